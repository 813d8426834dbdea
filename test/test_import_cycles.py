"""No import cycle in shipped code (issue 38).

A module that imports a module that imports it back (also only for type checking, under
``if TYPE_CHECKING:``) is two concepts that know each other: a friend class, or a
helper holding its owner. This test reads every module of the three Python packages
(their source, with ``ast``: nothing is imported), follows every ``import`` and
``from ... import`` at module level, in ``if TYPE_CHECKING:`` blocks and in class
bodies (imports inside functions are loaded late on purpose and left out), and fails
naming each cycle it finds.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mocap4r2_control", "mocap4r2_drivers", "mocap4r2_tools")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        base = ROOT / package
        for path in sorted((base / package).rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run (or are read by a type checker) when the module loads."""
    out: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.ClassDef)):
            pending.extend(ast.iter_child_nodes(node))  # type: ignore[arg-type]
        elif isinstance(node, ast.ExceptHandler):
            pending.extend(node.body)
    return out


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        for node in _top_level_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                # `from pkg import sub` imports the submodule pkg.sub when there is one
                targets = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in modules else stem for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]  # a name inside a module: the module
                if target and target != name:
                    graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_type_checking_back_reference(tmp_path):
    """The finder itself: a TYPE_CHECKING back-reference is a cycle, a lazy import is not."""
    graph = {"p.a": {"p.b"}, "p.b": {"p.a"}, "p.c": set()}
    assert _cycles(graph) == [["p.a", "p.b"]]
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n"
    lazy = "def f():\n    from .a import A\n"
    imports = _top_level_imports(ast.parse(source))
    assert sorted(i.module or "" for i in imports if isinstance(i, ast.ImportFrom)) == ["a", "typing"]
    assert _top_level_imports(ast.parse(lazy)) == []


def test_no_import_cycle_in_shipped_code():
    modules = _modules()
    assert len(modules) > 100, "the packages were not found"
    cycles = _cycles(_graph(modules))
    assert not cycles, "import cycles (each a set of modules that import each other):\n" + "\n".join(
        " <-> ".join(cycle) for cycle in cycles
    )
