"""The redesign's figures: those of ``sb3_r2po/r2po/r2po.py``, checked on its source with ``ast`` (nothing is
imported), and those of one iteration, traced (see :func:`trace_one_iteration`).

- the module has at most 500 lines;
- class ``R2PO`` has at most 25 methods (every ``def`` directly in the class body, properties included);
- ``R2PO._iterate``, one iteration, has at most 45 lines and never branches on a variant's name or search mode:
  what differs between variants is data (:data:`sb3_r2po.r2po.arguments.VARIANTS`), not ``if`` chains in the loop.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path
from types import FrameType

import pytest

ROOT = Path(__file__).resolve().parents[1]
R2PO_FILE = ROOT / "sb3_r2po" / "r2po" / "r2po.py"

MAX_MODULE_LINES = 500
MAX_METHODS = 25
MAX_ITERATE_LINES = 45
ITERATE = "_iterate"
SEARCH_MODES = frozenset({"one", "two_independent", "two_sequential", "none"})
"""The values of :data:`sb3_r2po.r2po.arguments.SearchMode`."""
VARIANT_ATTRIBUTES = frozenset({"search", "variant", "variant_spec"})
"""Attributes that name the variant or its search mode: none of them may be compared in ``_iterate``."""


@cache
def variant_names() -> frozenset[str]:
    """The keys of :data:`sb3_r2po.r2po.arguments.VARIANTS`."""
    from sb3_r2po.r2po.arguments import VARIANTS

    assert VARIANTS, "VARIANTS is empty"
    return frozenset(VARIANTS)


@cache
def r2po_source() -> str:
    return R2PO_FILE.read_text(encoding="utf-8")


def r2po_class() -> ast.ClassDef:
    tree = ast.parse(r2po_source(), filename=str(R2PO_FILE))
    found = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "R2PO"]
    assert found, f"{R2PO_FILE.relative_to(ROOT)} defines no top-level class R2PO"
    return found[0]


def methods(cls: ast.ClassDef) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in cls.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def iterate_method() -> ast.FunctionDef | ast.AsyncFunctionDef:
    found = [node for node in methods(r2po_class()) if node.name == ITERATE]
    if not found:
        pytest.fail(f"class R2PO in {R2PO_FILE.relative_to(ROOT)} has no method {ITERATE!r} (one iteration of a variant)")
    return found[0]


def string_constants(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def variant_attributes(node: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr in VARIANT_ATTRIBUTES}


def branches_on_variant(function: ast.AST) -> list[str]:
    """Every comparison or ``match`` in ``function`` that tests a variant's name or search mode, as ``line: source``."""
    names = variant_names() | SEARCH_MODES
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            literals = set().union(*(string_constants(side) for side in sides)) & names
            attributes = set().union(*(variant_attributes(side) for side in sides))
        elif isinstance(node, ast.Match):
            literals = set().union(*(string_constants(case.pattern) for case in node.cases)) & names
            attributes = variant_attributes(node.subject)
        else:
            continue
        if literals or attributes:
            why = ", ".join([*(repr(s) for s in sorted(literals)), *(f".{a}" for a in sorted(attributes))])
            head = ast.unparse(node.subject if isinstance(node, ast.Match) else node)
            found.append(f"line {node.lineno}: {'match ' if isinstance(node, ast.Match) else ''}{head}  ({why})")
    return found


