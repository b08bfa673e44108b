"""Shared fixtures: the chapter notebooks and their exercise cells."""

from __future__ import annotations

import functools
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import torch

from tinyformer.student import exercise_name

# The generic tests of every chapter's checks live there: rewrite their asserts as pytest does a test file's.
pytest.register_assert_rewrite("exercise_suite")

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


def sphinx_build(root: Path) -> tuple[Path, str]:
    """Build the Sphinx project in `root` (its conf.py) into root/_build/html; the output folder and
    the warnings Sphinx printed."""
    import io

    from sphinx.application import Sphinx
    from sphinx.testing.util import _clean_up_global_state

    warnings = io.StringIO()
    out = root / "_build" / "html"
    app = Sphinx(str(root), str(root), str(out), str(root / "_build" / "doctrees"), "html",
                 status=None, warning=warnings, freshenv=True)
    try:
        app.build()
    finally:
        # Sphinx registers its nodes with docutils once per process: undo that, as Sphinx's own test
        # apps do, so that the next build in this process does not warn that they exist already
        _clean_up_global_state()
    return out, warnings.getvalue()


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


@pytest.fixture
def one_thread():
    """Training a model this small is fastest on one thread, and far faster on a busy machine,
    where two OpenMP threads wait for each other at every tiny kernel."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def slowdown() -> float:
    """How many times longer than its CPU time a fixed piece of work takes now: about 1 on an idle
    machine, about the load divided by the cores on a busy one (measured once per test process,
    by starting Python and importing the library, which is what a graded notebook's first cell
    does). Time limits that only guard against a hang are scaled by it (:func:`scaled`), so that
    a shared CI machine running slowly fails no test, and an idle one waits no longer."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    work = "import torch, tinyformer.course; torch.randn(64, 64) @ torch.randn(64, 64)"
    subprocess.run([sys.executable, "-c", work], check=True, capture_output=True, timeout=3600)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return min(50.0, max(1.0, wall / max(cpu, 0.05)))


def scaled(seconds: float) -> int:
    """A time limit of ``seconds`` on an idle machine, stretched by the machine's :func:`slowdown`."""
    return math.ceil(seconds * slowdown())
