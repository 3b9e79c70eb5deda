"""Progress of long commands: one tqdm bar on stderr that moves through every phase of the work.

`Progress(desc, quiet=...)` is handed to the library functions that take a while (advise, report,
capacity, compare); each announces its phases (`phase("simulating")`), grows the bar when it learns
how much work is ahead (`add(n)`) and steps it as each unit ends (`step()`), plotting included — the
sink `specsim.analyses.progress.ProgressSink` describes, whose `NullProgress` a function uses when
it is given no bar. With `quiet=True` (the commands' --quiet) or when stderr is not a terminal,
nothing is printed.
"""
from __future__ import annotations


class Progress:
    """One bar through the phases of a command (see the module docstring)."""

    def __init__(self, desc: str, *, quiet: bool = False, total: int = 0):
        self._bar = None
        if not quiet:
            from tqdm.auto import tqdm

            # disable=None: tqdm stays silent when stderr is not a terminal (pipes, CI logs)
            self._bar = tqdm(total=total, desc=desc, unit="step", disable=None, leave=False, dynamic_ncols=True)

    def add(self, n: int) -> None:
        """There are n more units of work ahead."""
        if self._bar is not None and n:
            self._bar.total = (self._bar.total or 0) + int(n)
            self._bar.refresh()

    def phase(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=True)

    def step(self, n: int = 1, text: str | None = None) -> None:
        if self._bar is not None:
            if text is not None:
                self._bar.set_postfix_str(text, refresh=False)
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False


__all__ = ["Progress"]
