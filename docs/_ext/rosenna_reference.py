"""Sphinx glue of rosenna's documentation site.

- ``{rosenna-reference} NAME``: renders ``rosenna.docs.REFERENCE[NAME]()`` (Markdown made from the
  code: the command line, status codes, .rwt checks, toolchain schema, operators) in place, so the
  reference pages are generated at every build and cannot drift from the code.
- Optional toctree entries: a line ``name?`` in a toctree lists page ``name`` when it exists and
  is dropped when it does not, so pages that arrive later need no change of the index.
- Links from a page to a file of the repository outside ``docs/`` (``../rosenna/abi.py``,
  ``../results/README.md``) point at that file in the repository's web view; a link to a path
  that does not exist is a warning, which ``make docs`` (``-W``) turns into an error.
"""

import os
import re

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.transforms import SphinxTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)


class ReferenceDirective(SphinxDirective):
    required_arguments = 1
    has_content = False

    def run(self):
        from rosenna import docs

        name = self.arguments[0]
        if name not in docs.REFERENCE:
            raise self.error(f"unknown rosenna reference {name!r}; known: {', '.join(sorted(docs.REFERENCE))}")
        text = docs.REFERENCE[name]()
        container = nodes.container(classes=["rosenna-reference"])
        self.state.nested_parse(StringList(text.splitlines(), source=f"rosenna.docs.{name}"),
                                self.content_offset, container)
        return container.children


class RepositoryLinks(SphinxTransform):
    """Turn links to repository files outside the documentation folder into web links."""

    default_priority = 5  # before MyST resolves its references (a post-transform)

    def apply(self):
        srcdir = os.path.abspath(self.env.srcdir)
        root = os.path.dirname(srcdir)
        base = self.config.rosenna_repository_url.rstrip("/")
        here = os.path.dirname(self.env.doc2path(self.env.docname))
        for node in list(self.document.findall(addnodes.pending_xref)) + list(
                self.document.findall(addnodes.download_reference)):
            if node.get("reftype") != "myst":
                continue
            target = node.get("reftarget", "")
            if node.get("refdomain") == "doc":
                # MyST names a Markdown file outside docs/ by its absolute path without ".md"
                if not os.path.isabs(target):
                    continue
                path, anchor = target + ".md", node.get("reftargetid") or ""
            else:
                path, _, anchor = target.partition("#")
            if not path or "://" in path:
                continue
            full = os.path.normpath(os.path.join(here, path))
            if full == srcdir or full.startswith(srcdir + os.sep) or not full.startswith(root + os.sep):
                continue  # inside docs/: Sphinx and MyST check it; outside the repository: theirs
            relative = os.path.relpath(full, root).replace(os.sep, "/")
            if not os.path.exists(full):
                logger.warning(f"link to {relative}, which is not in the repository", location=node)
                continue
            kind = "tree" if os.path.isdir(full) else "blob"
            uri = f"{base}/{kind}/main/{relative}" + (f"#{anchor}" if anchor else "")
            reference = nodes.reference("", "", internal=False, refuri=uri)
            reference += node.children
            node.replace_self(reference)


OPTIONAL_ENTRY = re.compile(r"^(?P<name>[\w./-]+)\?[ \t]*$", re.M)


def optional_entries(app, docname, source):
    """Resolve ``name?`` toctree lines of a page (see the module's docstring)."""
    here = os.path.dirname(docname)

    def keep(match):
        target = os.path.normpath(os.path.join(here, match.group("name")))
        return match.group("name") if os.path.isfile(os.path.join(app.srcdir, target + ".md")) else ""

    source[0] = OPTIONAL_ENTRY.sub(keep, source[0])


def setup(app):
    app.connect("source-read", optional_entries)
    app.add_config_value("rosenna_repository_url", "https://github.com/rosenna/rosenna", "env")
    app.add_directive("rosenna-reference", ReferenceDirective)
    app.add_transform(RepositoryLinks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
