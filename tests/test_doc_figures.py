"""The docs' deterministic tables (``llm="example"``) equal their result files and a fresh run of their commands.

``python benchmarks/docs_figures.py --tables`` regenerates them (``benchmarks/results/<name>.json`` and the block
between ``<!-- figures: <name> -->`` and ``<!-- /figures -->`` in the page); a change of behaviour that moves one of
these figures fails here until they are regenerated.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_docs_figures() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_figures_benchmark", ROOT / "benchmarks" / "docs_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


figures = load_docs_figures()


@pytest.mark.parametrize("name", list(figures.TABLES))
def test_the_page_shows_the_result_file_with_its_date_commit_and_machine(name: str) -> None:
    result = json.loads((figures.RESULTS / f"{name}.json").read_text())
    assert result["command"] == figures.command_line(name)
    assert result["date"] and result["commit"] and result["machine"]
    page = (ROOT / "docs" / figures.TABLES[name][0]).read_text()
    match = figures.block_pattern(name).search(page)
    assert match, f"docs/{figures.TABLES[name][0]} has no block for {name}"
    assert match.group(2) == figures.render_block(name, result)
    assert result["date"] in match.group(2) and result["machine"] in match.group(2)


@pytest.mark.parametrize("name", figures.CHEAP_TABLES)
def test_a_fresh_run_gives_the_documented_table(name: str) -> None:
    """Deterministic figures: a difference is a code change; run ``python benchmarks/docs_figures.py --tables NAME``."""
    result = json.loads((figures.RESULTS / f"{name}.json").read_text())
    assert figures.run_table(name) == result["table"], f"regenerate: python benchmarks/docs_figures.py --tables {name}"


def test_a_table_leaves_out_its_volatile_rows_and_columns() -> None:
    text = "a line\n| what | value | seconds |\n|---|---|---|\n| best | 54.0 | 1.2 |\n| wall | 3 | 4 |\nafter\n| x |\n"
    assert figures.table_rows(text, ["seconds", "wall"]) == ["| what | value |", "| --- | --- |", "| best | 54.0 |"]
    with pytest.raises(RuntimeError, match="no table"):
        figures.table_rows("no table here", [])
