"""The wheel carries what the README's commands need, and every command in the README runs from a
wheel installed in a fresh virtualenv, in a folder outside the checkout.

The fresh virtualenv gets the built wheel (`pip install --no-deps`) and sees the test runner's
already-installed dependencies through one .pth line, so the test needs no network; it checks that
`specsim` is imported from the new environment, not from the checkout. Commands run with bash (the
README's `$(specsim data path ...)` substitutions included) from an empty temporary folder.

Which commands, and what is done with each (README_PLAN): every `specsim ...` line of the README's
`sh` blocks runs verbatim, and so does the `specsim` part of the set-up commands (the install itself
is what this test does with the wheel; the pytest run of the second set-up command is the suite this
test belongs to). Exceptions, each with its reason:
- `python benchmarks/...`: repository scripts that measure speed, not installed with the package;
- `--cluster tcp://...`: needs a running Dask scheduler at that address;
- `specsim decoder run` / `bench`: run, on a smaller input (`--n-prompts 1 --tokens 8`, `--repeats 1`;
  `--m 1,2 --contexts 128`) — the same code paths; the full sizes take minutes; they and
  `decoder fetch` are skipped, with the reason printed, when the model is not in the cache (the
  fetch needs the network, which tests do not use);
- `specsim calibrate machine` / `calibrate acceptance` / `validate`, and `calibrate steps` on a bench
  folder: measurements of this machine with the reference decoder (minutes of CPU, and they read each
  other's outputs); here their `--help` runs from the wheel, and their own tests run them on small
  inputs.
"""
import os
import re
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("hatchling")

ROOT = Path(__file__).resolve().parents[1]


def _build_wheel(tmp_path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(ROOT)], check=True)
    return next((tmp_path / "dist").glob("specsim-*.whl"))


