"""Library code the book prints with ``show_source`` must fit the page.

A listing wider than 79 columns scrolls sideways in the HTML book and on a
phone, so every function or class a chapter shows must keep each of its
source lines within 79 characters.
"""

import ast
import inspect
import re
from pathlib import Path

BOOK = Path(__file__).resolve().parent.parent / "book"
MAX_COLUMNS = 79
CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.S | re.M)


def _cells(text: str) -> list[str]:
    """The code cells of a MyST notebook, without their ``:tag:`` lines."""
    cells = []
    for body in CELL.findall(text):
        lines = body.splitlines()
        while lines and lines[0].startswith(":"):
            lines.pop(0)
        cells.append("\n".join(lines))
    return cells


def _listings():
    """``(chapter, expression, object)`` for every ``show_source(expr)`` call.

    The object is found the way the notebook finds it: by running the
    chapter's own ``tinyformer`` imports and evaluating the argument.
    """
    found = []
    for md in sorted(BOOK.glob("*.md")):
        namespace: dict = {}
        calls = []
        for cell in _cells(md.read_text(encoding="utf-8")):
            try:
                tree = ast.parse(cell)
            except SyntaxError:  # a cell with IPython magics
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom | ast.Import):
                    names = ([node.module or ""]
                             if isinstance(node, ast.ImportFrom)
                             else [a.name for a in node.names])
                    if all(n.split(".")[0] == "tinyformer" for n in names):
                        exec(compile(ast.Module([node], []), md.name, "exec"),
                             namespace)
                elif (isinstance(node, ast.Call)
                      and isinstance(node.func, ast.Name)
                      and node.func.id == "show_source"):
                    calls.append(ast.unparse(node.args[0]))
        for expr in calls:
            found.append((md.name, expr, eval(expr, namespace)))
    return found


def test_every_listing_fits_79_columns():
    listings = _listings()
    assert len(listings) >= 8, "expected the book to show library listings"
    too_wide = []
    for chapter, expr, obj in listings:
        lines, first = inspect.getsourcelines(obj)
        path = Path(inspect.getsourcefile(obj)).name
        for n, line in enumerate(lines, start=first):
            line = line.rstrip("\n")
            if len(line) > MAX_COLUMNS:
                too_wide.append(f"{chapter}: show_source({expr}) "
                                f"{path}:{n} has {len(line)} columns")
    assert not too_wide, "\n".join(too_wide)
