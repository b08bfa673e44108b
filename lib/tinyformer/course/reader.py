"""Reader notebooks: a chapter as Colab and Jupyter show it, with no MyST left.

    python tools/nb.py readers          writes notebooks/NN-slug.ipynb and notebooks/exercises/
    python tools/nb.py check-readers    fails when one is stale or holds MyST syntax

A book notebook (``book/NN-slug.ipynb``) is written in MyST: roles such as ``{glue:text}``,
``{numref}``, ``{eq}`` and ``{footcite:p}``, directives such as ``{math}``, ``{admonition}``,
``{exercise}`` and ``{solution-start}``, figure captions in cell metadata. Jupyter and Colab show
all of it as raw text. :func:`reader_notebook` rewrites the notebook in plain Jupyter Markdown:

- glued values are inlined from the outputs MyST-NB stored in the executed notebook, with
  MyST-NB's own formatting of ``name:.3f``; glued figures become cell attachments;
- figures, tables and equations get the numbers Sphinx gives them on the website (only
  captioned, named figures and labelled equations, numbered through the whole book in the
  order of ``_toc.yml``), so ``{numref}`` reads "Figure 3" and ``{eq}`` "(2)"; a ``{math}``
  block becomes ``$$ … \\tag{2} $$``; ``check-readers --html`` compares with the built site;
- citations become author–year, "(Vaswani et al., 2017)", and ``{footbibliography}`` the list
  of the chapter's references, formatted by pybtex in the book's ``plain`` style;
- admonitions become block quotes with a bold title; dropdowns and solutions fold in
  ``<details>``; exercises become headings "Exercise 2.1 · Title"; a figure's caption is a
  Markdown cell under it.

Markdown is parsed with MyST's own markdown-it configuration (``myst_parser``); each construct
is replaced in the source text by its line span (blocks) or its literal (roles), so the prose
keeps its line breaks. A glued value, a label or a citation that cannot be resolved raises
:class:`ReaderError` naming it; a directive or role this module does not know raises too, so
nothing reaches a reader unconverted. :func:`myst_problems` checks a written notebook.

With ``exercises=True`` the result is the exercise notebook: each solution replaced by a stub
that raises ``NotImplementedError`` (see :mod:`tinyformer.course.student`), the worked answers
dropped, every output cleared.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import mimetypes
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import yaml
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from myst_nb.core.variables import format_plain_text
from myst_nb.ext.glue import extract_glue_data_cell
from myst_parser.config.main import MdParserConfig
from myst_parser.parsers.mdit import create_md_parser
from pybtex.backends.markdown import Backend as MarkdownBackend
from pybtex.backends.plaintext import Backend as TextBackend
from pybtex.database import parse_file
from pybtex.plugin import find_plugin
from pybtex.richtext import Text

from tinyformer.course.cells import BEGIN, END, exercise_name, has_exercises, stub_function, stub_source

__all__ = ["Book", "ReaderError", "chapter_metadata", "check_readers", "dumps", "find_root", "myst_problems",
           "reader_notebook", "reader_paths", "write_readers"]

CHAPTER_GLOB = "[0-9][0-9]-*.ipynb"
READERS, EXERCISES = "notebooks", "notebooks/exercises"

#: directives rendered as block quotes, with the title they get when they have none
ADMONITIONS = {"admonition": "", "note": "Note", "warning": "Warning", "tip": "Tip", "hint": "Hint",
               "important": "Important", "caution": "Caution", "attention": "Attention",
               "danger": "Danger", "error": "Error", "seealso": "See also", "topic": "",
               "sidebar": "", "margin": "", "epigraph": "", "dropdown": ""}
CODE_BLOCKS = {"code", "code-block", "sourcecode"}
#: directives whose body is not Markdown (never searched for labels or citations)
RAW_BODY = CODE_BLOCKS | {"math", "raw", "glue:", "glue:any", "glue:figure", "glue:math", "glue:md",
                          "footbibliography", "bibliography", "csv-table", "eval-rst"}
DROPPED = {"toctree", "tableofcontents", "contents"}
CITE_ROLES = {"cite", "cite:p", "cite:t", "cite:ps", "cite:ts", "footcite", "footcite:p", "footcite:t",
              "footcite:ps", "footcite:ts", "cite:year", "cite:author"}
NUMREF_WORD = {"figure": "Figure", "table": "Table", "code-block": "Listing"}
SOLUTION_OPEN = "<details>\n<summary>Solution</summary>\n"
SOLUTION_AGAIN = "<details>\n<summary>Solution (continued)</summary>\n\n"
EXERCISE_NOTE = ("*Exercise notebook.* Each coding exercise below has a stub that raises "
                 "`NotImplementedError`: replace it with your code and run the check cell under it. "
                 "The worked solutions are left out; run the cells from the top.\n\n"
                 "*If your instructor grades this notebook*, it is run from the top in a fresh kernel, "
                 "then each exercise's function, as it stands at the end of the notebook, is called on "
                 "new test inputs. Your imports, helpers and later cells count (the last definition "
                 "wins). An answer that calls the library's own version of the function (for example "
                 "`tinyformer.attention.causal_mask` for `causal_mask`) earns no credit.")
HIDDEN = "jupyter"  # the cell metadata key JupyterLab and Notebook 7 read source_hidden / outputs_hidden from


class ReaderError(ValueError):
    """A chapter cannot be rendered for Jupyter: an unresolved item or unsupported syntax."""


@dataclass
class Target:
    """Something a reference can point at: a numbered figure, an equation, a section…"""

    kind: str  # "figure", "table", "code-block", "equation", "section", "exercise", "other"
    doc: str
    local: int | None = None  # its ordinal among the numbered targets of its kind on its page
    title: str = ""  # Markdown: a section's title, a caption, an exercise's heading text
    number: int | str | None = None  # the website's number: "3.2" per chapter, or a count (see Book)


@dataclass
class Doc:
    """What one chapter notebook provides to the conversion of itself and of the others."""

    name: str
    title: str = ""
    glue: dict = field(default_factory=dict)  # key -> output dict (mime prefix removed)
    targets: dict[str, Target] = field(default_factory=dict)
    cited: list[str] = field(default_factory=list)  # bibliography keys, in order of first citation
    notebook: bool = True  # a chapter notebook (with a reader notebook), not a Markdown page
    counts: dict[str, int] = field(default_factory=dict)  # numbered targets per kind
    offsets: dict[str, int] = field(default_factory=dict)  # numbered targets per kind on earlier pages


def find_root(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` holding the book's ``_config.yml``."""
    start = start.resolve()
    for folder in [start, *start.parents]:
        if (folder / "_config.yml").is_file():
            return folder
    return None


