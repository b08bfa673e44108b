"""The glossary: every term a chapter defines in bold, with the sentence that defines it.

    python tools/glossary.py check   fail if book/appendix-glossary.md is stale
    python tools/glossary.py write   regenerate book/appendix-glossary.md from the chapters
    python tools/glossary.py list    every bold of every chapter: a definition, or why it is not one

The book's rule is that a term is bold where it is defined. Not every bold is a definition, so
each bold of a chapter's markdown cells (parsed by MyST's own parser, boxes and exercises
included) is judged by `verdict`: first the structural RULES (a run-in heading, an exercise's
metadata, a solution, a box's title, a table, the Summary's recap), then EXCLUDED, the commented
list of the remaining bolds that define nothing. Every other bold is a definition. Its term is
the bold text with the first word's capital dropped (not an acronym's or a name's) and FORMS
applied ("nats" -> "nat", "top-k" -> "top-k sampling"); a plural whose singular is also defined
joins the singular's entry ("keys" -> "key").

Each entry of the page gives the term, a gloss (from the sentence of the chapter that holds the
bold, trimmed to the clause that defines it) and a link to the bold itself. The links are checked
by the book's build: _ext/glossary_labels.py gives the bold of each definition the label
`glossary-<slug>` by calling `definitions()` below, the one function that decides, so a link whose
bold moved or stopped being a definition is an undefined reference, fatal under `-W -n`. A term
defined more than once is listed at its first definition in reading order (unless that is only a
preview, see PREVIEWS), with links to the others. The page is generated only from the sources,
like the claims ledger (tools/claims.py): `make test` fails when it no longer matches the chapters.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jupytext
import yaml
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
PAGE_NAME = "appendix-glossary.md"
LABEL_PREFIX = "glossary-"
FIX = "run `python tools/glossary.py write`"

INTRO = """\
The terms the chapters define, in alphabetical order. A chapter sets a term in bold where it
defines it; each entry here gives the gist in the chapter's own words (a few, whose defining
sentence leans on its neighbours, are glossed afresh), and its link opens the chapter at that bold
word, unfolding the box it sits in if need be. A term defined in more than one place links to each, the fullest
definition first. This page is generated from the chapters by `tools/glossary.py`, so it cannot drift from
them: `make test` fails when it no longer matches them."""

# --- what is a definition ------------------------------------------------------------------------

# The structural rules, in the order `verdict` applies them; a bold one of them catches is never a
# definition, whatever its text.
RULES = {
    "run-in heading": "the bold text ends in '.', ':', '?' or '!': a paragraph's or an item's heading "
                      "(\"**In Colab.**\", \"**Why $\\sqrt{d_k}$.**\")",
    "exercise metadata": "in an exercise, followed by a rating (\"**Difficulty** ●○○\", \"**Time** ~15 min\")",
    "solution": "in the solution of an exercise, which restates the chapter's terms",
    "box title": "in the title of an admonition, exercise or table",
    "table": "in a table cell",
    "summary": "in a section titled Summary, which recaps what the chapter defined",
}

# The bolds the rules leave that still define nothing: (chapter number, the bold's MyST text as
# written) -> why. Every bold of that chapter with that text is excluded.
EXCLUDED = {
    (0, "bold"): "shows the typographic convention itself",
    (0, "Foundations"): "names a part of the book, as the run-in heading of its paragraph",
    (0, "Using and adapting models"): "names a part of the book, as the run-in heading of its paragraph",
    (0, "Looking inside"): "names a part of the book, as the run-in heading of its paragraph",
    (0, "rows"): "stresses the notation's convention (row vectors); the notation table defines the symbols",
    (1, "it"): "marks the pronoun in the example sentences",
    (1, "untrained"): "stresses which model the control probe reads",
    (1, "At *it*"): "run-in heading with a comma: one of three paragraphs, one per position",
    (1, "At the adjective"): "run-in heading with a comma: one of three paragraphs, one per position",
    (1, "At the period"): "run-in heading with a comma: one of three paragraphs, one per position",
    (2, "Separate values"): "stress: what the values decide, against where the head looks",
    (2, "a query with no allowed key gets zero weights and a zero output"): "stresses a behaviour",
    (2, "contiguous slices"): "stresses how the heads are laid out",
    (2, "not"): "stress",
    (2, "1"): "stresses one of the two offsets",
    (2, "3"): "stresses one of the two offsets",
    (2, "left-padded"): "Exercise 2.4 restates left padding, which the section on padding defines",
    (2, "without a Python loop over the heads"): "stresses the exercise's constraint",
    (3, "whatever its weights"): "stress",
    (3, "biased"): "stresses one of three details of layer norm that are easy to get wrong",
    (3, "features of one token"): "stresses one of three details of layer norm that are easy to get wrong",
    (3, "inside"): "stresses one of three details of layer norm that are easy to get wrong",
    (3, r"$d_\text{ff} = 4\, d_\text{model}$ is a convention"): "stresses a statement",
    (3, "No biases"): "run-in heading of an option (with a colon after it), not a term",
    (4, "prefix"): "stresses why the outputs differ; the word keeps its everyday meaning",
    (4, "concatenate"): "stresses the alternative to adding",
    (5, "independent"): "stresses a property the test checks",
    (5, "2 FLOPs"): "stresses a count",
    (5, "6 FLOPs per weight per token"): "stresses a count",
    (6, "data"): "one of the chapter's three parts, named in its opening (a data pipeline)",
    (6, "training"): "one of the chapter's three parts, named in its opening (a training loop)",
    (8, "Project"): "one of the three steps of a cached decoding step, stressed",
    (8, "Append"): "one of the three steps of a cached decoding step, stressed",
    (8, "Attend"): "one of the three steps of a cached decoding step, stressed",
    (8, "recomputing"): "stresses one of two ways of sliding the window",
    (8, "reusing"): "stresses one of two ways of sliding the window",
}

# A bold's text (first capital dropped) -> the entry's form: a plural's singular where the singular
# is plainly the lemma, the noun a bare adjective or fragment names, one name for one thing.
FORMS = {
    "blocks": "block",
    "noise words": "noise word",
    "nats": "nat",
    "paths": "path",
    "epochs": "epoch",
    "logits": "logit",
    "gated FFNs": "gated FFN",
    "repetition penalties": "repetition penalty",
    "scaling laws": "scaling law",
    "additively": "additive score",         # "scored keys **additively**"
    "bilinear": "bilinear score",           # "the **bilinear** form"
    "parallel": "parallel block",           # "the **parallel** block"
    "absolute": "absolute positions",       # "**Absolute** schemes"
    "rotary": "rotary position embeddings",  # "**Rotary** embeddings"
    "look-back": "look-back task",
    "reversal": "reversal task",
    "cache": "KV cache",                    # Chapter 4's pointer to Chapter 8
    "key-value cache": "KV cache",
    "one-hot": "one-hot vector",
    "sample": "sampling",                   # "to **sample**: draw the next token ..."
    "top-k": "top-k sampling",
    "top-p": "top-p sampling",
    "nucleus": "nucleus sampling",
    "min-p": "min-p sampling",
    "end-of-text": "end-of-text token",
    "decode": "decode step",
    "in context": "in-context learning",    # "is learning **in context**"
    "Q-": "Q-composition",                  # "**Q-**, **K-** and **V-composition**"
    "K-": "K-composition",
}

# Words that keep their capital at the start of a term.
NAMES = {"Frobenius", "Jacobian"}


@dataclass(frozen=True)
class Bold:
    """One `**...**` of a chapter's markdown cells, where it is and what it is."""
    source: Path       # the chapter, book/NN-slug.md
    cell: int          # 1-based position among all the chapter's cells
    markup: str        # the MyST source between the `**`s
    text: str          # its text as the rendered page's <strong> reads it (whitespace collapsed)
    ordinal: int       # how many bolds of the chapter with this text come before it
    section: str       # the MyST title of its section ("Exercise 8.4 · Title" in an exercise)
    where: str         # prose, quote, heading, table, title, exercise, solution, summary or box:<directive>
    after: str         # the MyST source right after it (20 characters at most)
    sentence: str      # the MyST source of its sentence, its own `**`s replaced by \x00 and \x01
    previous: str      # the sentence before it in the paragraph ('' for the first)
    next: str          # the sentence after it in the paragraph ('' for the last)
    verdict: str | None  # None for a definition, otherwise why it is not one


