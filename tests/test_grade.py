"""`make grade`: a folder of notebooks, some broken on purpose, gives the right table."""

from __future__ import annotations

import json

import nbformat
import pytest
from test_checks_ch02 import CHAPTER, SOLUTIONS

from tinyformer import checks, grade
from tinyformer.course import grade as course_grade

from conftest import scaled

EXERCISES = CHAPTER                  # the chapter's six exercises (drills are not expected in a notebook)
# limits on an idle machine, stretched on a busy one (conftest.scaled): they guard against a hang
NOTEBOOK_TIMEOUT = scaled(90)  # all of a notebook's cells together
CELL_TIMEOUT = scaled(15)      # one cell (an endless loop costs this once); the first cell imports torch
EXERCISE_TIMEOUT = scaled(3)   # one exercise's function on its test inputs


def _code(src, tag=None):
    return nbformat.v4.new_code_cell(src, metadata={"tags": [tag]} if tag else {})


def _notebook(replace=None, extra_first=(), extra_last=()):
    """A completed notebook: each exercise's cell (a test solution, or its replacement) and its check."""
    cells = [_code("from tinyformer import checks")] + [_code(s) for s in extra_first]
    for name in EXERCISES:
        source = (replace or {}).get(name, SOLUTIONS[name])
        cells.append(_code(source, f"exercise-{name}"))
        cells.append(_code(f"checks.check_{name}({checks.EXERCISES[name].function})"))
    cells += [_code(s) for s in extra_last]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


NO_W_O = '''\
import math

import torch


def all_heads_at_once(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, C = x.shape
    q, k, v = ((x @ W).reshape(B, T, n_heads, C // n_heads).transpose(1, 2) for W in (W_Q, W_K, W_V))
    s = q @ k.transpose(-2, -1) / math.sqrt(C // n_heads)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
'''

RIGHT_PADDING = '''\
import torch


def left_padded_causal_mask(lengths, T):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return torch.stack([(j <= i) & (j < n) for n in lengths.tolist()])
'''

# Right answer, but the caller's heads are wiped afterwards.
CLOBBERS_INPUT = '''\
def sum_over_heads(heads, W_O):
    d_head = heads.shape[-1]
    out = sum(heads[:, h] @ W_O[h * d_head:(h + 1) * d_head] for h in range(heads.shape[1]))
    heads.zero_()
    return out
'''

# A cheat: a wrong FLOP count, and every check in the notebook patched to say ✓.
CHEAT = '''\
import tinyformer.checks as C
import tinyformer.course.engine as E


def _always_right(*args, **kwargs):
    print("✓ looks perfect")
    return C.Verdict("x", C.PASS, "✓ looks perfect")


for _module in (C, E):
    for _name in list(vars(_module)):
        if _name.startswith("check") or _name in ("judge", "run_cases", "_judge", "_close", "_agrees"):
            setattr(_module, _name, _always_right)


def block_flops(T, d_model, d_ff):
    return 4 * T * d_model ** 2, 2 * T * T * d_model, 2 * T * d_model * d_ff
'''

LOOPING_FUNCTION = "def block_flops(T, d_model, d_ff):\n    while True:\n        pass\n"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("submissions")
    keep = folder / "precious.txt"
    keep.write_text("an instructor's file")
    nbs = {
        "a_correct": _notebook(),
        "b_wrong": _notebook({"multi_head_attention": NO_W_O, "left_padded_causal_mask": RIGHT_PADDING,
                              "sum_over_heads": CLOBBERS_INPUT}),
        "c_loops": _notebook({"block_flops": LOOPING_FUNCTION}, extra_first=["while True:\n    pass"]),
        "d_crashes": _notebook({"sum_over_heads": "raise RuntimeError('half-finished')"},
                               extra_last=["import os, pathlib\nfor p in pathlib.Path('..').rglob('*'):\n"
                                           "    p.unlink() if p.is_file() else None\nos._exit(3)"]),
        "e_cheats": _notebook({"block_flops": CHEAT}),
    }
    for name, nb in nbs.items():
        nbformat.write(nb, folder / f"{name}.ipynb")
    out = tmp_path_factory.mktemp("grades")
    rows = grade.grade_folder(folder, out, timeout=NOTEBOOK_TIMEOUT, exercise_timeout=EXERCISE_TIMEOUT, seed=123,
                              progress=False, cell_timeout=CELL_TIMEOUT)
    assert keep.read_text() == "an instructor's file"
    return rows, out


def _row(rows, notebook, exercise):
    (row,) = [r for r in rows if r.notebook == f"{notebook}.ipynb" and r.exercise == exercise]
    return row


