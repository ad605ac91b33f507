"""Sphinx configuration of the sb3_r2po documentation.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (the ``docs`` extra installs Sphinx, the
Read-the-Docs theme and myst-parser, which reads the Markdown pages). The API reference is generated from the
docstrings by autodoc, so the package must be importable (``pip install -e ".[docs]"``).
"""

from __future__ import annotations

import importlib.util
import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import sb3_r2po

project = "sb3_r2po"
author = "sb3_r2po contributors"
copyright = "2026, sb3_r2po contributors"
version = release = sb3_r2po.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# Markdown: anchors for the headings, so that links such as ``zoo.md#train-r2po`` resolve.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# autodoc: members in source order, the signature's type hints in the description; each module documents what it
# defines (not the names it imports, even when its __all__ re-exports them). Optional dependencies that are not
# installed are mocked so that their modules can still be documented.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
OPTIONAL = ("llama_cpp", "openai", "ray", "rl_zoo3", "sb3_contrib", "optuna")
autodoc_mock_imports = [name for name in OPTIONAL if importlib.util.find_spec(name) is None]

html_theme = "sphinx_rtd_theme"
html_title = f"sb3_r2po {release}"
html_show_sourcelink = False
html_static_path = ["_static"]
html_css_files = ["custom.css"]  # code wraps instead of being clipped; option names in tables do not break

# A code block without a language is shown as plain text (console output, tables), not highlighted as Python.
highlight_language = "text"