@dataclass(frozen=True)
class Definition:
    term: str          # the entry: case and form normalised
    label: str         # LABEL_PREFIX + slug, then -2, -3, ... for the term's later definitions
    bold: Bold


def chapter_number(source: Path) -> int:
    return int(source.name[:2])


def chapter_sources(book: Path = BOOK) -> list[Path]:
    # Only numbered chapters: the appendices (this page among them) define nothing.
    return sorted(book.glob("[0-9][0-9]-*.md"))


def _show(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# --- reading the chapters ------------------------------------------------------------------------

# Directives whose body is not markdown, so holds no bold of the prose.
NOT_MARKDOWN = {"code-cell", "code", "code-block", "math", "footbibliography", "bibliography", "raw"}
# Directives whose argument is a title, which MyST parses as inline markdown.
TITLED = {"admonition", "exercise", "solution", "table", "figure", "dropdown", "topic", "sidebar"}
# Gated directives: the cells between {solution-start} and {solution-end} are the solution.
GATED = {"solution-start": "solution", "exercise-start": "exercise"}


@lru_cache(maxsize=1)
def _parser():
    """The markdown-it parser MyST builds for the book, with the extensions _config.yml enables."""
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    extensions = set(config.get("parse", {}).get("myst_enable_extensions", []))
    return create_md_parser(MdParserConfig(enable_extensions=extensions), RendererHTML)


def _source(children: list[Token]) -> list[tuple[str, bool]]:
    """Inline tokens as MyST source again, one (source, is plain text) pair per token, so that a
    sentence is only ever split in plain text, never inside math, code or a role."""
    out, links = [], []
    for tok in children:
        kind = tok.type
        if kind == "text":
            out.append((re.sub(r"([\\`*$])", r"\\\1", tok.content), True))
        elif kind in ("softbreak", "hardbreak"):
            out.append((" ", True))
        elif kind == "code_inline":
            out.append((f"{tok.markup}{tok.content}{tok.markup}", False))
        elif kind == "math_inline":
            out.append((f"${tok.content}$", False))
        elif kind == "math_inline_double":
            out.append((f"$${tok.content}$$", False))
        elif kind == "myst_role":
            out.append((f"{{{tok.meta['name']}}}`{tok.content}`", False))
        elif kind in ("strong_open", "strong_close", "em_open", "em_close"):
            out.append((tok.markup, False))
        elif kind == "link_open":
            links.append(tok)
            out.append(("" if tok.markup in ("linkify", "autolink") else "[", False))
        elif kind == "link_close":
            start = links.pop() if links else None
            plain = start is None or start.markup in ("linkify", "autolink")
            out.append(("" if plain else f"]({start.attrGet('href')})", False))
        elif kind == "footnote_ref":
            out.append(("", False))  # a footnote of the chapter; it has no meaning elsewhere
        else:
            out.append((tok.content, False))
    return out


def _plain(children: list[Token]) -> str:
    """The text of the docutils node these inline tokens become (its `astext()`), whitespace collapsed."""
    parts = [" " if t.type in ("softbreak", "hardbreak") else t.content for t in children
             if t.type in ("text", "code_inline", "math_inline", "math_inline_double", "myst_role",
                           "softbreak", "hardbreak")]
    return " ".join("".join(parts).split())


_ABBREVIATIONS = ("e.g.", "i.e.", "et al.", "cf.", "vs.", "etc.")
_END = re.compile(r"[.!?][\x01*_]*[\"”’)]?(?=\s+\S)")


def _sentence(pieces: list[tuple[str, bool]], opening: int, closing: int) -> tuple[str, str, str]:
    """The sentence of a paragraph (its `_source` pieces) that holds the bold whose `**`s are pieces
    `opening` and `closing`, those two replaced by \x00 and \x01; the sentences before and after it
    in the paragraph ('' where there is none)."""
    texts, in_text = [], []
    for i, (src, is_text) in enumerate(pieces):
        src = "\x00" if i == opening else "\x01" if i == closing else src
        texts.append(src)
        in_text += [is_text] * len(src)
    full = "".join(texts)
    at = full.index("\x00")
    cuts = [0, len(full)]
    for m in _END.finditer(full):
        if in_text[m.start()] and not full[:m.start() + 1].endswith(_ABBREVIATIONS) \
                and not full[m.end():].lstrip()[:1].islower():
            cuts.append(m.end())
    start = max(c for c in cuts if c <= at)
    stop = min(c for c in cuts if c > at)
    before = max((c for c in cuts if c < start), default=start)
    after = min((c for c in cuts if c > stop), default=stop)
    return tuple(" ".join(full[a:b].split()) for a, b in ((start, stop), (before, start), (stop, after)))


def _body(content: str) -> str:
    """A directive's body without its options (`:key: value` lines, or a `---` YAML block)."""
    lines = content.splitlines()
    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), 0)
        return "\n".join(lines[end + 1:])
    skip = 0
    while skip < len(lines) and re.match(r"^:[\w-]+:", lines[skip]):
        skip += 1
    return "\n".join(lines[skip:])


