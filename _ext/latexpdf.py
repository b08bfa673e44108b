"""Sphinx extension: what the LaTeX (PDF) build of the book needs; the HTML build is left alone.

Loaded from _config.yml (`sphinx: local_extensions: {latexpdf: _ext}`) for every build, but each of
its post-transforms runs for the LaTeX builder only (``make pdf``):

- ``show_source`` outputs. IPython's ``Code`` object, which ``show_source`` displays, also carries
  a ``text/latex`` rendering: Pygments' LaTeX (``\\begin{Verbatim}`` with ``\\PY`` macros). MyST-NB
  puts any ``text/latex`` output into a math block, where a Verbatim cannot stand. The block
  becomes raw LaTeX instead, in Sphinx's own code environment (``sphinxVerbatim``) with Sphinx's
  highlighting macros (``\\PYG``), so that the source reads like every other code cell of the PDF:
  same colours, long lines wrapped.
- Chapter 10's attention viewer (``tinyformer.viz.attention_widget``) is HTML and JavaScript; a
  PDF would show its text form, ``AttentionWidget(n_layer=2, …)``. It is drawn instead as what it
  holds: every head's pattern on its sequence, one row of heat maps per layer (the weights come
  from the widget's own data in the notebook's stored output, drawn with
  ``tinyformer.viz.plot_attention``, as the chapter's other patterns are), with a line saying that
  the HTML book has the interactive view.
- The book's structure on paper. LaTeX numbers chapters itself, so a chapter title drops the number
  it carries in the HTML ("2. Attention" -> chapter 2, "Attention"); the appendices are lettered
  (Appendix A, B, ...), as they are unnumbered in the HTML; the preface, which Jupyter Book's LaTeX
  puts untitled after the table of contents, gets its title back, in the contents too.
- Link targets the LaTeX writer leaves out: an id on a word (the glossary's links land on a chapter's
  bold term) and the label of an exercise that a ``{ref}`` names (sphinx-exercise writes only a
  label of its own form) get a ``\\label`` of their own, so that those links lead somewhere on paper too.
- Two things in math that MathJax accepts and LaTeX does not, rewritten in the PDF only: an
  underscore in text (``$\\sqrt{\\texttt{n_pos}}$``), which LaTeX takes for a subscript outside math
  mode, is escaped (``\\_``); an operator as a bare subscript or superscript (``\\text{lr}_\\max``)
  gets braces (``_{\\max}``).
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: Pygments' LaTeX macros as IPython emits them, and Sphinx's names for the same macros.
PYGMENTS_MACRO = re.compile(r"\\PY(?=[{Z])")
VERBATIM = re.compile(r"\\(begin|end)\{Verbatim\}")

#: A text-mode command inside math, with an argument free of braces.
TEXT_IN_MATH = re.compile(r"(\\(?:text(?:tt|rm|it|bf|sf|normal)?|mbox)\{)([^{}]*)(\})")
UNESCAPED_UNDERSCORE = re.compile(r"(?<!\\)_")
#: An operator (a macro of several tokens) as the whole of a subscript or superscript.
BARE_OPERATOR = re.compile(r"([_^])(\\(?:max|min|sup|inf|lim|log|exp|det|arg(?:max|min)?))(?![A-Za-z])")

#: "2. Attention": a chapter's number in its title.
TITLE_NUMBER = re.compile(r"^\d+\.\s+")
#: The appendices' pages (book/appendix-*.md).
APPENDIX_DOC = re.compile(r"(?:^|/)appendix-[^/]*$")

WIDGET_TEXT = "AttentionWidget("
WIDGET_DATA = re.compile(r'<script type="application/json" class="tf-attn-data">(.*?)</script>', re.S)
WIDGET_TOKEN = re.compile(r'<span class="tf-attn-tok" data-i="\d+">(.*?)</span>', re.S)
WIDGET_NOTE = ("In the HTML edition of the book this is an interactive view: pick a layer and a head, "
               "then point at a token to see where it looks. On paper, every head's pattern on the "
               "probe sequence (row = query, column = key); the view opens on {selected}.")


def pygments_to_sphinx(latex: str) -> str:
    """IPython's Pygments LaTeX (``Verbatim``, ``\\PY``) as Sphinx writes code (``sphinxVerbatim``, ``\\PYG``)."""
    return VERBATIM.sub(r"\\\1{sphinxVerbatim}", PYGMENTS_MACRO.sub(r"\\PYG", latex.strip()))


