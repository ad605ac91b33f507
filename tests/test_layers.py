"""The package's layering, read from its source: no import cycles, ``sb3_r2po.common`` below ``sb3_r2po.llm``, and
``r2po.py`` (the model class) imported only by the package faces and the CLIs: components receive what they need.

Every ``import`` statement counts, also those inside functions (a lazy import hides a cycle, it does not break it)
and those under ``if TYPE_CHECKING:`` (a type-only import is an import too: the modules depend on each other).
``import a.b.c`` is an edge to ``a.b.c``; ``from a.b import c`` is an edge to the module ``a.b.c`` when there is
one, else to ``a.b``; relative imports are resolved; a package's ``__init__`` is the package's module, so its
re-exports are the package's edges. The parent packages a dotted import also runs are not edges: every module of a
package would otherwise be in a cycle with the package's ``__init__``.

``import_graph(type_checking=False)`` leaves out the imports under ``if TYPE_CHECKING:`` (those that run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import sb3_r2po

PACKAGE = Path(sb3_r2po.__file__).resolve().parent
ROOT = PACKAGE.name
Graph = dict[str, set[str]]


def module_names(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of ``package`` by dotted name (a package by its own name, for its ``__init__.py``)."""
    names: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = [package.name, *path.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST, type_checking: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``, at any depth; those under ``if TYPE_CHECKING:`` only if ``type_checking``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child) and not type_checking:
            children: list[ast.stmt] = child.orelse  # only the else branch runs
        else:
            children = [child]
        for statement in children:
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                yield statement
            else:
                yield from _import_nodes(statement, type_checking)


def _imported(tree: ast.AST, module: str, is_package: bool, type_checking: bool) -> Iterator[tuple[str, list[str]]]:
    """``(target, names)`` for every import statement of ``tree``, relative ones resolved to absolute names."""
    package = module if is_package else module.rpartition(".")[0]
    for node in _import_nodes(tree, type_checking):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            yield ".".join([*base, node.module] if node.module else base), [alias.name for alias in node.names]
        else:
            yield node.module or "", [alias.name for alias in node.names]


def import_graph(package: Path = PACKAGE, *, type_checking: bool = True) -> Graph:
    """
    Module -> the package's modules it imports (see the module notes for what counts as an edge).

    :param package: The package's directory.
    :param type_checking: Whether imports under ``if TYPE_CHECKING:`` (which never run) count.
    """
    modules = module_names(package)
    graph: Graph = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for target, names in _imported(tree, name, path.name == "__init__.py", type_checking):
            for imported in [f"{target}.{n}" for n in names] or [target]:
                edge = imported if imported in modules else target  # a submodule, else the module it is from
                if edge in modules:
                    graph[name].add(edge)
    return graph