class _Reader:
    """Walks a chapter's markdown cells in order, as MyST-NB renders them, and notes every bold."""

    def __init__(self):
        self.section = ""
        self.gated = None  # "solution" in the cells between {solution-start} and {solution-end}
        self.found: list[dict] = []
        self.cell = 0

    def read(self, cell: int, text: str) -> None:
        self.cell = cell
        self.blocks(_parser().parse(text), [])

    def blocks(self, tokens: list[Token], inside: list[str]) -> None:
        depth = {"table": 0, "quote": 0, "heading": 0}
        for i, tok in enumerate(tokens):
            if tok.type == "heading_open":
                title = "".join(src for src, _ in _source(tokens[i + 1].children or []))
                self.section = re.sub(r"^\d+\.\s+", "", title) if tok.tag == "h1" else title
            if tok.type in ("table_open", "table_close"):
                depth["table"] += tok.nesting
            elif tok.type in ("blockquote_open", "blockquote_close"):
                depth["quote"] += tok.nesting
            elif tok.type in ("heading_open", "heading_close"):
                depth["heading"] += tok.nesting
            elif tok.type == "inline":
                self.inline(tok.children or [], inside + [kind for kind, n in depth.items() if n])
            elif tok.type in ("fence", "colon_fence") and tok.info.startswith("{"):
                self.directive(tok, inside)

    def directive(self, tok: Token, inside: list[str]) -> None:
        name, _, argument = tok.info[1:].partition("}")
        name, argument = name.strip(), argument.strip()
        if name in GATED:
            self.gated = GATED[name]
        elif name.endswith("-end") and name[:-4] + "-start" in GATED:
            self.gated = None
        elif name not in NOT_MARKDOWN:
            if argument and name in TITLED:
                for title in _parser().parseInline(argument):
                    self.inline(title.children or [], inside + [name, "title"])
            section = self.section
            if name == "exercise":  # a term defined in an exercise links to "Exercise 8.4 · Title"
                self.section = f"Exercise {argument}"
            self.blocks(_parser().parse(_body(tok.content)), inside + [name])
            self.section = section

    def inline(self, children: list[Token], inside: list[str]) -> None:
        pieces = _source(children)
        for i, child in enumerate(children):
            if child.type != "strong_open":
                continue
            close = next(j for j in range(i + 1, len(children)) if children[j].type == "strong_close")
            sentence, previous, following = _sentence(pieces, i, close)
            self.found.append(dict(
                cell=self.cell, markup="".join(src for src, _ in pieces[i + 1:close]),
                text=_plain(children[i + 1:close]), section=self.section,
                inside=inside + ([self.gated] if self.gated else []),
                after="".join(src for src, _ in pieces[close + 1:])[:20],
                sentence=sentence, previous=previous, next=following))


