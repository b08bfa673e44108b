"""Shared fixtures: the chapter notebooks and their exercise cells."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tinyformer.student import exercise_name

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


def chapter_notebooks() -> list[Path]:
    return sorted(BOOK.glob("[0-9][0-9]-*.ipynb"))


def exercise_cells(path: Path) -> dict[str, str]:
    """Exercise name -> the source of its (solution) cell."""
    nb = nbformat.read(path, as_version=4)
    return {exercise_name(c): c.source for c in nb.cells if c.cell_type == "code" and exercise_name(c)}


def define(source: str, function: str):
    """Execute a cell's source in a fresh namespace and return the function it defines."""
    namespace: dict = {"__name__": "__main__"}
    exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102 - our own chapter's code
    return namespace[function]


@pytest.fixture(scope="session")
def solutions() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in chapter_notebooks():
        found.update(exercise_cells(path))
    return found
