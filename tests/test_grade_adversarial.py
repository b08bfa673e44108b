"""`make grade` on a class folder of honest, mistaken, renamed and hostile submissions: the expected
table, every file with a row, nothing outside the grader's output changed, nothing left running."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import time
import uuid
from pathlib import Path

import nbformat
import pytest
from test_checks_ch02 import CHAPTER, SOLUTIONS
from test_grade import NO_W_O, RIGHT_PADDING

from tinyformer import checks
from tinyformer.course import grade
from tinyformer.student import make_student

from conftest import scaled

CELL_TIMEOUT = scaled(30)  # one cell; the first imports torch (conftest.scaled: longer on a busy machine)
MARKER = f"tinyformer-test-daemon-{uuid.uuid4().hex}"   # in the command line of every process a notebook leaves
FIRST = "import math\n\nimport torch\nimport torch.nn.functional as F\n\nfrom tinyformer import checks\n"
META = {"chapter": "02-attention", "exercises": CHAPTER}
P, X, NI, E, T, M, FL, IG = (checks.PASS, checks.FAIL, checks.NOT_IMPLEMENTED, checks.ERROR, grade.TIMEOUT,
                             grade.MISSING, grade.FLAGGED, grade.IGNORED)


def _code(src, tags=None):
    return nbformat.v4.new_code_cell(src, metadata={"tags": tags} if tags is not None else {})


def _nb(*cells, meta=META):
    nb = nbformat.v4.new_notebook(cells=[_code(FIRST), *cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if meta is not None:
        nb.metadata["tinyformer"] = meta
    return nb


def _ex(name, source=None):
    return _code(SOLUTIONS[name] if source is None else source, [f"exercise-{name}"])


def _solutions(**replace):
    return [_ex(n, replace.get(n)) for n in CHAPTER if replace.get(n, "") is not None]


# --------------------------------------------------------------------------- the submissions

HELPERS = '''\
def split(t, n_heads):
    B, T, d_model = t.shape
    return t.reshape(B, T, n_heads, d_model // n_heads).transpose(1, 2)


def merge(t):
    B, H, T, d_head = t.shape
    return t.transpose(1, 2).reshape(B, T, H * d_head)
'''

# F, math and torch from the first cell, split and merge from a helper cell: no import here
MHA_WITH_HELPERS = '''\
def all_heads_at_once(x, W_Q, W_K, W_V, W_O, n_heads):
    T, d_head = x.shape[1], x.shape[2] // n_heads
    q, k, v = (split(x @ W, n_heads) for W in (W_Q, W_K, W_V))
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    hidden = torch.ones(T, T, dtype=torch.bool).triu(1)
    weights = F.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
    return merge(weights @ v) @ W_O
'''

BY_HAND_WITH_D_K = '''\
def attention_by_hand():
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    W_Q = torch.tensor([[0.0, 0, 0, 0], [1, 1, 0, 0]])
    W_K = torch.tensor([[1.0, 1, 0, 0], [0, 0, 1, 1]])
    W_V = torch.tensor([[1.0, 0], [0, 2]])
    scores = (X @ W_Q) @ (X @ W_K).T / math.sqrt(d_k)
    scores = scores.masked_fill(torch.ones(3, 3, dtype=torch.bool).triu(1), float("-inf"))
    weights = scores.softmax(-1)
    return weights, weights @ (X @ W_V)
'''

STUB_FLOPS = 'def block_flops(T, d_model, d_ff):\n    raise NotImplementedError("block_flops is not implemented yet")\n'
FLOPS_BELOW = ("def block_flops(T, d_model, d_ff):\n"
               "    return 8 * T * d_model**2, 4 * T**2 * d_model, 4 * T * d_model * d_ff\n")

PREV_SELF = '''\
def previous_token_head(n_pos):
    return 60.0 * torch.eye(n_pos, dtype=torch.float64), torch.eye(n_pos, dtype=torch.float64)
'''
RAISES_PIPES = 'def sum_over_heads(heads, W_O):\n    raise ValueError("bad | shape\\r\\n<b>bold</b> | ![x](http://x/y.png)")\n'
RAISES_HUGE = 'def block_flops(T, d_model, d_ff):\n    raise RuntimeError("x" * 3_000_000)\n'

KILL_GRADER = "import os\nimport signal\n\nos.kill(os.getppid(), signal.SIGKILL)\n"

GARBAGE_AT_EXIT = '''\
import atexit
import glob
import threading
import time


def _garbage():
    for p in glob.glob("/tmp/**", recursive=True) + glob.glob("../**", recursive=True):
        try:
            with open(p, "wb") as f:
                f.write(b"garbage")
        except OSError:
            pass


atexit.register(_garbage)
threading.Thread(target=time.sleep, args=(10**6,)).start()      # a stray thread that never ends
'''


def _vandal(folder: Path, out: Path) -> str:
    """Overwrites every submission and report it can reach, then leaves two double-forked processes
    (one in a new session with the run's environment, one with an empty environment) that keep
    rewriting them for two minutes."""
    targets = f"[os.path.join({str(out)!r}, n) for n in os.listdir({str(out)!r})] + glob.glob({str(folder)!r} + '/*')"
    return f'''\
import glob
import os
import sys

DAEMON = """
import glob, os, time
end = time.time() + 120
while time.time() < end:
    for p in {targets} if os.path.isdir({str(out)!r}) else []:
        if os.path.isfile(p):
            try:
                with open(p, "w") as f:
                    f.write("4/4")
            except OSError:
                pass
    time.sleep(0.05)
"""
for p in {targets} if os.path.isdir({str(out)!r}) else glob.glob({str(folder)!r} + '/*'):
    if os.path.isfile(p):
        try:
            with open(p, "w") as f:
                f.write("stubs")
        except OSError:
            pass
for env in (dict(os.environ), {{}}):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve(sys.executable, [sys.executable, "-c", DAEMON, {MARKER!r}], env)
        os._exit(0)
    os.wait()
'''


PATCH_RUN_CASES = '''\
import tinyformer.checks as C
import tinyformer.course.engine as E


def forged(fn, cases, **kwargs):
    ex = next(e for e in E.EXERCISES.values() if e.function == fn.__name__)
    return E.Outcome(outputs=[E.portable(ex.reference(*E._clone(c))) for c in cases])


E.run_cases = E._run_cases = C.run_cases = forged
E.portable = lambda obj, depth=0: obj


def block_flops(T, d_model, d_ff):
    return 4 * T * d_model**2, 2 * T * T * d_model, 2 * T * d_model * d_ff
'''

# the results the kernel hands back are garbage: each exercise says so, nothing crashes
FORGE_SAVE = '''\
import torch


def _garbage(obj, f, *args, **kwargs):
    with open(f, "wb") as out:
        out.write(b"garbage")


torch.save = _garbage
'''

LIBRARY_MHA = "from tinyformer.attention import multi_head_attention as all_heads_at_once\n"
LIBRARY_SUM = '''\
from tinyformer.attention import merge_heads as glue


def sum_over_heads(heads, W_O):
    return glue(heads) @ W_O
'''
LIBRARY_FLOPS = "from tinyformer.course.ch02 import block_flops_reference as block_flops\n"
# the library's causal mask is a fine helper here: only the exercise's own answer is flagged
PADDING_WITH_CAUSAL_MASK = '''\
from tinyformer.attention import causal_mask


def left_padded_causal_mask(lengths, T):
    keys = torch.arange(T)[None, None, :]
    return causal_mask(T)[None] & (keys >= (T - lengths)[:, None, None])
'''


def _raw(cells, meta):
    return {"nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                         "tinyformer": meta},
            "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {"tags": tags} if tags is not None else {},
                       "source": src, "outputs": [], "execution_count": None} for i, (src, tags) in enumerate(cells)]}


def _submissions(folder: Path, out: Path) -> None:
    stubs = make_student(nbformat.v4.new_notebook(cells=_solutions())).cells
    notebooks = {
        "honest": _nb(*_solutions(), *[_code(f"checks.check_{n}({checks.EXERCISES[n].function})") for n in CHAPTER]),
        "variants": _nb(_code("d_k = 4"), _code(HELPERS), *_solutions(
            attention_by_hand=BY_HAND_WITH_D_K, multi_head_attention=MHA_WITH_HELPERS, block_flops=STUB_FLOPS),
            _code(FLOPS_BELOW)),
        "stubs": _nb(*stubs),
        "wrong|answers\r": _nb(*_solutions(multi_head_attention=NO_W_O, left_padded_causal_mask=RIGHT_PADDING,
                                           previous_token_head=PREV_SELF, sum_over_heads=RAISES_PIPES,
                                           block_flops=RAISES_HUGE), _code('raise RuntimeError("y" * 3_000_000)')),
        "kills_the_grader": _nb(*_solutions(block_flops=KILL_GRADER)),
        "mischief": _nb(_code(GARBAGE_AT_EXIT), *_solutions(), _code("while True:\n    pass")),
        "vandal": _nb(*_solutions(), _code(_vandal(folder, out))),
        "library": _nb(*_solutions(multi_head_attention=LIBRARY_MHA, sum_over_heads=LIBRARY_SUM,
                                   block_flops=LIBRARY_FLOPS, left_padded_causal_mask=PADDING_WITH_CAUSAL_MASK)),
        "forger": _nb(*_solutions(), _code(FORGE_SAVE)),
        "patches": _nb(*_solutions(multi_head_attention=NO_W_O, block_flops=PATCH_RUN_CASES)),
        "memory": _nb(_code("big = torch.empty(10 * 2**30, dtype=torch.uint8)"), _code("b = bytearray(10 * 2**30)"),
                      *_solutions()),
    }
    for name, nb in notebooks.items():
        nbformat.write(nb, folder / f"{name}.ipynb")
    # renamed by Colab, its block_flops cell deleted, a cell copied, an unknown tag, tags that are not strings
    stub = STUB_FLOPS.replace("block_flops", "attention_by_hand")
    cells = [(FIRST, [3, None]), (stub, ["exercise-attention_by_hand"])]
    cells += [(SOLUTIONS[n], ["exercise-" + n]) for n in CHAPTER if n != "block_flops"]
    cells += [(SOLUTIONS["left_padded_causal_mask"], ["exercise-left_padded_causal_mask", 7]),
              ("bonus = 1", ["exercise-bonus_round"]), ("y = 2", "exercise-not-a-list")]
    (folder / "Copy of bob-02-attention.ipynb").write_text(json.dumps(_raw(cells, META)))
    (folder / "notjson.ipynb").write_text("{ nope")
    (folder / "adir.ipynb").mkdir()
    (folder / "dangling.ipynb").symlink_to(folder / "nowhere.ipynb")
    os.mkfifo(folder / "fifo.ipynb")


EXPECTED = {
    "honest.ipynb": dict.fromkeys(CHAPTER, P),
    "variants.ipynb": dict.fromkeys(CHAPTER, P),
    "stubs.ipynb": dict.fromkeys(CHAPTER, NI),
    "wrong|answers\r.ipynb": {"attention_by_hand": P, "previous_token_head": X, "sum_over_heads": E,
                              "left_padded_causal_mask": X, "block_flops": E, "multi_head_attention": X},
    "kills_the_grader.ipynb": dict.fromkeys(CHAPTER, E),
    "mischief.ipynb": dict.fromkeys(CHAPTER, P),
    "vandal.ipynb": dict.fromkeys(CHAPTER, P),
    "library.ipynb": {**dict.fromkeys(CHAPTER, P), "multi_head_attention": FL, "sum_over_heads": FL,
                      "block_flops": FL},
    "forger.ipynb": dict.fromkeys(CHAPTER, E),
    "patches.ipynb": {**dict.fromkeys(CHAPTER, P), "multi_head_attention": X, "block_flops": X},
    "memory.ipynb": dict.fromkeys(CHAPTER, P),
    "Copy of bob-02-attention.ipynb": {**dict.fromkeys(CHAPTER, P), "block_flops": M, "bonus_round": IG},
    "notjson.ipynb": {"-": E}, "adir.ipynb": {"-": E}, "dangling.ipynb": {"-": E}, "fifo.ipynb": {"-": E},
}


def _digest(folder: Path) -> dict[str, str]:
    out = {}
    for p in sorted(folder.iterdir()):
        if p.is_file() and not p.is_symlink() and p.suffix != "" and not p.name.startswith("fifo"):
            out[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _left_running() -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if MARKER.encode() in f.read():
                        pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder, out = tmp_path_factory.mktemp("class"), tmp_path_factory.mktemp("grades")
    _submissions(folder, out)
    (folder / "data.txt").write_text("an instructor's file")
    (out / "canary.txt").write_text("the instructor's notes")
    before = _digest(folder)
    start = time.monotonic()
    rows = grade.grade_folder(folder, out, timeout=scaled(120), exercise_timeout=scaled(5), seed=7, progress=False,
                              cell_timeout=CELL_TIMEOUT, jobs=2)
    wall = time.monotonic() - start
    reports = {n: (out / n).read_bytes() for n in ("grades.json", "grades.md", "grades.csv")}
    time.sleep(1.0)                                     # a daemon left behind would rewrite them now
    return {"rows": rows, "folder": folder, "out": out, "before": before, "reports": reports, "wall": wall}


def _table(rows):
    table: dict[str, dict[str, str]] = {}
    for r in rows:
        table.setdefault(r.notebook, {})[r.exercise] = r.status
    return table


def _row(rows, notebook, exercise):
    (row,) = [r for r in rows if r.notebook == notebook and r.exercise == exercise]
    return row


def test_the_expected_table(graded):
    assert _table(graded["rows"]) == EXPECTED


def test_nothing_is_left_running_and_nothing_outside_the_reports_changed(graded):
    assert _left_running() == []
    out = graded["out"]
    for name, data in graded["reports"].items():
        assert (out / name).read_bytes() == data, f"{name} changed after grading"
    assert json.loads(graded["reports"]["grades.json"])["rows"]
    isolation = _row(graded["rows"], "vandal.ipynb", "block_flops").isolation
    if isolation != "bubblewrap":
        pytest.skip(f"without bubblewrap a notebook can write the instructor's files ({isolation})")
    assert _digest(graded["folder"]) == graded["before"]
    assert (out / "canary.txt").read_text() == "the instructor's notes"
    assert sorted(p.name for p in out.iterdir()) == ["canary.txt", "grades.csv", "grades.json", "grades.md"]


def test_the_run_column_says_what_happened(graded):
    rows = graded["rows"]
    run = {r.notebook: r.run for r in rows}
    assert run["honest.ipynb"] == run["variants.ipynb"] == run["vandal.ipynb"] == run["forger.ipynb"] == "ok"
    assert run["stubs.ipynb"] == "ok"                 # no check cells: the stubs are never called in the notebook
    assert run["mischief.ipynb"] == f"timeout in code cell 9 (the limit per cell is {CELL_TIMEOUT} s)"
    assert run["memory.ipynb"] == ("error in code cell 2: RuntimeError (over the memory limit of 4096 MiB); "
                                   "1 more cell raised")
    assert run["kills_the_grader.ipynb"].startswith("crashed (")
    assert run["wrong|answers\r.ipynb"] == "error in code cell 8: RuntimeError"
    assert all(r == "unreadable" for n, r in run.items() if n in ("notjson.ipynb", "adir.ipynb", "dangling.ipynb",
                                                                  "fifo.ipynb"))


def test_an_endless_loop_costs_one_cell_limit(graded):
    mischief = _row(graded["rows"], "mischief.ipynb", "block_flops")
    honest = _row(graded["rows"], "honest.ipynb", "block_flops")
    assert mischief.seconds < honest.seconds + CELL_TIMEOUT + scaled(30)


def test_honesty_flags_and_messages(graded):
    rows = graded["rows"]
    flagged = _row(rows, "library.ipynb", "multi_head_attention")
    assert flagged.flag.startswith("uses the library's answer: tinyformer.attention.multi_head_attention")
    assert "correct on all 3 test inputs" in flagged.message          # its outputs pass; the flag takes the credit
    assert _row(rows, "library.ipynb", "sum_over_heads").flag == \
        "uses the library's answer: tinyformer.attention.merge_heads"
    assert "block_flops_reference" in _row(rows, "library.ipynb", "block_flops").flag
    assert "multiply-add" in _row(rows, "patches.ipynb", "block_flops").message
    assert "W_O" in _row(rows, "patches.ipynb", "multi_head_attention").message
    assert "RIGHT padding" in _row(rows, "wrong|answers\r.ipynb", "left_padded_causal_mask").message
    assert "malformed outputs" in _row(rows, "forger.ipynb", "block_flops").message
    died = _row(rows, "kills_the_grader.ipynb", "multi_head_attention")
    assert "before its functions were judged" in died.message
    assert _row(rows, "variants.ipynb", "block_flops").message.startswith("✓")
    assert _row(rows, "stubs.ipynb", "sum_over_heads").message.startswith("✗ Exercise 2.3 (sum_over_heads): not impl")
    excerpt = _row(rows, "wrong|answers\r.ipynb", "sum_over_heads").error
    assert excerpt.startswith("code cell 4: ValueError: bad | shape")


def test_the_reports_stay_small_escaped_and_one_line_per_row(graded):
    rows, reports = graded["rows"], graded["reports"]
    assert len(reports["grades.md"]) < 60_000 and len(reports["grades.json"]) < 200_000
    md = reports["grades.md"].decode()
    lines = md.split("\n")
    assert sum(line.startswith("| ") for line in lines) == len(rows) + 2 + (len(EXPECTED) + 2) * 2
    assert "<b>" not in md and "\r" not in md and "![" not in md
    assert "| wrong&#124;answers .ipynb | error in code cell 8: RuntimeError |" in md
    with open(graded["out"] / "grades.csv", newline="", encoding="utf-8") as f:
        table = {r["notebook"]: r for r in csv.DictReader(f)}
    assert set(table) == set(EXPECTED)
    totals = {n: (int(r["total"]), int(r["out_of"])) for n, r in table.items()}
    for notebook, verdicts in EXPECTED.items():
        counted = {e: s for e, s in verdicts.items() if s != IG and e != "-"}
        assert totals[notebook] == (sum(s == P for s in counted.values()), len(counted)), notebook
    assert table["library.ipynb"]["flagged"] == "sum_over_heads block_flops multi_head_attention"
    assert table["Copy of bob-02-attention.ipynb"]["ignored_tags"] == "bonus_round"
    assert all(r.exercise_seconds >= 0 for r in rows)
    data = json.loads(reports["grades.json"])
    assert data["isolation"] in ("bubblewrap",) or data["isolation"].startswith("process group only")
    assert data["jobs"] == 2 and data["limits"]["cell_timeout"] == CELL_TIMEOUT