def test_one_row_per_notebook_and_exercise(graded):
    rows, out = graded
    assert len(rows) == 5 * len(EXERCISES)
    data = json.loads((out / "grades.json").read_text())
    assert len(data["rows"]) == len(rows) and data["seed"] == 123
    table = (out / "grades.md").read_text().splitlines()
    assert table[0].startswith("| notebook | run | exercise | result |")
    assert sum(line.startswith("| a_correct.ipynb | ok |") for line in table) == len(EXERCISES)
    assert f"| a_correct.ipynb | {len(EXERCISES)} / {len(EXERCISES)} |" in table


def test_correct_notebook_passes_everything(graded):
    rows, _ = graded
    for name in EXERCISES:
        row = _row(rows, "a_correct", name)
        assert row.run == "ok" and row.status == checks.PASS, row


def test_wrong_answers_fail_with_their_hints(graded):
    rows, _ = graded
    assert "W_O" in _row(rows, "b_wrong", "multi_head_attention").message
    assert "RIGHT padding" in _row(rows, "b_wrong", "left_padded_causal_mask").message
    clobbered = _row(rows, "b_wrong", "sum_over_heads")
    assert clobbered.status == checks.FAIL and "changed its input `heads` in place (its output is right)" in \
        clobbered.message
    assert _row(rows, "b_wrong", "block_flops").status == checks.PASS
    assert _row(rows, "b_wrong", "block_flops").run == "ok"


def test_endless_loop_times_out_and_the_rest_is_graded(graded):
    rows, _ = graded
    assert _row(rows, "c_loops", "attention_by_hand").run.startswith("timeout in code cell 2 ")
    assert _row(rows, "c_loops", "block_flops").status == "timeout"
    assert _row(rows, "c_loops", "multi_head_attention").status == checks.PASS


def test_crash_is_reported_and_other_exercises_still_count(graded):
    rows, _ = graded
    run = _row(rows, "d_crashes", "attention_by_hand").run
    assert run.startswith("error in code cell 6: RuntimeError;") and "kernel died in code cell 14" in run
    crashed = _row(rows, "d_crashes", "sum_over_heads")
    assert crashed.status == checks.ERROR and "sum_over_heads" in crashed.message
    assert _row(rows, "d_crashes", "multi_head_attention").status == checks.PASS


def test_patching_the_checks_earns_nothing(graded):
    rows, _ = graded
    row = _row(rows, "e_cheats", "block_flops")
    assert row.status == checks.FAIL and "multiply-add" in row.message


def test_drills_are_not_expected_but_graded_when_tagged(tmp_path):
    from tinyformer.course.grade import _expected_exercises

    assert _expected_exercises(tmp_path / "02-attention.ipynb", []) == EXERCISES
    nb = _notebook()
    nb.cells.append(_code(SOLUTIONS["stable_softmax"], "exercise-stable_softmax"))
    nbformat.write(nb, tmp_path / "02-attention.ipynb")
    graded = grade.grade_exercises(tmp_path / "02-attention.ipynb", tmp_path, 0, 10)
    assert [n for n, *_ in graded] == EXERCISES + ["stable_softmax"]
    assert all(status == checks.PASS for _, status, _ in graded), graded


def test_bad_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no .ipynb"):
        grade.grade_folder(tmp_path, tmp_path / "out")
    with pytest.raises(ValueError, match="not a directory"):
        grade.grade_folder(tmp_path / "missing", tmp_path / "out")


def test_student_notebooks_run_and_grade_as_not_implemented(tmp_path):
    """The real student notebooks, cut to what differs from their chapters (the stubs, the checks
    and what they need: tinyformer.course.slicing; the rest is the chapter's code, which nbval
    executes), run top to bottom in the grader, and every stub is reported, not crashed on. The
    limits guard against a hang only: each notebook takes about 5 s on an idle machine."""
    from tinyformer.course.slicing import exercise_slice
    from tinyformer.student import write_student_notebooks

    from conftest import chapter_notebooks

    written = write_student_notebooks(chapter_notebooks(), tmp_path / "student")
    assert written
    for path in written:
        nbformat.write(exercise_slice(nbformat.read(path, as_version=4)), path)
    rows = grade.grade_folder(tmp_path / "student", tmp_path / "grades", timeout=1800, cell_timeout=900, seed=0,
                              progress=False)
    assert {row.notebook for row in rows} == {p.name for p in written}
    for row in rows:
        assert row.run == "ok", row
        assert row.status == checks.NOT_IMPLEMENTED, row


# --------------------------------------------------------------------------- identity and reports


def _raw_notebook(cells, tinyformer=None):
    """A notebook as plain JSON (so that malformed tags survive: nbformat would validate them away)."""
    meta = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    if tinyformer is not None:
        meta["tinyformer"] = tinyformer
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": meta,
            "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {"tags": tags} if tags is not None else {},
                       "source": src, "outputs": [], "execution_count": None}
                      for i, (src, tags) in enumerate(cells)]}


