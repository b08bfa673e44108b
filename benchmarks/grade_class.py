"""How long `make grade` takes for a class: N completed exercise notebooks of one chapter.

    python benchmarks/grade_class.py [--chapter 02-attention] [--students 30] [--jobs 2]

Builds a class folder from the chapter's exercise notebook (notebooks/exercises/): each student's
copy has every exercise cell filled with the book's solution, except that every third student
left one exercise as the stub (so the table is not all passes), then grades the folder with
`tinyformer.grade` at `--jobs` notebooks at once and reports the wall time, the time per
notebook, the isolation used and the verdict counts. The README quotes the result for 30
chapter-2 notebooks on the 2-core course machine. Writes benchmarks/results/grade_class.md.
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile
import time
from pathlib import Path

import nbformat

from tinyformer.course import grade
from tinyformer.student import exercise_name, solution_lines

ROOT = Path(__file__).resolve().parents[1]


def solutions(chapter: str) -> dict[str, str]:
    """Each exercise cell of the book's chapter with its solution in place (markers removed)."""
    book = nbformat.read(ROOT / "book" / f"{chapter}.ipynb", as_version=4)
    out = {}
    for cell in book.cells:
        name = exercise_name(cell) if cell.cell_type == "code" else None
        if name and solution_lines(cell.source):
            out[name] = "\n".join(line for line in cell.source.splitlines()
                                  if line.strip() not in ("# BEGIN SOLUTION", "# END SOLUTION"))
    return out


def make_class(chapter: str, students: int, folder: Path) -> None:
    template = nbformat.read(ROOT / "notebooks" / "exercises" / f"{chapter}.ipynb", as_version=4)
    answers = solutions(chapter)
    names = list(answers)
    for s in range(students):
        nb = nbformat.from_dict(template)
        left_out = names[s % len(names)] if s % 3 == 0 else None
        for cell in nb.cells:
            name = exercise_name(cell) if cell.cell_type == "code" else None
            if name in answers and name != left_out:      # the left-out one keeps its stub
                cell.source = answers[name]
        nbformat.write(nb, folder / f"student{s + 1:02d}-{chapter}.ipynb")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chapter", default="02-attention")
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "grade_class.md")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tinyformer-class-") as tmp:
        folder, reports = Path(tmp) / "class", Path(tmp) / "grades"
        folder.mkdir()
        make_class(a.chapter, a.students, folder)
        start = time.monotonic()
        rows = grade.grade_folder(folder, reports, seed=0, jobs=a.jobs)
        wall = time.monotonic() - start
    per_nb = {r.notebook: r.seconds for r in rows}
    verdicts = collections.Counter(r.status for r in rows)
    isolation = rows[0].isolation
    text = "\n".join([
        f"# Grading a class: {a.students} notebooks of {a.chapter}",
        "",
        "| students | jobs | cores | wall time | mean seconds per notebook | isolation | verdicts |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {a.students} | {a.jobs} | {os.cpu_count()} | {wall / 60:.1f} min ({wall:.0f} s) | "
        f"{sum(per_nb.values()) / len(per_nb):.1f} | {isolation} | "
        + ", ".join(f"{k}: {v}" for k, v in sorted(verdicts.items())) + " |",
        "",
    ])
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
