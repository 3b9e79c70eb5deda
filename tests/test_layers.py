"""Layering (DESIGN.md): a module imports only from its own layer or the layers below it; the
analytical core imports without numba, simpy or matplotlib (STYLE.md); heavy packages stay in the
few modules that need them.

The layer of a module is the folder it sits in: specs (1) → cost (2) → speculation (3) → serving (4)
→ decoder, calibration (5) → analyses (6: the decisions) → presentation (7) → cli (8). `errors` and the
package root are layer 0.
Imports inside functions count: a lazy import is still an import.
"""
import ast
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "specsim"
LAYERS = {"errors": 0, "__init__": 0, "specs": 1, "cost": 2, "speculation": 3, "serving": 4, "decoder": 5,
          "calibration": 5, "analyses": 6, "presentation": 7, "cli": 8}
CORE = ["specsim.specs.hardware", "specsim.specs.models", "specsim.specs.scenario", "specsim.cost.roofline",
        "specsim.speculation.cycle", "specsim.speculation.acceptance", "specsim.speculation.trees",
        "specsim.speculation.predict", "specsim.cli"]
# third-party packages and the only places allowed to import them
HEAVY = {"numba": ("decoder/",), "llvmlite": ("decoder/",), "simpy": ("serving/engine.py",),
         "matplotlib": ("presentation/",), "torch": ("decoder/train/",)}


def layer_of(rel: str) -> int:
    """Layer of a module from its path relative to the package (`speculation/cycle.py`)."""
    head = rel.split("/")[0].removesuffix(".py")
    if head not in LAYERS:
        raise AssertionError(f"{rel}: not in a layer folder; known: {sorted(LAYERS)}")
    return LAYERS[head]


def _absolute(rel: str, node: ast.ImportFrom) -> str:
    parts = ["specsim"] + rel.removesuffix(".py").split("/")
    package = parts[:-1]  # the package a relative import starts from (a package's __init__ too)
    if node.level == 0:
        return node.module or ""
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_module(name: str) -> bool:
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


def imported_specsim_modules(rel: str, source: str) -> list[str]:
    """Every specsim module a source file imports (absolute dotted names, function-level too)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            mod = _absolute(rel, node)
            if mod == "specsim" or mod.startswith("specsim."):
                if mod == "specsim":  # `from specsim import x`: a subpackage, or a root attribute (layer 0)
                    out += [f"specsim.{a.name}" if _is_module(a.name) else "specsim" for a in node.names]
                else:
                    out.append(mod)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("specsim")]
    return out


def upward_imports(rel: str, source: str) -> list[str]:
    """The imports of a module that reach a layer above its own."""
    mine = layer_of(rel)
    bad = []
    for mod in imported_specsim_modules(rel, source):
        parts = mod.split(".")
        if len(parts) < 2:
            continue
        if layer_of(parts[1]) > mine:
            bad.append(f"{rel} (layer {mine}) imports {mod} (layer {layer_of(parts[1])})")
    return bad


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "__init__.py" or rel == "__main__.py":
            continue
        yield rel, path.read_text()


def test_every_module_sits_in_a_layer_folder():
    for rel, _ in _modules():
        layer_of(rel)


def test_no_module_imports_from_a_layer_above_it():
    offenders = [b for rel, src in _modules() for b in upward_imports(rel, src)]
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("rel, line", [
    ("cost/roofline.py", "from ..speculation.cycle import Deployment\n"),
    ("speculation/cycle.py", "def f():\n    from ..serving import engine\n"),
    ("serving/engine.py", "import specsim.presentation.plots\n"),
    ("specs/models.py", "from specsim.cli import main\n"),
    ("analyses/advise.py", "from ..presentation.progress import Progress\n"),
    ("analyses/threshold.py", "def f():\n    from specsim.presentation import plots\n"),
])
def test_the_checker_catches_a_planted_upward_import(rel, line):
    # the checker itself must fail on an upward import, or the test above asserts nothing
    src = (PACKAGE / rel).read_text() + "\n" + line
    assert upward_imports(rel, src), f"planted import in {rel} was not caught"


def test_the_checker_accepts_same_and_lower_layers():
    assert upward_imports("serving/engine.py", "from ..speculation.acceptance import x\nfrom .policies import y\n") == []
    assert upward_imports("calibration/fit.py", "from ..decoder.bench import x\n") == []


def test_heavy_packages_stay_where_they_belong():
    offenders = []
    for rel, src in _modules():
        for node in ast.walk(ast.parse(src)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module.split(".")[0]]
            for n in names:
                if n in HEAVY and not rel.startswith(HEAVY[n]):
                    offenders.append(f"{rel} imports {n}")
    assert not offenders, offenders


def test_core_imports_without_heavy_packages():
    code = ("import sys, importlib\n"
            f"for m in {CORE!r}: importlib.import_module(m)\n"
            "heavy = [m for m in ('numba', 'simpy', 'matplotlib', 'llvmlite') if m in sys.modules]\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"the analytical core pulled in {out}"