def test_module_has_at_most_500_lines() -> None:
    lines = len(r2po_source().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{R2PO_FILE.relative_to(ROOT)} has {lines} lines (at most {MAX_MODULE_LINES})"


def test_r2po_has_at_most_25_methods() -> None:
    names = [node.name for node in methods(r2po_class())]
    assert len(names) <= MAX_METHODS, f"class R2PO has {len(names)} methods (at most {MAX_METHODS}): {', '.join(names)}"


def test_iterate_has_at_most_45_lines() -> None:
    node = iterate_method()
    assert node.end_lineno is not None
    lines = node.end_lineno - node.lineno + 1
    assert lines <= MAX_ITERATE_LINES, (
        f"R2PO.{ITERATE} has {lines} lines (lines {node.lineno}-{node.end_lineno}; at most {MAX_ITERATE_LINES})"
    )


def test_iterate_does_not_branch_on_the_variant() -> None:
    found = branches_on_variant(iterate_method())
    assert not found, f"R2PO.{ITERATE} branches on a variant's name or search mode:\n" + "\n".join(found)


# the checker itself, on small sources


@pytest.mark.parametrize(
    "source",
    [
        "if variant.search == 'none': pass",
        "if mode in ('one', 'two_independent'): pass",
        "if 'two_sequential' != mode: pass",
        "if self.variant_spec.critic is None: pass",
        "if self.variant is x: pass",
        "if name == 'props': pass",
        "match self.variant_spec.search:\n    case _: pass",
        "match mode:\n    case 'one' | 'none': pass",
    ],
)
def test_checker_finds_a_branch_on_the_variant(source: str) -> None:
    assert branches_on_variant(ast.parse(source))


@pytest.mark.parametrize(
    "source",
    [
        "if spec.calls_per_iteration > 1 and spec.critic is not None: pass",
        "if record['kind'] == 'warmup': pass",
        "x = self.variant_spec.search  # read, not compared",
        "match status:\n    case 'kept': pass",
    ],
)
def test_checker_lets_data_driven_code_pass(source: str) -> None:
    assert not branches_on_variant(ast.parse(source))


# one iteration, traced: how deep our calls go from R2PO.learn to the env's step, and which of our files run

MAX_DEPTH = 6
"""The deepest chain of ``sb3_r2po`` frames from ``R2PO.learn`` down to the env's ``step`` (the issue's goal: 6)."""
MAX_ITERATION_FILES = 8
"""The ``sb3_r2po`` files one ``R2PO._iterate`` runs, the templates and the LLM backend aside (the issue's goal: 8).
The backend is the optimizer the loop calls, as the env is the task it steps: which files it runs depends on the
backend chosen (here the example LLM's one file; a transformers or HTTP backend runs its own)."""
MAX_PACKAGE_LINES = 11_000
"""Lines of the package's ``.py`` files: the ceiling (issue 38: 15,883 before the redesign; 11,000 with issue 40's
code policies in the loop). Prompt text lives in templates and ``prompts/tasks.yml``, which are data."""


def trace_one_iteration() -> tuple[list[str], set[str]]:
    """Run warm-up and one iteration, then trace a second iteration (llm="example", CartPole): the deepest chain of our
    frames above the env's ``step``, and our files run inside ``_iterate``."""
    import dataclasses
    import os

    import sb3_r2po
    from sb3_r2po import R2PO

    package = os.path.dirname(sb3_r2po.__file__)
    model = R2PO("MlpLinear", "CartPole-v1", llm="example", seed=0, n_eval_episodes=2, warmup_episodes=1, max_iterations=1)
    model.learn(10**9)
    model.settings = dataclasses.replace(model.settings, max_iterations=2)
    deepest: list[str] = []
    files: set[str] = set()
    inside = [0]

    def profile(frame: FrameType, event: str, arg: object) -> None:
        code = frame.f_code
        ours = code.co_filename.startswith(package) and code.co_filename.endswith(".py")
        if event == "call" and ours:
            if inside[0]:
                files.add(os.path.relpath(code.co_filename, package))
            inside[0] += code.co_name == "_iterate"
        elif event == "call" and code.co_name == "step" and "gymnasium/envs" in code.co_filename.replace(os.sep, "/"):
            chain, caller = [], frame.f_back
            while caller is not None:
                if caller.f_code.co_filename.startswith(package):
                    chain.append(f"{os.path.relpath(caller.f_code.co_filename, package)}:{caller.f_code.co_qualname}")
                caller = caller.f_back
            if len(chain) > len(deepest):
                deepest[:] = chain[::-1]
        elif event == "return" and ours and code.co_name == "_iterate":
            inside[0] -= 1

    sys.setprofile(profile)
    try:
        model.learn(10**9, reset_num_timesteps=False)
    finally:
        sys.setprofile(None)
    assert model.iteration == 2
    return deepest, files


def test_one_iteration_is_shallow_and_in_few_files() -> None:
    deepest, files = trace_one_iteration()
    assert deepest[0] == "r2po/r2po.py:R2PO.learn", deepest
    assert len(deepest) <= MAX_DEPTH, "calls from learn() to the env's step:\n" + "\n".join(deepest)
    assert "r2po/r2po.py" in files and "common/rollouts.py" in files
    assert "llm/example.py" in files, "the LLM was not called"
    loop = files - {"llm/example.py"}
    assert len(loop) <= MAX_ITERATION_FILES, f"{len(loop)} files run in one iteration: {sorted(loop)}"


def test_the_package_does_not_grow() -> None:
    package = ROOT / "sb3_r2po"
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in package.rglob("*.py"))
    assert lines <= MAX_PACKAGE_LINES, f"sb3_r2po has {lines} lines (the ceiling is {MAX_PACKAGE_LINES})"
