"""Make student notebooks: every solution replaced by a stub, no solution text left.

    python -m tinyformer.student book/ --out student/

In a chapter, a solution is the code between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` in a
cell tagged ``exercise-<name>``; the cell usually sits inside a collapsed
``{solution-start}`` … ``{solution-end}`` block, whose prose is the worked answer. The student
notebook keeps the function's signature and docstring, replaces its body with
``raise NotImplementedError("<function> is not implemented yet")``, drops the worked answer, clears
every output, and turns the ``{exercise}`` directives into plain headings that read well in
Jupyter and Colab. The stub names the function the reader writes (the exercise registry's
``function``), so a check can tell a reader that an exercise calls an unfinished earlier one.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

from tinyformer.course.engine import EXERCISES

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
EXERCISE_TAG = "exercise-"
_FENCE = re.compile(r"^(?P<fence>:{3,}|`{3,})\{(?P<name>[\w-]+)\}\s*(?P<arg>.*)$")
_DEF = re.compile(r"^(?P<indent>\s*)def\s+(?P<name>\w+)\s*\(")


def exercise_name(cell) -> str | None:
    """The check name of an exercise cell (its ``exercise-<name>`` tag), or None."""
    for tag in cell.get("metadata", {}).get("tags", []):
        if tag.startswith(EXERCISE_TAG):
            return tag[len(EXERCISE_TAG):]
    return None


def solution_lines(source: str) -> list[str]:
    """The lines strictly between the BEGIN and END markers."""
    out, inside = [], False
    for line in source.splitlines():
        if line.strip() == BEGIN:
            inside = True
        elif line.strip() == END:
            inside = False
        elif inside:
            out.append(line)
    return out


def stub_function(name: str, source: str) -> str:
    """The function a stub of exercise ``name`` names: the registry's ``function``; for an exercise
    not registered, the ``def`` that encloses the first BEGIN marker; else ``name`` itself."""
    if name in EXERCISES:
        return EXERCISES[name].function
    enclosing = name
    for line in source.splitlines():
        if line.strip() == BEGIN:
            break
        m = _DEF.match(line)
        if m:
            enclosing = m["name"]
    return enclosing


def stub_source(source: str, name: str) -> str:
    """Replace each BEGIN…END region with a ``NotImplementedError`` stub at the same indentation."""
    lines, out, inside = source.splitlines(), [], False
    for lineno, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise ValueError(f"exercise {name!r}: nested {BEGIN} at line {lineno}")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}# YOUR CODE HERE")
            out.append(f'{indent}raise NotImplementedError("{name} is not implemented yet")')
        elif stripped == END:
            if not inside:
                raise ValueError(f"exercise {name!r}: {END} without {BEGIN} at line {lineno}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"exercise {name!r}: {BEGIN} is never closed by {END}")
    return "\n".join(out)


def _strip_solution_prose(text: str, in_solution: bool) -> tuple[str, bool]:
    """Drop solution-start … solution-end regions (and the directives) from markdown."""
    kept, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = _FENCE.match(lines[i].strip())
        if m and m["name"] in ("solution-start", "solution-end"):
            fence = m["fence"]
            i += 1
            while i < len(lines) and lines[i].strip() != fence:  # skip options up to the closing fence
                i += 1
            in_solution = m["name"] == "solution-start"
        elif not in_solution:
            kept.append(lines[i])
        i += 1
    return "\n".join(kept).strip("\n"), in_solution


def _exercise_headings(text: str) -> str:
    """``:::{exercise} 2.1 · Title`` + ``:label:`` → ``### Exercise 2.1 · Title`` (Jupyter has no directives)."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = _FENCE.match(lines[i].strip())
        if m and m["name"] == "exercise":
            out.append(f"### Exercise {m['arg']}".rstrip())
            fence = m["fence"]
            i += 1
            while i < len(lines) and lines[i].lstrip().startswith(":") and lines[i].strip() != fence:
                i += 1  # the directive's options (:label: …)
            while i < len(lines) and lines[i].strip() != fence:
                out.append(lines[i])
                i += 1
        else:
            out.append(lines[i])
        i += 1
    return "\n".join(out)


def make_student(nb):
    """Return a student copy of notebook ``nb`` (an nbformat node); ``nb`` is not modified."""
    nb = nbformat.from_dict(nb)  # a deep copy
    cells, in_solution = [], False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            text, in_solution = _strip_solution_prose(cell.source, in_solution)
            if text.strip():
                cell.source = _exercise_headings(text)
                cells.append(cell)
            continue
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            name = exercise_name(cell)
            has_marker = BEGIN in cell.source or END in cell.source
            if has_marker and name is None:
                raise ValueError(f"a cell with {BEGIN} has no exercise-<name> tag:\n{cell.source[:200]}")
            if in_solution and not has_marker:
                raise ValueError(f"a code cell inside a solution block has no {BEGIN} marker, so its code "
                                 f"would reach students:\n{cell.source[:200]}")
            if has_marker:
                cell.source = stub_source(cell.source, stub_function(name, cell.source))
        cells.append(cell)
    nb.cells = cells
    return nb


def has_exercises(nb) -> bool:
    return any(c.cell_type == "code" and exercise_name(c) for c in nb.cells)


def write_student_notebooks(sources: list[Path], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sources:
        nb = nbformat.read(path, as_version=4)
        if not has_exercises(nb):
            continue
        target = out_dir / path.name
        nbformat.write(make_student(nb), target)
        written.append(target)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Write student notebooks with the solutions stubbed out.")
    ap.add_argument("source", nargs="+", type=Path, help="chapter .ipynb files or folders holding them")
    ap.add_argument("--out", type=Path, default=Path("student"), help="output folder (default: student/)")
    a = ap.parse_args(argv)
    sources = []
    for p in a.source:
        if p.is_dir():
            sources += sorted(p.glob("*.ipynb"))
        elif p.suffix == ".ipynb" and p.exists():
            sources.append(p)
        else:
            ap.error(f"source {p} is neither a folder nor an existing .ipynb file")
    for target in write_student_notebooks(sources, a.out):
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
