"""Grade a folder of completed exercise notebooks.

    python -m tinyformer.grade submissions/ --out grades/ [--timeout 600] [--exercise-timeout 60]

Each notebook is handled in two independent ways:

1. **Run.** It is executed top to bottom in its own kernel, in a scratch copy of its folder, in
   a child process that is killed, kernel and all, when the notebook's time limit passes. This
   reports whether the notebook runs (``ok``, ``error in code cell N``, ``timeout``,
   ``kernel died``).
2. **Exercises.** The cells tagged ``exercise-<name>`` are executed again in a fresh Python
   process that holds nothing but the reader's code; the reader's function is called there
   on freshly drawn random inputs, and only its *outputs* come back. They are judged here, in
   the grader's process, by :func:`tinyformer.course.engine.judge`. So a notebook that redefines
   or patches a check function changes nothing: the checks it patched are never consulted.

The exercises expected in a notebook are its chapter's (drills are graded only where a cell is
tagged with them).

One notebook that loops, crashes or deletes files cannot stop the others. The results go to
``grades.json`` and ``grades.md`` (one row per notebook and exercise).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
import torch

from tinyformer.course import engine as checks
from tinyformer.course.student import exercise_name


@dataclass
class Row:
    notebook: str
    run: str            # how the notebook ran as a whole
    exercise: str
    status: str         # pass · fail · not implemented · error · timeout · missing
    message: str


# --------------------------------------------------------------------------- child processes


def _run_child(args: list[str], timeout: float, cwd: Path) -> str | None:
    """Run ``python <args>`` in its own process group; kill the whole group (a kernel included)
    on timeout. Returns None, or 'timeout' / 'exit N'."""
    proc = subprocess.Popen([sys.executable, *args], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return "timeout"
    finally:
        try:  # a kernel the notebook left behind
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return None if code == 0 else f"exit {code}"


def _strip_magics(source: str) -> str:
    return "\n".join("pass" if line.lstrip().startswith(("%", "!")) else line
                     for line in source.splitlines())


class _Alarm(BaseException):  # not an Exception: the reader's try/except must not swallow it
    pass


def _on_alarm(signum, frame):
    raise _Alarm()


def _sandbox(spec_path: str, out_path: str) -> int:
    """Child: exec the reader's exercise cells, call each function on its cases, save outputs."""
    run_cases, outcome_type = checks.run_cases, checks.Outcome   # bound before any reader code runs
    spec = json.loads(Path(spec_path).read_text())
    cases = torch.load(spec["cases"], weights_only=True)
    per_exercise_s = int(spec["exercise_timeout"])
    signal.signal(signal.SIGALRM, _on_alarm)
    namespace: dict = {"__name__": "__main__"}
    cell_errors = []
    for source in spec["cells"]:
        signal.alarm(per_exercise_s)
        try:
            exec(compile(_strip_magics(source), "<exercise cell>", "exec"), namespace)  # noqa: S102
        except _Alarm:
            cell_errors.append(("TimeoutError", f"the cell ran for more than {per_exercise_s} s"))
        except BaseException as err:  # noqa: BLE001 - SystemExit included: the reader's cell ended itself
            cell_errors.append((type(err).__name__, str(err)))
        finally:
            signal.alarm(0)
    results = {}
    for name, function in spec["functions"].items():
        fn = namespace.get(function)
        if not callable(fn):
            why = f"no function named {function!r} was defined"
            if cell_errors:
                why += f" (an exercise cell raised {cell_errors[0][0]}: {cell_errors[0][1]})"
            results[name] = {"outputs": None, "error": ("NameError", why), "mutated": []}
            continue
        signal.alarm(per_exercise_s)
        try:  # the outputs come back portable: plain tensors, numbers, tuples, descriptions of the rest
            outcome = run_cases(fn, cases[name], reraise=(_Alarm,))
        except _Alarm:
            outcome = outcome_type(error=("TimeoutError", f"the function ran for more than {per_exercise_s} s"))
        finally:
            signal.alarm(0)
        results[name] = {"outputs": outcome.outputs, "error": outcome.error, "mutated": outcome.mutated}
    torch.save(results, out_path)
    return 0


# --------------------------------------------------------------------------- grading


def _expected_exercises(nb_path: Path, found: list[str]) -> list[str]:
    """The exercises a notebook should hold: those of its chapter, plus any others it tags."""
    expected = [n for n, ex in checks.EXERCISES.items() if ex.chapter == nb_path.stem and not ex.drill]
    return expected + [n for n in found if n not in expected]


