"""The package's layers: no module imports a package of a higher layer (function-level imports count too), and
no import circle is longer than 3 modules (an import of ``a.b.c`` counts as an import of the package ``a.b`` too,
whose ``__init__`` Python runs first).

The cache's loader wing (``cache/loader/``: what builds loaders and nodes over a cached dataset) is a layer of its
own above ``loader/``, so ``nodes/`` and ``loader/`` never import the cache's loaders. There is no exception: what
the cache needs of the layers above it is registered by name by the ``torch_drt`` face (``cache/_registry.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import torch_drt

ROOT = Path(torch_drt.__file__).parent

# low to high; a module may import its own layer and lower ones
LAYERS = [
    {"_cpu_budget", "_distinct", "_indices", "_inherited_clients", "_lazy", "_processes", "_protocol", "_scratch",
     "_stage_clock",
     "_state_fields", "_threads", "checksums", "describe", "nodecache", "publish", "random", "sampling"},
    {"sources", "transforms"},
    {"_progress", "locations"},  # a location and the backends that read its bytes (remote ones retry through sources/)
    {"cache"},
    {"sets"},  # many part caches under one name (the cache opens a set's path through its registered loader)
    {"formats", "nodes", "storage"},
    {"lm"},
    {"loader"},
    {"cache.loader"},  # the cache's loader wing
    {"build", "compat", "lightning", "lightning_stats", "ray", "demo", "cli", "__init__"},  # and every _cli_* module
]

# none: what a lower layer needs of a higher one is registered by name by the torch_drt face (cache/_registry.py)
KNOWN_UPWARD: set[tuple[str, str]] = set()

WINGS = {("cache", "loader")}  # sub-packages with a layer of their own


def _layer(package: str) -> int:
    if package.startswith("_cli_"):
        return len(LAYERS) - 1
    for level, names in enumerate(LAYERS):
        if package in names:
            return level
    raise AssertionError(f"{package!r} has no layer: add it to LAYERS")


def _imports(path: Path) -> set[str]:
    """The torch_drt modules ``path`` imports anywhere except under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    package = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {name for name in found if name.startswith("torch_drt.")}


def _package(module: str) -> str:
    """``torch_drt.cache.dataset`` -> ``cache``; ``torch_drt.cache.loader.torch_loader`` -> ``cache.loader``;
    ``torch_drt.cli`` -> ``cli``."""
    parts = module.split(".")[1:]
    return ".".join(parts[:2]) if tuple(parts[:2]) in WINGS else parts[0]


def test_no_module_imports_a_higher_layer():
    upward = set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        own = _package(f"torch_drt.{module}")
        for target in _imports(path):
            other = _package(target)
            where = ROOT.joinpath(*other.split("."))
            if other == own or not (where.exists() or where.with_suffix(".py").exists()):
                continue
            if _layer(other) > _layer(own):
                upward.add((module, other))
    assert upward - KNOWN_UPWARD == set(), "upward imports (move the code, or the import, down a layer)"
    assert KNOWN_UPWARD - upward == set(), "an exception no longer needed: remove it from KNOWN_UPWARD"


def _graph() -> dict[str, set[str]]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(("torch_drt", *path.relative_to(ROOT).with_suffix("").parts)).removesuffix(".__init__")
        modules[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {t for t in _imports(path) if t in modules}
        for t in list(targets):  # the packages Python initialises on the way (the root one always loads first)
            parts = t.split(".")
            targets.update(".".join(parts[:k]) for k in range(2, len(parts)) if ".".join(parts[:k]) in modules)
        graph[name] = {t for t in targets if t != name and not name.startswith(f"{t}.")}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_is_longer_than_three_modules():
    circles = _circles(_graph())
    assert [c for c in circles if len(c) > 3] == []


def test_nodes_and_loader_never_import_the_cache():
    """The cache's nodes and loaders live in its wing (``cache/loader/``); ``nodes/`` and ``loader/`` stand below
    the whole cache (their faces name the wing's nodes through lazy lookups, which load nothing until used)."""
    found = {
        (str(path.relative_to(ROOT)), target)
        for package in ("nodes", "loader")
        for path in sorted((ROOT / package).rglob("*.py"))
        for target in _imports(path)
        if _package(target).startswith("cache")
    }
    assert found == set()


def test_the_cache_holds_at_most_a_fifth_of_the_package():
    """Issue 25's measure of a cache package with one job: what is not the cache's concept lives elsewhere (the
    process pool in ``_processes/``, the CPU budget in ``_cpu_budget.py``, dataset-rt's names in ``compat/``)."""
    lines = {path: len(path.read_text().splitlines()) for path in ROOT.rglob("*.py")}
    cache = sum(n for path, n in lines.items() if (ROOT / "cache") in path.parents)
    assert cache / sum(lines.values()) <= 0.20, f"cache/ is {cache} of {sum(lines.values())} lines"


def test_the_layers_above_the_cache_are_registered_by_name():
    import pytest

    from torch_drt.cache import _registry
    from torch_drt.cache.loader.torch_loader import to_torch_dataloader
    from torch_drt.sets.cache_set import load_caches

    assert _registry.registered("torch_dataloader") is to_torch_dataloader  # the face registered both
    assert _registry.registered("caches") is load_caches
    with pytest.raises(ValueError, match="role="):
        _registry.register("writer", "m:f")
    with pytest.raises(ValueError, match="target="):
        _registry.register("caches", "module_without_function")
