"""`make grade`: a folder of notebooks, some broken on purpose, gives the right table."""

from __future__ import annotations

import json

import nbformat
import pytest
from test_checks_ch02 import CHAPTER, SOLUTIONS

from tinyformer import checks, grade

EXERCISES = CHAPTER                  # the chapter's six exercises (drills are not expected in a notebook)
NOTEBOOK_TIMEOUT = 25  # generous: a loaded CI machine starts kernels slowly


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
    rows = grade.grade_folder(folder, out, timeout=NOTEBOOK_TIMEOUT, exercise_timeout=3, seed=123, progress=False)
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
    assert _row(rows, "c_loops", "attention_by_hand").run.startswith("timeout")
    assert _row(rows, "c_loops", "block_flops").status == "timeout"
    assert _row(rows, "c_loops", "multi_head_attention").status == checks.PASS


def test_crash_is_reported_and_other_exercises_still_count(graded):
    rows, _ = graded
    assert _row(rows, "d_crashes", "attention_by_hand").run in ("kernel died", "error in code cell 6: RuntimeError")
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
    """The real student notebooks run top to bottom, and every stub is reported, not crashed on."""
    from tinyformer.student import write_student_notebooks

    from conftest import chapter_notebooks

    written = write_student_notebooks(chapter_notebooks(), tmp_path / "student")
    assert written
    rows = grade.grade_folder(tmp_path / "student", tmp_path / "grades", timeout=170, seed=0, progress=False)
    for row in rows:
        assert row.run == "ok", row
        assert row.status == checks.NOT_IMPLEMENTED, row
