"""The notation appendix: book/appendix-notation.md, generated from tinyformer.course.notation.TABLE.

    python tools/notation.py check   fail if the page is stale or a chapter breaks the table's rules
    python tools/notation.py write   regenerate the page (after editing the table)

The table, the page's text and the rules (which symbols a chapter may not write without a row, and
where each symbol must first appear) live in tinyformer.course.notation; tests/test_notation.py runs
the same checks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext

from tinyformer.course import notation

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "appendix-notation.md"


def titles(book: Path = ROOT / "book") -> dict[int, str]:
    """Chapter number -> its title (the first `# ` line of its source)."""
    out = {}
    for path in sorted(book.glob("[0-9][0-9]-*.md")):
        heading = next(line for line in path.read_text().splitlines() if line.startswith("# "))
        out[int(path.name[:2])] = heading[2:].strip()
    return out


def chapters_markdown(book: Path = ROOT / "book") -> dict[int, str]:
    """Chapter number -> the Markdown of its cells, for book/01-… to book/10-…"""
    out = {}
    for path in sorted(book.glob("[0-9][0-9]-*.md")):
        if path.name.startswith("00-"):
            continue
        cells = jupytext.read(path).cells
        out[int(path.name[:2])] = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["check", "write"])
    args = parser.parse_args(argv)
    problems = notation.problems(chapters_markdown())
    text = notation.page(titles=titles())
    if args.command == "write":
        PAGE.write_text(text)
        print(f"wrote {PAGE.relative_to(ROOT)} ({len(notation.TABLE)} rows)")
    elif not PAGE.exists() or PAGE.read_text() != text:
        problems.append(f"{PAGE.relative_to(ROOT)} is stale: run `python tools/notation.py write`")
    for problem in problems:
        print("notation:", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