def _directive(token) -> tuple[str, str, dict, str]:
    """(name, argument, options, body) of a MyST directive fence (``` or :::)."""
    info = token.info.strip()
    name, _, arg = info[1:].partition("}")
    lines = token.content.splitlines()
    options: dict = {}
    if lines and lines[0].strip() == "---":  # a YAML option block
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
        if end is None:
            raise ReaderError(f"directive {{{name}}}: its YAML option block is never closed")
        options = yaml.safe_load("\n".join(lines[1:end])) or {}
        lines = lines[end + 1:]
    else:
        while lines and lines[0].startswith(":") and lines[0].count(":") >= 2:
            key, _, value = lines.pop(0)[1:].partition(":")
            options[key.strip()] = value.strip()
    while lines and not lines[0].strip():
        lines.pop(0)
    return name, arg.strip(), options, "\n".join(lines).rstrip()


def _is_directive(token) -> bool:
    return token.type in ("fence", "colon_fence") and token.info.strip().startswith("{")


def _title_and_target(content: str) -> tuple[str | None, str]:
    """``"text <target>"`` → ("text", "target"); ``"target"`` → (None, "target")."""
    content = content.strip()
    if content.endswith(">") and " <" in content:
        title, _, target = content[:-1].rpartition(" <")
        return title.strip(), target.strip()
    return None, content


def _glue_key(content: str) -> tuple[str, str]:
    """MyST-NB's reading of ``key:format`` (split on the last colon; ``s`` when none)."""
    key_format = content.rsplit(":", 1)
    return (key_format[0], key_format[1]) if len(key_format) == 2 else (key_format[0], "s")


class _Markdown(MarkdownBackend):
    """pybtex's Markdown, escaping only what Markdown and MathJax would read (pybtex escapes
    every ``.`` and ``-``, which some renderers show), and URLs as autolinks."""

    def format_str(self, text):
        for char in "\\`*_[]$":
            text = text.replace(char, "\\" + char)
        return text.replace("<", "&lt;")

    def format_href(self, url, text, external=False):
        return f"<{url}>" if text in (url, self.format_str(url)) else f"[{text}]({url})"


def _plain(text: str) -> str:
    """LaTeX in a BibTeX field (``{\\L}ukasz``, ``R{\\'e}``) as Unicode text."""
    return Text.from_latex(text).render(TextBackend())


# Numbered per chapter on the website (_ext/layout.py): "Figure 3.2", "(3.4)".
PER_CHAPTER = ("figure", "table", "equation", "code-block")


def _chapter_number(name: str) -> int | None:
    """3 for ``03-transformer-block`` (any folder before it); None for the Preface (00) and
    pages without a number."""
    m = re.search(r"(?:^|/)(\d\d)-[^/]*$", name)
    return int(m.group(1)) if m and int(m.group(1)) > 0 else None


