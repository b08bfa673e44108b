"""`make student`: stubs in, solutions out."""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest

from tinyformer import student
from tinyformer.student import BEGIN, make_student, solution_lines

from conftest import chapter_notebooks


def _solution_block_prose(nb) -> list[str]:
    """Markdown lines that sit inside solution-start … solution-end blocks."""
    lines, inside = [], False
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            if "{solution-start}" in line:
                inside = True
            elif "{solution-end}" in line:
                inside = False
            elif inside and line.strip() and not line.strip().startswith(":"):
                lines.append(line.strip())
    return lines


NOTEBOOKS = [p for p in chapter_notebooks() if student.has_exercises(nbformat.read(p, as_version=4))]


def test_some_chapter_has_exercises():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_solution_line_survives(path):
    nb = nbformat.read(path, as_version=4)
    secret = [line.strip() for c in nb.cells if c.cell_type == "code" and BEGIN in c.source
              for line in solution_lines(c.source) if line.strip()]
    secret += _solution_block_prose(nb)
    assert secret, "found no solution text to test"
    out = make_student(nb)
    everything = "\n".join(c.source for c in out.cells)
    leaked = [line for line in secret if line in everything]
    assert not leaked, f"solution lines left in the student notebook: {leaked[:5]}"
    assert "{solution-start}" not in everything and "{solution-end}" not in everything
    assert everything.count("raise NotImplementedError") >= sum(
        BEGIN in c.source for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_student_notebook_is_clean(path):
    out = make_student(nbformat.read(path, as_version=4))
    nbformat.validate(out)
    code = [c for c in out.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert all("{exercise}" not in c.source for c in out.cells if c.cell_type == "markdown")
    assert any(c.source.startswith("### Exercise") or "\n### Exercise" in c.source
               for c in out.cells if c.cell_type == "markdown")


def _nb(*cells):
    return nbformat.v4.new_notebook(cells=list(cells))


def _code(src, tag=None):
    return nbformat.v4.new_code_cell(src, metadata={"tags": [tag]} if tag else {})


def test_stub_keeps_signature_and_indentation():
    src = "def f(x):\n    '''Doc.'''\n    # BEGIN SOLUTION\n    return x + 1\n    # END SOLUTION\n"
    out = make_student(_nb(_code(src, "exercise-f"))).cells[0].source
    assert out.startswith("def f(x):\n    '''Doc.'''\n")
    assert "    raise NotImplementedError" in out and "x + 1" not in out
    namespace: dict = {}
    exec(out, namespace)  # noqa: S102
    with pytest.raises(NotImplementedError):
        namespace["f"](1)


def test_markdown_after_solution_end_is_kept():
    md = nbformat.v4.new_markdown_cell
    nb = _nb(md("Intro.\n\n::::{solution-start} ex-a\n:class: dropdown\n::::\n\nThe secret reason."),
             _code("def f():\n    # BEGIN SOLUTION\n    return 42\n    # END SOLUTION", "exercise-f"),
             md("::::{solution-end}\n::::\n\nAfter the solution."))
    text = "\n".join(c.source for c in make_student(nb).cells)
    assert "Intro." in text and "After the solution." in text
    assert "secret" not in text and "return 42" not in text


@pytest.mark.parametrize(("cells", "message"), [
    ([_code("def f():\n    # BEGIN SOLUTION\n    return 1\n")], "no exercise-<name> tag"),
    ([_code("def f():\n    # BEGIN SOLUTION\n    return 1\n", "exercise-f")], "never closed"),
    ([_code("def f():\n    # END SOLUTION\n", "exercise-f")], "without"),
    ([nbformat.v4.new_markdown_cell("::::{solution-start} x\n::::"), _code("answer = 42")],
     "would reach students"),
])
def test_malformed_solutions_are_refused(cells, message):
    with pytest.raises(ValueError, match=message):
        make_student(_nb(*cells))


def test_exercise_directive_becomes_heading():
    md = "Text.\n\n:::{exercise} 2.9 · Title\n:label: ex-x\n:nonumber:\n\nDo it.\n:::\n\nMore."
    out = make_student(_nb(nbformat.v4.new_markdown_cell(md))).cells[0].source
    assert out == "Text.\n\n### Exercise 2.9 · Title\n\nDo it.\n\nMore."
    # without :nonumber: sphinx-exercise numbers the exercise on the page, and so does the heading
    md = ":::{exercise} Title\n:label: ex-y\n\nDo it.\n:::"
    out = make_student(_nb(nbformat.v4.new_markdown_cell(md))).cells[0].source
    assert out == "### Exercise 1 · Title\n\nDo it."


def test_student_notebook_names_its_chapter_and_exercises():
    nb = _nb(_code("def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION", "exercise-f"),
             _code("def g():\n    # BEGIN SOLUTION\n    return 2\n    # END SOLUTION", "exercise-g"))
    assert make_student(nb, "05-demo").metadata["tinyformer"] == {"chapter": "05-demo", "exercises": ["f", "g"]}


def test_stub_names_the_function_the_reader_writes():
    """A registered exercise's stub names its registry function (so a check can say which
    unfinished exercise another one calls); an unregistered one names its enclosing def."""
    src = "def all_heads_at_once(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n"
    out = make_student(_nb(_code(src, "exercise-multi_head_attention"))).cells[0].source
    assert 'raise NotImplementedError("all_heads_at_once is not implemented yet")' in out
    src = "import math\n\n\ndef helper_name(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n"
    out = make_student(_nb(_code(src, "exercise-not_registered"))).cells[0].source
    assert 'raise NotImplementedError("helper_name is not implemented yet")' in out
    assert student.stub_function("no_def_here", "x = 1\n# BEGIN SOLUTION\n# END SOLUTION") == "no_def_here"


def test_old_paths_are_the_course_tools():
    from tinyformer import grade
    from tinyformer.course import grade as course_grade
    from tinyformer.course import student as course_student

    assert student.make_student is course_student.make_student and student.main is course_student.main
    assert grade.grade_folder is course_grade.grade_folder and grade.main is course_grade.main


def test_commands_run_from_the_old_paths():
    for module in ("tinyformer.student", "tinyformer.grade"):
        done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.startswith("usage:"), done.stderr


def test_cli_writes_only_notebooks_with_exercises(tmp_path):
    for p in chapter_notebooks():
        (tmp_path / p.name).write_bytes(p.read_bytes())
    out = tmp_path / "student"
    assert student.main([str(tmp_path), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.glob("*.ipynb")) == sorted(p.name for p in NOTEBOOKS)


def test_cli_rejects_missing_source(tmp_path):
    with pytest.raises(SystemExit):
        student.main([str(tmp_path / "nope.ipynb")])
