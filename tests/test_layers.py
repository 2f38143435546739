"""The package is built in layers (docs/internals.md): a module imports only modules of its own layer or below,
at the top of the file or inside a function alike, and no imports go in a circle."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "maskattn"

# bottom to top; a module belongs to the layer of the longest name that prefixes it
LAYERS = (
    ("maskattn._maskprep", "maskattn._gpu", "maskattn._arrays"),  # the compiled core, kernel sources, array ingestion
    ("maskattn.masks",),  # specs and builders
    ("maskattn.plan",),  # BlockMask
    ("maskattn.backends",),  # reference (NumPy), cuda (kernels)
    ("maskattn.api",),  # compile_mask, attention, attention_backward
    ("maskattn.torch", "maskattn.flex", "maskattn.distributed", "maskattn"),  # integrations, and the package's face
    # (its __init__ alone)
    ("maskattn.testing", "maskattn.bench"),  # generators, yardsticks, benchmarks: users of the public face
    ("maskattn.__main__",),  # the CLI
)


def layer_of(module: str) -> int:
    best = None
    for rank, names in enumerate(LAYERS):
        for name in names:
            inside = module == name or (name != "maskattn" and module.startswith(name + "."))
            if inside and (best is None or len(name) > len(best[1])):
                best = (rank, name)
    if best is None:
        raise AssertionError(f"{module} belongs to no layer: add it to LAYERS in tests/test_layers.py")
    return best[0]


def modules() -> dict:
    """{module name: path} of every Python source of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name: str, path: Path, known) -> set:
    """The package's modules that ``name`` imports, anywhere in its source (``from X import Y`` imports X.Y where
    that is a module, else X)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            submodules = {f"{base}.{alias.name}" for alias in node.names} & set(known)
            found.update(submodules or {base})
    return {m for m in found if m == "maskattn" or m.startswith("maskattn.")} - {name}


def test_every_import_goes_down():
    known = modules()
    upward = []
    for name, path in known.items():
        for target in imports(name, path, known):
            if layer_of(target) > layer_of(name):
                upward.append(f"{name} (layer {layer_of(name)}) imports {target} (layer {layer_of(target)})")
    assert not upward, "imports that go up a layer:\n" + "\n".join(sorted(upward))


def test_no_import_circles():
    known = modules()
    graph = {name: imports(name, path, known) & set(known) for name, path in known.items()}
    state, circles = {}, []

    def visit(node, trail):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                circles.append(" -> ".join(trail[trail.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not circles, "import circles:\n" + "\n".join(circles)


@pytest.mark.parametrize("source, target", [("maskattn.masks.base", "maskattn.plan"),
                                            ("maskattn.plan", "maskattn.backends.cuda.kernels"),
                                            ("maskattn.api", "maskattn.torch")])
def test_layers_order_the_core(source, target):
    """The order the checks above rely on: a spec never sees a plan, a plan never a backend, the API never torch."""
    assert layer_of(source) < layer_of(target)
