"""The claims ledger: every comparison the prose makes is asserted by a cell tagged `claim`.

    python tools/claims.py check   fail if a claim cell is malformed or book/appendix-claims.md is stale
    python tools/claims.py write   validate the claim cells and regenerate book/appendix-claims.md

A claim cell is a code cell of a chapter source (book/NN-slug.md) tagged `claim`. Its first line is

    # claim: <the sentence of the prose it backs>

and the sentence may go on over the `#` comment lines right below it; it ends at the first line
that is not a comment with text (code, a blank line, or a bare `#`). The cell must assert
something: an `assert` statement, or a call to a function whose name starts with `assert`
(`torch.testing.assert_close`, `np.testing.assert_allclose`, ...). A `# claim:` comment in a cell
not tagged `claim` is an error too: the ledger would silently miss it.

The ledger lists, per chapter, each claim sentence and the top-level statements of its cell that
assert (a loop whose body asserts is shown whole). It is generated only from the sources, so the
same chapters always give the same page; re-executing the chapters re-runs the assertions.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
LEDGER_NAME = "appendix-claims.md"
TAG = "claim"
# Tolerant on purpose ("#claim:", "# Claim :"): a near-miss in an untagged cell is still caught.
CLAIM_LINE = re.compile(r"^\s*#\s*claim\s*:(.*)$", re.IGNORECASE)
CONTINUATION = re.compile(r"^\s*#\s*(\S.*)$")
FIX = "run `make execute` or `python tools/claims.py write`"

INTRO = """\
Every comparison the prose makes is asserted by a code cell of its chapter. Such a cell is
tagged `claim` and its first line, `# claim: …`, quotes the sentence it backs. This page is
generated from those cells by `tools/claims.py`, so it cannot drift from the chapters: `make test`
fails when it no longer matches them. The page only lists the claims; re-executing the chapters
(`make execute`, or the notebook check in `make test`) runs every assertion below again."""


@dataclass(frozen=True)
class Claim:
    cell: int        # 1-based position among all the chapter's cells (markdown included)
    sentence: str    # the MyST text of the claim
    asserting: str   # the top-level statements of the cell that assert, as written


@dataclass(frozen=True)
class Chapter:
    source: Path     # book/NN-slug.md
    title: str       # its first `# ` heading
    claims: tuple[Claim, ...]


def _show(path: Path) -> str:
    # Paths as a reader of `make test` output meets them: relative to the repository when inside it.
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def chapter_sources(book: Path = BOOK) -> list[Path]:
    # Only numbered chapters: the ledger itself (appendix-claims.md) is not a chapter.
    return sorted(book.glob("[0-9][0-9]-*.md"))


def _title(nb, source: Path) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    raise ValueError(f"{_show(source)}: no `# ` title heading found")


def _python(source: str) -> str:
    """The cell with IPython magics (`%pip`, `%%time`, `!ls`) blanked, one line for one line,
    so the AST parses and its line numbers still point into the cell as written."""
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")):
            line = line[: len(line) - len(stripped)] + "pass"
        lines.append(line)
    return "\n".join(lines)


def _is_assertion(node: ast.AST) -> bool:
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Call):
        func = node.func  # assert_close(...), torch.testing.assert_close(...), self.assertEqual(...)
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name.startswith("assert")
    return False


def _asserting_statements(source: str) -> str:
    """The top-level statements of the cell that contain an assertion ('' when none).
    Raises SyntaxError when the cell is not Python."""
    tree = ast.parse(_python(source))
    lines = source.splitlines()
    shown = []
    for stmt in tree.body:
        if any(_is_assertion(node) for node in ast.walk(stmt)):
            first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
            shown.append("\n".join(line.rstrip() for line in lines[first - 1: stmt.end_lineno]))
    return "\n".join(shown)


def _sentence(lines: list[str]) -> str:
    """The claim sentence: the text after `# claim:` and the comment lines that continue it."""
    parts = [CLAIM_LINE.match(lines[0]).group(1).strip()]
    for line in lines[1:]:
        more = CONTINUATION.match(line)
        if not more or CLAIM_LINE.match(line):
            break
        parts.append(more.group(1).strip())
    return " ".join(p for p in parts if p)


def _claim(cell, number: int, where: str) -> tuple[Claim | None, list[str]]:
    """Validate one code cell; return its claim (None if it is not a claim cell) and its errors."""
    tagged = TAG in cell.get("metadata", {}).get("tags", [])
    lines = cell.source.splitlines()
    marked = [i for i, line in enumerate(lines) if CLAIM_LINE.match(line)]
    if not tagged:
        return None, [f"{where}: has a `# claim:` comment but is not tagged `{TAG}`"] if marked else []
    if not lines or not CLAIM_LINE.match(lines[0]):
        return None, [f"{where}: tagged `{TAG}` but its first line is not `# claim: <the sentence it backs>`"]
    errors = []
    sentence = _sentence(lines)
    if not sentence:
        errors.append(f"{where}: the `# claim:` line has no sentence")
    if len(marked) > 1:
        errors.append(f"{where}: more than one `# claim:` line (one claim per cell)")
    try:
        asserting = _asserting_statements(cell.source)
    except SyntaxError as e:
        return None, errors + [f"{where}: cannot parse the cell as Python ({e.msg}, line {e.lineno})"]
    if not asserting:
        errors.append(f"{where}: claims \"{sentence}\" but asserts nothing (no `assert`, no assert_*() call)")
    return (None if errors else Claim(number, sentence, asserting)), errors


def collect(book: Path = BOOK) -> tuple[list[Chapter], list[str]]:
    """Every chapter with its valid claims, and one error line per malformed cell."""
    chapters, errors = [], []
    for source in chapter_sources(book):
        nb = jupytext.read(source)
        try:
            title = _title(nb, source)
        except ValueError as e:
            errors.append(str(e))
            title = source.stem
        claims = []
        for number, cell in enumerate(nb.cells, start=1):
            if cell.cell_type != "code":
                if TAG in cell.get("metadata", {}).get("tags", []):
                    errors.append(f"{_show(source)}, cell {number}: tagged `{TAG}` but is not a code cell")
                continue
            first = cell.source.splitlines()[0][:60] if cell.source else ""
            claim, bad = _claim(cell, number, f"{_show(source)}, cell {number} ({first!r})")
            errors += bad
            if claim:
                claims.append(claim)
        chapters.append(Chapter(source, title, tuple(claims)))
    return chapters, errors


def _fence(code: str) -> str:
    # A fence longer than any run of backticks inside the code, so the block cannot end early.
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    return "`" * max(3, longest + 1)


def render(chapters: list[Chapter]) -> str:
    """The ledger page (MyST). Depends only on the chapters' claims, in file and cell order."""
    out = ["# Claims ledger", "", INTRO, ""]
    with_claims = [ch for ch in chapters if ch.claims]
    if not with_claims:
        out += ["No claims yet: no cell of any chapter is tagged `claim`.", ""]
    for ch in with_claims:
        title = ch.title.replace("<", r"\<")  # `<` would start the role's explicit target
        out += [f"## {{doc}}`{title} <{ch.source.stem}>`", ""]
        for n, claim in enumerate(ch.claims, start=1):
            marker = f"{n}. "
            pad = " " * len(marker)  # a code block inside a list item is indented to its text
            fence = _fence(claim.asserting)
            out.append(marker + claim.sentence)
            out.append("")
            out.append(pad + fence + "python")
            out += [pad + line if line else "" for line in claim.asserting.splitlines()]
            out.append(pad + fence)
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _summary(chapters: list[Chapter]) -> str:
    return f"claims: {sum(len(ch.claims) for ch in chapters)} cells in {len(chapters)} chapters"