class PygmentsOutputsToCode(SphinxPostTransform):
    """A ``text/latex`` output that is Pygments code (not math) becomes raw LaTeX code."""

    builders = ("latex",)
    default_priority = 10  # after MyST-NB has chosen each output's MIME type (priority 4)

    def run(self, **kwargs) -> None:
        for block in list(self.document.findall(nodes.math_block)):
            text = block.astext().strip()
            if "text_latex" in block.get("classes", []) and text.startswith(r"\begin{Verbatim}"):
                block.replace_self(nodes.raw("", pygments_to_sphinx(text) + "\n", format="latex"))


def drop_title_number(title: nodes.title) -> None:
    """"2. Attention" -> "Attention" (the first text of the title loses its number)."""
    first = next(iter(title.findall(nodes.Text)), None)
    if first is not None and TITLE_NUMBER.match(first):
        first.parent.replace(first, nodes.Text(TITLE_NUMBER.sub("", first, count=1)))


class BookStructure(SphinxPostTransform):
    """Chapter titles without their numbers, lettered appendices, a titled preface.

    Runs on the whole book, which the LaTeX builder assembles into one doctree, after
    sphinx-jupyterbook-latex has arranged it into parts (its post-transform runs at 700)."""

    builders = ("latex",)
    default_priority = 800

    def run(self, **kwargs) -> None:
        root = self.app.config.root_doc
        appendix_started = False
        for parent, start, docname in list(walk(self.document, root)):
            if not isinstance(start, addnodes.start_of_file):
                continue
            section = next((c for c in start.children if isinstance(c, nodes.section)), None)
            if section is None or not section.children or not isinstance(section[0], nodes.title):
                continue
            drop_title_number(section[0])
            if APPENDIX_DOC.search(docname) and not appendix_started:
                parent.insert(parent.index(start), nodes.raw("", "\\appendix\n", format="latex"))
                appendix_started = True
        title = self.env.titles.get(root)
        first = next(iter(self.document.findall(nodes.section)), None)
        if title is not None and first is not None and first.get("docname") == root:
            name = TITLE_NUMBER.sub("", title.astext()).replace("\\", "").replace("{", "").replace("}", "")
            heading = (f"\\chapter*{{{name}}}\\addcontentsline{{toc}}{{chapter}}{{{name}}}"
                       f"\\markboth{{{name}}}{{{name}}}\n")
            at = 1 if first.children and isinstance(first[0], nodes.title) else 0
            first.insert(at, nodes.raw("", heading, format="latex"))


def walk(node: nodes.Element, docname: str):
    """(parent, child, page) for every node under ``node``, top-down, with the page each came from
    (its nearest ``start_of_file``). It follows ``children``, not ``parent``: sphinx-jupyterbook-latex
    moves nodes into new parents without updating their ``parent``."""
    for child in list(node.children):
        here = child["docname"] if isinstance(child, addnodes.start_of_file) else docname
        yield node, child, here
        if isinstance(child, nodes.Element):
            yield from walk(child, here)


def is_unlabelled_target(node: nodes.Node) -> bool:
    """A node with ids whose ids the LaTeX writer writes no label for: a word (strong, emphasis,
    inline) or one of sphinx-exercise's exercises (its solutions have their labels)."""
    if not isinstance(node, nodes.Element) or not node.get("ids"):
        return False
    kind = type(node)
    return isinstance(node, (nodes.strong, nodes.emphasis, nodes.inline)) or \
        (kind.__module__.startswith("sphinx_exercise") and kind.__name__.startswith("exercise"))


class LabelTargets(SphinxPostTransform):
    """Write a ``\\label`` for each id the LaTeX writer would drop (see :func:`is_unlabelled_target`)."""

    builders = ("latex",)
    default_priority = 800

    def run(self, **kwargs) -> None:
        for parent, node, docname in list(walk(self.document, self.app.config.root_doc)):
            if is_unlabelled_target(node):
                labels = "".join(f"\\phantomsection\\label{{\\detokenize{{{docname}:{i}}}}}" for i in node["ids"])
                parent.insert(parent.index(node), nodes.raw("", labels, format="latex"))


def math_for_latex(latex: str) -> str:
    """``\\texttt{n_pos}`` -> ``\\texttt{n\\_pos}`` (and so for \\text, \\textrm, \\mbox, ...);
    ``x_\\max`` -> ``x_{\\max}``."""
    latex = TEXT_IN_MATH.sub(lambda m: m[1] + UNESCAPED_UNDERSCORE.sub(r"\\_", m[2]) + m[3], latex)
    return BARE_OPERATOR.sub(r"\1{\2}", latex)


