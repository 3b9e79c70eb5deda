"""The catalogs ship inside the wheel, so `pip install .` (not only editable installs) finds them."""
import subprocess
import sys
import zipfile

import pytest

pytest.importorskip("hatchling")


@pytest.mark.slow
def test_wheel_carries_the_catalogs_and_an_installed_copy_reads_them(tmp_path):
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(root)], check=True)
    wheel = next((tmp_path / "dist").glob("specsim-*.whl"))
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
                 "specsim/catalog/data/traces/azure_llm_inference_2023/LICENSE-CC-BY-4.0.txt",
                 "specsim/catalog/data/perf/vidur/LICENSE", "specsim/catalog/data/corpora/README.md"):
        assert path in names
