"""Test-wide settings: hypothesis without per-example deadlines (these machines are shared and
noisy; speed is measured in benchmarks/, never asserted here), and derandomised under CI so a run
is reproducible."""
import os

from hypothesis import settings

settings.register_profile("specsim", deadline=None, derandomize=bool(os.environ.get("CI")))
settings.load_profile("specsim")


def pytest_collection_modifyitems(config, items):
    """Run the tests marked slow (a minute or more each) first: with pytest-xdist's load scheduling
    the workers then share them out at the start instead of one worker finishing them alone at the
    end. The order within each group stays the collection order."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_configure(config):
    """Under pytest-xdist each worker is a process with numba's full thread pool; two workers each
    running parallel kernels on every core oversubscribe the machine, and numba's workers then wait
    on one another (a real-model test took 240 s that way, 16 s alone). Give each worker its share
    of the cores; a test that wants more threads still sets them (kernels.set_threads)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        return
    import numba

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    numba.set_num_threads(max(1, min(numba.config.NUMBA_NUM_THREADS, cores // workers)))
