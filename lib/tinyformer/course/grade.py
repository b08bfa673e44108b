"""Grade a folder of completed exercise notebooks.

    python -m tinyformer.grade submissions/ --out grades/ [--jobs N] [--timeout 600] [--cell-timeout 300]
        [--exercise-timeout 60] [--memory-mb 4096] [--file-mb 256] [--isolation auto] [--seed S]

Each notebook is run from a private copy, in its own kernel, inside a sandbox: `bubblewrap` where
it is installed and usable (read-only system, no network, a private ``/tmp``, its own PID
namespace; the submissions, the reports and every other notebook's copy are hidden), else a
process group of its own (a process it leaves behind, even one that called ``setsid``, is found by
a per-run token in its environment, or as an orphan adopted by the grader, and killed). Each row
says which. Every cell has a time limit, and so has the whole notebook; the address space and the
size of every file written are limited.

After the notebook's last cell, one more cell runs in the same kernel (``_nbrun.harvest``): it
calls each exercise's function *as it stands at the end of the notebook* (the last definition
wins; imports, helpers and variables of any cell count) on test inputs drawn afresh for every run,
and ships only the outputs back. They are judged here, in the grader's process, by
:func:`tinyformer.course.engine.judge`, the code behind the in-book checks; so a notebook that
patches the checks or the engine changes nothing. While the function runs, a profiler notes any
call of the library's own answer (``Exercise.library_answers``, the exercise's reference, the
course's code): such an exercise is ``flagged`` and earns nothing.

A notebook is identified by the metadata ``make student`` writes into it,
``{"tinyformer": {"chapter": ..., "exercises": [...]}}``, so a renamed copy grades the same; only
when that metadata is absent is the chapter guessed from the file name, and the row says so. An
expected exercise with neither a tagged cell nor a function is ``missing``; a tagged cell copied
twice counts once; a tag naming no known exercise is ignored and reported, not counted. Drills
are graded only where a cell is tagged with them.

A file that is no notebook (not JSON, a directory, a dangling link, a FIFO) gets a row of its own.
``--jobs`` notebooks are graded at once; the reports are rewritten after each notebook finishes,
with the rows of the finished ones (whose sandboxes are gone, so an interrupted run keeps them),
and once more after the last sandbox is gone: ``grades.csv`` (one row per notebook, one column per
exercise, the total), ``grades.json`` and ``grades.md`` (one row per notebook and exercise,
messages escaped and cut to 300 characters).
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import html
import io
import json
import os
import re
import secrets
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
import torch

from tinyformer.course import _nbrun
from tinyformer.course import engine as checks
from tinyformer.course.cells import EXERCISE_TAG
from tinyformer.setup import PINNED_NUMERICS


@dataclass
class Row:
    notebook: str
    run: str            # how the notebook ran as a whole
    exercise: str
    status: str         # pass · fail · not implemented · error · timeout · missing · flagged · ignored
    message: str
    error: str = ""     # the exception, where one was raised: "code cell 6: RuntimeError: ..."
    seconds: float = 0.0        # how long the notebook took to grade (run and exercises)
    chapter: str = ""
    identified_by: str = "metadata"   # or how the chapter was guessed without it
    exercise_seconds: float = 0.0     # how long the exercise's function took on the test inputs
    flag: str = ""                    # why a flagged exercise earns nothing
    isolation: str = ""               # how the notebook was contained


@dataclass(frozen=True)
class Limits:
    timeout: float = 600.0            # seconds for all of a notebook's cells together
    cell_timeout: float = 300.0       # seconds for one cell (a chapter's slowest cell on one busy core)
    exercise_timeout: float = 60.0    # seconds for one exercise's function on all its test inputs
    memory_mb: int = 4096             # address space of the kernel (and of every process it starts)
    file_mb: int = 256                # the largest file the notebook may write

    def hard_timeout(self, n_exercises: int) -> float:
        """When the whole sandbox is killed: the cells, the harvest, and kernel start-ups."""
        return self.timeout + max(1, n_exercises) * self.exercise_timeout + 60 + 30 * _nbrun.MAX_ATTEMPTS


FLAGGED = "flagged"     # answered with the library's own function: no credit
TIMEOUT = "timeout"
MISSING = "missing"
IGNORED = "ignored"     # a tag that names no known exercise: reported, never counted
MAX_MESSAGE = 2000      # characters of a message kept in a row (the Markdown table shows 300)
MAX_NOTEBOOK_BYTES = 50 * 2**20
CELL_NUMBERING = ("code cell N is the cell's position among the notebook's code cells, which is "
                  "the execution count Jupyter shows ([N]) after Run All when no code cell is empty")
TOKEN_VAR = "TINYFORMER_GRADE_TOKEN"


def _cut(text, limit: int = MAX_MESSAGE) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


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


# --------------------------------------------------------------------------- reading submissions


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


def _skipper(out: Path | None):
    """copytree's ignore: notebooks, hidden files, links, anything not a file or folder, the reports."""
    def skip_unsafe(directory: str, names: list[str]) -> list[str]:
        skip = []
        for name in names:
            path = os.path.join(directory, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                skip.append(name)
                continue
            if (name.startswith(".") or name.endswith(".ipynb") or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))
                    or (out is not None and os.path.realpath(path) == str(out))):
                skip.append(name)
        return skip
    return skip_unsafe