class Book:
    """The context a chapter is converted in: configuration, bibliography, every chapter's
    labels, numbers and glued values.

    ``Book.load(root)`` reads ``root/_config.yml``, the bibliography files it names, the pages
    of ``root/_toc.yml`` and every ``root/book/NN-slug.ipynb``. ``Book.load(None)`` is an empty
    book (no bibliography, no other chapters): enough for a notebook that cites nothing and
    refers only to itself.

    Numbers are the website's: captioned and named figures (tables, code blocks) and labelled
    equations are numbered per chapter, "3.2" for the second of chapter 3 (the book's Sphinx
    extension _ext/layout.py renumbers them so); exercises keep Sphinx's one sequence per kind
    through the book.
    """

    def __init__(self, root: Path | None, config: dict, bib=None):
        self.root, self.config, self.bib = root, config, bib
        extensions = set(config.get("parse", {}).get("myst_enable_extensions", [])) or {
            "amsmath", "colon_fence", "dollarmath"}
        self.parser: MarkdownIt = create_md_parser(MdParserConfig(enable_extensions=extensions), RendererHTML)
        self.docs: dict[str, Doc] = {}
        self.order: list[str] = []  # page names in the order of the table of contents

    @classmethod
    def load(cls, root: Path | None) -> Book:
        if root is None:
            return cls(None, {})
        root = Path(root)
        config_file = root / "_config.yml"
        if not config_file.is_file():
            raise ReaderError(f"root: {root} has no _config.yml")
        config = yaml.safe_load(config_file.read_text()) or {}
        bib = None
        for name in config.get("bibtex_bibfiles", []):
            data = parse_file(str(root / name), "bibtex")
            if bib is None:
                bib = data
            else:
                for key, entry in data.entries.items():
                    bib.add_entry(key, entry)
        book = cls(root, config, bib)
        pages = _toc_files(root)
        book.order = [Path(page).stem for page in pages]
        for page in pages:  # pages that are not chapter notebooks still count in the numbering
            path = root / page
            if path.suffix == ".md" and path.is_file() and not path.with_suffix(".ipynb").is_file():
                page_nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(path.read_text())])
                book.add(path.stem, page_nb, notebook=False)
        for path in sorted((root / "book").glob(CHAPTER_GLOB)):
            book.add(path.stem, nbformat.read(path, as_version=4))
        return book

    # --- configuration ------------------------------------------------------------------------
    @property
    def repository(self) -> tuple[str, str]:
        repo = self.config.get("repository", {})
        return repo.get("url", "").rstrip("/"), repo.get("branch", "main")

    # --- indexing -----------------------------------------------------------------------------
    def add(self, name: str, nb, notebook: bool = True) -> Doc:
        """Index notebook ``nb`` as chapter ``name`` (replacing an earlier index of it);
        ``notebook=False``: a page of the book that is not a chapter notebook."""
        doc = Doc(name, notebook=notebook)
        counters: dict[str, int] = {}

        def number(kind: str) -> int:
            counters[kind] = counters.get(kind, 0) + 1
            return counters[kind]

        pending: list[str | None] = [None]  # a (label)= target waiting for the next block
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                for key, output in extract_glue_data_cell(copy.deepcopy(cell)):
                    doc.glue[key] = output
                figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
                if figure.get("name"):
                    caption = figure.get("caption", "")
                    doc.targets[figure["name"]] = Target("figure", name, number("figure") if caption else None,
                                                         caption)
            elif cell.cell_type == "markdown":
                try:
                    self._index_markdown(cell.source, doc, number, pending)
                except ReaderError as err:
                    raise ReaderError(f"{name}, cell {index}: {err}") from None
        doc.counts = counters
        self.docs[name] = doc
        self._renumber()
        return doc

    def _renumber(self) -> None:
        """Give every target the number the website shows (see the class's docstring)."""
        names = [n for n in self.order if n in self.docs] + [n for n in self.docs if n not in self.order]
        offsets: dict[str, int] = {}
        for name in names:
            doc = self.docs[name]
            doc.offsets = dict(offsets)
            chapter = _chapter_number(name)
            for target in doc.targets.values():
                if target.local is None:
                    continue
                if target.kind in PER_CHAPTER:
                    target.number = f"{chapter}.{target.local}" if chapter else target.local
                else:
                    target.number = offsets.get(target.kind, 0) + target.local
            for kind, count in doc.counts.items():
                offsets[kind] = offsets.get(kind, 0) + count

    def _index_markdown(self, text: str, doc: Doc, number, pending: list) -> None:
        tokens = self.parser.parse(text)
        for i, tok in enumerate(tokens):
            if tok.type == "myst_target":
                pending[0] = tok.content
                continue
            if tok.type == "heading_open":
                title = tokens[i + 1].content
                if tok.tag == "h1" and not doc.title:
                    doc.title = title
                if pending[0]:
                    doc.targets[pending[0]] = Target("section", doc.name, None, title)
                pending[0] = None
            elif tok.type == "inline":
                for child in tok.children or []:
                    if child.type == "myst_role" and child.meta["name"] in CITE_ROLES:
                        for key in child.content.split(","):
                            if key.strip() and key.strip() not in doc.cited:
                                doc.cited.append(key.strip())
            elif tok.type == "math_block_label":
                doc.targets[tok.info] = Target("equation", doc.name, number("equation"))
            elif _is_directive(tok):
                if pending[0]:
                    doc.targets[pending[0]] = Target("other", doc.name)
                    pending[0] = None
                self._index_directive(tok, doc, number, pending)
            elif tok.nesting >= 0 and tok.level == 0 and pending[0] and tok.type not in ("myst_line_comment",):
                doc.targets[pending[0]] = Target("other", doc.name)
                pending[0] = None

    def _index_directive(self, tok, doc: Doc, number, pending: list) -> None:
        name, arg, options, body = _directive(tok)
        label = options.get("label") or options.get("name")
        if name == "math":
            if options.get("label"):
                doc.targets[options["label"]] = Target("equation", doc.name, number("equation"))
        elif name == "glue:math":
            if options.get("label"):
                doc.targets[options["label"]] = Target("equation", doc.name, number("equation"))
        elif name in ("figure", "glue:figure"):
            caption = body.split("\n\n")[0].strip() if body else ""
            if label:
                doc.targets[label] = Target("figure", doc.name, number("figure") if caption else None, caption)
        elif name in ("table", "list-table", "csv-table"):
            if label:
                doc.targets[label] = Target("table", doc.name, number("table") if arg else None, arg)
        elif name in CODE_BLOCKS:
            if label:
                caption = options.get("caption", "")
                doc.targets[label] = Target("code-block", doc.name, number("code-block") if caption else None,
                                            caption)
        elif name in ("exercise", "exercise-start"):
            numbered = "nonumber" not in options
            n = number("exercise") if numbered else None
            if label:
                doc.targets[label] = Target("exercise", doc.name, n, arg)
        elif label:
            doc.targets[label] = Target("other", doc.name, None, arg)
        if name not in RAW_BODY and body:
            self._index_markdown(body, doc, number, pending)

    # --- resolution ---------------------------------------------------------------------------
    def target(self, label: str, doc: str) -> Target:
        if label in self.docs.get(doc, Doc(doc)).targets:
            return self.docs[doc].targets[label]
        found = [d.targets[label] for d in self.docs.values() if label in d.targets]
        if not found:
            raise ReaderError(f"reference to {label!r}: no figure, equation, section or exercise has this label")
        return found[0]

    def author_year(self, key: str, full: bool = False) -> tuple[str, str]:
        """(authors, year) of a bibliography entry, as sphinxcontrib-bibtex's author_year style
        writes them: one author "A", two "A and B", more "A et al." (all of them with ``full``)."""
        if self.bib is None or key not in self.bib.entries:
            raise ReaderError(f"citation {key!r}: not in the bibliography "
                              f"({', '.join(self.config.get('bibtex_bibfiles', [])) or 'none configured'})")
        entry = self.bib.entries[key]
        persons = entry.persons.get("author") or entry.persons.get("editor") or []
        names = [_plain(" ".join(p.prelast_names + p.last_names)) for p in persons]
        if not names:
            authors = _plain(entry.fields.get("title", key))
        elif len(names) == 1:
            authors = names[0]
        elif len(names) == 2:
            authors = f"{names[0]} and {names[1]}"
        elif full:
            authors = ", ".join(names[:-1]) + f", and {names[-1]}"
        else:
            authors = f"{names[0]} et al."
        return authors, _plain(entry.fields.get("year", "n.d."))

    def references(self, keys: list[str]) -> str:
        """The Markdown list of the entries ``keys``, in the ``plain`` style, sorted by author."""
        for key in keys:
            self.author_year(key)  # raises on an unknown key
        style_name = self.config.get("sphinx", {}).get("config", {}).get("bibtex_default_style", "plain")
        style = find_plugin("pybtex.style.formatting", style_name)()
        items = []
        for entry in style.format_bibliography(self.bib, citations=keys):
            text = " ".join(entry.text.render(_Markdown()).split("\n"))
            items.append(f"- {text}")
        return "\n".join(items)


def _toc_files(root: Path) -> list[str]:
    """The pages of ``root/_toc.yml`` in reading order (root first), as paths from ``root``."""
    toc_file = root / "_toc.yml"
    if not toc_file.is_file():
        return []
    toc = yaml.safe_load(toc_file.read_text()) or {}
    files = [toc["root"]] if toc.get("root") else []

    def walk(entries):
        for entry in entries or []:
            if isinstance(entry, dict):
                if entry.get("file"):
                    files.append(entry["file"])
                for key in ("parts", "chapters", "sections"):
                    walk(entry.get(key))

    walk([{key: toc.get(key) for key in ("parts", "chapters", "sections")}])
    out = []
    for name in files:
        path = Path(name)
        if not path.suffix:
            path = next((path.with_suffix(s) for s in (".ipynb", ".md") if (root / path.with_suffix(s)).is_file()),
                        path)
        out.append(path.as_posix())
    return out


def _exercise_title(arg: str, number: int | None) -> str:
    if number is None:
        return f"Exercise {arg}".rstrip()
    return f"Exercise {number}" + (f" · {arg}" if arg else "")


def _span(starts: list[int], token) -> tuple[int, int]:
    a, b = token.map
    return starts[a], starts[min(b, len(starts) - 1)]


