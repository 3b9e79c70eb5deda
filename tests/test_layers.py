"""Layering: the analytical core imports without numba, simpy or matplotlib (STYLE.md), and nothing
in the library imports the CLI, the plots or the report."""
import ast
import pathlib
import subprocess
import sys

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "specsim"
CORE = ["specsim.hardware", "specsim.models", "specsim.roofline", "specsim.speculation", "specsim.acceptance",
        "specsim.trees", "specsim.predict", "specsim.scenario", "specsim.cli"]


def test_core_imports_without_heavy_packages():
    code = ("import sys, importlib\n"
            f"for m in {CORE!r}: importlib.import_module(m)\n"
            "heavy = [m for m in ('numba', 'simpy', 'matplotlib', 'llvmlite') if m in sys.modules]\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"the analytical core pulled in {out}"


def test_nothing_imports_the_presentation_layer():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("cli/") or rel in ("plots.py", "report.py") or rel.endswith("/plots.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                parts = node.module.split(".")
                if "cli" in parts or parts[-1] in ("plots", "report"):
                    offenders.append(f"{rel}: from {node.module}")
    assert not offenders, offenders
