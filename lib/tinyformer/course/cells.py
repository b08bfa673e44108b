"""The exercise cells of a chapter: how they are tagged, where a solution starts and ends, and how
a solution becomes a stub.

In a chapter, a solution is the code between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` in a cell
tagged ``exercise-<name>``. The reader notebooks (:mod:`tinyformer.course.reader`), the student
notebooks (:mod:`tinyformer.course.student`), the grader (:mod:`tinyformer.course.grade`) and the
slicing of exercise notebooks (:mod:`tinyformer.course.slicing`) all read cells through these
helpers, which import nothing of theirs.
"""

from __future__ import annotations

import re

from tinyformer.course.engine import EXERCISES

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
EXERCISE_TAG = "exercise-"
_DEF = re.compile(r"^(?P<indent>\s*)def\s+(?P<name>\w+)\s*\(")


def exercise_name(cell) -> str | None:
    """The check name of an exercise cell (its ``exercise-<name>`` tag), or None."""
    tags = cell.get("metadata", {}).get("tags", [])
    for tag in tags if isinstance(tags, list) else []:
        if isinstance(tag, str) and tag.startswith(EXERCISE_TAG):
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


def has_exercises(nb) -> bool:
    return any(c.cell_type == "code" and exercise_name(c) for c in nb.cells)