def _where(inside: list[str], section: str) -> str:
    for kind in ("title", "solution", "exercise", "table", "heading", "quote"):
        if kind in inside:
            return kind
    if section.strip().lower() == "summary":
        return "summary"
    return f"box:{inside[-1]}" if inside else "prose"


def verdict(chapter: int, markup: str, text: str, where: str, after: str) -> str | None:
    """None when the bold defines a term; otherwise why not: a key of RULES (tried in their order),
    or "excluded: <reason>" from EXCLUDED."""
    caught = {
        "run-in heading": re.search(r"[.:?!]$", text),
        "exercise metadata": where == "exercise" and re.match(r"\s*[●○~]", after),
        "solution": where == "solution",
        "box title": where == "title",
        "table": where == "table",
        "summary": where == "summary",
    }
    rule = next((rule for rule in RULES if caught[rule]), None)
    if rule:
        return rule
    reason = EXCLUDED.get((chapter, markup))
    return f"excluded: {reason}" if reason else None


def read_chapter(source: Path) -> list[Bold]:
    """Every bold of the chapter's markdown cells, in reading order, each with its verdict."""
    reader = _Reader()
    for number, cell in enumerate(jupytext.read(source).cells, start=1):
        if cell.cell_type == "markdown":
            reader.read(number, cell.source)
    seen: dict[str, int] = {}
    bolds = []
    for found in reader.found:
        where = _where(found.pop("inside"), found["section"])
        ordinal = seen[found["text"]] = seen.get(found["text"], -1) + 1
        bolds.append(Bold(source=source, ordinal=ordinal, where=where, **found,
                          verdict=verdict(chapter_number(source), found["markup"], found["text"], where,
                                          found["after"])))
    return bolds


# --- terms ---------------------------------------------------------------------------------------

def uncapitalised(text: str) -> str:
    """A bold text with whitespace collapsed and the first word's capital dropped, unless the word
    is an acronym, a mixed-case name or one of NAMES ("LoRA", "KV cache", "Jacobian" keep theirs)."""
    first, _, rest = " ".join(text.split()).partition(" ")
    head = first.split("-")[0]
    if len(head) > 1 and head[0].isupper() and head[1:].islower() and head not in NAMES:
        first = first[0].lower() + first[1:]
    return f"{first} {rest}".strip()


def term_of(text: str) -> str:
    """The entry a bold text belongs to: `uncapitalised`, then FORMS."""
    term = uncapitalised(text)
    return FORMS.get(term, term)


