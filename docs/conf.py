"""Sphinx configuration of rosenna's documentation site (`make docs`).

Sphinx with MyST Markdown and the Furo theme: the generator HPC users already read (Spack,
EasyBuild, archspec and hls4ml publish their docs with Sphinx). Pages are CommonMark/MyST
Markdown, readable on the repository's web view too. Warnings are errors (`make docs` passes -W),
so a broken internal link or anchor, a page in no table of contents, or a reference page that
no longer renders fails the build.
"""

import os
import sys

DOCS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(DOCS))  # this checkout's rosenna, for the generated reference
sys.path.insert(0, os.path.join(DOCS, "_ext"))

from rosenna import __version__  # noqa: E402

project = "rosenna"
author = "the rosenna developers"
copyright = "the rosenna developers"
release = __version__
version = __version__

extensions = ["myst_parser", "rosenna_reference"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "README.md"]

# Headings up to ### get anchors, so `page.md#a-heading` links are checked like page links.
myst_heading_anchors = 3
myst_enable_extensions = ["deflist"]

# A toctree line `name?` (index.md) lists a page only when it exists: docs/_ext/rosenna_reference.py.
nitpicky = True
# Command lines are quoted as written: no "--" turned into a dash, no curly quotes.
smartquotes = False

html_theme = "furo"
html_title = f"rosenna {__version__}"
html_show_sourcelink = False
rosenna_repository_url = "https://github.com/rosenna/rosenna"
