"""Test-wide settings: hypothesis without per-example deadlines (these machines are shared and
noisy; speed is measured in benchmarks/, never asserted here), and derandomised under CI so a run
is reproducible."""
import os

from hypothesis import settings

settings.register_profile("specsim", deadline=None, derandomize=bool(os.environ.get("CI")))
settings.load_profile("specsim")