def _reindent(text: str, prefix: str) -> str:
    """Give a block the prefix of the line it replaces (a list item's indent, a quote's ``>``)."""
    if not prefix:
        return text
    cont = "".join(ch if ch in "> " else " " for ch in prefix)
    lines = text.split("\n")
    out = [prefix + lines[0]] + [(cont + line) if line else cont.rstrip() for line in lines[1:]]
    return "\n".join(out)


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.split("\n"))


def _strip_markers(source: str) -> str:
    """A solution cell without its ``# BEGIN SOLUTION`` / ``# END SOLUTION`` lines (checked for balance)."""
    stub_source(source, "check")  # raises on unbalanced markers
    return "\n".join(line for line in source.splitlines() if line.strip() not in (BEGIN, END))


def _cell_id(*parts: str) -> str:
    return hashlib.sha1(":".join(parts).encode()).hexdigest()[:8]


class _Converter:
    """One conversion of one notebook: the state that runs across cells."""

    def __init__(self, book: Book, doc: Doc, exercises: bool, link_prefix: str):
        self.book, self.doc, self.exercises, self.link_prefix = book, doc, exercises, link_prefix
        self.in_solution = False
        self.section_level = 2
        self.exercise = ""  # the heading of the exercise being read
        self.attachments: dict = {}
        self.bibliography_done = False
        self.exercise_count = 0

    # --- Markdown -----------------------------------------------------------------------------
    def markdown(self, text: str, top: bool = False) -> str:
        """``text`` (MyST Markdown) as Jupyter Markdown. ``top``: ``text`` is a whole cell, and
        a solution opened in an earlier cell goes on (or is closed) in it."""
        tokens = self.book.parser.parse(text)
        lines = text.splitlines(keepends=True)
        starts = [0]
        for line in lines:
            starts.append(starts[-1] + len(line))
        edits: list[tuple[int, int, str]] = []
        cursors: dict[tuple[int, int], int] = {}
        drop_from: int | None = None  # exercise notebooks: where the solution being dropped began
        opened = False  # reader notebooks: a <details> opened in this text and not closed yet
        if self.in_solution and top:
            first = next((t for t in tokens if t.map is not None), None)
            ends_here = first is not None and _is_directive(first) and _directive(first)[0] == "solution-end"
            if self.exercises:
                drop_from = 0
            elif first is not None and not ends_here:
                edits.append((0, 0, SOLUTION_AGAIN))
                opened = True
        for tok in tokens:
            if drop_from is not None and not (_is_directive(tok) and _directive(tok)[0] == "solution-end"):
                continue  # inside a solution that the exercise notebook leaves out
            if tok.type == "heading_open" and tok.level == 0:
                self.section_level = int(tok.tag[1])
            elif tok.type == "inline" and tok.map is not None:
                self._inline_edits(tok, text, starts, cursors, edits)
            elif tok.type in ("myst_target", "myst_line_comment", "myst_block_break"):
                edits.append((*_span(starts, tok), ""))
            elif tok.type.startswith("substitution"):
                raise ReaderError(f"substitution {{{{{tok.content.strip()}}}}}: substitutions are not supported")
            elif tok.type == "math_block_label" or _is_directive(tok):
                name = _directive(tok)[0] if _is_directive(tok) else "math"
                start, end = _span(starts, tok)
                if name == "solution-end":
                    if drop_from is not None:
                        edits.append((drop_from, end, ""))
                        drop_from = None
                    else:
                        edits.append((start, end, "</details>\n" if opened else ""))
                        opened = False
                    self.in_solution = False
                    continue
                if name == "solution-start":
                    self.in_solution = True
                    if self.exercises:
                        drop_from = start
                    else:
                        edits.append((start, end, SOLUTION_OPEN))
                        opened = True
                    continue
                line = lines[tok.map[0]]
                prefix = line[: len(line) - len(line.lstrip(" >-*+0123456789.)"))]
                if tok.type == "math_block_label":  # $$ … $$ (label)
                    block = self.math(tok.content, tok.info)
                else:
                    block = self.directive(*_directive(tok))
                edits.append((start, end, _reindent(block, prefix) + "\n" if block else ""))
        if drop_from is not None:
            edits.append((drop_from, len(text), ""))
        out = self._apply(text, edits)
        if opened:
            out = out.rstrip("\n") + "\n\n</details>"
        return out.strip("\n")

    @staticmethod
    def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
        out, pos = [], 0
        for start, end, new in sorted(edits, key=lambda e: (e[0], e[1])):
            if start < pos:
                raise ReaderError(f"overlapping rewrites at {text[start:start + 40]!r}")
            out.append(text[pos:start])
            if not new and (start == 0 or text[:start].endswith("\n\n")):
                while end < len(text) and text[end] == "\n":  # a removed block leaves no blank run
                    end += 1
            out.append(new)
            pos = end
        out.append(text[pos:])
        return "".join(out)

    def _inline_edits(self, tok, text, starts, cursors, edits) -> None:
        region = (tok.map[0], tok.map[1])
        stop = starts[min(region[1], len(starts) - 1)]
        cursor = cursors.get(region, starts[region[0]])
        for child in tok.children or []:
            if child.type == "code_inline":
                found = text.find(child.markup + child.content, cursor, stop)
                if found >= 0:
                    cursor = found + len(child.markup) * 2 + len(child.content)
                continue
            if child.type.startswith("substitution"):
                raise ReaderError(f"substitution {{{{{child.content.strip()}}}}}: substitutions are not supported")
            if child.type != "myst_role":
                continue
            name, content = child.meta["name"], child.content
            opener = "{" + name + "}"
            pos = cursor
            while True:
                found = text.find(opener + "`", pos, stop)
                if found < 0:
                    raise ReaderError(f"role {{{name}}}`{content}`: cannot find it in the cell's text")
                after = found + len(opener)
                ticks = len(text[after:stop]) - len(text[after:stop].lstrip("`"))
                body_end = after + ticks + len(content)
                if text.startswith(content, after + ticks) and text.startswith("`" * ticks, body_end):
                    break
                pos = found + 1
            end = body_end + ticks
            edits.append((found, end, self.role(name, content)))
            cursor = end
        cursors[region] = cursor

    # --- roles --------------------------------------------------------------------------------
    def role(self, name: str, content: str) -> str:
        if name == "glue:text" or name in ("glue:", "glue:any", "glue:md", "glue"):
            return self.glue_inline(name, content)
        if name in CITE_ROLES:
            return self.cite(name, content)
        if name == "eq":
            title, label = _title_and_target(content)
            target = self.book.target(label, self.doc.name)
            if target.kind != "equation" or target.number is None:
                raise ReaderError(f"{{eq}}`{content}`: {label!r} is not a numbered equation")
            return title or f"({target.number})" + self._elsewhere(target)
        if name == "numref":
            title, label = _title_and_target(content)
            target = self.book.target(label, self.doc.name)
            if target.number is None:
                raise ReaderError(f"{{numref}}`{content}`: {label!r} has no number on the website")
            word = NUMREF_WORD.get(target.kind, "Equation" if target.kind == "equation" else "")
            if not word:
                raise ReaderError(f"{{numref}}`{content}`: {label!r} is a {target.kind}, which has no number")
            if title:
                return (title.replace("%s", str(target.number)).replace("{number}", str(target.number))
                        .replace("{name}", self.inline(target.title)))
            return f"{word} {target.number}" + self._elsewhere(target)
        if name == "ref":
            title, label = _title_and_target(content)
            target = self.book.target(label, self.doc.name)
            if title:
                return title
            if target.kind == "section":
                return f"Section “{self.inline(target.title)}”" + self._elsewhere(target)
            if target.kind == "exercise":
                return self.inline(_exercise_title(target.title, target.number)) + self._elsewhere(target)
            if target.kind in NUMREF_WORD and target.number is not None:
                return f"{NUMREF_WORD[target.kind]} {target.number}" + self._elsewhere(target)
            if target.kind == "equation":
                return f"({target.number})" + self._elsewhere(target)
            if target.title:
                return self.inline(target.title) + self._elsewhere(target)
            raise ReaderError(f"{{ref}}`{content}`: {label!r} has no title; write {{ref}}`text <{label}>`")
        if name == "doc":
            return self.doc_link(content)
        if name == "math":
            return f"${content}$"
        if name in ("sub", "sup", "kbd"):
            return f"<{name}>{content}</{name}>"
        if name == "abbr":
            return content.split(" (", 1)[0]  # "LLM (large language model)": the short form
        if name in ("code", "samp", "file", "command", "program"):
            return f"`{content}`"
        if name in ("term", "dfn", "index"):
            return _title_and_target(content)[0] or content
        raise ReaderError(f"role {{{name}}}: not supported in reader notebooks")

    def inline(self, text: str) -> str:
        """A short piece of MyST (a title, a caption) as Jupyter Markdown on one line."""
        level = self.section_level
        try:
            return " ".join(self.markdown(text).split("\n"))
        finally:
            self.section_level = level

    def _elsewhere(self, target: Target) -> str:
        if target.doc == self.doc.name:
            return ""
        other = self.book.docs.get(target.doc)
        return f" in “{other.title if other and other.title else target.doc}”"

    def glue_inline(self, name: str, content: str) -> str:
        if name == "glue:text":
            key, fmt = _glue_key(content)
        else:
            key, fmt = content, ""
        data = self._glue(key)["data"]
        if name == "glue:md":
            if "text/markdown" not in data:
                raise ReaderError(f"glue {key!r}: no text/markdown output")
            return data["text/markdown"].strip()
        if name == "glue:text":
            if "text/plain" not in data:
                raise ReaderError(f"glue {key!r}: no text/plain output")
            try:
                return format_plain_text(data["text/plain"], fmt)
            except Exception as err:
                raise ReaderError(f"glue {key!r}: cannot format {data['text/plain']!r} with {fmt!r}: {err}") from None
        return self._glue_any(key, data, inline=True)

    def _glue(self, key: str) -> dict:
        doc = self.doc
        if "::" in key:
            path, key = key.split("::", 1)
            doc = self.book.docs.get(Path(path).stem)
            if doc is None:
                raise ReaderError(f"glue {path}::{key}: no chapter notebook {path!r}")
        if key not in doc.glue:
            raise ReaderError(f"glue {key!r}: no cell of {doc.name} glues this name (run `make execute`?)")
        return doc.glue[key]

    def _glue_any(self, key: str, data: dict, inline: bool) -> str:
        for mime in ("image/png", "image/jpeg", "image/svg+xml", "image/gif"):
            if mime in data:
                return self.image(f"{key}{mimetypes.guess_extension(mime) or '.img'}", mime, data[mime], key)
        if "text/markdown" in data:
            return data["text/markdown"].strip()
        if "text/latex" in data:
            return data["text/latex"].strip() if inline else f"$$\n{data['text/latex'].strip().strip('$')}\n$$"
        if "text/html" in data and not inline:
            return data["text/html"].strip()
        if "text/plain" in data:
            return data["text/plain"] if inline else f"```\n{data['text/plain']}\n```"
        raise ReaderError(f"glue {key!r}: no output kind a notebook can show ({', '.join(data)})")

    def image(self, filename: str, mime: str, payload, alt: str) -> str:
        """A Markdown image whose bytes travel with the cell, as a cell attachment."""
        if isinstance(payload, bytes):
            payload = base64.b64encode(payload).decode()
        elif isinstance(payload, list):
            payload = "".join(payload)
        if mime == "image/svg+xml" and isinstance(payload, str) and payload.lstrip().startswith("<"):
            payload = base64.b64encode(payload.encode()).decode()  # outputs hold SVG as text, attachments base64
        self.attachments[filename] = {mime: payload.replace("\n", "")}
        return f"![{alt}](attachment:{filename})"

    def cite(self, name: str, content: str) -> str:
        keys = [k.strip() for k in content.split(",") if k.strip()]
        full = name.endswith("s")
        pairs = [self.book.author_year(k, full) for k in keys]
        if name == "cite:year":
            return ", ".join(y for _, y in pairs)
        if name == "cite:author":
            return ", ".join(a for a, _ in pairs)
        if name.endswith((":t", ":ts")):
            return " and ".join(f"{a} ({y})" for a, y in pairs)
        return "(" + "; ".join(f"{a}, {y}" for a, y in pairs) + ")"

    def doc_link(self, content: str) -> str:
        title, target = _title_and_target(content)
        here = Path("book")
        path = (here / target).as_posix() if not target.startswith("/") else target.lstrip("/")
        stem = Path(path).name
        if stem in self.book.docs and self.book.docs[stem].notebook and Path(path).parent.as_posix() == "book":
            text = title or self.book.docs[stem].title or stem
            return f"[{text}]({self.link_prefix}{stem}.ipynb)"
        root = self.book.root
        found = None
        if root is not None:
            found = next((p for p in (root / f"{path}.md", root / f"{path}.ipynb", root / path) if p.is_file()), None)
        if found is None:
            raise ReaderError(f"{{doc}}`{content}`: no document {path!r}")
        if title is None:
            title = found.stem
            tokens = self.book.parser.parse(found.read_text(encoding="utf-8")) if found.suffix == ".md" else []
            for before, tok in zip(tokens, tokens[1:]):
                if before.type == "heading_open" and before.tag == "h1":
                    title = tok.content
                    break
        url, branch = self.book.repository
        if not url:
            return self.inline(title)
        return f"[{self.inline(title)}]({url}/blob/{branch}/{found.relative_to(root).as_posix()})"

    # --- directives ---------------------------------------------------------------------------
    def directive(self, name: str, arg: str, options: dict, body: str) -> str:
        classes = str(options.get("class", "")).split()
        if name == "math":
            return self.math(body, options.get("label"))
        if name in ADMONITIONS:
            if ADMONITIONS[name] or name == "epigraph":  # no argument: a first line belongs to the body
                title, body = ADMONITIONS[name], f"{arg}\n{body}".strip()
            else:
                title = arg
            inner = self.markdown(body) if body else ""
            quoted = _quote(inner) if inner else ""
            if "dropdown" in classes or name == "dropdown":
                summary = self._summary_html(title or ADMONITIONS.get(name) or "Details")
                return f"<details>\n<summary>{summary}</summary>\n\n{quoted}\n\n</details>"
            head = f"> **{self.inline(title)}**" if title else ""
            return "\n>\n".join(p for p in (head, quoted) if p)
        if name in ("exercise", "exercise-start"):
            n = None
            if "nonumber" not in options:
                self.exercise_count += 1
                n = self.doc.offsets.get("exercise", 0) + self.exercise_count
            heading = _exercise_title(arg, n)
            self.exercise = heading
            level = min(6, max(3, self.section_level + 1))
            text = "#" * level + " " + self.inline(heading)
            inner = self.markdown(body) if body and name == "exercise" else ""
            return text + (f"\n\n{inner}" if inner else "")
        if name == "exercise-end":
            return ""
        if name == "solution":
            if self.exercises:
                return ""
            inner = self.markdown(body) if body else ""
            return f"{SOLUTION_OPEN}\n{inner}\n\n</details>"
        if name in ("footbibliography", "bibliography"):
            self.bibliography_done = True
            return self.book.references(self.doc.cited) if self.doc.cited else ""
        if name in ("figure", "image"):
            return self.figure(name, arg, options, body)
        if name == "glue:figure":
            image = self._glue_any(arg, self._glue(arg)["data"], inline=False)
            return image + self._caption("figure", options.get("name"), body)
        if name in ("glue:", "glue:any"):
            return self._glue_any(arg, self._glue(arg)["data"], inline=False)
        if name == "glue:md":
            return self.glue_inline("glue:md", arg)
        if name == "glue:math":
            data = self._glue(arg)["data"]
            if "text/latex" not in data:
                raise ReaderError(f"glue {arg!r}: no text/latex output")
            return self.math(data["text/latex"].strip().strip("$"), options.get("label"))
        if name in CODE_BLOCKS:
            fence = "````" if "```" in body else "```"
            block = f"{fence}{arg}\n{body}\n{fence}"
            caption = options.get("caption")
            if caption:
                block = self._caption("code-block", options.get("name"), caption, above=True) + block
            return block
        if name == "table":
            return self._caption("table", options.get("name"), arg, above=True) + self.markdown(body)
        if name == "list-table":
            return self._caption("table", options.get("name"), arg, above=True) + self.list_table(body, options)
        if name in ("raw",):
            return body if arg.strip() == "html" else ""
        if name in ("div", "container"):
            return self.markdown(body)
        if name in DROPPED:
            return ""
        if name == "code-cell":
            raise ReaderError("a {code-cell} inside Markdown (nested in another directive?): MyST-NB does not run "
                              "it either (it warns 'unexpected code-cell'); make it a cell of its own")
        raise ReaderError(f"directive {{{name}}}: not supported in reader notebooks")

    def _summary_html(self, title: str) -> str:
        """A title for ``<summary>``, where Markdown is not read: bold HTML, math left to MathJax."""
        return "<strong>" + MarkdownIt("commonmark").renderInline(self.inline(title)).strip() + "</strong>"

    def math(self, body: str, label: str | None) -> str:
        parts = [p.strip() for p in body.strip().split("\n\n") if p.strip()]
        content = parts[0] if len(parts) == 1 else "\\begin{gathered}\n" + " \\\\\n".join(parts) + "\n\\end{gathered}"
        if label:
            target = self.book.target(label, self.doc.name)
            content += f"\n\\tag{{{target.number}}}"
        return f"$$\n{content}\n$$"

    def _caption(self, kind: str, label: str | None, caption: str, above: bool = False) -> str:
        if not caption:
            return ""
        number = self.doc.targets[label].number if label and label in self.doc.targets else None
        head = f"**{NUMREF_WORD[kind]} {number}.** " if number is not None else ""
        text = head + self.inline(caption)
        return f"{text}\n\n" if above else f"\n\n{text}"

    def figure(self, name: str, arg: str, options: dict, body: str) -> str:
        if self.book.root is None:
            raise ReaderError(f"{{{name}}} {arg}: images need the book's root folder")
        path = (self.book.root / "book" / arg).resolve()
        if arg.startswith(("http://", "https://")) or not path.is_file():
            raise ReaderError(f"{{{name}}} {arg}: no such local image (remote images are not allowed)")
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        image = self.image(path.name, mime, path.read_bytes(), options.get("alt", path.stem))
        if name == "image":
            return image
        caption, _, legend = body.partition("\n\n")
        text = image + self._caption("figure", options.get("name"), caption.strip())
        return text + (f"\n\n{self.markdown(legend)}" if legend.strip() else "")

    def list_table(self, body: str, options: dict) -> str:
        tokens = self.book.parser.parse(body)
        rows, row, depth, cell_start = [], None, 0, None
        lines = body.splitlines(keepends=True)
        for tok in tokens:
            if tok.type == "bullet_list_open":
                depth += 1
            elif tok.type == "bullet_list_close":
                depth -= 1
            elif tok.type == "list_item_open" and depth == 1:
                row = []
                rows.append(row)
            elif tok.type == "list_item_open" and depth == 2:
                cell_start = tok.map
            elif tok.type == "list_item_close" and depth == 2 and cell_start is not None:
                raw = "".join(lines[cell_start[0]:cell_start[1]])
                raw = raw.strip().removeprefix("-").removeprefix("*").strip()
                row.append(self.inline(raw).replace("|", "\\|"))
        if not rows:
            raise ReaderError("{list-table}: no rows")
        width = max(len(r) for r in rows)
        rows = [r + [""] * (width - len(r)) for r in rows]
        header = int(options.get("header-rows", 0) or 0)
        head = rows[0] if header else [""] * width
        body_rows = rows[1:] if header else rows
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * width]
        out += ["| " + " | ".join(r) + " |" for r in body_rows]
        return "\n".join(out)

    # --- cells --------------------------------------------------------------------------------
    def notebook(self, nb):
        out = nbformat.from_dict(copy.deepcopy(dict(nb)))
        cells, first_code = [], True
        for index, cell in enumerate(nb.cells):
            try:
                made = self.cell(cell, first_code)
            except ReaderError as err:
                raise ReaderError(f"{self.doc.name}, cell {index}: {err}") from None
            if cell.cell_type == "code":
                first_code = False
            cells += made
        if self.doc.cited and not self.bibliography_done:
            cells.append(nbformat.v4.new_markdown_cell(
                "## References\n\n" + self.book.references(self.doc.cited), id=_cell_id(self.doc.name, "references")))
        if self.exercises and cells and cells[0].cell_type == "markdown" and cells[0].source.startswith("# "):
            cells.insert(1, nbformat.v4.new_markdown_cell(EXERCISE_NOTE, id=_cell_id(self.doc.name, "exercises")))
        out.cells = cells
        out.metadata = {k: v for k, v in nb.metadata.items() if k in ("kernelspec", "language_info")}
        return out

    def cell(self, cell, first_code: bool) -> list:
        cell = copy.deepcopy(cell)
        tags = list(cell.get("metadata", {}).get("tags", []))
        meta = {k: v for k, v in cell.get("metadata", {}).items() if k not in ("mystnb", "execution")}
        if cell.cell_type == "raw":
            return [cell]
        if cell.cell_type == "markdown":
            if "remove-cell" in tags:
                return []
            self.attachments = dict(cell.get("attachments", {}))
            text = self.markdown(cell.source, top=True)
            if not text.strip():
                return []
            new = nbformat.v4.new_markdown_cell(text, id=cell.get("id"), metadata=meta)
            if self.attachments:
                new.attachments = self.attachments
            return [new]
        return self.code(cell, meta, tags, first_code)

    def code(self, cell, meta: dict, tags: list, first_code: bool) -> list:
        extract_glue_data_cell(cell)  # drops the hidden glue records (display=False)
        name = exercise_name(cell)
        has_marker = BEGIN in cell.source or END in cell.source
        if has_marker and name is None:
            raise ReaderError(f"a cell with {BEGIN} has no exercise-<name> tag:\n{cell.source[:200]}")
        if self.exercises:
            if self.in_solution and not has_marker:
                raise ReaderError(f"a code cell inside a solution block has no {BEGIN} marker, so its code "
                                  f"would reach students:\n{cell.source[:200]}")
            if has_marker:
                cell.source = stub_source(cell.source, stub_function(name, cell.source))
            cell.outputs, cell.execution_count = [], None
        else:
            if has_marker:
                cell.source = _strip_markers(cell.source)
            if self.in_solution:  # folded: Colab shows the title, Jupyter a collapsed input
                title = f"Solution to {self.exercise}" if self.exercise else "Solution"
                cell.source = f"# @title {title}\n{cell.source}"
                meta["cellView"] = "form"
                meta.setdefault(HIDDEN, {})["source_hidden"] = True
        if not first_code:
            if tags and {"remove-cell", "remove-input", "hide-input", "hide-cell"} & set(tags):
                meta.setdefault(HIDDEN, {})["source_hidden"] = True
            if {"remove-cell", "remove-output"} & set(tags):
                cell.outputs = []
            if {"hide-output", "hide-cell"} & set(tags) and cell.outputs:
                meta.setdefault(HIDDEN, {})["outputs_hidden"] = True
            for stream in ("stdout", "stderr"):
                if f"remove-{stream}" in tags:
                    cell.outputs = [o for o in cell.outputs if o.get("name") != stream]
        new = nbformat.v4.new_code_cell(cell.source, id=cell.get("id"), metadata=meta,
                                        outputs=cell.outputs, execution_count=cell.get("execution_count"))
        made = [new]
        figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
        if figure.get("caption"):
            self.attachments = {}
            caption = self._caption("figure", figure.get("name"), figure["caption"]).strip()
            made.append(nbformat.v4.new_markdown_cell(caption, id=_cell_id(str(cell.get("id")), "caption")))
        return made