def reachable(graph: Graph, start: str) -> set[str]:
    """The modules ``start`` imports, directly or not (``start`` itself only through a cycle)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for succ in graph.get(todo.pop(), ()):
            if succ not in seen:
                seen.add(succ)
                todo.append(succ)
    return seen


def cycles(graph: Graph) -> list[list[str]]:
    """
    The modules in import cycles, grouped by strongly connected component (modules that import each other,
    directly or not); each group sorted, the groups in order.
    """
    reach = {node: reachable(graph, node) for node in graph}
    groups = {frozenset(other for other in reach[node] if node in reach[other]) for node in graph if node in reach[node]}
    return sorted(sorted(group) for group in groups)


def cycle_path(graph: Graph, component: list[str]) -> list[str]:
    """One cycle through the first module of ``component``, as a path that ends where it starts."""
    members = set(component)
    start = component[0]
    parents: dict[str, str] = {}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for succ in sorted(graph[node] & members):
            if succ == start:
                path = [node]
                while path[-1] != start:
                    path.append(parents[path[-1]])
                return [start, *reversed(path[:-1]), start] if node != start else [start, start]
            if succ not in parents:
                parents[succ] = node
                queue.append(succ)
    return component  # unreachable for a strongly connected component


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_violations(graph: Graph, lower: str, upper: str) -> list[str]:
    """``"a -> b"`` for every module ``a`` under ``lower`` that imports a module ``b`` under ``upper``."""
    return [f"{a} -> {b}" for a in sorted(graph) if _under(a, lower) for b in sorted(graph[a]) if _under(b, upper)]


def test_the_graph_sees_function_level_and_relative_imports() -> None:
    graph = import_graph()
    assert f"{ROOT}.llm.base" in graph[f"{ROOT}.llm"]  # a package's re-exports are its edges
    assert f"{ROOT}.envs" in graph[ROOT]  # import a.b is an edge to a.b
    assert any(_under(target, f"{ROOT}.llm") for target in graph[f"{ROOT}.llm.resolve"])


def test_no_import_cycles() -> None:
    graph = import_graph()
    found = cycles(graph)
    described = [" -> ".join(cycle_path(graph, component)) for component in found]
    assert not found, "import cycles (function-level and TYPE_CHECKING imports included):\n" + "\n".join(described)


MODEL_MODULE = f"{ROOT}.r2po.r2po"
FACES = (ROOT, f"{ROOT}.r2po")
"""The package faces, which re-export ``R2PO``."""
CLIS = ("zoo", "compare", "ablate", "experiments")
"""The command-line tools (and their packages), which build models."""


def test_only_the_package_faces_and_the_clis_import_the_model_class() -> None:
    graph = import_graph()
    importers = sorted(name for name, edges in graph.items() if MODEL_MODULE in edges)
    assert f"{ROOT}.r2po" in importers  # the check sees the face's import
    others = [n for n in importers if n not in FACES and not any(_under(n, f"{ROOT}.{cli}") for cli in CLIS)]
    assert not others, f"modules that import {MODEL_MODULE} (components must receive what they need):\n" + "\n".join(others)


def test_common_does_not_import_llm() -> None:
    violations = layer_violations(import_graph(), f"{ROOT}.common", f"{ROOT}.llm")
    assert not violations, f"{ROOT}.common must not import {ROOT}.llm:\n" + "\n".join(violations)


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checks_catch_a_hidden_cycle_and_a_layer_violation(tmp_path: Path) -> None:
    pkg = _write(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "common/__init__.py": "",
            "common/text.py": "def f():\n    from ..llm import x\n",  # relative, inside a function
            "llm/__init__.py": "from pkg.llm.x import X\n",
            "llm/x.py": "import pkg.llm.y\nX = 1\n",
            "llm/y.py": "def g():\n    from pkg.llm import z\n",
            "llm/z.py": "from . import x\n",
            "llm/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.llm.w import W\n",
            "llm/w.py": "from pkg.llm.typed import T\n",
        },
    )
    assert import_graph(pkg)["pkg.llm.typed"] == {"pkg.llm.w"}
    assert cycles(import_graph(pkg)) == [["pkg.llm.typed", "pkg.llm.w"], ["pkg.llm.x", "pkg.llm.y", "pkg.llm.z"]]
    graph = import_graph(pkg, type_checking=False)  # the type-only cycle is gone
    assert graph["pkg.common.text"] == {"pkg.llm.x"}
    assert graph["pkg.llm"] == {"pkg.llm.x"}
    assert cycles(graph) == [["pkg.llm.x", "pkg.llm.y", "pkg.llm.z"]]
    assert cycle_path(graph, ["pkg.llm.x", "pkg.llm.y", "pkg.llm.z"]) == ["pkg.llm.x", "pkg.llm.y", "pkg.llm.z", "pkg.llm.x"]
    assert layer_violations(graph, "pkg.common", "pkg.llm") == ["pkg.common.text -> pkg.llm.x"]
    with pytest.raises(AssertionError, match=r"pkg\.llm\.x -> pkg\.llm\.y"):
        found = cycles(graph)
        assert not found, "\n".join(" -> ".join(cycle_path(graph, c)) for c in found)
