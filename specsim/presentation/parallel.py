"""Independent points of a sweep, run serially, on a local process pool, or on a Dask cluster.

`run_points(fn, shared, payloads, ...)` returns `[fn(shared, p) for p in payloads]` in payload order,
whatever ran where: `fn` is a module-level function (it travels by reference), `shared` the large
object every point reads (a serving setup, an operating point), sent once per worker, and each payload
is small. Every point is deterministic given its inputs (the serving simulator seeds each run from the
setup's seed, the analytic sweep has no randomness), so the three modes return identical results.

- workers = 1, or a single point: serially, in this process.
- default: a local `concurrent.futures.ProcessPoolExecutor` of `workers` processes (all the CPUs),
  `shared` pickled once into each worker by its initializer.
- cluster = "tcp://HOST:PORT" (or a `distributed.Client`): the points run on that existing Dask
  cluster; `shared` is scattered to every worker once (`Client.scatter(..., broadcast=True)`). The
  workers need specsim installed (the same version) and any catalog file the points name.

Resuming: with a `PointStore`, each finished point is written at once (one file per point, written
beside itself and renamed, so a file is either whole or absent) into a hidden folder inside the output
folder named `.specsim-partial-points-<key>` (`key` hashes what the points are, so a changed command
never reuses another's points); a rerun of the same command loads what is there and runs only the
rest. `OutputDir` ignores that folder (it starts with its staging prefix), never lists it in a
manifest, and the command removes it once the outputs are complete: partial results never look like
a finished run.

Progress: `progress(n_done, n_total, payload)` is called as each point finishes, in both modes (and
once per point loaded from a store).
"""
from __future__ import annotations

import copyreg
import hashlib
import json
import os
import pickle
import signal
import shutil
import types
from pathlib import Path
from typing import Callable, Sequence

from ..errors import OutputError, SpecError
from .output import write_file_atomically

POINTS_PREFIX = ".specsim-partial-points-"


def _mappingproxy(items: dict):
    return types.MappingProxyType(items)


def _reduce_mappingproxy(m):
    return _mappingproxy, (dict(m),)


# Operating points and scenarios hold read-only tables (types.MappingProxyType), which pickle cannot
# send as they are; they travel as a copy of their items and come back read-only.
copyreg.pickle(types.MappingProxyType, _reduce_mappingproxy)

_SHARED = None  # a pool worker's copy of `shared` (set by its initializer)


def _install(blob: bytes) -> None:
    global _SHARED
    # a Ctrl-C reaches the whole process group: the parent alone answers it (it stops the workers);
    # a worker that took it too would print its own 'Process ForkProcess-N:' report on stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _SHARED = pickle.loads(blob)


def _call_local(fn, payload, spool: str) -> str:
    """Run one point in a pool worker and hand its result back through a file in `spool`: the
    message on the pool's result pipe is then one short path, written by one atomic write(2). A
    large result sent down the pipe itself goes in several writes, and a worker stopped between two
    of them (Ctrl-C stops the workers) leaves the pool's reader thread waiting for the rest forever,
    so the interpreter never exits."""
    import tempfile

    result = pickle.dumps(fn(_SHARED, payload), protocol=pickle.HIGHEST_PROTOCOL)
    fd, tmp = tempfile.mkstemp(dir=spool, suffix=".part")
    with os.fdopen(fd, "wb") as f:
        f.write(result)
    final = tmp[: -len(".part")] + ".pkl"
    os.replace(tmp, final)
    return final


def _collect(path: str):
    with open(path, "rb") as f:
        out = pickle.load(f)
    os.unlink(path)
    return out


def _call_dask(fn, shared, payload):
    return fn(shared, payload)


