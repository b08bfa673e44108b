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

A notebook is identified by the metadata ``make student`` writes into it,
``{"tinyformer": {"chapter": ..., "exercises": [...]}}``, so a renamed copy grades the same; only
when that metadata is absent is the chapter guessed from the file name, and the row says so. An
expected exercise whose cell was deleted is ``missing``; a tagged cell copied twice counts once
(the last definition wins); a tag naming no known exercise is ignored and reported, not counted.
Drills are graded only where a cell is tagged with them.

One notebook that loops, crashes or deletes files cannot stop the others, and a file that is no
notebook (not JSON, a directory, a dangling link, a FIFO) gets a row of its own. The results go to
``grades.csv`` (one row per notebook, one column per exercise, the total), ``grades.json`` and
``grades.md`` (one row per notebook and exercise, messages escaped and cut to 300 characters).
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
import torch

from tinyformer.course import engine as checks
from tinyformer.course.student import EXERCISE_TAG


@dataclass
class Row:
    notebook: str
    run: str            # how the notebook ran as a whole
    exercise: str
    status: str         # pass · fail · not implemented · error · timeout · missing · ignored
    message: str
    error: str = ""     # the exception, where one was raised: "code cell 6: RuntimeError: ..."
    seconds: float = 0.0        # how long the notebook took to grade (run and exercises)
    chapter: str = ""
    identified_by: str = "metadata"   # or how the chapter was guessed without it


IGNORED = "ignored"     # a tag that names no known exercise: reported, never counted
MAX_MESSAGE = 2000      # characters of a message kept in a row (the Markdown table shows 300)
MAX_NOTEBOOK_BYTES = 50 * 2**20
CELL_NUMBERING = ("code cell N is the cell's position among the notebook's code cells, which is "
                  "the execution count Jupyter shows ([N]) after Run All")


def _cut(text, limit: int = MAX_MESSAGE) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
    for number, source in zip(spec["numbers"], spec["cells"]):
        signal.alarm(per_exercise_s)
        try:
            exec(compile(_strip_magics(source), f"<code cell {number}>", "exec"), namespace)  # noqa: S102
        except _Alarm:
            cell_errors.append(("TimeoutError", f"the cell ran for more than {per_exercise_s} s", number))
        except BaseException as err:  # noqa: BLE001 - SystemExit included: the reader's cell ended itself
            cell_errors.append((type(err).__name__, str(err)[:MAX_MESSAGE], number))
        finally:
            signal.alarm(0)
    results = {}
    for name, function in spec["functions"].items():
        fn = namespace.get(function)
        if not callable(fn):
            why = f"no function named {function!r} was defined"
            if cell_errors:
                why += f" (an exercise cell raised {cell_errors[0][0]}: {cell_errors[0][1]})"
            results[name] = {"outputs": None, "error": ("NameError", why), "mutated": [],
                             "cell_error": list(cell_errors[0]) if cell_errors else None}
            continue
        signal.alarm(per_exercise_s)
        try:  # the outputs come back portable: plain tensors, numbers, tuples, descriptions of the rest
            outcome = run_cases(fn, cases[name], reraise=(_Alarm,))
        except _Alarm:
            outcome = outcome_type(error=("TimeoutError", f"the function ran for more than {per_exercise_s} s"))
        finally:
            signal.alarm(0)
        results[name] = {"outputs": outcome.outputs, "error": outcome.error, "mutated": outcome.mutated,
                         "cell_error": None}
    torch.save(results, out_path)
    return 0


# --------------------------------------------------------------------------- identity


CHAPTERS = sorted({ex.chapter for ex in checks.EXERCISES.values()})


def _tags(cell) -> list[str]:
    """A cell's tags that are strings (a malformed notebook may hold anything there)."""
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    tags = meta.get("tags", []) if isinstance(meta, dict) else []
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def _exercise_tag(cell) -> str | None:
    for tag in _tags(cell):
        if tag.startswith(EXERCISE_TAG) and len(tag) > len(EXERCISE_TAG):
            return tag[len(EXERCISE_TAG):]
    return None


def _code_cells(nb) -> list[tuple[int, str, str | None]]:
    """(number, source, exercise) of each code cell; number counts code cells from 1."""
    out: list[tuple[int, str, str | None]] = []
    cells = nb.get("cells", [])
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(s for s in source if isinstance(s, str))
        out.append((len(out) + 1, source if isinstance(source, str) else "", _exercise_tag(cell)))
    return out


def _chapter_exercises(chapter: str) -> list[str]:
    return [n for n, ex in checks.EXERCISES.items() if ex.chapter == chapter and not ex.drill]


