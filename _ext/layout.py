"""Sphinx extension: what the book's pages show, made to read well on a phone and a desktop.

Loaded from _config.yml (`sphinx: local_extensions: {layout: _ext}`); its CSS and script are
_static/layout.css and _static/layout.js, which Jupyter Book includes on every page.

- Solutions show no grading markers: the ``# BEGIN SOLUTION`` / ``# END SOLUTION`` lines are
  removed from the code cells of the rendered page (the notebooks keep them for `make student`).
- Every figure's image carries alt text: an image without one gets its figure's caption.
- Exercise titles read "Exercise 2.1 · Title" and "Solution to Exercise 2.1 · Title" instead of
  sphinx-exercise's "Exercise (2.1 · Title)" for unnumbered exercises.
- Short tables (two or three columns) are marked so that the CSS can stack them into one card per
  row on a phone, with the header of each further column written in front of its cell.

- Figures, tables and equations are numbered per chapter, "Figure 3.2" and "(3.4)", the chapter's
  number taken from its file name (``book/03-…``), so that a chapter not written yet leaves no gap
  and the Preface and appendices stay unnumbered in between.

tools/browser_check.py checks the result in a browser.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform
from sphinx.transforms.post_transforms import SphinxPostTransform

# The grading markers of tinyformer.course.student (BEGIN, END), matched the way it matches them
# (the whole line, stripped); tests/test_browser_check.py keeps the two in step.
MARKERS = ("# BEGIN SOLUTION", "# END SOLUTION")
ASSETS = ("_static/layout.css", "_static/layout.js")
STACK_CLASS, LABEL_CLASS, EMPTY_CLASS = "tf-stack", "tf-cell-label", "tf-empty"


def strip_markers(text: str) -> str:
    """`text` without the lines that consist of a grading marker."""
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if line.strip() not in MARKERS]
    return "".join(kept) if len(kept) != len(lines) else text


def is_cell_input(node: nodes.Node) -> bool:
    """A MyST-NB code cell's source (a container that holds the cell's literal block)."""
    return isinstance(node, nodes.container) and (
        node.get("nb_element") == "cell_code_source" or "cell_input" in node.get("classes", []))


class StripSolutionMarkers(SphinxTransform):
    """Drop the grading-marker lines from the code cells of every page."""

    default_priority = 500

    def apply(self, **kwargs) -> None:
        for cell in self.document.findall(is_cell_input):
            for block in cell.findall(nodes.literal_block):
                text = block.astext()
                cleaned = strip_markers(text)
                if cleaned != text:
                    block.rawsource = cleaned
                    block.children = []
                    block += nodes.Text(cleaned)


def figure_alt_text(doctree: nodes.document) -> None:
    """Give every image of a captioned figure an alt text: the caption's, unless it has its own."""
    for figure in doctree.findall(nodes.figure):
        captions = list(figure.findall(nodes.caption))
        if not captions:
            continue
        caption = re.sub(r"\s+", " ", captions[0].astext()).strip()
        for image in figure.findall(nodes.image):
            if not image.get("alt", "").strip() and caption:
                image["alt"] = caption


class CleanExerciseTitles(SphinxPostTransform):
    """"Exercise (2.1 · Title)" -> "Exercise 2.1 · Title" for unnumbered exercises and their solutions.

    Runs after sphinx-exercise has built the titles (its post-transforms run at 20 and 21).
    """

    default_priority = 25

    def run(self, **kwargs) -> None:
        try:
            from sphinx_exercise.nodes import exercise_node, solution_node
        except ImportError:  # the book without sphinx-exercise: nothing to clean
            return
        for node in self.document.findall(lambda n: isinstance(n, (exercise_node, solution_node))):
            if not node.children or not isinstance(node.children[0], nodes.title):
                continue
            title = node.children[0]
            if isinstance(node, solution_node):
                refs = [c for c in title.children if isinstance(c, nodes.reference)]
                if not refs or not self.unnumbered(refs[0], solution=True):
                    continue
                unparenthesize(refs[0])
                move_leading_space(title, refs[0])
            elif self.unnumbered(title, solution=False):
                unparenthesize(title)

    @staticmethod
    def unnumbered(parent: nodes.Element, solution: bool) -> bool:
        """The exercise is unnumbered: the word "Exercise" is followed by " (" (not by a number)."""
        texts = [c.astext() for c in parent.children[:2]]
        return len(texts) == 2 and texts[0].strip() in ("Exercise", "Solution to Exercise") and texts[1] == " ("