class PointStore:
    """Finished points of one command, kept in `folder/.specsim-partial-points-<key>` until the
    command's outputs are complete (see the module docstring)."""

    def __init__(self, folder, key_material: dict):
        text = json.dumps(key_material, sort_keys=True, default=str)
        self.key = hashlib.sha256(text.encode()).hexdigest()[:16]
        self.path = Path(folder) / f"{POINTS_PREFIX}{self.key}"

    def _file(self, index: int) -> Path:
        return self.path / f"point-{index:06d}.pkl"

    def load(self, n: int) -> dict:
        """Points already written, by index (a file that does not unpickle is ignored and rerun)."""
        out = {}
        if not self.path.is_dir():
            return out
        for i in range(n):
            f = self._file(i)
            if f.is_file():
                try:
                    out[i] = pickle.loads(f.read_bytes())
                except (pickle.UnpicklingError, EOFError, AttributeError, ValueError):
                    continue
        return out

    def save(self, index: int, result) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"--out {str(self.path.parent)!r}: cannot keep finished points there ({exc.strerror})") from None
        write_file_atomically(self._file(index), pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL),
                              flag="--out")

    def clear(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def check_workers(workers) -> int | None:
    if workers is None:
        return None
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SpecError(f"--workers {workers!r}: expected an integer >= 1 (1 runs the points one after another here)")
    return workers


def _client(cluster):
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - a declared dependency
        raise SpecError("--cluster needs dask.distributed: pip install 'dask[distributed]'") from None
    if not isinstance(cluster, str):
        return cluster, False
    if not cluster.startswith(("tcp://", "tls://", "inproc://", "ucx://")):
        raise SpecError(f"--cluster {cluster!r}: expected a scheduler address like tcp://HOST:PORT")
    try:
        return Client(cluster, timeout="10s"), True
    except OSError as exc:
        raise SpecError(f"--cluster {cluster!r}: cannot reach the Dask scheduler ({exc})") from None


def run_points(fn: Callable, shared, payloads: Sequence, *, workers: int | None = None, cluster=None,
               store: PointStore | None = None, progress: Callable | None = None) -> list:
    """[fn(shared, p) for p in payloads], run as the module docstring says; results in payload order."""
    workers = check_workers(workers)
    n = len(payloads)
    results: dict = store.load(n) if store is not None else {}
    done = 0

    def finished(i, r, *, fresh: bool = True):
        nonlocal done
        results[i] = r
        if fresh and store is not None:
            store.save(i, r)
        done += 1
        if progress is not None:
            progress(done, n, payloads[i])

    for i in sorted(results):
        finished(i, results[i], fresh=False)
    todo = [i for i in range(n) if i not in results]
    if not todo:
        return [results[i] for i in range(n)]
    if cluster is not None:
        from distributed import as_completed

        client, owned = _client(cluster)
        try:
            ref = client.scatter(shared, broadcast=True)
            futures = {client.submit(_call_dask, fn, ref, payloads[i], pure=False): i for i in todo}
            for fut in as_completed(futures):
                finished(futures[fut], fut.result())
        finally:
            if owned:
                client.close()
        return [results[i] for i in range(n)]
    n_workers = min(workers or os.cpu_count() or 1, len(todo))
    if n_workers <= 1:
        for i in todo:
            finished(i, fn(shared, payloads[i]))
        return [results[i] for i in range(n)]
    import tempfile
    from concurrent.futures import ProcessPoolExecutor, as_completed as completed

    blob = pickle.dumps(shared, protocol=pickle.HIGHEST_PROTOCOL)
    spool = tempfile.mkdtemp(prefix="specsim-points-")
    pool = ProcessPoolExecutor(max_workers=n_workers, initializer=_install, initargs=(blob,))
    try:
        futures = {pool.submit(_call_local, fn, payloads[i], spool): i for i in todo}
        for fut in completed(futures):
            finished(futures[fut], _collect(fut.result()))
    except BaseException:
        # Ctrl-C (a SIGINT to this process alone reaches no worker) or a failed point: stop the workers
        # instead of waiting for the points still running; the finished ones are in the store
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    pool.shutdown()
    return [results[i] for i in range(n)]


__all__ = ["run_points", "PointStore", "check_workers", "POINTS_PREFIX"]
