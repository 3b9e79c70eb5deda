"""What a long decision reports as it works, and the silent stand-in when nobody listens.

The decisions (advise, the gate simulation, capacity, compare) announce their phases to a sink with
three methods — `add(n)`: n more units of work lie ahead; `phase(text)`: what is running now;
`step(n=1, text=None)`: n units are done — and know nothing of how it is shown.
`specsim.presentation.progress.Progress` (a terminal bar) is one such sink; `NullProgress` is the
one a decision uses when it is given none.
"""
from __future__ import annotations

from typing import Protocol


class ProgressSink(Protocol):
    def add(self, n: int) -> None: ...

    def phase(self, text: str) -> None: ...

    def step(self, n: int = 1, text: str | None = None) -> None: ...


class NullProgress:
    """A sink that shows nothing."""

    def add(self, n: int) -> None:
        pass

    def phase(self, text: str) -> None:
        pass

    def step(self, n: int = 1, text: str | None = None) -> None:
        pass


def progress_or_null(progress: ProgressSink | None) -> ProgressSink:
    return progress if progress is not None else NullProgress()


__all__ = ["ProgressSink", "NullProgress", "progress_or_null"]
