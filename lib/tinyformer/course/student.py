"""Make student notebooks: every solution replaced by a stub, no solution text left.

    python -m tinyformer.student book/ --out student/

In a chapter, a solution is the code between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` in a
cell tagged ``exercise-<name>``; the cell usually sits inside a collapsed
``{solution-start}`` … ``{solution-end}`` block, whose prose is the worked answer. The student
notebook keeps the function's signature and docstring, replaces its body with
``raise NotImplementedError("<function> is not implemented yet")``, drops the worked answer and
clears every output. The stub names the function the reader writes (the exercise registry's
``function``), so a check can tell a reader that an exercise calls an unfinished earlier one.

The rest of the rendering (no MyST left: glued values, numbered references, citations, exercise
headings) is the reader notebooks' (:mod:`tinyformer.course.reader`): a student notebook is
byte for byte the committed ``notebooks/exercises/NN-slug.ipynb``, and its metadata names its
chapter and exercises, ``{"tinyformer": {"chapter": "02-attention", "exercises": [...]}}``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

from tinyformer.course.cells import (  # noqa: F401 - re-exported: tinyformer.student's names
    BEGIN,
    END,
    EXERCISE_TAG,
    exercise_name,
    has_exercises,
    solution_lines,
    stub_function,
    stub_source,
)
from tinyformer.course.reader import Book, dumps, find_root, reader_notebook


def make_student(nb, chapter: str | None = None, book=None):
    """Return the exercise notebook of ``nb`` (an nbformat node, not modified).

    The same conversion as the reader notebooks (:mod:`tinyformer.course.reader`), with each
    solution stubbed, the worked answers dropped and every output cleared, so ``make student``
    writes exactly what ``notebooks/exercises/`` holds. ``chapter`` (``"02-attention"``) is
    recorded in the notebook's metadata for the grader; ``book`` is the reader context, by
    default the book around the current directory.
    """
    out = reader_notebook(nb, chapter or "notebook", book, exercises=True)
    out.metadata["tinyformer"]["chapter"] = chapter
    return out


def write_student_notebooks(sources: list[Path], out_dir: Path) -> list[Path]:
    """Write the exercise notebook of each chapter in ``sources`` that has exercises, byte for
    byte what ``notebooks/exercises/`` holds for it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    books: dict = {}
    written = []
    for path in sources:
        nb = nbformat.read(path, as_version=4)
        if not has_exercises(nb):
            continue
        root = find_root(Path(path).parent) or find_root(Path.cwd())  # a copy outside the book: the one here
        if root not in books:
            books[root] = Book.load(root)
        target = out_dir / Path(path).name
        target.write_text(dumps(make_student(nb, Path(path).stem, books[root])), encoding="utf-8")
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