def identify(nb, nb_path: Path) -> tuple[str, list[str], str]:
    """``(chapter, expected exercises, how it was identified)`` of a notebook.

    From the ``tinyformer`` metadata ``make student`` writes (its exercise list, plus any of the
    chapter's registered exercises it lacks, so editing the list cannot hide one); without it,
    from a chapter name the file name contains ('bob-02-attention.ipynb'), said in ``how``.
    """
    meta = nb.get("metadata", {}) if isinstance(nb.get("metadata"), dict) else {}
    info = meta.get("tinyformer")
    if isinstance(info, dict) and isinstance(info.get("exercises"), list):
        chapter = info.get("chapter") if isinstance(info.get("chapter"), str) else ""
        listed = [e for e in info["exercises"] if isinstance(e, str)]
        return chapter, list(dict.fromkeys(listed + _chapter_exercises(chapter))), "metadata"
    stem = Path(nb_path).stem
    inside = [c for c in CHAPTERS if c in stem]
    chapter = stem if stem in CHAPTERS else inside[0] if len(inside) == 1 else ""
    how = "file name (no tinyformer metadata)" if chapter else \
        "none (no tinyformer metadata, no chapter in the file name)"
    return chapter, _chapter_exercises(chapter) if chapter else [], how


def _expected_exercises(nb_path: Path, found: list[str], nb=None) -> list[str]:
    """The exercises a notebook should hold: its chapter's, plus any other known ones it tags."""
    _, expected, _ = identify(nb if nb is not None else {}, nb_path)
    return expected + [n for n in dict.fromkeys(found) if n in checks.EXERCISES and n not in expected]


# --------------------------------------------------------------------------- grading


def _excerpt(error, number) -> str:
    if not error:
        return ""
    return _cut(f"code cell {number}: {error[0]}: {error[1]}", 300)


def _judge_loaded(name: str, r, cases, cell: int) -> tuple[str, str, str]:
    """(status, message, error excerpt) from the sandbox's record of one exercise."""
    error = tuple(r["error"]) if r["error"] is not None else None
    if error is not None and (len(error) != 2 or not all(isinstance(e, str) for e in error)):
        raise TypeError("malformed error record")
    cell_error = r.get("cell_error")
    excerpt = _excerpt(cell_error[:2], cell_error[2]) if cell_error else _excerpt(error, cell)
    if error and error[0] == "TimeoutError":
        return "timeout", f"✗ {checks.EXERCISES[name].title}: {error[1]}", excerpt
    outcome = checks.Outcome(outputs=r["outputs"], error=error, mutated=list(r.get("mutated") or []))
    v = checks.judge(checks.EXERCISES[name], cases, outcome)
    return v.status, v.message, excerpt


def _grade_detail(nb, nb_path: Path, workdir: Path, seed: int, exercise_timeout: float) -> list[dict]:
    """One dict (exercise, status, message, error) per expected, tagged or ignored exercise."""
    _, expected, _ = identify(nb, nb_path)
    cells = [(num, src, name) for num, src, name in _code_cells(nb) if name]
    found = list(dict.fromkeys(name for *_, name in cells))
    last_cell = {name: num for num, _, name in cells}          # a copied cell: the last one wins
    known = [n for n in found if n in checks.EXERCISES]
    cases = {n: checks.cases_for(checks.EXERCISES[n], seed) for n in known}
    outcomes: dict[str, tuple[str, str, str]] = {}
    if known:
        torch.save(cases, workdir / "cases.pt")
        spec = {"cells": [src for _, src, _ in cells], "numbers": [num for num, _, _ in cells],
                "cases": str(workdir / "cases.pt"),
                "functions": {n: checks.EXERCISES[n].function for n in known},
                "exercise_timeout": max(1, int(exercise_timeout))}
        (workdir / "spec.json").write_text(json.dumps(spec))
        out = workdir / "outputs.pt"
        failure = _run_child(["-m", "tinyformer.course.grade", "--sandbox", str(workdir / "spec.json"), str(out)],
                             timeout=exercise_timeout * (len(known) + len(cells)) + 30, cwd=workdir)
        loaded = None
        if failure is None and out.is_file():
            try:
                loaded = torch.load(out, weights_only=True)
            except Exception:  # noqa: BLE001 - a tampered file is the reader's problem, not the grader's
                loaded = None
        for n in known:
            if not isinstance(loaded, dict) or not isinstance(loaded.get(n), dict):
                why = "timeout" if failure == "timeout" else f"the exercise process ended ({failure or 'no output'})"
                outcomes[n] = ("timeout" if failure == "timeout" else checks.ERROR, why, "")
                continue
            try:
                outcomes[n] = _judge_loaded(n, loaded[n], cases[n], last_cell[n])
            except Exception as err:  # noqa: BLE001 - outputs forged by the notebook
                why = f"the exercise process returned malformed outputs ({type(err).__name__})"
                outcomes[n] = (checks.ERROR, why, "")
    results = []
    for n in expected + [n for n in known if n not in expected]:
        if n not in checks.EXERCISES:
            results.append({"exercise": n, "status": IGNORED, "error": "",
                            "message": f"{n!r} in the notebook's metadata is no known exercise; not counted"})
        elif n not in found:
            results.append({"exercise": n, "status": "missing", "error": "",
                            "message": f"no cell tagged {EXERCISE_TAG}{n}"})
        else:
            status, message, excerpt = outcomes[n]
            results.append({"exercise": n, "status": status, "message": _cut(message), "error": excerpt})
    for n in found:
        if n not in checks.EXERCISES and n not in expected:
            results.append({"exercise": n, "status": IGNORED, "error": "",
                            "message": _cut(f"unknown tag {EXERCISE_TAG}{n} (code cell {last_cell[n]}): "
                                            "ignored, not counted")})
    return results