def chapter_metadata(nb, chapter: str) -> dict:
    """``{"chapter": "02-attention", "exercises": [...]}``: what a grader reads to identify a notebook."""
    names = [exercise_name(c) for c in nb.cells if c.cell_type == "code" and exercise_name(c)]
    return {"chapter": chapter, "exercises": names}


def reader_notebook(nb, chapter: str, book: Book | None = None, *, exercises: bool = False):
    """The reader (or, with ``exercises``, the exercise) notebook of chapter ``chapter``.

    ``nb`` is the executed book notebook (not modified); ``book`` the context (labels of other
    chapters, bibliography, configuration), by default the book around the current directory.
    Raises :class:`ReaderError` naming any glued value, label or citation it cannot resolve.
    """
    if not isinstance(chapter, str) or not chapter:
        raise TypeError(f"chapter: expected a chapter name such as '02-attention', got {chapter!r}")
    if book is None:
        book = Book.load(find_root(Path.cwd()))
    book.add(chapter, nb)  # index this very notebook, which may differ from the stored one
    converter = _Converter(book, book.docs[chapter], exercises, "../" if exercises else "")
    out = converter.notebook(nb)
    out.metadata["tinyformer"] = chapter_metadata(nb, chapter)
    nbformat.validate(out)
    return out


