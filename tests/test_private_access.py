"""No code of ours reaches into another object's private attributes (``x._name``).

Every module of ``sb3_r2po``, ``benchmarks`` and ``examples`` is parsed with ``ast`` (nothing is imported). A name
with one leading underscore (``_name``, ``__name``; not a dunder ``__name__``) is private to its object; reading or
writing it is allowed only on

- ``self`` and ``cls`` (the object's own code, SB3's protected hooks ``self._on_step()`` ... included),
- ``super()`` (a subclass extending its base's hook: ``super()._on_step()``),

and for the few names of :data:`ALLOWED`. Also refused: ``getattr``/``setattr``/``hasattr``/``delattr`` with a
constant private name on anything but ``self``/``cls``, and ``from module import _name``. A class that lacks what a
caller needs gets a public method or property instead.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("sb3_r2po", "benchmarks", "examples")
OWN = frozenset({"self", "cls"})
REFLECTION = frozenset({"getattr", "setattr", "hasattr", "delattr"})

ALLOWED: dict[str, str] = {
    # ctypes: a Structure subclass declares its fields in ``_fields_``, and reading it is ctypes' documented way to
    # list them (llm/embedded.py checks a llama.cpp params struct has a field before it sets it). The trailing
    # underscore marks ctypes' public "sunder" API, not a private attribute.
    "_fields_": "ctypes.Structure's documented list of fields",
    # a NamedTuple's methods start with an underscore so that they cannot clash with field names; they are public
    "_asdict": "typing.NamedTuple's documented conversion to a dict (common/rollouts.VecStep into callback.locals)",
}
"""Private-looking names that are a library's public API, with the reason; keep this short."""


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def is_own(node: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: the object's own code."""
    if isinstance(node, ast.Name):
        return node.id in OWN
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def private_attribute(node: ast.Attribute) -> bool:
    """``x._name`` read, written or deleted, ``x`` not the object's own."""
    return is_private(node.attr) and node.attr not in ALLOWED and not is_own(node.value)


def private_reflection(node: ast.Call) -> bool:
    """``getattr(x, "_name", ...)`` (or ``setattr``, ``hasattr``, ``delattr``), ``x`` not the object's own."""
    func, args = node.func, node.args
    if not (isinstance(func, ast.Name) and func.id in REFLECTION and len(args) >= 2):
        return False
    name = args[1]
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return False
    return is_private(name.value) and name.value not in ALLOWED and not is_own(args[0])


def violations(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, source)`` for every access to another object's private name in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private_attribute(node):
            yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Call) and private_reflection(node):
            yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if is_private(alias.name) and alias.name not in ALLOWED:
                    yield node.lineno, f"from {'.' * node.level}{node.module or ''} import {alias.name}"


def modules() -> list[Path]:
    return sorted(path for top in CHECKED for path in (ROOT / top).rglob("*.py"))


def test_no_private_access_from_outside() -> None:
    found = []
    for path in modules():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [f"{path.relative_to(ROOT)}:{line}: {source}" for line, source in sorted(violations(tree))]
    assert not found, "private attributes of another object (use or add a public API):\n" + "\n".join(found)


def test_every_allowed_name_is_still_used() -> None:
    """An exception nobody needs any more goes from :data:`ALLOWED`."""
    used = set()
    for path in modules():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        used |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not set(ALLOWED) - used, f"allowed but never used: {sorted(set(ALLOWED) - used)}"


# the checker itself, on small sources


@pytest.mark.parametrize(
    "source",
    [
        "model._episode_num",
        "model._episode_num = 0",
        "del model._cache",
        "self.backend._threads",
        "llm._ctx.ctx",
        "type(self)._registry",
        "obj.__mangled",
        "getattr(manager, '_patched', False)",
        "setattr(fn, '_marker', True)",
        "from sb3_r2po.llm.base import _helper",
    ],
)
def test_checker_finds_private_access(source: str) -> None:
    assert list(violations(ast.parse(source)))


@pytest.mark.parametrize(
    "source",
    [
        "self._episode_num += 1",
        "cls._registry",
        "super()._on_step()",
        "self.__class__",
        "type(params)._fields_",
        "model.episodes_used",
        "getattr(self, '_last', None)",
        "getattr(fn, '__name__', '')",
        "from sb3_r2po.llm.base import chat_batch as _chat_batch",
    ],
)
def test_checker_lets_public_and_own_access_pass(source: str) -> None:
    assert not list(violations(ast.parse(source)))