def grade_exercises(nb_path: Path, workdir: Path, seed: int, exercise_timeout: float) -> list[tuple[str, str, str]]:
    nb = nbformat.read(nb_path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and exercise_name(c)]
    found = [exercise_name(c) for c in cells]
    results = []
    known = [n for n in dict.fromkeys(found) if n in checks.EXERCISES]
    cases = {n: checks.cases_for(checks.EXERCISES[n], seed) for n in known}
    outcomes = {}
    if known:
        torch.save(cases, workdir / "cases.pt")
        spec = {"cells": [c.source for c in cells], "cases": str(workdir / "cases.pt"),
                "functions": {n: checks.EXERCISES[n].function for n in known},
                "exercise_timeout": max(1, int(exercise_timeout))}
        (workdir / "spec.json").write_text(json.dumps(spec))
        out = workdir / "outputs.pt"
        failure = _run_child(["-m", "tinyformer.course.grade", "--sandbox", str(workdir / "spec.json"), str(out)],
                             timeout=exercise_timeout * (len(known) + len(cells)) + 30, cwd=workdir)
        loaded = None
        if failure is None and out.exists():
            try:
                loaded = torch.load(out, weights_only=True)
            except Exception:  # noqa: BLE001 - a tampered file is the reader's problem, not the grader's
                loaded = None
        for n in known:
            if loaded is None or n not in loaded:
                why = "timeout" if failure == "timeout" else f"the exercise process ended ({failure or 'no output'})"
                outcomes[n] = ("timeout" if failure == "timeout" else checks.ERROR, why)
                continue
            r = loaded[n]
            error = tuple(r["error"]) if r["error"] is not None else None
            if error and error[0] == "TimeoutError":
                outcomes[n] = ("timeout", f"✗ {checks.EXERCISES[n].title}: {error[1]}")
                continue
            outcome = checks.Outcome(outputs=r["outputs"], error=error, mutated=list(r.get("mutated") or []))
            v = checks.judge(checks.EXERCISES[n], cases[n], outcome)
            outcomes[n] = (v.status, v.message)
    for n in _expected_exercises(nb_path, found):
        if n not in checks.EXERCISES:
            results.append((n, checks.ERROR, f"unknown exercise tag exercise-{n}"))
        elif n not in found:
            results.append((n, "missing", "no cell tagged exercise-" + n))
        else:
            results.append((n, *outcomes[n]))
    return results


def grade_notebook(nb_path: Path, timeout: float, exercise_timeout: float, seed: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        tmp = Path(tmp)
        run_dir, ex_dir = tmp / "run", tmp / "exercises"
        shutil.copytree(nb_path.parent, run_dir, ignore=shutil.ignore_patterns("*.ipynb", ".*"))
        ex_dir.mkdir()
        copy = run_dir / nb_path.name
        shutil.copy(nb_path, copy)
        try:
            nbformat.read(copy, as_version=4)
        except Exception as err:  # noqa: BLE001
            return [Row(nb_path.name, f"unreadable: {type(err).__name__}", "-", checks.ERROR, str(err)[:200])]
        status_file = tmp / "status.json"
        # `timeout` bounds the whole notebook, kernel start included: the child is killed then.
        failure = _run_child([str(Path(__file__).with_name("_nbrun.py")), str(copy), str(status_file), str(timeout)],
                             timeout=timeout, cwd=run_dir)
        if failure == "timeout":
            run = f"timeout after {timeout:g} s"
        elif status_file.exists():
            run = json.loads(status_file.read_text())["run"]
        else:
            run = f"crashed ({failure})"
        rows = [Row(nb_path.name, run, n, s, m) for n, s, m in grade_exercises(nb_path, ex_dir, seed, exercise_timeout)]
    return rows or [Row(nb_path.name, run, "-", "-", "no exercises in this notebook")]


def grade_folder(folder: Path, out: Path, timeout: float = 600, exercise_timeout: float = 60,
                 seed: int | None = None, progress: bool = True) -> list[Row]:
    if not folder.is_dir():
        raise ValueError(f"folder {folder} is not a directory")
    notebooks = sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    if not notebooks:
        raise ValueError(f"folder {folder} holds no .ipynb notebooks")
    seed = secrets.randbelow(2**31) if seed is None else seed
    rows: list[Row] = []
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        def tqdm(x, **_):
            return x
    for nb_path in tqdm(notebooks, desc="grading", unit="notebook", disable=not progress):
        rows += grade_notebook(nb_path.resolve(), timeout, exercise_timeout, seed)
        write_reports(rows, out, seed)  # after every notebook: an interrupted run keeps what it graded
    return rows


def write_reports(rows: list[Row], out: Path, seed: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    by_nb: dict[str, list[Row]] = {}
    for r in rows:
        by_nb.setdefault(r.notebook, []).append(r)
    summary = {nb: {"passed": sum(r.status == checks.PASS for r in rs),
                    "exercises": sum(r.exercise != "-" for r in rs)} for nb, rs in by_nb.items()}
    (out / "grades.json").write_text(json.dumps(
        {"seed": seed, "rows": [asdict(r) for r in rows], "summary": summary}, indent=1, ensure_ascii=False) + "\n")
    lines = ["| notebook | run | exercise | result | detail |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        detail = r.message.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r.notebook} | {r.run} | {r.exercise} | {r.status} | {detail} |")
    lines += ["", "| notebook | passed |", "| --- | --- |"]
    lines += [f"| {nb} | {s['passed']} / {s['exercises']} |" for nb, s in summary.items()]
    (out / "grades.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--sandbox"]:
        return _sandbox(*argv[1:3])
    ap = argparse.ArgumentParser(description="Grade a folder of completed exercise notebooks.")
    ap.add_argument("folder", type=Path)
    ap.add_argument("--out", type=Path, default=Path("grades"), help="where grades.json and grades.md go")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a notebook may run (default 600)")
    ap.add_argument("--exercise-timeout", type=float, default=60, help="seconds per exercise (default 60)")
    ap.add_argument("--seed", type=int, default=None, help="seed for the test inputs (default: random)")
    a = ap.parse_args(argv)
    if a.timeout <= 0 or a.exercise_timeout <= 0:
        ap.error("--timeout and --exercise-timeout must be positive")
    try:
        rows = grade_folder(a.folder, a.out, a.timeout, a.exercise_timeout, a.seed)
    except ValueError as err:
        ap.error(str(err))
    print((a.out / "grades.md").read_text())
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