def slug_of(term: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", term.lower()).strip("-")


def definitions(book: Path = BOOK) -> list[Definition]:
    """Every definition of every chapter in reading order, each with its label. A plural whose
    singular is also defined joins the singular's entry ("attention heads" -> "attention head").
    The labels are unique: a term's first definition gets `glossary-<slug>`, its later ones `-2`, ..."""
    found = [(bold, term_of(bold.text)) for source in chapter_sources(book)
             for bold in read_chapter(source) if bold.verdict is None]
    terms = {term for _, term in found}
    out, count = [], {}
    for bold, term in found:
        if term.endswith("s") and term[:-1] in terms:
            term = term[:-1]
        slug = slug_of(term)
        count[slug] = count.get(slug, 0) + 1
        out.append(Definition(term, LABEL_PREFIX + slug + (f"-{count[slug]}" if count[slug] > 1 else ""), bold))
    return out


# --- glosses -------------------------------------------------------------------------------------

# Bolds that preview a term a later section of the same chapter defines (in the chapter's opening,
# or as an analogy): (chapter, bold text) -> why; the chapter's first bold with that text is the
# preview. The entry quotes and lists the later definition first, and links to the preview after it.
PREVIEWS = {
    (2, "keys"): "the dict analogy; the section Queries, keys and values defines the roles",
    (2, "values"): "the dict analogy; the section Queries, keys and values defines the roles",
    (2, "query"): "the dict analogy; the section Queries, keys and values defines the roles",
    (4, "look-back"): "names Chapter 2's task in passing; the list of the section's tasks defines it",
    (8, "key-value cache"): "named in the opening; the section The cache defines it",
    (3, "residual stream"): "named under the opening figure; the section The residual stream defines it",
    (5, "LM head"): "named in the opening; the section Vectors out: the LM head defines it",
    (5, "logits"): "named in the opening; the section Vectors out: the LM head defines them",
    (5, "weight tying"): "named in the opening; the section Weight tying defines it",
    (6, "byte-pair encoding"): "named in the chapter's goals; the section on byte pairs defines it",
    (10, "hooks"): "the opening names the chapter's tools; the section Hooks defines them",
    (10, "ablation"): "the opening names the chapter's tools; the section Ablation defines it",
    (10, "logit lens"): "the opening names the chapter's tools; the section The logit lens defines it",
    (3, "post-norm"): "named in the opening; the section Pre-norm and post-norm defines it",
    (2, "KV cache"): "a forward reference to Chapter 8, which defines it",
    (1, "attention"): "a pointer to Chapter 2, which defines it",
    (4, "cache"): "a pointer to Chapter 8's cache, which defines it",
    (3, "pre-norm"): "named where the block is assembled; the section Pre-norm and post-norm defines it",
}

#: Glosses written for the glossary, for terms whose defining sentence leans on the sentences around
#: it ("That puts the answer ...") and reads as a fragment on its own. tests/test_glossary.py fails
#: when a key is no longer a term of the glossary.
GLOSSES = {
    "causal mask": "the mask that lets the query at position $i$ attend only to keys at positions "
                   "$j \\le i$, so that no position sees the tokens it is trained to predict.",
    "padding mask": "the mask that hides the padding positions of the shorter sequences in a batch, so "
                    "that no query attends to them.",
    "soft lookup": "attention read as a dictionary lookup in which every key matches a little: the output "
                   "is the average of all the values, weighted by how well each key matches the query.",
    "nat": "the unit of information, and of a cross-entropy loss, measured with the natural logarithm "
           "($\\ln 2 \\approx 0.69$ nats make one bit).",
    "KV cache": "the keys and values of every earlier position, kept from one decoding step to the next "
                "so that a new token computes only its own; one layer cache per block.",
    "3CosAdd": "the analogy rule: to answer *a* is to *b* as *c* is to ?, take the word whose vector is "
               "nearest, by cosine, to $b - a + c$, leaving out *a*, *b* and *c*.",
    "induction head": "a head that attends from the current token to the token that followed an earlier copy "
                      "of it, and copies that token forward, so that a repeated span is predicted; in Chapter 10's "
                      "circuit its keys read a previous-token head of the layer below.",
    "previous-token heads": "heads that put their weight on the token just before the query.",
    "catastrophic forgetting": "a fine-tuned model's loss of what it could do before: in Chapter 9, training "
                               "on a new domain pushes the English loss above that of predicting each token "
                               "by its frequency alone.",
    "model FLOPs utilisation": "MFU: the share of the hardware's advertised peak rate that a run's model FLOPs "
                               "(about $6N$ per token trained, plus attention's) use.",
    "floor": "the least error a model can reach on a task: for a stack that is affine in its input, whatever "
             "its weights, the error of the best affine fit to a non-linear target.",
    "negative log-likelihood": "minus the log of the probability the model gave the actual next token, "
                               "averaged over the positions: a language model's loss.",
    "scaling law": "a power law that predicts the loss a model reaches from its parameters, its training "
                   "tokens or its compute.",
    "autoregressive decoding": "generating text one token at a time, each new token appended to the input of "
                               "the next step.",
    "Q-composition": "a later head's queries reading what an earlier head wrote into the residual stream.",
    "K-composition": "a later head's keys reading what an earlier head wrote into the residual stream, as an "
                     "induction head's keys read a previous-token head's output.",
    "V-composition": "a later head's values reading what an earlier head wrote into the residual stream.",
    "AdamW": "Adam with weight decay applied to the weights directly, decoupled from the gradient's "
             "running averages.",
}

WORDS = 32  # a gloss longer than this is cut at a clause after the term (then at a comma, with "…")
_ATOM = re.compile(r"\\.|\{[\w:.-]+\}`[^`]*`|(`+).*?\1|\$\$.*?\$\$|\$(?:\\.|[^$])*\$")
_CITATIONS = re.compile(r"^(\s*\{footcite:p\}`[^`]*`)*")


def _mask(s: str) -> tuple[list[bool], list[int]]:
    """For each character of MyST source `s`: whether it is plain text (not math, code, a role or an
    escape), and how deep in the plain text's parentheses it sits (a parenthesis counts as inside)."""
    text = [True] * len(s)
    for m in _ATOM.finditer(s):
        text[m.start():m.end()] = [False] * (m.end() - m.start())
    depth, level = [], 0
    for ch, plain in zip(s, text):
        level += plain and ch == "("
        depth.append(level)
        level -= plain and ch == ")" and level > 0
    return text, depth


def _words(s: str) -> int:
    """How many words `s` has, not counting its footnote citations."""
    s = re.sub(r"\{footcite:p\}`[^`]*`", "", s.replace("\x00", "").replace("\x01", ""))
    return sum(1 for word in s.split() if re.search(r"\w", word))


def _cite_names(key: str) -> str:
    """ "Mikolov et al." for a references.bib key, as a textual citation reads without its year."""
    bib = (ROOT / "references.bib").read_text(encoding="utf-8")
    entry = re.search(r"@\w+\{" + re.escape(key) + r",(.*?)\n\}", bib, re.S)
    authors = re.search(r"author\s*=\s*\{(.*)\},?\s*$", entry.group(1), re.M) if entry else None
    if not authors:
        return ""
    names = [a.split(",")[0].strip().strip("{}") for a in authors.group(1).split(" and ")]
    return names[0] if len(names) == 1 else " and ".join(names) if len(names) == 2 else f"{names[0]} et al."


def _glue(role: str, key: str, doc: str) -> str:
    """A glue role that pastes from the chapter's notebook; {glue:text} splits a format at its last
    colon, so a key without one gets the format it had by default (`s`)."""
    if role == "glue:text" and ":" not in key:
        key += ":s"
    return f"{{{role}}}`{doc}::{key}`"


def _clean(s: str, doc: str) -> str:
    """A gloss as MyST that renders on the glossary page: no bold (the entry's term is bold), no
    footnote citations (`footcite:t` becomes the authors' names), glued values pasted from the
    chapter's notebook (`{glue:text}`02-attention.ipynb::name``), one sentence with a capital."""
    s = s.replace("\x00", "**").replace("\x01", "**")
    s = re.sub(r"\s*\{footcite:p\}`[^`]*`", "", s)
    s = re.sub(r"\{footcite:t\}`([^`,]*)[^`]*`", lambda m: _cite_names(m.group(1)), s)
    s = re.sub(r"\{(glue(?::\w+)?)\}`(?![^`]*::)([^`]*)`", lambda m: _glue(m.group(1), m.group(2), doc), s)
    text, _ = _mask(s)
    bold = {i + k for i in range(len(s) - 1) if s.startswith("**", i) and text[i] for k in (0, 1)}
    s = "".join(ch for i, ch in enumerate(s) if i not in bold)
    s = " ".join(s.split())
    s = re.sub(r"\s+([,;:.)])", r"\1", s).strip(" ,;:—")
    if s.startswith("(") and s.endswith((")", ").", ".)")):
        s = s[1:].rstrip(".")[:-1]
    s = re.sub(r"^(and|or|but|so|then)\s+", "", s)
    if re.match(r"[a-z][a-z'’-]*\b", s):
        s = s[0].upper() + s[1:]
    return s if s.endswith((".", "?", "!", "…")) else s + "."


class _Gloss:
    """The MyST source of a definition's sentence with the plain-text structure `gloss` needs."""

    def __init__(self, sentence: str):
        self.s = sentence
        self.text, self.depth = _mask(sentence)
        self.start, self.end = sentence.index("\x00"), sentence.index("\x01") + 1

    def at(self, chars: str, lo: int, hi: int, level: int) -> list[int]:
        """Positions in s[lo:hi] of the plain-text characters `chars` at parenthesis depth `level`."""
        return [i for i in range(lo, hi) if self.s[i] in chars and self.text[i] and self.depth[i] == level]

    def group(self, at: int) -> tuple[int, int]:
        """The inside of the parentheses around position `at`."""
        level = self.depth[at]
        opening = max(i for i in range(at) if self.s[i] == "(" and self.text[i] and self.depth[i] == level)
        closing = min((i for i in range(at, len(self.s)) if self.s[i] == ")" and self.text[i]
                       and self.depth[i] == level), default=len(self.s))
        return opening + 1, closing

    def skip_group(self, at: int) -> int:
        """`at`, or past the parenthesis that opens there (after spaces)."""
        i = at + len(self.s[at:]) - len(self.s[at:].lstrip())
        if i < len(self.s) and self.s[i] == "(" and self.text[i]:
            return self.group(i + 1)[1] + 1
        return at


def gloss(bold: Bold) -> str:
    """The gloss of a definition, in the words of the sentence that holds its bold:

    - the definition after the term's colon ("**Diversity**: the share of ...", "(**gradient
      clipping**: all the gradients ... are scaled down ...)");
    - else an appositive right after it ("the **cosine similarity**, the cosine of the angle ...");
    - else, when a parenthesis follows the term ("the steps spent **context-free** (spread under
      0.01)"), the phrase between commas that holds both;
    - else the clause that holds the term: between semicolons, after a colon that opens it.

    A gloss that starts "This is" or ends "... this" gets the sentence before it, one of fewer than
    8 words the sentence after it; one longer than WORDS words is cut at a colon after the term,
    then at a comma (with "…"); one that runs on into a displayed equation ends with "…"."""
    g = _Gloss(bold.sentence)
    s, level = g.s, g.depth[g.start]
    lo, hi = 0, len(s)
    if level:  # the term is inside a parenthesis: keep to it when it says more than the term's name
        lo, hi = g.group(g.start)
        naming = re.fullmatch(r"(?i)(the|an?)", s[lo:g.start].strip())  # "(the **spread**: 0 when ...)"
        if _words(s[lo:hi]) < 6 or naming:
            lo, hi, level = 0, len(s), level - 1
    lo = max([i + 1 for i in g.at(";", lo, g.start, level)], default=lo)
    hi = min(g.at(";", g.end, hi, level), default=hi)
    rest = g.end + len(s[g.end:hi]) - len(_CITATIONS.sub("", s[g.end:hi]))  # past the term's citations
    after_group = g.skip_group(rest)
    after_group += len(s[after_group:hi]) - len(_CITATIONS.sub("", s[after_group:hi]))
    following = s[after_group:hi]
    appositive = re.match(r",\s+(the|an?)\s", s[rest:hi])
    stop = min(g.at(",;:—", rest + 1, hi, level), default=hi)
    if following.startswith(":") and _words(following) > 5 and g.depth[g.start] == level:
        lo = after_group + 1
    elif appositive and _words(s[rest + 1:stop]) >= 7 and not re.search(r"\b[Cc]hapter \d", s[rest:stop]) \
            and not s[stop + 1:].lstrip().startswith("and "):
        lo, hi = rest + 1, stop
    elif after_group > rest and re.match(r"\s*([,;)]|and\s|$)", s[after_group:hi]):
        left = max([i + 1 for i in g.at(",:", lo, g.start, level)], default=lo)
        right = min(g.at(",:", after_group, hi, level) + [after_group + s[after_group:].find(" and ")]
                    if " and " in s[after_group:hi] else g.at(",:", after_group, hi, level), default=hi)
        if _words(s[left:right]) >= 4:
            lo, hi = left, right
    else:
        colons = [i for i in g.at(":", lo, g.start, level) if _words(s[i:g.start]) > 3]
        lo = colons[-1] + 1 if colons else lo
    if re.match(r"\s*(This|That|It) (is|was)\b", s[lo:hi]) or re.search(r"\b(this|that)\W*$", s[lo:hi]):
        if bold.previous and _words(bold.previous) + _words(s[lo:hi]) <= WORDS + 8:  # "This is ..."
            return _clean(bold.previous + " " + s[lo:hi], _doc(bold))
    if _words(s[lo:hi]) > WORDS:
        cuts = [i for i in g.at(":—", max(lo, g.end), hi, level) if _words(s[lo:i]) >= 12]
        hi = cuts[0] if cuts else hi
    if _words(s[lo:hi]) > WORDS + 8:
        commas = [i for i in g.at(",", max(lo, g.end), hi, level) if _words(s[lo:i]) <= WORDS]
        if commas:
            return _clean(s[lo:commas[-1]], _doc(bold)).rstrip(".") + " …"
    text = _clean(s[lo:hi], _doc(bold))
    if _words(text) < 8 and bold.next:  # "**Byte-pair encoding** shortens them. Start from the 256 bytes, ..."
        more = _Gloss("\x00\x01" + bold.next)
        colons = more.at(":", 2, len(more.s), 0)
        extra = more.s[2:colons[0]] if colons and _words(text + more.s) > WORDS else more.s[2:]
        if _words(text + extra) <= WORDS + 8:
            return _clean(s[lo:hi] + ". " + extra, _doc(bold)).replace("..", ".")
    # a sentence that runs on into a displayed equation stops without a full stop
    return text if hi < len(s) or re.search(r"[.!?:][\x01*_\"”’)]*$", s) else text.rstrip(".") + " …"


def _doc(bold: Bold) -> str:
    return bold.source.with_suffix(".ipynb").name


# --- the page ------------------------------------------------------------------------------------

def _where_title(bold: Bold) -> str:
    number = chapter_number(bold.source)
    chapter = "Preface" if number == 0 else f"Chapter {number}"
    return f"{chapter}, {bold.section}" if bold.section else chapter


def _sort_key(term: str) -> tuple[str, str]:
    plain = re.sub(r"[^0-9a-z ]", "", term.casefold())
    return plain, term


def _letter(term: str) -> str:
    first = _sort_key(term)[0][:1]
    return "0–9" if first.isdigit() else first.upper()


def _is_preview(bold: Bold) -> bool:
    return (chapter_number(bold.source), bold.markup) in PREVIEWS and bold.ordinal == 0


def render(defs: list[Definition]) -> str:
    """The glossary page (MyST): one entry per term, grouped by initial letter, alphabetically."""
    terms: dict[str, list[Definition]] = {}
    for d in defs:
        terms.setdefault(d.term, []).append(d)
    out = ["# Glossary", "", INTRO, ""]
    letter = None
    for term in sorted(terms, key=_sort_key):
        # the full definitions in reading order, then the previews
        first, *others = sorted(terms[term], key=lambda d: _is_preview(d.bold))
        if _letter(term) != letter:
            letter = _letter(term)
            out += [f"## {letter}", ""]
        links = f"[{_where_title(first.bold)}](#{first.label})"
        if others:
            links += "; also " + ", ".join(f"[{_where_title(d.bold)}](#{d.label})" for d in others)
        text = GLOSSES.get(term)
        out += [f"**{term}**: {text[0].upper() + text[1:] if text else gloss(first.bold)} ({links})", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def _summary(defs: list[Definition]) -> str:
    return f"glossary: {len({d.term for d in defs})} terms from {len(defs)} definitions"


def check(book: Path = BOOK, page: Path | None = None) -> int:
    page = page or book / PAGE_NAME
    defs = definitions(book)
    if not page.exists():
        print(f"{_show(page)} is missing: {FIX}")
        return 1
    if page.read_text(encoding="utf-8") != render(defs):
        print(f"{_show(page)} is stale (it does not match the chapters' bold definitions): {FIX}")
        return 1
    print(f"{_summary(defs)}, page up to date")
    return 0


def write(book: Path = BOOK, page: Path | None = None) -> int:
    page = page or book / PAGE_NAME
    defs = definitions(book)
    text = render(defs)
    if not page.exists() or page.read_text(encoding="utf-8") != text:  # untouched when nothing changed
        page.write_text(text, encoding="utf-8")
    print(f"{_summary(defs)}, wrote {_show(page)}")
    return 0


def list_bolds(book: Path = BOOK) -> int:
    """Print every bold with its verdict, and a count per verdict."""
    counts: dict[str, int] = {}
    for source in chapter_sources(book):
        for b in read_chapter(source):
            kind, _, reason = (b.verdict or "definition").partition(": ")
            counts[kind] = counts.get(kind, 0) + 1
            shown = b.sentence.replace("\x00", "»").replace("\x01", "«")
            print(f"{source.name[:2]} cell {b.cell:<3} {kind:<17} {b.markup!r} [{b.where}] {shown}"
                  + (f"  ({reason})" if reason else ""))
    print(", ".join(f"{n} {kind}" for kind, n in sorted(counts.items(), key=lambda kv: -kv[1])))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=["check", "write", "list"])
    ap.add_argument("--book", type=Path, default=BOOK, help="folder of the chapter sources (default: book/)")
    a = ap.parse_args(argv)
    return {"check": check, "write": write, "list": list_bolds}[a.cmd](a.book)


if __name__ == "__main__":
    sys.exit(main())