def unparenthesize(parent: nodes.Element) -> None:
    """Turn the children [word, " (", subtitle…, ")"] into [word, " " or ": ", subtitle…]."""
    children = parent.children
    if len(children) < 3 or children[1].astext() != " (" or children[-1].astext() != ")":
        return
    subtitle = "".join(c.astext() for c in children[2:-1])
    separator = " " if subtitle[:1].isdigit() else ": "
    parent.replace(children[1], nodes.Text(separator))
    parent.remove(parent.children[-1])


def move_leading_space(title: nodes.Element, reference: nodes.reference) -> None:
    """"Solution to<a> Exercise …</a>" -> "Solution to <a>Exercise …</a>" (no underlined space)."""
    first = reference.children[0] if reference.children else None
    index = title.index(reference)
    if isinstance(first, nodes.Text) and first.startswith(" ") and index > 0:
        before = title.children[index - 1]
        if isinstance(before, nodes.Text):
            title.replace(before, nodes.Text(before.rstrip() + " "))
            reference.replace(first, nodes.Text(first.lstrip()))


def mark_short_tables(doctree: nodes.document) -> None:
    """Tables of two or three columns with a header get the class tf-stack, and each body cell
    after the first column starts with its column's header (shown only when stacked), except in
    a second column of prose (a "meaning" column reads fine without its header)."""
    for table in doctree.findall(nodes.table):
        groups = [g for g in table.children if isinstance(g, nodes.tgroup)]
        if len(groups) != 1 or not 2 <= int(groups[0].get("cols", 0)) <= 3:
            continue
        head = next(iter(groups[0].findall(nodes.thead)), None)
        body = next(iter(groups[0].findall(nodes.tbody)), None)
        if head is None or body is None or len(head.children) != 1:
            continue
        labels = [entry.astext().strip() for entry in head.children[0].children]
        second = [row.children[1].astext().strip() for row in body.children if len(row.children) > 1]
        prose = sum(len(text.split()) for text in second) > 4 * max(1, len(second))  # > 4 words a cell
        table["classes"].append(STACK_CLASS)
        for row in body.children:
            for column, entry in enumerate(row.children):
                if not entry.astext().strip():
                    entry["classes"].append(EMPTY_CLASS)
                elif column >= (2 if prose else 1) and column < len(labels) and labels[column]:
                    label = nodes.inline("", labels[column] + ": ", classes=[LABEL_CLASS])
                    paragraph = next(iter(entry.findall(nodes.paragraph)), None)
                    (paragraph if paragraph is not None else entry).insert(0, label)


def record_assets(app: Sphinx, config) -> None:
    """Put a digest of the CSS and script into the configuration: Sphinx copies static files only
    when some page is rebuilt, so an edited stylesheet alone would never reach the built book."""
    digest = hashlib.sha256()
    for name in ASSETS:
        path = Path(app.confdir) / name
        digest.update(path.read_bytes() if path.exists() else b"")
    config.layout_assets_digest = digest.hexdigest()[:16]


def on_doctree_resolved(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    figure_alt_text(doctree)
    if app.builder.format == "html":  # the labels are for a phone's screen; on paper they would show
        mark_short_tables(doctree)


CHAPTER_DOC = re.compile(r"(?:^|/)(\d\d)-[^/]*$")


def chapter_number(docname: str) -> int | None:
    """2 for ``book/02-attention``; None for a page that is no numbered chapter (the Preface)."""
    m = CHAPTER_DOC.search(docname)
    return int(m.group(1)) if m and int(m.group(1)) > 0 else None


def number_per_chapter(app: Sphinx, env) -> list[str]:
    """Renumber what Sphinx numbered book-wide (figures, tables, code blocks, equations) as
    (chapter, k), k counting from 1 in each chapter in the order Sphinx found them."""
    for docname, by_type in env.toc_fignumbers.items():
        chapter = chapter_number(docname)
        for numbers in by_type.values():
            ordered = sorted(numbers, key=lambda i: numbers[i])
            for k, node_id in enumerate(ordered, start=1):
                numbers[node_id] = (chapter, k) if chapter else (k,)
    return []


def setup(app: Sphinx) -> dict:
    app.add_config_value("layout_assets_digest", "", "html")
    app.connect("config-inited", record_assets)
    app.add_transform(StripSolutionMarkers)
    app.add_post_transform(CleanExerciseTitles)
    app.connect("doctree-resolved", on_doctree_resolved)
    # after the toctree collector (priority 500) has numbered everything book-wide
    app.connect("env-get-updated", number_per_chapter, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