# --- the MyST checker ---------------------------------------------------------------------------
def myst_problems(nb, where: str = "notebook") -> list[str]:
    """Every piece of MyST syntax left in the Markdown cells of ``nb``, one line each."""
    book = Book(None, {"parse": {"myst_enable_extensions": ["amsmath", "colon_fence", "dollarmath",
                                                            "substitution"]}})
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        here = f"{where}, cell {index}"
        for tok in book.parser.parse(cell.source):
            if _is_directive(tok):
                problems.append(f"{here}: directive {tok.info.strip().split()[0]} (line {tok.map[0] + 1})")
            elif tok.type in ("myst_target", "myst_line_comment", "myst_block_break", "math_block_label") or \
                    tok.type.startswith("substitution"):
                problems.append(f"{here}: MyST {tok.type} {tok.content.strip()[:40]!r} (line {tok.map[0] + 1})")
            elif tok.type == "inline":
                for child in tok.children or []:
                    if child.type.startswith("substitution"):
                        problems.append(f"{here}: substitution {{{{{child.content.strip()}}}}}")
                    elif child.type == "myst_role":
                        problems.append(f"{here}: role {{{child.meta['name']}}}`{child.content}` "
                                        f"(line {tok.map[0] + 1})")
                    elif child.type == "text" and "}`" in child.content and "{" in child.content:
                        problems.append(f"{here}: role-like text {child.content.strip()[:40]!r}")
                    elif child.type == "text" and child.content.startswith(":") and \
                            child.content[1:].partition(":")[0].replace("-", "").isalnum():
                        problems.append(f"{here}: directive option line {child.content.strip()[:40]!r}")
    return problems