class MathForLaTeX(SphinxPostTransform):
    """Rewrite the math that MathJax reads and LaTeX cannot (see :func:`math_for_latex`)."""

    builders = ("latex",)
    default_priority = 10

    def run(self, **kwargs) -> None:
        for node in list(self.document.findall(lambda n: isinstance(n, (nodes.math, nodes.math_block)))):
            text = node.astext()
            escaped = math_for_latex(text)
            if escaped != text:
                node.children = []
                node += nodes.Text(escaped)


def widget_outputs(app: Sphinx) -> dict[str, dict]:
    """The attention viewers in the book's stored notebook outputs: their text form -> their data
    (the JSON the viewer's script reads) and token labels."""
    found: dict[str, dict] = {}
    for docname in sorted(app.env.found_docs):
        path = Path(app.env.doc2path(docname))
        if path.suffix != ".ipynb":
            continue
        for cell in json.loads(path.read_text(encoding="utf-8")).get("cells", []):
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                text, markup = "".join(data.get("text/plain", "")), "".join(data.get("text/html", ""))
                match = WIDGET_DATA.search(markup)
                if text.startswith(WIDGET_TEXT) and match:
                    tokens = [html.unescape(t) for t in WIDGET_TOKEN.findall(markup)]
                    found[text.strip()] = {"data": json.loads(match.group(1)), "tokens": tokens}
    return found


def draw_widget(data: dict, tokens: list[str], path: Path) -> None:
    """Every head's pattern, one row of panels per layer, the selected head's title in bold."""
    import numpy as np
    from matplotlib.figure import Figure

    from tinyformer.viz import plot_attention

    n_layer, n_heads, T = len(data["w"]), len(data["w"][0]), len(tokens)
    weights = np.zeros((n_layer, n_heads, T, T))
    for layer, heads in enumerate(data["w"]):
        for head, rows in enumerate(heads):
            for query, row in enumerate(rows):
                weights[layer, head, query, :len(row)] = np.asarray(row) / data["scale"]
    fig = Figure(figsize=(1.9 * n_heads, 2.05 * n_layer), layout="constrained")
    axes = fig.subplots(n_layer, n_heads, squeeze=False)
    for layer in range(n_layer):
        for head in range(n_heads):
            ax = axes[layer, head]
            plot_attention(weights[layer, head], tokens, ax=ax, colorbar=False,
                           title=f"{data['layers'][layer]}, {data['heads'][layer][head]}")
            ax.title.set_fontsize(8)
            if (layer, head) == (data["layer"], data["head"]):
                ax.title.set_fontweight("bold")
            ax.tick_params(labelsize=6, length=2)
            ax.xaxis.label.set_fontsize(7)
            ax.yaxis.label.set_fontsize(7)
            if head:
                ax.set_ylabel("")
            if layer < n_layer - 1:
                ax.set_xlabel("")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=200)


class StaticAttentionWidget(SphinxPostTransform):
    """The interactive attention viewer's text form -> a figure of every head's pattern."""

    builders = ("latex",)
    default_priority = 10

    def run(self, **kwargs) -> None:
        blocks = [b for b in self.document.findall(nodes.literal_block) if b.astext().startswith(WIDGET_TEXT)]
        if not blocks:
            return
        widgets = widget_outputs(self.app)
        for block in blocks:
            widget = widgets.get(block.astext().strip())
            if widget is None:
                logger.warning("no stored attention viewer matches this output; the PDF shows its text form",
                               location=block, type="latexpdf", subtype="widget")
                continue
            data = widget["data"]
            digest = hashlib.sha256(json.dumps(widget, sort_keys=True).encode()).hexdigest()[:12]
            name = f"attention-widget-{digest}.png"
            draw_widget(data, widget["tokens"], Path(self.app.outdir) / name)
            selected = f"{data['layers'][data['layer']]}, {data['heads'][data['layer']][data['head']]} (in bold)"
            latex = f"\\begin{{center}}\\sphinxincludegraphics[width=\\linewidth]{{{name}}}\\end{{center}}\n"
            figure = nodes.raw("", latex, format="latex")
            note = nodes.paragraph("", "", nodes.emphasis("", WIDGET_NOTE.format(selected=selected)))
            block.replace_self([figure, note])


def setup(app: Sphinx) -> dict:
    app.add_post_transform(PygmentsOutputsToCode)
    app.add_post_transform(StaticAttentionWidget)
    app.add_post_transform(MathForLaTeX)
    app.add_post_transform(BookStructure)
    app.add_post_transform(LabelTargets)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
