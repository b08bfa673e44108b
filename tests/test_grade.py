"""`make grade`: a folder of notebooks, some broken on purpose, gives the right table."""

from __future__ import annotations

import json

import nbformat
import pytest

from tinyformer import checks, grade

EXERCISES = ["stable_softmax", "causal_mask", "attention_head", "multi_head_attention"]
NOTEBOOK_TIMEOUT = 25  # generous: a loaded CI machine starts kernels slowly


def _code(src, tag=None):
    return nbformat.v4.new_code_cell(src, metadata={"tags": [tag]} if tag else {})


def _notebook(solutions, replace=None, extra_first=(), extra_last=()):
    """A completed notebook: each exercise's cell (optionally replaced) followed by its check."""
    cells = [_code("from tinyformer import checks")] + [_code(s) for s in extra_first]
    for name in EXERCISES:
        source = (replace or {}).get(name, solutions[name])
        cells.append(_code(source, f"exercise-{name}"))
        cells.append(_code(f"checks.check_{name}({checks.EXERCISES[name].function})"))
    cells += [_code(s) for s in extra_last]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


NO_SCALE_HEAD = '''\
import torch


def attention_head(x, W_Q, W_K, W_V):
    q, k, v = x @ W_Q, x @ W_K, x @ W_V
    s = q @ k.transpose(-2, -1)
    T = x.shape[-2]
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, dim=-1) @ v
'''

DIAGONAL_MASK = "import torch\n\ndef causal_mask(T):\n    return torch.ones(T, T, dtype=torch.bool).tril(-1)\n"

# A cheat: a wrong softmax, and every check in the notebook patched to say ✓.
CHEAT = '''\
import torch
import tinyformer.checks as C


def _always_right(*args, **kwargs):
    print("✓ looks perfect")
    return C.Verdict("x", C.PASS, "✓ looks perfect")


for _name in list(vars(C)):
    if _name.startswith("check") or _name in ("judge", "_all_same", "_same"):
        setattr(C, _name, _always_right)


def stable_softmax(scores):
    return torch.exp(scores) / torch.exp(scores).sum(-1, keepdim=True)
'''

LOOPING_FUNCTION = "def causal_mask(T):\n    while True:\n        pass\n"


@pytest.fixture(scope="module")
def graded(solutions, tmp_path_factory):
    folder = tmp_path_factory.mktemp("submissions")
    keep = folder / "precious.txt"
    keep.write_text("an instructor's file")
    nbs = {
        "a_correct": _notebook(solutions),
        "b_wrong": _notebook(solutions, {"attention_head": NO_SCALE_HEAD, "causal_mask": DIAGONAL_MASK}),
        "c_loops": _notebook(solutions, {"causal_mask": LOOPING_FUNCTION}, extra_first=["while True:\n    pass"]),
        "d_crashes": _notebook(solutions, {"attention_head": "raise RuntimeError('half-finished')"},
                               extra_last=["import os, pathlib\nfor p in pathlib.Path('..').rglob('*'):\n"
                                           "    p.unlink() if p.is_file() else None\nos._exit(3)"]),
        "e_cheats": _notebook(solutions, {"stable_softmax": CHEAT}),
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
    assert "| a_correct.ipynb | 4 / 4 |" in table


def test_correct_notebook_passes_everything(graded):
    rows, _ = graded
    for name in EXERCISES:
        row = _row(rows, "a_correct", name)
        assert row.run == "ok" and row.status == checks.PASS, row


def test_wrong_answers_fail_with_their_hints(graded):
    rows, _ = graded
    assert "√d_k" in _row(rows, "b_wrong", "attention_head").message
    assert "diagonal" in _row(rows, "b_wrong", "causal_mask").message
    assert _row(rows, "b_wrong", "stable_softmax").status == checks.PASS
    assert _row(rows, "b_wrong", "stable_softmax").run == "ok"


def test_endless_loop_times_out_and_the_rest_is_graded(graded):
    rows, _ = graded
    assert _row(rows, "c_loops", "stable_softmax").run.startswith("timeout")
    assert _row(rows, "c_loops", "causal_mask").status == "timeout"
    assert _row(rows, "c_loops", "attention_head").status == checks.PASS


def test_crash_is_reported_and_other_exercises_still_count(graded):
    rows, _ = graded
    assert _row(rows, "d_crashes", "stable_softmax").run in ("kernel died", "error in code cell 6: RuntimeError")
    head = _row(rows, "d_crashes", "attention_head")
    assert head.status == checks.ERROR and "attention_head" in head.message
    assert _row(rows, "d_crashes", "multi_head_attention").status == checks.PASS


def test_patching_the_checks_earns_nothing(graded):
    rows, _ = graded
    row = _row(rows, "e_cheats", "stable_softmax")
    assert row.status == checks.FAIL and "maximum" in row.message


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
