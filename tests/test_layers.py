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


# ---- no import circles ------------------------------------------------------------------------------
# A circle held by an import inside a function still ties the two modules: each needs the other loaded,
# and the order they load in decides whether it works. So every import counts, wherever it stands.

def _dotted(rel: str) -> str:
    """`decoder/run.py` -> `specsim.decoder.run`; `serving/__init__.py` -> `specsim.serving`."""
    parts = ["specsim"] + rel.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_edges(rel: str, source: str) -> set[str]:
    """The specsim modules a file imports, by dotted name: `from . import drafters` is the module
    `specsim.decoder.drafters`, not the package it sits in."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            mod = _absolute(rel, node)
            if not (mod == "specsim" or mod.startswith("specsim.")):
                continue
            base = mod.split(".")[1:]
            for a in node.names:
                sub = "/".join(base + [a.name])
                out.add(f"{mod}.{a.name}" if _is_module(sub) else mod)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name == "specsim" or a.name.startswith("specsim.")}
    return out


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (or a module importing itself), each as a
    closed path through it (Tarjan's algorithm, iterative: the package is deep enough to matter)."""
    index, low, on_stack, stack, sccs = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                scc = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    scc.append(w)
                    if w == v:
                        break
                if len(scc) > 1 or v in graph.get(v, ()):
                    sccs.append(_closed_path(sorted(scc), graph))
    return sccs


def _closed_path(members: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest closed path through the first member, inside the strongly connected set (to name it)."""
    start, inside = members[0], set(members)
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return path[::-1] + [start]
                if w in inside and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return members + [start]


def package_graph() -> dict[str, set[str]]:
    return {_dotted(rel): import_edges(rel, src) - {_dotted(rel)} for rel, src in _modules()}


def test_no_import_circle_inside_specsim():
    cycles = import_cycles(package_graph())
    assert not cycles, "import circles (function-level imports count):\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_edges_resolve_submodules_and_relative_packages():
    # by hand from the import statements: `from . import x` names the module x, a name from a module names that module
    src = "from . import drafters as D\nfrom .trained import load_draft_model\nfrom ..errors import SpecError\n" \
          "def f():\n    from ..speculation import trees\n"
    assert import_edges("decoder/run.py", src) == {"specsim.decoder.drafters", "specsim.decoder.trained",
                                                   "specsim.errors", "specsim.speculation.trees"}


def test_the_cycle_checker_catches_planted_circles():
    # a two-module circle through a function-level import, and a three-module one through top-level imports
    graph = package_graph()
    planted = {k: set(v) for k, v in graph.items()}
    planted["specsim.specs.data"].add("specsim.specs.hardware")
    planted["specsim.specs.hardware"].add("specsim.specs.data")
    found = import_cycles(planted)
    assert any(set(c) == {"specsim.specs.data", "specsim.specs.hardware"} and c[0] == c[-1] for c in found), found
    three = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(three) == [["a", "b", "c", "a"]]
    assert import_cycles({"a": {"a"}}) == [["a", "a"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
    src = (PACKAGE / "cost/roofline.py").read_text() + "\ndef _f():\n    from ..specs import hardware\n"
    assert "specsim.specs.hardware" in import_edges("cost/roofline.py", src)