#: how NumPy and PyTorch print a value: glued as such, it reads ``np.float64(0.014)`` in the prose
REPR = re.compile(r"\b(?:np|numpy)\.(?:float|int|uint|bool)\w*\(|\b(?:tensor|array)\(")


def repr_problems(nb, where: str = "notebook") -> list[str]:
    """Every NumPy or PyTorch repr (``np.float64(…)``, ``tensor(…)``, ``array(…)``) in the prose of
    ``nb``'s Markdown cells, outside code spans: a glued value that was not a plain number."""
    book = Book(None, {"parse": {"myst_enable_extensions": ["amsmath", "colon_fence", "dollarmath"]}})
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for tok in book.parser.parse(cell.source):
            for child in (tok.children or []) if tok.type == "inline" else []:
                found = REPR.search(child.content) if child.type == "text" else None
                if found:
                    problems.append(f"{where}, cell {index}: a NumPy or PyTorch repr in the prose, "
                                    f"{child.content[found.start():found.start() + 30]!r} (glue a "
                                    f"plain number: float(x) or x.item())")
    return problems


# --- files --------------------------------------------------------------------------------------
def dumps(nb) -> str:
    text = nbformat.writes(nb, version=4)
    return text if text.endswith("\n") else text + "\n"


def reader_paths(root: Path) -> dict[Path, tuple[Path, bool]]:
    """Every generated file under ``root`` → (its chapter notebook, whether it is the exercise version)."""
    paths = {}
    for path in sorted((Path(root) / "book").glob(CHAPTER_GLOB)):
        paths[Path(root) / READERS / path.name] = (path, False)
        if has_exercises(nbformat.read(path, as_version=4)):
            paths[Path(root) / EXERCISES / path.name] = (path, True)
    return paths


