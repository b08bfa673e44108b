"""Containment without bubblewrap (a process group, the run's token, orphans adopted by the grader),
the notebook's own time limit, and the choice of isolation."""

from __future__ import annotations

import json
import shutil
import time

import nbformat
import pytest
from test_checks_ch02 import CHAPTER
from test_grade_adversarial import _left_running, _nb, _solutions, _vandal

from tinyformer import checks
from tinyformer.course import grade

from conftest import scaled


def test_without_bubblewrap_a_double_forked_setsid_process_is_gone_before_the_row(tmp_path):
    folder, out = tmp_path / "class", tmp_path / "grades"
    folder.mkdir()
    out.mkdir()
    nbformat.write(_nb(*_solutions(), nbformat.v4.new_code_cell(_vandal(folder, out))), folder / "vandal.ipynb")
    rows = grade.grade_folder(folder, out, timeout=scaled(60), exercise_timeout=scaled(5), seed=3, progress=False,
                              cell_timeout=scaled(20),
                              jobs=1, isolation="none")
    assert _left_running() == []            # both daemons: the one with the run's token, the one without
    report = (out / "grades.json").read_bytes()
    time.sleep(1.0)
    assert (out / "grades.json").read_bytes() == report
    assert {r.status for r in rows} == {checks.PASS} and len(rows) == len(CHAPTER)
    assert rows[0].run == "ok" and rows[0].isolation == "process group only (bubblewrap not asked for)"
    assert json.loads(report)["isolation"] == "process group only (bubblewrap not asked for)"


def test_the_notebook_time_limit_stops_the_cells_and_the_functions_are_still_judged(tmp_path):
    slow = [nbformat.v4.new_code_cell("import time\n\ntime.sleep(3600)") for _ in range(2)]
    nb = _nb(*_solutions()[:2], *slow, *_solutions()[2:])
    nbformat.write(nb, tmp_path / "slow.ipynb")
    limit = scaled(12)  # the first cells finish well within it; the sleeping cell does not
    rows = grade.grade_folder(tmp_path, tmp_path / "out", timeout=limit, exercise_timeout=scaled(5), seed=3,
                              progress=False, cell_timeout=scaled(20), jobs=1)
    status = {r.exercise: r.status for r in rows}
    assert rows[0].run.startswith(f"timeout: the notebook's limit of {limit} s ran out at code cell ")
    assert status == {**dict.fromkeys(CHAPTER[:2], checks.PASS), **dict.fromkeys(CHAPTER[2:], grade.TIMEOUT)}


def test_isolation_is_chosen_and_said():
    box = grade.Sandbox("auto")
    if shutil.which("bwrap") is None:
        assert box.describe() == "process group only (bubblewrap is not installed)"
        with pytest.raises(RuntimeError, match="bubblewrap is not installed"):
            grade.Sandbox("bubblewrap")
    else:          # installed: usable here, or unusable (user namespaces off) and said so
        assert box.describe() == "bubblewrap" or box.describe().startswith("process group only (bubblewrap is ")
    with pytest.raises(ValueError, match="isolation must be"):
        grade.Sandbox("docker")


def test_bad_limits_are_refused(tmp_path):
    (tmp_path / "a.ipynb").write_text("{}")
    for bad in ({"cell_timeout": 0}, {"memory_mb": -1}, {"jobs": 0}, {"timeout": "10"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            grade.grade_folder(tmp_path, tmp_path / "out", progress=False, **bad)


def test_notebooks_graded_side_by_side_share_the_cores(tmp_path, monkeypatch):
    """With --jobs 2 on 2 cores each kernel gets 1 thread, even after a chapter's seed_everything
    (which sets the book's 2): two kernels of two spinning threads each ran 5x slower."""
    monkeypatch.setattr(grade.os, "cpu_count", lambda: 2)
    probe = ("from tinyformer import seed_everything\nseed_everything(0)\n\n"
             "def block_flops(T, d_model, d_ff):\n"
             "    raise RuntimeError(f'threads={torch.get_num_threads()}')\n")
    for name in ("a", "b"):
        nbformat.write(_nb(nbformat.v4.new_code_cell(probe, metadata={"tags": ["exercise-block_flops"]}),
                           meta={"chapter": "02-attention", "exercises": ["block_flops"]}), tmp_path / f"{name}.ipynb")
    rows = grade.grade_folder(tmp_path, tmp_path / "out", seed=0, progress=False, jobs=2)
    errors = {r.notebook: r.error for r in rows if r.exercise == "block_flops"}
    assert errors and all(e.endswith("RuntimeError: threads=1") for e in errors.values()), errors
    env = grade._sandbox_env(tmp_path, "token", threads=3, in_bwrap=True)
    assert env["TINYFORMER_NUM_THREADS"] == env["OMP_NUM_THREADS"] == "3" and env["OMP_WAIT_POLICY"] == "PASSIVE"


def test_an_environment_under_tmp_stays_visible_in_the_sandbox(tmp_path, monkeypatch):
    """The sandbox's private /tmp must not hide the Python environment or the library when they
    live under /tmp (a clone in /tmp/fresh with its .venv): the kernel could not start."""
    import subprocess
    import sys

    box = grade.Sandbox("auto")
    if not box.bwrap:
        pytest.skip(f"no bubblewrap sandbox here: {box.describe()}")
    env = tmp_path / "venv"          # tmp_path lies under /tmp
    env.mkdir()
    (env / "marker").write_text("the environment")
    monkeypatch.setattr(sys, "prefix", str(env))
    assert env in grade._runtime_paths()
    private = tmp_path / "private"
    private.mkdir()
    shown = subprocess.run(box.command(private, private, ["cat", str(env / "marker")]),
                           capture_output=True, text=True, timeout=60)
    assert shown.stdout == "the environment", shown.stderr
    hidden = tmp_path / "other"      # a folder under /tmp that is no environment stays hidden
    hidden.mkdir()
    (hidden / "secret").write_text("x")
    assert subprocess.run(box.command(private, private, ["cat", str(hidden / "secret")]),
                          capture_output=True, timeout=60).returncode != 0
