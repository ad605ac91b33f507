"""The README and the documentation site's sources: what CI and a reader rely on (the site itself is built by
``.ci/run`` with ``sphinx-build -W``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAX_README_WORDS = 1500


def setup_lines() -> list[str]:
    """The lines of the README's first ``bash`` block, as ``.ci/run`` reads them."""
    match = re.search(r"^```bash\n(.*?)^```$", README, flags=re.S | re.M)
    assert match is not None, "README.md has no ```bash block"
    return match.group(1).splitlines()


def declared_extras() -> set[str]:
    """The names of pyproject.toml's ``[project.optional-dependencies]`` (read as text: tomllib needs Python 3.11)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([A-Za-z0-9_-]+) = \[", section, flags=re.M))


def test_readme_is_short() -> None:
    assert len(README.split()) <= MAX_README_WORDS


def test_readme_opens_with_the_two_set_up_commands() -> None:
    first, second = setup_lines()  # exactly two lines
    assert README.index("```bash") < README.index("\n## ")  # before the first section
    assert first.endswith("&& python examples/quickstart.py --llm embedded")
    install, _, test = second.rpartition(" && ")
    assert test == "python -m pytest -q"
    extras = set(re.findall(r'pip install -e "\.\[([^\]]*)\]"', install)[0].split(","))
    declared = declared_extras()
    assert {"test", "docs", "zoo", "server", "embedded"} <= extras
    assert extras - {"ray"} <= declared  # every extra the line asks for exists (ray: declared by the Ray executor)


def test_readme_links_point_to_existing_files() -> None:
    targets = re.findall(r"\]\((?!https?://)([^)#\s]+)", README)
    assert targets
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert missing == []


def test_every_markdown_page_is_in_the_site() -> None:
    """Sphinx reads every page under docs/ (and warns for one outside every toctree); this checks the index names each
    top-level page, so that a page added to docs/ is not silently left out of the navigation."""
    index = (ROOT / "docs" / "index.rst").read_text(encoding="utf-8")
    named = set(re.findall(r"^   (\S+)$", index, flags=re.M))
    pages = {path.stem for path in (ROOT / "docs").glob("*.md")}
    assert pages - named == set()


def defines_something(path: Path) -> bool:
    """Whether a module defines a function or a class of its own (a package that only re-exports does not)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, (ast.FunctionDef, ast.ClassDef)) for node in tree.body)


def test_the_api_reference_documents_every_module() -> None:
    package = ROOT / "sb3_r2po"
    modules = set()
    for path in package.rglob("*.py"):
        if path.name == "__main__.py" or (path.name == "__init__.py" and not defines_something(path)):
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules.add(".".join(parts[:-1] if path.name == "__init__.py" else parts))
    documented = set()
    for page in (ROOT / "docs" / "api").glob("*.rst"):
        documented |= set(re.findall(r"^\.\. automodule:: (\S+)$", page.read_text(encoding="utf-8"), flags=re.M))
    assert modules - documented == set(), "add an automodule entry for each to a page of docs/api/"
