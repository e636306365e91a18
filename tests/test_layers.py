"""The package's layers import one way, with no circles (lazy imports inside functions included).

    runtime, errors, version, config  ->  data  ->  geometry  ->  model  ->  train  ->  interfaces

interfaces: the command-line tools (``jaxmd_dp.cli``, the ``python -m`` entry points), MD (``jaxmd_dp.md``),
export (``jaxmd_dp.export``) and the notebook API (``jaxmd_dp.api``, the package root). ``pallas_kernels``
is leaf code: it imports nothing of jaxmd_dp. A module may import its own layer or any layer below it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).absolute().parents[1]
LAYERS = ["base", "data", "geometry", "model", "train", "interfaces"]
BASE = {"jaxmd_dp.errors", "jaxmd_dp.version", "jaxmd_dp.config", "jaxmd_dp.runtime"}
INTERFACES = {"jaxmd_dp", "jaxmd_dp.api", "jaxmd_dp.cli", "jaxmd_dp.md", "jaxmd_dp.export", "jaxmd_dp.train.__main__"}
ENTRY_POINTS = {"test", "freeze", "plot", "neighbor_stat", "convert_deepmd", "change_bias"}  # python -m jaxmd_dp.<name>


def module_files() -> dict[str, Path]:
    out = {}
    for pkg in ("jaxmd_dp", "pallas_kernels"):
        for f in (ROOT / pkg).rglob("*.py"):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = f
    return out


def layer(module: str) -> str:
    if module.startswith("pallas_kernels"):
        return "leaf"
    if module in INTERFACES or any(module.startswith(p + ".") for p in INTERFACES - {"jaxmd_dp"}):
        return "interfaces"
    if module.split(".")[-1] in ENTRY_POINTS and module.count(".") == 1:
        return "interfaces"
    if module in BASE or any(module.startswith(p + ".") for p in BASE):
        return "base"
    return module.split(".")[1]


def imports(module: str, path: Path, known: set[str]) -> set[str]:
    """Every module of ours that ``module`` imports, anywhere in the file (lazy imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            names = [f"{src}.{a.name}" if f"{src}.{a.name}" in known else src for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    files = module_files()
    return {m: imports(m, f, set(files)) for m, f in files.items()}


def test_every_module_has_a_layer():
    for m in module_files():
        assert layer(m) in LAYERS + ["leaf"], f"{m}: in no layer"


def test_imports_go_down_only():
    upward = []
    for m, deps in graph().items():
        for d in deps:
            if d == "jaxmd_dp" and m.startswith("jaxmd_dp"):
                upward.append(f"{m} -> the package root (import the module itself)")
            elif layer(m) == "leaf" and layer(d) != "leaf":
                upward.append(f"{m} -> {d} (pallas_kernels is leaf code)")
            elif layer(m) != "leaf" and layer(d) != "leaf" and LAYERS.index(layer(d)) > LAYERS.index(layer(m)):
                upward.append(f"{m} ({layer(m)}) -> {d} ({layer(d)})")
    assert not upward, "upward imports:\n" + "\n".join(sorted(upward))


def test_no_import_circles():
    g = graph()
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_the_graph_sees_lazy_and_package_imports():
    """The checks above would pass on an empty graph: make sure known edges are found."""
    g = graph()
    assert "jaxmd_dp.api" in g["jaxmd_dp"]  # the root's lazy facade, inside a function
    assert "jaxmd_dp.geometry.neighbor" in g["jaxmd_dp.model.evaluate"]  # from jaxmd_dp.geometry import neighbor
    assert "pallas_kernels.env_mat" in g["jaxmd_dp.geometry.env_mat"]
    assert layer("jaxmd_dp.train.loop") == "train" and layer("jaxmd_dp.cli.train") == "interfaces"


def test_top_level_is_small():
    """The package root holds the facade, errors, version, the notebook API and the ``python -m``
    entry points (each a few lines that call :mod:`jaxmd_dp.cli`); everything else is in subpackages."""
    top = sorted(p.stem for p in (ROOT / "jaxmd_dp").glob("*.py"))
    assert set(top) <= {"__init__", "errors", "version", "api"} | ENTRY_POINTS, top
    for name in ENTRY_POINTS:
        tree = ast.parse((ROOT / "jaxmd_dp" / f"{name}.py").read_text())
        body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        assert len(body) == 1 and isinstance(body[0], ast.If), f"jaxmd_dp/{name}.py: only a __main__ guard"