def test_identity_comes_from_metadata_and_falls_back_to_the_file_name(tmp_path):
    meta = {"chapter": "02-attention", "exercises": EXERCISES[:2]}
    chapter, expected, how = course_grade.identify(_raw_notebook([], meta), tmp_path / "whatever.ipynb")
    # an edited exercise list cannot hide one of the chapter's exercises
    assert (chapter, how) == ("02-attention", "metadata") and expected == EXERCISES
    chapter, expected, how = course_grade.identify(_raw_notebook([]), tmp_path / "Copy of bob-02-attention.ipynb")
    assert chapter == "02-attention" and expected == EXERCISES and "file name" in how
    chapter, expected, how = course_grade.identify(_raw_notebook([]), tmp_path / "homework.ipynb")
    assert (chapter, expected) == ("", []) and "no tinyformer metadata" in how


def test_markdown_cells_are_escaped_and_cut():
    cell = course_grade.md_cell("a|b\r\nc\n<img src=x onerror=alert(1)> ![](http://x/y.png) " + "z" * 1000)
    assert "|" not in cell and "\n" not in cell and "\r" not in cell and "<img" not in cell
    assert "![" not in cell and len(cell) < 400


def test_renamed_copied_and_malformed_submissions(tmp_path):
    """A renamed notebook grades by its metadata: a deleted exercise is missing, a copied cell counts
    once (the last one wins), an unknown tag is ignored and reported, non-string tags do not crash;
    files that are no notebook each get a row."""
    import csv
    import os

    fn = {n: checks.EXERCISES[n].function for n in EXERCISES}
    cells = [("import torch", [3, None]),
             (f"def {fn['attention_by_hand']}(*args, **kwargs):\n    return None", ["exercise-attention_by_hand"]),
             ("raise RuntimeError('half-finished')", ["exercise-sum_over_heads", 7])]
    cells += [(SOLUTIONS[n], ["exercise-" + n]) for n in EXERCISES if n not in ("block_flops", "sum_over_heads")]
    cells += [("x = 1", ["exercise-bonus_round"]), ("y = 2", "exercise-not-a-list")]
    meta = {"chapter": "02-attention", "exercises": EXERCISES}
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "Copy of bob|renamed.ipynb").write_text(json.dumps(_raw_notebook(cells, meta)))
    (folder / "notjson.ipynb").write_text("{ nope")
    (folder / "adir.ipynb").mkdir()
    (folder / "dangling.ipynb").symlink_to(tmp_path / "nowhere.ipynb")
    os.mkfifo(folder / "fifo.ipynb")
    out = tmp_path / "grades"
    rows = grade.grade_folder(folder, out, timeout=NOTEBOOK_TIMEOUT, exercise_timeout=EXERCISE_TIMEOUT, seed=1,
                              progress=False, cell_timeout=CELL_TIMEOUT)

    mine = {r.exercise: r for r in rows if r.notebook == "Copy of bob|renamed.ipynb"}
    assert set(mine) == set(EXERCISES) | {"bonus_round"}
    assert mine["attention_by_hand"].status == checks.PASS            # the later, right copy wins
    assert mine["block_flops"].status == "missing"
    assert mine["bonus_round"].status == course_grade.IGNORED
    assert mine["sum_over_heads"].status == checks.ERROR
    assert mine["sum_over_heads"].error == "code cell 3: RuntimeError: half-finished"
    assert all(r.identified_by == "metadata" and r.chapter == "02-attention" for r in mine.values())
    assert mine["multi_head_attention"].seconds > 0
    why = {r.notebook: r.message for r in rows if r.run == "unreadable"}
    assert set(why) == {"notjson.ipynb", "adir.ipynb", "dangling.ipynb", "fifo.ipynb"}
    assert "FIFO" in why["fifo.ipynb"] and "directory" in why["adir.ipynb"] and "link" in why["dangling.ipynb"]

    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        table = {r["notebook"]: r for r in csv.DictReader(f)}
    assert len(table) == 5
    row = table["Copy of bob|renamed.ipynb"]
    assert (row["total"], row["out_of"]) == (str(len(EXERCISES) - 2), str(len(EXERCISES)))
    assert row["block_flops"] == "missing" and row["ignored_tags"] == "bonus_round" and "bonus_round" not in row
    md = (out / "grades.md").read_text()
    assert f"| Copy of bob&#124;renamed.ipynb | {len(EXERCISES) - 2} / {len(EXERCISES)} |" in md.splitlines()
    assert json.loads((out / "grades.json").read_text())["summary"]["fifo.ipynb"]["exercises"] == 0


def test_exit_status_when_nothing_could_be_graded(tmp_path):
    (tmp_path / "broken.ipynb").write_text("not json")
    assert grade.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 1
    assert (tmp_path / "out" / "grades.csv").read_text().count("broken.ipynb") == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit) as stop:
        grade.main([str(empty), "--out", str(tmp_path / "out2")])
    assert stop.value.code != 0
