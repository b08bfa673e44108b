"""Sphinx extension: the bold word of every glossary definition is a label the glossary links to.

Loaded from _config.yml (`sphinx: local_extensions: {glossary_labels: _ext}`). tools/glossary.py
decides which bolds of the chapters are definitions (`definitions()`, the one place that decides)
and writes book/appendix-glossary.md, whose links read `[Chapter 2, ...](#glossary-attention)`.
While Sphinx reads a chapter, this extension finds the `strong` node of each of the chapter's
definitions and makes it an explicit target named like the link: the node gets the id
`glossary-<slug>`, so the link lands on the bold word, and Sphinx's standard domain records the
name as a label (`anonlabels`), so a link whose target is missing is an undefined reference
(fatal in the book's `-W -n` build). The standard domain also forgets a re-read page's labels
(`env-purge-doc`) and merges the labels that parallel readers found (`env-merge-info`).

A definition is found by its text: the n-th bold of the chapter whose text it is. If the chapter's
page has a different number of bolds with that text than its markdown, the match would be a guess,
so the extension warns instead. When the set of definitions changes (a chapter gains one, so the
labels of a later chapter's definitions of the same term get renumbered), every chapter whose
labels changed is read again, even if its own file did not change.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform
from sphinx.util import logging

logger = logging.getLogger(__name__)
TOOL = Path(__file__).resolve().parents[1] / "tools" / "glossary.py"


def _tool():
    """tools/glossary.py, imported under a name of its own (this module is the extension)."""
    name = "tinyformer_glossary_tool"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TOOL)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_cache: dict = {}


def labels_by_chapter(book: Path) -> dict[str, list]:
    """Chapter stem ("02-attention") -> its definitions; recomputed when a chapter source changes."""
    tool = _tool()
    key = (str(book),) + tuple((p.name, p.stat().st_mtime_ns) for p in tool.chapter_sources(book))
    if _cache.get("key") != key:
        by_chapter: dict[str, list] = {}
        for d in tool.definitions(book):
            by_chapter.setdefault(d.bold.source.stem, []).append(d)
        _cache.update(key=key, value=by_chapter)
    return _cache["value"]


def _book(env) -> Path:
    return Path(env.srcdir) / "book"


def _stem(docname: str) -> str:
    return docname.rsplit("/", 1)[-1]


class LabelDefinitions(SphinxTransform):
    """Give the bold word of each glossary definition in this chapter its `glossary-<slug>` label."""

    default_priority = 800  # before SphinxDomains (850) hands the explicit targets to the std domain

    def apply(self, **kwargs) -> None:
        definitions = labels_by_chapter(_book(self.env)).get(_stem(self.env.docname), [])
        if not definitions:
            return
        strong: dict[str, list[nodes.strong]] = {}
        for node in self.document.findall(nodes.strong):
            strong.setdefault(" ".join(node.astext().split()), []).append(node)
        tool = _tool()
        written: dict[str, int] = {}
        for bold in tool.read_chapter(definitions[0].bold.source):
            written[bold.text] = written.get(bold.text, 0) + 1
        for d in definitions:
            found = strong.get(d.bold.text, [])
            if len(found) != written[d.bold.text]:
                logger.warning("glossary: %s has %d bold %r in its markdown but %d on the page; "
                               "cannot tell which one defines %r", self.env.docname, written[d.bold.text],
                               d.bold.text, len(found), d.term, location=(self.env.docname, None))
                continue
            node = found[d.bold.ordinal]
            node["names"].append(d.label)
            self.document.note_explicit_target(node, node)
            if d.label not in node["ids"]:  # the id is the label itself, so `#glossary-x` lands on the word
                node["ids"] = [d.label] + [i for i in node["ids"] if i != d.label]
                self.document.ids[d.label] = node


def reread_relabelled(app: Sphinx, env, added, changed, removed) -> list[str]:
    """The chapters whose glossary labels changed since the last build, to be read again."""
    current = {stem: [(d.label, d.bold.text, d.bold.ordinal) for d in defs]
               for stem, defs in labels_by_chapter(_book(env)).items()}
    previous = getattr(env, "glossary_labels", {})
    env.glossary_labels = current
    stale = {stem for stem in set(current) | set(previous) if current.get(stem) != previous.get(stem)}
    return [doc for doc in env.found_docs if _stem(doc) in stale and doc not in added | changed]


def setup(app: Sphinx) -> dict:
    app.add_transform(LabelDefinitions)
    app.connect("env-get-outdated", reread_relabelled)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