def grade_exercises(nb_path: Path, workdir: Path, seed: int, exercise_timeout: float) -> list[tuple[str, str, str]]:
    """(exercise, status, message) of each exercise in the notebook at ``nb_path``."""
    nb = nbformat.read(nb_path, as_version=4)
    return [(r["exercise"], r["status"], r["message"])
            for r in _grade_detail(nb, nb_path, workdir, seed, exercise_timeout)]


def _read_submission(nb_path: Path) -> tuple[object, str]:
    """(notebook, "") or (None, why it is no notebook). A FIFO or device is never read from."""
    try:
        fd = os.open(nb_path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, "dangling symbolic link" if nb_path.is_symlink() else "file vanished"
    except IsADirectoryError:
        return None, "a directory, not a notebook"
    except OSError as err:
        return None, f"cannot be opened ({type(err).__name__})"
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            return None, "a directory, not a notebook"
        if not stat.S_ISREG(mode):
            return None, "not a regular file (a FIFO, socket or device)"
        chunks, size = [], 0
        while size <= MAX_NOTEBOOK_BYTES and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > MAX_NOTEBOOK_BYTES:
        return None, f"larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB"
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
            raise ValueError("no list of cells")
    except Exception as err:  # noqa: BLE001 - anything that is not a notebook
        return None, _cut(f"not a notebook: {type(err).__name__}: {err}", 300)
    return nb, ""


def _skip_unsafe(directory: str, names: list[str]) -> list[str]:
    """copytree's ignore: notebooks, hidden files, links and anything not a file or folder."""
    skip = []
    for name in names:
        try:
            mode = os.lstat(os.path.join(directory, name)).st_mode
        except OSError:
            skip.append(name)
            continue
        if name.startswith(".") or name.endswith(".ipynb") or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            skip.append(name)
    return skip


def grade_notebook(nb_path: Path, timeout: float, exercise_timeout: float, seed: int) -> list[Row]:
    start = time.monotonic()
    name = nb_path.name
    nb, problem = _read_submission(nb_path)
    if nb is None:
        return [Row(name, "unreadable", "-", checks.ERROR, problem, seconds=round(time.monotonic() - start, 2),
                    identified_by="-")]
    chapter, _, how = identify(nb, nb_path)
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        tmp = Path(tmp)
        run_dir, ex_dir = tmp / "run", tmp / "exercises"
        try:  # the notebook's data files; a file that cannot be copied is left out
            shutil.copytree(nb_path.parent, run_dir, ignore=_skip_unsafe)
        except (shutil.Error, OSError):
            run_dir.mkdir(exist_ok=True)
        ex_dir.mkdir()
        copy = run_dir / "submission.ipynb"
        nbformat.write(nb, copy)
        status_file = tmp / "status.json"
        # `timeout` bounds the whole notebook, kernel start included: the child is killed then.
        failure = _run_child([str(Path(__file__).with_name("_nbrun.py")), str(copy), str(status_file), str(timeout)],
                             timeout=timeout, cwd=run_dir)
        run = f"crashed ({failure})"
        if failure == "timeout":
            run = f"timeout after {timeout:g} s"
        elif status_file.is_file():
            try:
                run = _cut(json.loads(status_file.read_text())["run"], 300)
            except Exception:  # noqa: BLE001 - overwritten by the notebook
                run = "unknown (its status file was tampered with)"
        detail = _grade_detail(nb, nb_path, ex_dir, seed, exercise_timeout)
    seconds = round(time.monotonic() - start, 2)
    rows = [Row(name, run, r["exercise"], r["status"], r["message"], r["error"], seconds, chapter, how)
            for r in detail]
    return rows or [Row(name, run, "-", "-", "no exercises in this notebook", "", seconds, chapter, how)]


def grade_folder(folder: Path, out: Path, timeout: float = 600, exercise_timeout: float = 60,
                 seed: int | None = None, progress: bool = True) -> list[Row]:
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder {folder} is not a directory")
    folder = folder.resolve()
    notebooks = sorted(p for p in folder.iterdir() if p.name.endswith(".ipynb") and not p.name.startswith("."))
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
        rows += grade_notebook(nb_path, timeout, exercise_timeout, seed)
        write_reports(rows, out, seed)  # after every notebook: an interrupted run keeps what it graded
    return rows


# --------------------------------------------------------------------------- reports

_NEWLINES = re.compile(r"[\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]+")
_MARKDOWN = re.compile(r"([\\`*\[\]!#~])")


def md_cell(text, limit: int = 300) -> str:
    """``text`` as one Markdown table cell: on one line, cut to ``limit`` characters, its Markdown
    and HTML shown as text, and no ``|`` that could end the cell."""
    text = _NEWLINES.sub(" ", _cut(text, limit))
    return html.escape(_MARKDOWN.sub(r"\\\1", text), quote=False).replace("|", "&#124;")


def _csv_cell(value) -> str:
    """A CSV value a spreadsheet shows as text, never runs as a formula."""
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _summaries(rows: list[Row]) -> dict[str, dict]:
    by_nb: dict[str, list[Row]] = {}
    for r in rows:
        by_nb.setdefault(r.notebook, []).append(r)
    summary = {}
    for nb, rs in by_nb.items():
        counted = [r for r in rs if r.exercise != "-" and r.status != IGNORED]
        summary[nb] = {"passed": sum(r.status == checks.PASS for r in counted), "exercises": len(counted),
                       "run": rs[0].run, "seconds": rs[0].seconds, "chapter": rs[0].chapter,
                       "identified_by": rs[0].identified_by,
                       "ignored": [r.exercise for r in rs if r.status == IGNORED],
                       "verdicts": {r.exercise: r.status for r in counted}}
    return summary


def write_reports(rows: list[Row], out: Path, seed: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    summary = _summaries(rows)
    (out / "grades.json").write_text(json.dumps(
        {"seed": seed, "cell_numbering": CELL_NUMBERING, "rows": [asdict(r) for r in rows],
         "summary": summary}, indent=1, ensure_ascii=False) + "\n")
    exercises = list(dict.fromkeys(e for s in summary.values() for e in s["verdicts"]))
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["notebook", "chapter", "identified_by", "run", "seconds", *exercises, "total", "out_of",
                    "ignored_tags"])
        for nb, s in summary.items():
            w.writerow([_csv_cell(v) for v in (nb, s["chapter"], s["identified_by"], s["run"], s["seconds"],
                                               *(s["verdicts"].get(e, "") for e in exercises),
                                               s["passed"], s["exercises"], " ".join(s["ignored"]))])
    lines = ["| notebook | run | exercise | result | detail | error |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append("| " + " | ".join(md_cell(v) for v in (r.notebook, r.run, r.exercise, r.status, r.message,
                                                               r.error)) + " |")
    lines += ["", "| notebook | passed |", "| --- | --- |"]
    lines += [f"| {md_cell(nb)} | {s['passed']} / {s['exercises']} |" for nb, s in summary.items()]
    lines += ["", "| notebook | chapter | identified by | seconds | ignored tags |", "| --- | --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(md_cell(v) for v in (nb, s["chapter"], s["identified_by"], s["seconds"],
                                                       " ".join(s["ignored"]))) + " |" for nb, s in summary.items()]
    lines += ["", f"Seed {seed}. {md_cell(CELL_NUMBERING)}."]
    (out / "grades.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def nothing_graded(rows: list[Row]) -> bool:
    """True when no notebook could even be read."""
    return all(r.run == "unreadable" for r in rows)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--sandbox"]:
        return _sandbox(*argv[1:3])
    ap = argparse.ArgumentParser(description="Grade a folder of completed exercise notebooks.")
    ap.add_argument("folder", type=Path)
    ap.add_argument("--out", type=Path, default=Path("grades"),
                    help="where grades.csv, grades.json and grades.md go")
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
    print((a.out / "grades.md").read_text(encoding="utf-8"))
    if nothing_graded(rows):
        print("nothing could be graded: no file in the folder is a readable notebook", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