def check(book: Path = BOOK, ledger: Path | None = None) -> int:
    ledger = ledger or book / LEDGER_NAME
    chapters, errors = collect(book)
    for e in errors:
        print(e)
    if errors:
        print(f"claims: {len(errors)} invalid claim cell(s); fix them, then {FIX}")
        return 1
    if not ledger.exists():
        print(f"{_show(ledger)} is missing: {FIX}")
        return 1
    if ledger.read_text() != render(chapters):
        print(f"{_show(ledger)} is stale (it does not match the claim cells): {FIX}")
        return 1
    print(f"{_summary(chapters)}, ledger up to date")
    return 0


def write(book: Path = BOOK, ledger: Path | None = None) -> int:
    ledger = ledger or book / LEDGER_NAME
    chapters, errors = collect(book)
    for e in errors:
        print(e)
    if errors:  # never publish a ledger that leaves out a malformed claim
        print(f"claims: {len(errors)} invalid claim cell(s); {_show(ledger)} not written")
        return 1
    text = render(chapters)
    if not ledger.exists() or ledger.read_text() != text:  # untouched when nothing changed
        ledger.write_text(text)
    print(f"{_summary(chapters)}, wrote {_show(ledger)}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=["check", "write"])
    ap.add_argument("--book", type=Path, default=BOOK, help="folder of the chapter sources (default: book/)")
    a = ap.parse_args(argv)
    return check(a.book) if a.cmd == "check" else write(a.book)


if __name__ == "__main__":
    sys.exit(main())