_skip_unsafe = _skipper(None)


def _runnable_copy(nb) -> nbformat.NotebookNode:
    """Only the code cells, in order (so code cell N stays N), without outputs or metadata."""
    cells = [nbformat.v4.new_code_cell(source) for _, source, _ in _code_cells(nb)]
    out = nbformat.v4.new_notebook(cells=cells)
    out.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return out


# --------------------------------------------------------------------------- containment


_PR_SET_CHILD_SUBREAPER = 36
_lock = threading.Lock()
_live: set[int] = set()          # the sandboxes' leaders now running (their pids), across threads


def _within(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


class Sandbox:
    """How each notebook is contained: ``bubblewrap`` where it is usable, else a process group."""

    def __init__(self, mode: str = "auto", hide: tuple[Path, ...] = ()):
        if mode not in ("auto", "bubblewrap", "none"):
            raise ValueError(f"isolation must be 'auto', 'bubblewrap' or 'none', got {mode!r}")
        self.hide = tuple(Path(h).resolve() for h in hide)
        self.bwrap = shutil.which("bwrap") if mode != "none" else None
        self.note = "" if mode != "none" else "bubblewrap not asked for"
        if mode != "none" and self.bwrap is None:
            self.note = "bubblewrap is not installed"
        elif self.bwrap is not None:
            self.note = self._probe()
            if self.note:
                self.bwrap = None
        if mode == "bubblewrap" and self.bwrap is None:
            raise RuntimeError(f"--isolation bubblewrap: {self.note}")

    def _probe(self) -> str:
        """'' if bubblewrap can make a sandbox here (user namespaces may be disabled), else why not."""
        with tempfile.TemporaryDirectory(prefix="tinyformer-bwrap-") as tmp:
            try:
                done = subprocess.run(self._wrap(Path(tmp), Path(tmp), ["true"]), capture_output=True, timeout=60)
            except (OSError, subprocess.SubprocessError) as err:
                return f"bubblewrap does not run ({type(err).__name__})"
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip().splitlines()
            return _cut(f"bubblewrap is unusable here ({why[-1] if why else f'exit {done.returncode}'})", 200)
        return ""

    @property
    def kind(self) -> str:
        return "bubblewrap" if self.bwrap else "process group only"

    def describe(self) -> str:
        return self.kind if self.bwrap or not self.note else f"{self.kind} ({self.note})"

    def _wrap(self, private: Path, workdir: Path, argv: list[str]) -> list[str]:
        cmd = [self.bwrap or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        needed = [Path(sys.executable).resolve(), Path(_nbrun.__file__).resolve(), Path(sys.prefix).resolve()]
        for folder in (*self.hide, private.parent):
            if folder == Path("/") or _within(folder, Path("/tmp")) or any(_within(n, folder) for n in needed):
                continue       # under the private /tmp already, or holding what runs the notebook
            cmd += ["--tmpfs", str(folder)]
        for path in _runtime_paths():   # a venv or a checkout under /tmp, hidden by the private /tmp
            if _within(path, Path("/tmp")):
                cmd += ["--ro-bind", str(path), str(path)]
        return cmd + ["--bind", str(private), str(private), "--chdir", str(workdir), "--unshare-pid",
                      "--unshare-net", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session",
                      "--", *argv]

    def command(self, private: Path, workdir: Path, argv: list[str]) -> list[str]:
        return self._wrap(private, workdir, argv) if self.bwrap else argv


def _runtime_paths() -> list[Path]:
    """What a notebook's kernel needs to start and to import tinyformer: the environment
    (``sys.prefix``, as written and resolved) and the folder holding the tinyformer package (an
    editable install points there). The sandbox shows them read-only even where its private
    ``/tmp`` would hide them, as it does for a clone under ``/tmp``."""
    package_root = Path(_nbrun.__file__).resolve().parents[2]       # lib/ (or site-packages/)
    paths = [Path(sys.prefix), Path(sys.prefix).resolve(), package_root]
    return sorted({p for p in paths if p.exists()}, key=lambda p: len(p.parts))


def _set_subreaper(on: bool) -> bool:
    """Make this process adopt its descendants' orphans (Linux), so none escapes by double-forking."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children() -> set[int]:
    """This process's children (zombies included)."""
    me, out = os.getpid(), set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                if int(fields[1]) == me:
                    out.add(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def _marked(token: bytes) -> set[int]:
    """Processes whose environment holds this run's token."""
    me, out = os.getpid(), set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != me:
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if token in f.read():
                        out.add(int(entry.name))
            except OSError:
                continue
    return out


class _Reaper:
    """Finds and kills what a sandbox leaves behind."""

    def __init__(self, adopt: bool):
        self.adopt = adopt and _set_subreaper(True)
        self.before = _children() if self.adopt else set()

    def close(self) -> None:
        if self.adopt:
            _set_subreaper(False)

    def _orphans(self) -> set[int]:
        if not self.adopt:
            return set()
        with _lock:
            return _children() - self.before - _live

    def clean(self, token: bytes) -> bool:
        """Kill every process with ``token`` and every adopted orphan; True once none is left."""
        for _ in range(100):
            left = _marked(token) | self._orphans()
            if not left:
                return True
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            for pid in left:      # reap the adopted ones (the others are reaped by their parents)
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
            time.sleep(0.05)
        return False


def _read_pipe(stream, cap: int, into: list) -> None:
    total = 0
    while chunk := stream.read(1 << 16):
        if total < cap:
            into.append(chunk[: cap - total])
        total += len(chunk)


def _run_sandbox(sandbox: Sandbox, reaper: _Reaper, private: Path, config: Path, env: dict, hard: float,
                 cap: int) -> tuple[bytes, str | None, bool]:
    """Run _nbrun in its sandbox; (payload, failure, all gone). Returns only when every process of
    the sandbox is gone."""
    token = env[TOKEN_VAR].encode()
    argv = sandbox.command(private, private / "work", [sys.executable, _nbrun.__file__, str(config)])
    with open(private / "stderr.txt", "wb") as err:
        with _lock:
            proc = subprocess.Popen(argv, cwd=private / "work", env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=err, start_new_session=True)
            _live.add(proc.pid)
    chunks: list[bytes] = []
    reader = threading.Thread(target=_read_pipe, args=(proc.stdout, cap, chunks), daemon=True)
    reader.start()
    failure = None
    try:
        code = proc.wait(timeout=hard)
        if code != 0:
            failure = f"killed by signal {-code}" if code < 0 else f"exit {code}"
    except subprocess.TimeoutExpired:
        failure = "timeout"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        with _lock:
            _live.discard(proc.pid)
    gone = reaper.clean(token)
    reader.join(timeout=10)
    proc.stdout.close()
    return b"".join(chunks), failure, gone


def _sandbox_env(private: Path, token: str, threads: int, in_bwrap: bool) -> dict:
    """A small environment: no secrets of the grader's (CI tokens), writable homes in the private dir."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "PYTHONPATH", "TZ")}
    home = private / "home"
    env.update(PINNED_NUMERICS)  # the book's numerics (tinyformer/numerics.env); the threads are set below
    env.update({
        "HOME": str(home), "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTER_DATA_DIR": str(home / "data"),
        "IPYTHONDIR": str(home / "ipython"), "MPLCONFIGDIR": str(home / "mpl"), "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_CONFIG_HOME": str(home / "config"), "TMPDIR": "/tmp" if in_bwrap else str(private / "tmp"),
        "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
        # the threads of each kernel: the cores shared among the notebooks run at once (a chapter's
        # seed_everything would otherwise set 2, and spinning OpenMP threads of two kernels on two
        # cores slow both many times over)
        "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "TINYFORMER_NUM_THREADS": str(threads),
        "OMP_WAIT_POLICY": "PASSIVE", TOKEN_VAR: token,
    })
    return env


# --------------------------------------------------------------------------- one notebook


@dataclass
class _Run:
    """What came back from one notebook's sandbox."""

    status: dict | None        # _nbrun's record of the run (None: no payload came back)
    results: dict | None       # the harvest's records per exercise (None: none, or malformed)
    failure: str | None        # how the sandbox process ended, if not cleanly
    malformed: str = ""        # why the results could not be read
    stray: bool = False        # a process of the notebook could not be stopped
    hard: float = 0.0          # the time limit of the whole sandbox


def _parse_payload(data: bytes) -> tuple[dict | None, bytes]:
    head_len = len(_nbrun.MAGIC) + 16
    if len(data) < head_len or not data.startswith(_nbrun.MAGIC):
        return None, b""
    n_status, n_results = struct.unpack("<QQ", data[len(_nbrun.MAGIC):head_len])
    try:
        status = json.loads(data[head_len:head_len + n_status])
    except ValueError:
        return None, b""
    return (status if isinstance(status, dict) else None), data[head_len + n_status:head_len + n_status + n_results]


def _str_pair(x) -> bool:
    return isinstance(x, (tuple, list)) and len(x) == 2 and all(isinstance(e, str) for e in x)


def _grads_item(g) -> bool:
    """One case's gradients as the harvest writes them: None, "cut", or a list of tensors."""
    return g is None or (isinstance(g, str) and g == "cut") or (
        isinstance(g, list) and all(isinstance(t, torch.Tensor) for t in g))


def _check_record(rec) -> None:
    """Raise TypeError unless ``rec`` is a record the harvest could have written."""
    if not isinstance(rec, dict) or not isinstance(rec.get("found"), bool):
        raise TypeError("not a record")
    if not rec["found"]:
        return
    ok = (isinstance(rec.get("callable"), bool) and isinstance(rec.get("outputs", []), (list, type(None)))
          and (rec.get("error") is None or _str_pair(rec["error"]))
          and isinstance(rec.get("mutated", []), list) and all(type(i) is int for i in rec.get("mutated", []))
          and isinstance(rec.get("flags", []), list) and all(isinstance(f, str) for f in rec.get("flags", []))
          and isinstance(rec.get("tampering", []), list)
          and all(isinstance(f, str) for f in rec.get("tampering", []))
          and type(rec.get("seconds", 0.0)) in (int, float)
          and (rec.get("count") is None or type(rec.get("count")) is int)
          and isinstance(rec.get("what", ""), str)
          and (rec.get("grads") is None or (isinstance(rec["grads"], list) and all(map(_grads_item, rec["grads"])))))
    if not ok:
        raise TypeError("a field of the wrong type")


def _load_results(blob: bytes, names: list[str]) -> tuple[dict | None, str]:
    if not blob:
        return None, ""
    try:
        loaded = torch.load(io.BytesIO(blob), weights_only=True)
        if not isinstance(loaded, dict) or not all(isinstance(k, str) for k in loaded):
            raise TypeError("not a dict of exercises")
        for name in names:
            if name in loaded:
                _check_record(loaded[name])
    except Exception as err:  # noqa: BLE001 - outputs forged or garbled by the notebook
        return None, _cut(f"{type(err).__name__}: {err}", 200)
    return loaded, ""


def _execute(nb, private: Path, data_dir: Path | None, functions: dict[str, str], cases: dict, keys: dict,
             limits: Limits, sandbox: Sandbox, reaper: _Reaper, threads: int) -> _Run:
    """Run the notebook in its sandbox from the private folder ``private``."""
    work, io_dir = private / "work", private / "io"
    try:  # the folder's data files; a file that cannot be copied is left out
        if data_dir is not None:
            shutil.copytree(data_dir, work, ignore=_skip_unsafe)
    except (shutil.Error, OSError):
        pass
    for d in (work, io_dir, private / "home", private / "tmp"):
        d.mkdir(parents=True, exist_ok=True)
    nbformat.write(_runnable_copy(nb), work / "submission.ipynb")
    torch.save(cases, io_dir / "cases.pt")
    config = {"notebook": str(work / "submission.ipynb"), "workdir": str(work), "io": str(io_dir),
              "cases": str(io_dir / "cases.pt"), "cell_timeout": limits.cell_timeout,
              "notebook_timeout": limits.timeout, "memory_mb": limits.memory_mb, "file_mb": limits.file_mb,
              "max_results_mb": limits.file_mb,
              "harvest": {"functions": functions, "keys": keys, "engine": checks.__file__,
                          "exercise_timeout": limits.exercise_timeout}}
    (io_dir / "config.json").write_text(json.dumps(config))
    env = _sandbox_env(private, secrets.token_hex(16), threads, sandbox.bwrap is not None)
    hard = limits.hard_timeout(len(functions))
    payload, failure, gone = _run_sandbox(sandbox, reaper, private, io_dir / "config.json", env, hard,
                                          (limits.file_mb + 16) * 2**20)
    status, blob = _parse_payload(payload)
    results, malformed = _load_results(blob, list(functions)) if status is not None else (None, "")
    return _Run(status, results, failure, malformed, not gone, hard)


def _memory_note(ename: str, evalue: str, limits: Limits) -> str:
    if ename == "MemoryError" or re.search(r"can't allocate memory|cannot allocate memory|out of memory", evalue,
                                           re.IGNORECASE):
        return f" (over the memory limit of {limits.memory_mb} MiB)"
    return ""


def _run_text(run: _Run, limits: Limits) -> str:
    """The notebook's run, in one line: 'ok', or its problems in cell order."""
    if run.status is None:
        if run.failure == "timeout":
            return f"timeout: stopped at the sandbox's limit of {run.hard:g} s"
        return f"crashed ({run.failure or 'no record of the run came back'})"
    st = run.status
    if st.get("setup_error"):
        return f"kernel failed to start ({_cut(st['setup_error'], 200)})"
    cells = st.get("cells") if isinstance(st.get("cells"), dict) else {}
    events = []
    errors = timeouts = 0
    for key in sorted(cells, key=lambda k: int(k) if str(k).isdigit() else 0):
        rec = cells[key]
        if not isinstance(rec, dict):
            continue
        kind = rec.get("status")
        if kind == "error" and not errors:
            ename, evalue = _cut(rec.get("ename", ""), 100), str(rec.get("evalue", ""))
            events.append(f"error in code cell {key}: {ename}{_memory_note(ename, evalue, limits)}")
        elif kind == "timeout" and not timeouts:
            events.append(f"timeout in code cell {key} (the limit per cell is {limits.cell_timeout:g} s)")
        elif kind == "died":
            events.append(f"kernel died in code cell {key} (the notebook was run again without it)")
        errors += kind == "error"
        timeouts += kind == "timeout"
    if errors > 1:
        events.append(f"{errors - 1} more cell{'s' if errors > 2 else ''} raised")
    if timeouts > 1:
        events.append(f"{timeouts - 1} more cell{'s' if timeouts > 2 else ''} timed out")
    if st.get("out_of_time_at"):
        events.append(f"timeout: the notebook's limit of {limits.timeout:g} s ran out at code cell "
                      f"{st['out_of_time_at']}")
    harvest = st.get("harvest") if isinstance(st.get("harvest"), dict) else None
    if harvest and harvest.get("status") == "died":
        events.append("kernel died while its functions were judged")
    elif harvest and harvest.get("status") == "timeout":
        events.append("its functions ran out of time")
    if run.failure:
        events.append(f"crashed ({run.failure})")
    if run.stray:
        events.append("a process it started could not be stopped")
    return _cut("; ".join(events) or "ok", 300)


def _excerpt(kind: str, msg: str, number) -> str:
    return _cut(f"code cell {number}: {kind}: {msg}", 300) if number else _cut(f"{kind}: {msg}", 300)


def _verdict(name: str, rec: dict, cases: list, cell: int | None, cell_error: tuple | None, count_to_cell: dict,
             limits: Limits) -> tuple[str, str, str, str]:
    """(status, message, error excerpt, flag) of one exercise from its harvest record."""
    ex = checks.EXERCISES[name]
    title = ex.title
    if not rec.get("callable", True):
        return checks.ERROR, f"✗ {title}: {ex.function} is {rec.get('what') or 'something else'}, not a function.", \
            "", ""
    error = tuple(rec["error"]) if rec.get("error") is not None else None
    where = count_to_cell.get(str(rec.get("count"))) or cell
    excerpt = _excerpt(error[0], error[1], where) if error else (_excerpt(*cell_error) if cell_error else "")
    if error and error[0] == "TimeoutError":
        return TIMEOUT, f"✗ {title}: {error[1]}.", excerpt, ""
    outcome = checks.Outcome(outputs=rec.get("outputs") or [], error=error, mutated=list(rec.get("mutated") or []),
                             grads=rec.get("grads"))
    v = checks.judge(ex, cases, outcome)
    flags, tampering = list(rec.get("flags") or []), list(rec.get("tampering") or [])
    if flags or tampering:
        why = (f"uses the library's answer: {', '.join(flags[:3])}" if flags else "") + \
              ("; " if flags and tampering else "") + ("tampering: " + "; ".join(tampering) if tampering else "")
        return FLAGGED, _cut(f"✗ {title}: no credit, it {why}. (Judged alone, its outputs: {v.message})"), \
            excerpt, _cut(why, 300)
    return v.status, v.message, excerpt, ""


def _exercise_rows(nb, nb_path: Path, run: _Run | None, cases: dict, limits: Limits) -> list[dict]:
    """One dict (exercise, status, message, error, seconds, flag) per expected, tagged or ignored exercise."""
    _, expected, _ = identify(nb, nb_path)
    tagged = [(num, name) for num, _, name in _code_cells(nb) if name]
    found = list(dict.fromkeys(name for _, name in tagged))
    last_cell = {name: num for num, name in tagged}          # a copied cell: the last one wins
    st = run.status if run is not None and run.status is not None else {}
    cells = st.get("cells") if isinstance(st.get("cells"), dict) else {}
    counts = st.get("counts") if isinstance(st.get("counts"), dict) else {}
    harvest = st.get("harvest") if isinstance(st.get("harvest"), dict) else {}
    late = st.get("out_of_time_at") if isinstance(st.get("out_of_time_at"), int) else None
    results = run.results if run is not None else None

    def cell_error(n):
        rec = cells.get(str(last_cell.get(n)))
        if isinstance(rec, dict) and rec.get("status") in ("error", "timeout", "died"):
            kind = {"timeout": "CellTimeout", "died": "DeadKernel"}.get(rec["status"], rec.get("ename", "Error"))
            return kind, _cut(rec.get("evalue", ""), 300), last_cell[n]
        return None

    def no_results(n) -> tuple[str, str]:
        if run is None or run.status is None:
            if run is not None and run.failure == "timeout":
                return TIMEOUT, "the notebook was stopped at its time limit before its functions were judged"
            return checks.ERROR, f"the notebook's run ended ({run.failure if run else 'not run'}) before its " \
                                 f"functions were judged"
        if st.get("setup_error"):
            return checks.ERROR, "the notebook's kernel did not start"
        if run.malformed:
            return checks.ERROR, f"malformed outputs: the results of the notebook's kernel could not be read " \
                                 f"({run.malformed})"
        h = harvest.get("status")
        if h == "timeout":
            return TIMEOUT, "the functions ran out of time in the notebook's kernel"
        if h == "died":
            return checks.ERROR, "the kernel died while its functions were judged (os._exit, a crash, or the " \
                                 "memory limit)"
        if h == "error":
            return checks.ERROR, f"the grader could not call the functions in the notebook's kernel " \
                                 f"({harvest.get('ename', '')}: {_cut(harvest.get('evalue', ''), 200)})"
        return checks.ERROR, "the notebook's kernel returned no result for this exercise"

    rows = []
    for n in list(dict.fromkeys(expected + [n for n in found if n in checks.EXERCISES])):
        row = {"exercise": n, "error": "", "seconds": 0.0, "flag": ""}
        if n not in checks.EXERCISES:
            rows.append({**row, "status": IGNORED,
                         "message": f"{n!r} in the notebook's metadata is no known exercise; not counted"})
            continue
        ex = checks.EXERCISES[n]
        rec = results.get(n) if isinstance(results, dict) else None
        if rec is None:
            if n not in found:
                status, message = MISSING, f"no cell tagged {EXERCISE_TAG}{n}"
            else:
                status, message = no_results(n)
                message = f"✗ {ex.title}: {message}."
            rows.append({**row, "status": status, "message": message})
            continue
        if not rec["found"]:
            if n not in found:
                rows.append({**row, "status": MISSING, "message": f"no cell tagged {EXERCISE_TAG}{n} and no "
                                                                   f"function {ex.function}"})
                continue
            err = cell_error(n)
            if late is not None and last_cell[n] >= late:
                status, message = TIMEOUT, f"the notebook's time ran out before its cell (code cell {last_cell[n]}) ran"
            elif err:
                status, message = checks.ERROR, f"no function named {ex.function!r} was defined (its cell, code " \
                                                f"cell {last_cell[n]}, raised {err[0]}: {err[1]})"
            else:
                status, message = checks.ERROR, f"no function named {ex.function!r} is defined at the end of the " \
                                                f"notebook"
            rows.append({**row, "status": status, "message": f"✗ {ex.title}: {message}.",
                         "error": _excerpt(*err) if err else ""})
            continue
        status, message, excerpt, flag = _verdict(n, rec, cases[n], last_cell.get(n), cell_error(n), counts, limits)
        if n not in found:
            message += f" (no cell is tagged {EXERCISE_TAG}{n}; the function {ex.function} was judged)"
        rows.append({**row, "status": status, "message": _cut(message), "error": excerpt, "flag": flag,
                     "seconds": round(float(rec.get("seconds", 0.0)), 3)})
    for n in found:
        if n not in checks.EXERCISES and n not in expected:
            rows.append({"exercise": n, "status": IGNORED, "error": "", "seconds": 0.0, "flag": "",
                         "message": _cut(f"unknown tag {EXERCISE_TAG}{n} (code cell {last_cell[n]}): "
                                         "ignored, not counted")})
    return rows


class _Grading:
    """What every notebook of one run shares: limits, seed, sandbox, the folder's data, the cases."""

    def __init__(self, limits: Limits, seed: int, sandbox: Sandbox, root: Path, data_dir: Path | None,
                 threads: int = 1):
        self.limits, self.seed, self.sandbox, self.root, self.data_dir = limits, seed, sandbox, root, data_dir
        self.threads = threads
        self.reaper = _Reaper(adopt=sandbox.bwrap is None)
        self._cases: dict[str, tuple[list, dict]] = {}
        self._cases_lock = threading.Lock()

    def cases(self, name: str) -> tuple[list, dict]:
        """The test inputs of exercise ``name`` and how to recognise the library's answer to it."""
        with self._cases_lock:
            if name not in self._cases:
                ex = checks.EXERCISES[name]
                self._cases[name] = checks.cases_for(ex, self.seed), checks.library_answer_keys(ex)
            return self._cases[name]

    def close(self) -> None:
        self.reaper.close()

    def grade(self, name: str, nb, problem: str, nb_path: Path) -> list[Row]:
        start = time.monotonic()
        isolation = self.sandbox.describe()
        if nb is None:
            return [Row(name, "unreadable", "-", checks.ERROR, problem, seconds=round(time.monotonic() - start, 2),
                        identified_by="-", isolation="-")]
        chapter, expected, how = identify(nb, nb_path)
        tagged = [n for *_, n in _code_cells(nb) if n in checks.EXERCISES]
        functions = {n: checks.EXERCISES[n].function for n in dict.fromkeys(expected + tagged)
                     if n in checks.EXERCISES}
        cases = {n: self.cases(n)[0] for n in functions}
        keys = {n: self.cases(n)[1] for n in functions}
        private = Path(tempfile.mkdtemp(prefix="nb-", dir=self.root))
        try:
            run = _execute(nb, private, self.data_dir, functions, cases, keys, self.limits, self.sandbox,
                           self.reaper, self.threads)
        finally:
            shutil.rmtree(private, ignore_errors=True)
        text = _run_text(run, self.limits)
        detail = _exercise_rows(nb, nb_path, run, cases, self.limits)
        seconds = round(time.monotonic() - start, 2)
        rows = [Row(name, text, r["exercise"], r["status"], r["message"], r["error"], seconds, chapter, how,
                    r["seconds"], r["flag"], isolation) for r in detail]
        return rows or [Row(name, text, "-", "-", "no exercises in this notebook", "", seconds, chapter, how,
                            isolation=isolation)]


# --------------------------------------------------------------------------- the public entry points


def _limits(timeout, exercise_timeout, cell_timeout, memory_mb, file_mb) -> Limits:
    for name, value in (("timeout", timeout), ("exercise_timeout", exercise_timeout),
                        ("cell_timeout", cell_timeout), ("memory_mb", memory_mb), ("file_mb", file_mb)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    return Limits(float(timeout), float(cell_timeout), float(exercise_timeout), int(memory_mb), int(file_mb))


def grade_notebook(nb_path: Path, timeout: float = 600, exercise_timeout: float = 60, seed: int = 0, *,
                   cell_timeout: float = 300, memory_mb: int = 4096, file_mb: int = 256,
                   isolation: str = "auto") -> list[Row]:
    """The rows of one notebook (its folder's other files are its data)."""
    nb_path = Path(nb_path)
    limits = _limits(timeout, exercise_timeout, cell_timeout, memory_mb, file_mb)
    nb, problem = _read_submission(nb_path)
    root = Path(tempfile.mkdtemp(prefix="tinyformer-grade-")).resolve()
    try:
        sandbox = Sandbox(isolation, hide=(nb_path.parent.resolve(),))
        data = root / "data"
        shutil.copytree(nb_path.parent, data, ignore=_skip_unsafe)
        grading = _Grading(limits, seed, sandbox, root, data, threads=os.cpu_count() or 1)
        try:
            return grading.grade(nb_path.name, nb, problem, nb_path)
        finally:
            grading.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def grade_exercises(nb_path: Path, workdir: Path, seed: int, exercise_timeout: float) -> list[tuple[str, str, str]]:
    """(exercise, status, message) of each exercise in the notebook at ``nb_path``, run whole.
    (``workdir`` is kept for old callers; every run uses a private folder of its own.)"""
    rows = grade_notebook(nb_path, timeout=600, exercise_timeout=exercise_timeout, seed=seed)
    return [(r.exercise, r.status, r.message) for r in rows if r.exercise != "-"]


def grade_folder(folder: Path, out: Path, timeout: float = 600, exercise_timeout: float = 60,
                 seed: int | None = None, progress: bool = True, *, cell_timeout: float = 300,
                 jobs: int | None = None, memory_mb: int = 4096, file_mb: int = 256,
                 isolation: str = "auto") -> list[Row]:
    """Grade every ``*.ipynb`` in ``folder`` (``jobs`` at a time); the reports go to ``out``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder {folder} is not a directory")
    folder = folder.resolve()
    notebooks = sorted(p for p in folder.iterdir() if p.name.endswith(".ipynb") and not p.name.startswith("."))
    if not notebooks:
        raise ValueError(f"folder {folder} holds no .ipynb notebooks")
    limits = _limits(timeout, exercise_timeout, cell_timeout, memory_mb, file_mb)
    jobs = (os.cpu_count() or 1) if jobs is None else jobs
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive int, got {jobs!r}")
    seed = secrets.randbelow(2**31) if seed is None else seed
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    # every submission is read now, before any notebook runs: a notebook cannot change another's
    submissions = [(p, *_read_submission(p)) for p in notebooks]
    root = Path(tempfile.mkdtemp(prefix="tinyformer-grade-")).resolve()
    started = time.monotonic()
    try:
        data = root / "data"
        try:
            shutil.copytree(folder, data, ignore=_skipper(out))
        except (shutil.Error, OSError):
            data.mkdir(exist_ok=True)
        sandbox = Sandbox(isolation, hide=(folder, out))
        grading = _Grading(limits, seed, sandbox, root, data, threads=max(1, (os.cpu_count() or 1) // jobs))
        meta = {"isolation": sandbox.describe(), "jobs": jobs, "limits": asdict(limits)}
        done: dict[int, list[Row]] = {}
        try:
            from tqdm.auto import tqdm
        except ImportError:  # pragma: no cover
            def tqdm(x, **_):
                return x

        def one(i: int) -> list[Row]:
            path, nb, problem = submissions[i]
            try:
                return grading.grade(path.name, nb, problem, path)
            except Exception as err:  # noqa: BLE001 - a grader bug costs one notebook, not the run
                return [Row(path.name, f"grader error ({type(err).__name__}: {_cut(err, 200)})", "-", checks.ERROR,
                            "the grader failed on this notebook", isolation=sandbox.describe())]

        pool = ThreadPoolExecutor(max_workers=jobs)
        try:
            futures = {pool.submit(one, i): i for i in range(len(submissions))}
            for future in tqdm(as_completed(futures), total=len(futures), desc="grading", unit="notebook",
                               disable=not progress):
                done[futures[future]] = future.result()
                # only finished notebooks, whose sandboxes are gone; in the folder's order
                rows = [r for i in sorted(done) for r in done[i]]
                write_reports(rows, out, seed, {**meta, "wall_seconds": round(time.monotonic() - started, 1)})
        except BaseException:
            with _lock:
                for pid in list(_live):
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except OSError:
                        pass
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            grading.close()
            # once more now that every sandbox is gone: whatever a notebook without bubblewrap wrote
            # into the reports while it ran is overwritten
            if done:
                write_reports([r for i in sorted(done) for r in done[i]], out, seed,
                              {**meta, "wall_seconds": round(time.monotonic() - started, 1)})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return [r for i in sorted(done) for r in done[i]]


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
                       "identified_by": rs[0].identified_by, "isolation": rs[0].isolation,
                       "ignored": [r.exercise for r in rs if r.status == IGNORED],
                       "flagged": [r.exercise for r in counted if r.status == FLAGGED],
                       "verdicts": {r.exercise: r.status for r in counted},
                       "exercise_seconds": {r.exercise: r.exercise_seconds for r in counted}}
    return summary


def write_reports(rows: list[Row], out: Path, seed: int, meta: dict | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = meta or {}
    summary = _summaries(rows)
    (out / "grades.json").write_text(json.dumps(
        {"seed": seed, **meta, "cell_numbering": CELL_NUMBERING, "rows": [asdict(r) for r in rows],
         "summary": summary}, indent=1, ensure_ascii=False) + "\n")
    exercises = list(dict.fromkeys(e for s in summary.values() for e in s["verdicts"]))
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["notebook", "chapter", "identified_by", "run", "seconds", "isolation", *exercises, "total",
                    "out_of", "flagged", "ignored_tags"])
        for nb, s in summary.items():
            w.writerow([_csv_cell(v) for v in (nb, s["chapter"], s["identified_by"], s["run"], s["seconds"],
                                               s["isolation"], *(s["verdicts"].get(e, "") for e in exercises),
                                               s["passed"], s["exercises"], " ".join(s["flagged"]),
                                               " ".join(s["ignored"]))])
    lines = ["| notebook | run | exercise | result | detail | error | function seconds |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append("| " + " | ".join(md_cell(v) for v in (r.notebook, r.run, r.exercise, r.status, r.message,
                                                               r.error, f"{r.exercise_seconds:g}")) + " |")
    lines += ["", "| notebook | passed |", "| --- | --- |"]
    lines += [f"| {md_cell(nb)} | {s['passed']} / {s['exercises']} |" for nb, s in summary.items()]
    lines += ["", "| notebook | chapter | identified by | seconds | isolation | ignored tags |",
              "| --- | --- | --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(md_cell(v) for v in (nb, s["chapter"], s["identified_by"], s["seconds"],
                                                       s["isolation"], " ".join(s["ignored"]))) + " |"
              for nb, s in summary.items()]
    about = f"Seed {seed}. {md_cell(CELL_NUMBERING)}."
    if meta.get("isolation"):
        about += f" Isolation: {md_cell(meta['isolation'])}; {meta.get('jobs', 1)} at a time."
    lines += ["", about]
    (out / "grades.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def nothing_graded(rows: list[Row]) -> bool:
    """True when no notebook could even be read."""
    return all(r.run == "unreadable" for r in rows)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description="Grade a folder of completed exercise notebooks.")
    ap.add_argument("folder", type=Path)
    ap.add_argument("--out", type=Path, default=Path("grades"),
                    help="where grades.csv, grades.json and grades.md go")
    ap.add_argument("--jobs", type=int, default=None,
                    help="notebooks graded at once (default: the number of cores)")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds for all of a notebook's cells together (default 600)")
    ap.add_argument("--cell-timeout", type=float, default=300, help="seconds for one cell (default 300)")
    ap.add_argument("--exercise-timeout", type=float, default=60,
                    help="seconds for one exercise's function on its test inputs (default 60)")
    ap.add_argument("--memory-mb", type=int, default=4096,
                    help="address space of a notebook's kernel, in MiB (default 4096)")
    ap.add_argument("--file-mb", type=int, default=256,
                    help="the largest file a notebook may write, in MiB (default 256)")
    ap.add_argument("--isolation", choices=("auto", "bubblewrap", "none"), default="auto",
                    help="auto: bubblewrap where usable, else a process group; none: a process group")
    ap.add_argument("--seed", type=int, default=None, help="seed for the test inputs (default: random)")
    a = ap.parse_args(argv)

    def stop(signum, frame):  # a SIGTERM ends the run as Ctrl-C does: every sandbox is stopped first
        raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, stop) if main_thread else None
    try:
        rows = grade_folder(a.folder, a.out, a.timeout, a.exercise_timeout, a.seed, cell_timeout=a.cell_timeout,
                            jobs=a.jobs, memory_mb=a.memory_mb, file_mb=a.file_mb, isolation=a.isolation)
    except (ValueError, RuntimeError) as err:
        ap.error(str(err))
    except KeyboardInterrupt:
        print(f"interrupted: {a.out} holds the notebooks graded so far", file=sys.stderr)
        return 130
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, before)
    print((a.out / "grades.md").read_text(encoding="utf-8"))
    if nothing_graded(rows):
        print("nothing could be graded: no file in the folder is a readable notebook", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