def render_all(root: Path) -> tuple[dict[Path, str | None], list[str]]:
    """The text every generated notebook should have, converted afresh (None where the
    conversion fails), and the failures, one line each."""
    texts: dict[Path, str | None] = {}
    errors = []
    try:
        book = Book.load(root)
    except ReaderError as err:
        return {target: None for target in reader_paths(root)}, [f"cannot convert: {err}"]
    for target, (source, exercises) in reader_paths(root).items():
        nb = nbformat.read(source, as_version=4)
        try:
            texts[target] = dumps(reader_notebook(nb, source.stem, book, exercises=exercises))
        except ReaderError as err:
            texts[target] = None
            errors.append(f"cannot convert {source.relative_to(root)}{' (exercises)' if exercises else ''}: {err}")
    return texts, errors


def write_readers(root: Path) -> list[Path]:
    """Write notebooks/ and notebooks/exercises/ (only files whose text changes) and remove
    generated notebooks whose chapter is gone. Returns the files written; raises
    :class:`ReaderError` after writing the others if a chapter cannot be converted."""
    root = Path(root)
    texts, errors = render_all(root)
    written = []
    for target, text in texts.items():
        if text is None:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            written.append(target)
    for folder in (root / READERS, root / EXERCISES):
        for stale in folder.glob(CHAPTER_GLOB):
            if stale not in texts:
                stale.unlink()
    if errors:
        raise ReaderError("\n".join(errors))
    return written


def check_readers(root: Path, html: Path | None = None) -> list[str]:
    """Problems with the committed reader notebooks, one line each: a chapter that cannot be
    converted (an unresolved glue, reference or citation), a generated notebook missing, stale
    (differs from a fresh conversion) or left over, MyST syntax inside one, or (with ``html``,
    the built website) a figure or equation number that differs from the website's."""
    root = Path(root)
    texts, problems = render_all(root)
    for target, text in texts.items():
        rel = target.relative_to(root)
        if not target.exists():
            problems.append(f"{rel} is missing: run `python tools/nb.py readers`")
            continue
        stored = target.read_text(encoding="utf-8")
        if text is not None and stored != text:
            problems.append(f"{rel} is stale (differs from a fresh conversion): run `python tools/nb.py readers`")
        try:
            stored_nb = nbformat.reads(stored, as_version=4)
        except Exception as err:  # not JSON, not a notebook: nbformat raises several kinds
            problems.append(f"{rel} is not a readable notebook ({type(err).__name__})")
            continue
        problems += myst_problems(stored_nb, str(rel)) + repr_problems(stored_nb, str(rel))
    for folder in (root / READERS, root / EXERCISES):
        for extra in sorted(folder.glob(CHAPTER_GLOB)):
            if extra not in texts:
                problems.append(f"{extra.relative_to(root)} has no chapter: run `python tools/nb.py readers`")
    if html is not None:
        problems += _check_numbers(Book.load(root), Path(html))
    return problems


def website_numbers(page: Path) -> dict[str, str]:
    """Label → the number the website prints for it ("1" for "Fig. 1", "2" for "(2)")."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    numbers = {}
    for span in soup.select("span.caption-number"):
        holder = span.find_parent(["figure", "table", "div"], id=True)
        if holder is not None:
            numbers[holder["id"]] = span.get_text(strip=True).split()[-1].rstrip(".")
    for span in soup.select("span.eqno"):
        link = span.find("a", href=True)
        if link is not None and link["href"].startswith("#equation-"):
            numbers[link["href"][len("#equation-"):]] = span.find(string=True).strip().strip("()")
    return numbers


def _check_numbers(book: Book, html: Path) -> list[str]:
    from docutils.nodes import make_id

    problems = []
    for name, doc in book.docs.items():
        page = html / "book" / f"{name}.html"
        if not page.is_file():
            problems.append(f"{page}: not built, cannot compare numbers with the website")
            continue
        site = website_numbers(page)
        for label, target in doc.targets.items():
            if target.number is None or target.kind not in ("figure", "table", "equation", "code-block"):
                continue
            shown = site.get(label) or site.get(make_id(label))
            if shown != str(target.number):
                problems.append(f"{name}: {target.kind} {label!r} is {target.number} in the reader notebook "
                                f"but {shown} on the website")
    return problems