@pytest.mark.slow
def test_wheel_carries_the_catalogs_and_an_installed_copy_reads_them(tmp_path):
    wheel = _build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    for kind, entry in [("hardware", "seed-hbm-2tbs"), ("models", "seed-70b"), ("scenarios", "seed-70b-hbm")]:
        assert f"specsim/catalog/{kind}/{entry}.toml" in names
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True)
    code = ("import specsim.specs.catalog as c; from specsim.speculation.predict import predict; "
            "from specsim.speculation.operating_point import resolve_id; from specsim.specs.data import data_dir; "
            "print(c.catalog_dir('hardware')); print(predict(resolve_id('seed-70b-hbm')).cycle.speedup); "
            "print(data_dir())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(site), "PATH": ""}, cwd=tmp_path).stdout.split("\n")
    assert out[0].startswith(str(site)) and out[0].endswith("specsim/catalog/hardware")
    assert 3.0 < float(out[1]) < 3.5
    assert out[2].startswith(str(site)) and out[2].endswith("specsim/catalog/data")  # the data ships too
    for path in ("specsim/catalog/data/traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv",
                 "specsim/catalog/data/traces/azure_llm_inference_2023/AzureLLMInferenceTrace_code.csv",
                 "specsim/catalog/data/traces/azure_llm_inference_2023/LICENSE-CC-BY-4.0.txt",
                 "specsim/catalog/data/perf/vidur/LICENSE", "specsim/catalog/data/corpora/README.md",
                 "specsim/catalog/data/published/speculative_decoding.csv",
                 "specsim/catalog/data/examples/smollm2-135m/config.json",
                 "specsim/catalog/scenarios/llama-8b-h100-code-pld.toml",
                 "specsim/catalog/scenarios/llama-8b-128k-sparse-kv.toml"):
        assert path in names


def readme_commands(text: str) -> list[str]:
    """Every command line of the README's `sh` blocks (continuations joined)."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        out += [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]
    return out


def readme_plan(commands: list[str], *, model_cached: bool) -> list[tuple[str, str | None]]:
    """(command to run, None) or (command, reason it is not run) — see the module docstring."""
    plan = []
    for c in commands:
        if c.startswith("python3 -m venv"):
            plan += [("specsim " + m.strip(), None) for m in re.findall(r"\.venv/bin/specsim ([^&|}]*)", c)]
            plan.append((c, "the install is what this test does with the wheel; the pytest run is this suite"))
        elif c.startswith("python benchmarks/"):
            plan.append((c, "a repository script that measures speed, not part of the installed package"))
        elif "--cluster tcp://" in c:
            plan.append((c, "needs a running Dask scheduler at that address"))
        elif re.match(r"specsim (calibrate (machine|acceptance)|validate)\b", c) or "--format bench" in c:
            words = c.split("#")[0].split()
            plan.append((" ".join(words[:3] if words[1] == "calibrate" else words[:2]) + " --help", None))
            plan.append((c, "a measurement of this machine with the reference decoder: its --help runs instead"))
        elif c.startswith("specsim decoder"):
            if not model_cached:
                plan.append((c, "the SmolLM2 model is not in the cache (specsim decoder fetch needs the network)"))
            elif c.startswith("specsim decoder run"):
                c2 = c.split("#")[0].strip() + " --n-prompts 1 --tokens 8"
                plan.append((c2 + (" --repeats 1" if "--repeats" in c else ""), None))
            elif c.startswith("specsim decoder bench"):
                words = c.split("#")[0].split()
                if "--out" in words:  # a fresh folder per run of the plan
                    words[words.index("--out") + 1] += "-readme"
                # --force: beside the other queue and workers the bench may find the CPUs busy and refuse its
                # figures (exit 7); here it is run for the command, not for the figures. --force needs a file
                # to mark (--out, or --json): a command that prints only gets a --json file beside it
                plan.append((" ".join(words) + " --m 1,2 --contexts 128 --repeats 1"
                             + (" --force" if "--out" in words else " --json decoder-bench-readme.json --force"), None))
            else:
                plan.append((c, None))
        elif c.startswith("specsim "):
            plan.append((c, None))
        else:
            plan.append((c, "not a specsim command"))
    return plan


def test_readme_plan_runs_every_specsim_command():
    plan = readme_plan(readme_commands((ROOT / "README.md").read_text()), model_cached=True)
    ran = [c for c, why in plan if why is None]
    skipped = {c: why for c, why in plan if why is not None}
    assert any(c.startswith("specsim report seed-70b-hbm --out report") for c in ran)  # the main command
    for name in ("advise", "report", "capacity", "compare", "predict", "sweep", "threshold", "replay", "simulate",
                 "calibrate", "models import", "data path"):
        assert any(name in c for c in ran), name
    assert all(not c.startswith("specsim ") or "--cluster" in c or f"{' '.join(c.split()[:3])} --help" in ran
               or f"{' '.join(c.split()[:2])} --help" in ran for c in skipped), skipped


@pytest.mark.slow
def test_every_readme_command_runs_from_a_wheel_in_a_fresh_virtualenv(tmp_path):
    wheel = _build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True)
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "zz_specsim_test_dependencies.pth").write_text("\n".join(sorted(deps)) + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECSIM_DATA", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin"
    # two command queues run at once below, beside the other test workers: one numba thread each
    # keeps their parallel kernels from oversubscribing the cores (see conftest.py)
    env["NUMBA_NUM_THREADS"] = "1"
    where = subprocess.run([str(py), "-c", "import specsim; print(specsim.__file__)"], capture_output=True,
                           text=True, check=True, env=env, cwd=elsewhere).stdout.strip()
    assert where.startswith(str(venv)), where  # the wheel's copy, not the checkout
    from specsim.decoder.fetch import default_model_path

    plan = readme_plan(readme_commands((ROOT / "README.md").read_text()), model_cached=default_model_path().is_file())
    log = [f"skipped: {command}  ({reason})" for command, reason in plan if reason is not None]
    runs = [command for command, reason in plan if reason is None]

    def run_all(commands: list[str]) -> list[tuple[str, float, subprocess.CompletedProcess]]:
        out = []
        for command in commands:
            t0 = time.perf_counter()
            done = subprocess.run(["bash", "-c", "set -o pipefail; " + command], capture_output=True, text=True,
                                  env=env, cwd=elsewhere, timeout=900)
            out.append((command, time.perf_counter() - t0, done))
        return out

    # two queues on the two cores: the reference decoder's commands (one after another: they share
    # numba's kernel cache) and everything else; no command reads another's output
    from concurrent.futures import ThreadPoolExecutor

    decoder = [c for c in runs if c.startswith("specsim decoder")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = [r for f in [pool.submit(run_all, decoder), pool.submit(run_all, [c for c in runs if c not in decoder])]
                   for r in f.result()]
    failures = []
    for command, seconds, done in results:
        log.append(f"{seconds:6.1f} s  rc {done.returncode}  {command}")
        if done.returncode != 0:
            failures.append(f"{command}\n  exit {done.returncode}: {done.stderr.strip()[-600:]}")
    print("\n".join(log))
    assert not failures, "\n".join(failures)
    assert (elsewhere / "report" / "report.html").is_file()  # the main command's page
    assert (elsewhere / "my-model.toml").is_file()
