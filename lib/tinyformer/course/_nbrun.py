"""Run one submitted notebook for the grader and call its exercise functions in its own kernel.

    python _nbrun.py CONFIG_JSON

:mod:`tinyformer.course.grade` runs this script in a child process (inside bubblewrap where it
can), one per notebook. It judges nothing: it only gathers what the grader judges.

1. It limits the address space and the size of any file written (the kernel inherits both), reads
   the test inputs and deletes their file, so that no cell of the notebook can read them.
2. It executes the notebook's code cells one by one in a fresh kernel, each with its own time
   limit (an endless loop is interrupted and costs its limit once) and the notebook with a total
   one; outputs are dropped, errors recorded. A cell that kills the kernel is skipped and the
   notebook is run again without it, so the functions defined in the other cells still count.
3. It appends one cell, the *harvest* (:func:`harvest`, loaded from this file inside the kernel):
   in the kernel's final state, it looks up each exercise's function (the last definition wins,
   wherever it was made), calls it on the test inputs under a per-exercise alarm and a profiler
   that notes any call of the library's own answer, and saves the portable outputs.
4. It writes the run's record and the harvest's outputs to the grader through a pipe (its
   original stdout; the kernel's stdout is /dev/null), read by the grader once the sandbox is gone.

At module level it imports only the standard library: the harvest loads this file in the kernel.
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import sys
import threading
import time

MAGIC = b"TFGRADE1"
MAX_TEXT = 2000          # characters of an exception message kept
MAX_ATTEMPTS = 3         # kernel starts: the first run, then one more per cell that killed the kernel
HARVEST_TAG = "tinyformer-harvest"

HARVEST_CELL = """\
# Added by the grader: call the exercise functions on fresh test inputs.
import builtins as _tinyformer_builtins
import importlib.util as _tinyformer_util

_tinyformer_spec = _tinyformer_util.spec_from_file_location("_tinyformer_harvest", {nbrun!r})
_tinyformer_harvest = _tinyformer_util.module_from_spec(_tinyformer_spec)
_tinyformer_spec.loader.exec_module(_tinyformer_harvest)
_tinyformer_harvest.harvest(_tinyformer_builtins.globals(), {config!r})
"""


def _cut(text, limit: int = MAX_TEXT) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- the notebook's run


def _limit(cfg: dict) -> None:
    """Limits this process and every process it starts inherits (hard limits: no raising them)."""
    import resource

    for what, mb in ((resource.RLIMIT_AS, cfg.get("memory_mb")), (resource.RLIMIT_FSIZE, cfg.get("file_mb"))):
        if mb:
            resource.setrlimit(what, (int(mb) * 2**20, int(mb) * 2**20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _client_class():
    from nbclient import NotebookClient

    class Client(NotebookClient):
        """Keeps no outputs (the grader reads none) and notes when a cell ran out of time."""

        timed_out = False
        reply: dict | None = None

        def output(self, outs, msg, display_id, cell_index):
            return None

        def handle_comm_msg(self, outs, msg, cell_index):
            return None

        async def _async_handle_timeout(self, timeout, cell=None):
            self.timed_out = True
            return await super()._async_handle_timeout(timeout, cell)

    return Client


def _new_client(nb, cfg: dict):
    client = _client_class()(
        nb, timeout=int(cfg["cell_timeout"]), kernel_name="python3", allow_errors=True,
        interrupt_on_timeout=True, record_timing=False, shutdown_kernel="immediate", startup_timeout=120,
        error_on_timeout={"ename": "CellTimeout", "evalue": "", "traceback": []},
        resources={"metadata": {"path": cfg["workdir"]}})

    def keep_reply(cell, cell_index, execute_reply):
        client.reply = execute_reply

    client.on_cell_executed = keep_reply
    return client


async def _execute_cell(client, cell, index: int, count: int | None, timeout: float) -> dict:
    """Run one cell; its record: status (ok, error, timeout, died), exception, seconds, count."""
    from nbclient.exceptions import DeadKernelError

    client.timeout = max(1, int(timeout))
    client.timed_out, client.reply = False, None
    start = time.monotonic()
    record = {"status": "ok", "ename": "", "evalue": "", "count": None}
    try:
        await client.async_execute_cell(cell, index, execution_count=count)
    except DeadKernelError:
        record["status"] = "died"
    content = (client.reply or {}).get("content", {}) if record["status"] != "died" else {}
    if client.timed_out:
        record["status"] = "timeout"
    elif content.get("status") == "error":
        record.update(status="error", ename=_cut(content.get("ename", "Error"), 100),
                      evalue=_cut(content.get("evalue", "")))
    if isinstance(content.get("execution_count"), int):
        record["count"] = content["execution_count"]
    record["seconds"] = round(time.monotonic() - start, 3)
    return record


async def _run(cfg: dict, cases: bytes) -> tuple[dict, bytes]:
    import nbformat

    nb = nbformat.read(cfg["notebook"], as_version=4)
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    deadline = time.monotonic() + float(cfg["notebook_timeout"])
    status: dict = {"cells": {}, "attempts": 0, "out_of_time_at": None, "harvest": None, "setup_error": None,
                    "counts": {}}
    skip: set[int] = set()
    results = b""
    while status["attempts"] < MAX_ATTEMPTS:
        status["attempts"] += 1
        client = _new_client(nb, cfg)
        died, counts = None, {}
        try:
            async with client.async_setup_kernel():
                for position, (index, cell) in enumerate(code, 1):
                    if position in skip or not cell.source.strip():
                        continue
                    left = deadline - time.monotonic()
                    if left <= 0:
                        status["out_of_time_at"] = position
                        break
                    limit = min(float(cfg["cell_timeout"]), left)
                    record = await _execute_cell(client, cell, index, len(counts) + 1, limit)
                    if record["status"] == "timeout" and limit < float(cfg["cell_timeout"]):
                        status["out_of_time_at"] = position         # the notebook's limit, not the cell's
                        break
                    status["cells"].setdefault(str(position), record)    # the first run of a cell is reported
                    if record["count"] is not None:
                        counts[str(record["count"])] = position
                    if record["status"] == "died":
                        died = position
                        skip.add(position)
                        break
                if died is None:
                    status["counts"] = counts
                    status["harvest"], results = await _harvest(client, nb, cfg, cases)
        except Exception as err:  # noqa: BLE001 - a kernel that would not start, or died while starting
            if died is None:
                status["setup_error"] = _cut(f"{type(err).__name__}: {err}", 300)
                break
        if died is None or time.monotonic() >= deadline:
            break
    return status, results


async def _harvest(client, nb, cfg: dict, cases: bytes) -> tuple[dict, bytes]:
    """Write the test inputs (only now), run the harvest cell, read what it saved."""
    import nbformat

    io_dir = cfg["io"]
    name = os.urandom(8).hex()
    config = {**cfg["harvest"], "cases": os.path.join(io_dir, f"{name}.pt"),
              "results": os.path.join(io_dir, f"{name}-results.pt")}
    config_path = os.path.join(io_dir, f"{name}.json")
    try:  # the notebook may have deleted the folder
        os.makedirs(io_dir, exist_ok=True)
        with open(config["cases"], "wb") as f:
            f.write(cases)
        with open(config_path, "w") as f:
            json.dump(config, f)
    except OSError as err:
        return {"status": "error", "ename": type(err).__name__, "evalue": _cut(err, 300)}, b""
    cell = nbformat.v4.new_code_cell(HARVEST_CELL.format(nbrun=os.path.abspath(__file__), config=config_path),
                                     metadata={"tags": [HARVEST_TAG]})
    nb.cells.append(cell)
    n = max(1, len(config["functions"]))
    record = await _execute_cell(client, cell, len(nb.cells) - 1, None,
                                 n * float(config["exercise_timeout"]) + 60)
    results = b""
    try:  # read at once: an atexit hook or a stray thread may overwrite it later
        with open(config["results"], "rb") as f:
            results = f.read(int(cfg["max_results_mb"]) * 2**20 + 1)
    except OSError:
        pass
    return record, results


def main(config_path: str) -> int:
    with open(config_path) as f:
        cfg = json.load(f)
    _limit(cfg)
    payload = os.dup(1)                      # the pipe to the grader; not inherited by the kernel
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    with open(cfg["cases"], "rb") as f:
        cases = f.read()
    os.unlink(cfg["cases"])
    import asyncio

    status, results = asyncio.run(_run(cfg, cases))
    head = json.dumps(status).encode()
    with os.fdopen(payload, "wb") as out:
        out.write(MAGIC + struct.pack("<QQ", len(head), len(results)) + head + results)
    return 0


# --------------------------------------------------------------------------- the harvest (in the kernel)


class _Alarm(BaseException):
    """The per-exercise time limit (not an Exception: the reader's `except Exception` cannot eat it)."""


def _on_alarm(signum, frame):
    raise _Alarm()


def _probe():
    """Called under the profiler: if the profiler does not see it, the profiler is not there."""


def _referenced(fn, depth: int = 3):
    """The objects a function refers to through its globals and closure, and theirs, a few levels
    deep (scripted helpers among them)."""
    found, todo, seen = [], [(fn, 0)], set()
    while todo:
        obj, level = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        found.append(obj)
        code = getattr(obj, "__code__", None)
        if code is None or level >= depth:
            continue
        names, codes = set(), [code]
        while codes:
            c = codes.pop()
            names.update(c.co_names)
            codes.extend(k for k in c.co_consts if hasattr(k, "co_names"))
        glob = getattr(obj, "__globals__", {})
        todo.extend((glob[n], level + 1) for n in names if n in glob)
        for cell in getattr(obj, "__closure__", None) or ():
            try:
                todo.append((cell.cell_contents, level + 1))
            except ValueError:
                pass
    return found


class _Profiler:
    """Notes calls of the library's own answer (by code object: file, first line, name, so an alias
    is caught too), of the course's checking code, and of the listed builtins."""

    def __init__(self, keys: dict):
        self.code: dict = {}
        for tail, line, name, dotted in keys.get("code", []):
            self.code.setdefault((line, name), []).append((tail, dotted))
        self.builtin = {(m, n): d for m, n, d in keys.get("builtin", [])}
        # the same builtins called as torch's operators, torch.ops.aten.layer_norm (or .default)
        self.operators = {f"aten::{n}": d for m, n, d in keys.get("builtin", []) if m.startswith("torch")}
        self.hits: list[str] = []
        self.tampering: list[str] = []
        self.probes = 0
        self.probe_code = _probe.__code__

    def _hit(self, what: str) -> None:
        if what not in self.hits:
            self.hits.append(what)

    def __call__(self, frame, event, arg):
        if event == "call":
            c = frame.f_code
            if c is self.probe_code:
                self.probes += 1
                return
            found = self.code.get((c.co_firstlineno, c.co_name))
            if c.co_name == "__call__" and self.operators and c.co_filename.endswith("_ops.py"):
                op = frame.f_locals.get("self")   # an operator packet, or one of its overloads
                packet = getattr(op, "overloadpacket", op)
                dotted = self.operators.get(getattr(packet, "_qualified_op_name", None))
                if dotted:
                    self._hit(dotted)
            if found:
                filename = c.co_filename.replace(os.sep, "/")
                for tail, dotted in found:
                    if filename.endswith(tail):
                        self._hit(dotted)
            elif "course" in c.co_filename and c.co_name != "<module>" and c.co_filename != __file__:
                filename = c.co_filename.replace(os.sep, "/")
                if "/tinyformer/course/" in filename:
                    self._hit(f"the course's checking code ({c.co_name} in tinyformer/course/"
                              f"{filename.rsplit('/', 1)[-1]})")
        elif event == "c_call":
            dotted = self.builtin.get((getattr(arg, "__module__", None), getattr(arg, "__name__", None)))
            if dotted:
                self._hit(dotted)

    def _still_there(self) -> None:
        seen = self.probes
        _probe()
        if self.probes == seen:
            self.tampering.append("the grader's profiler was removed while the function ran")

    def _scan_scripted(self, fn) -> None:
        """TorchScript runs its operators in C++, out of the profiler's sight: note the listed
        operators in the graph of any scripted function or module the answer refers to."""
        if not self.operators:
            return
        for obj in _referenced(fn):
            graph = getattr(obj, "inlined_graph", None)
            if graph is None:
                continue
            for op in re.findall(r"aten::\w+", str(graph)):
                if op in self.operators:
                    self._hit(self.operators[op])

    def call(self, fn, args):
        self._scan_scripted(fn)
        seen = self.probes
        # TorchScript compiled while the answer runs would hide its operators in C++: with the JIT
        # off, torch.jit.script returns the Python function, whose calls the profiler sees
        jit = sys.modules.get("torch.jit._state")
        jit_was = jit._enabled.enabled if jit is not None else None
        if jit is not None:
            jit._enabled.enabled = False
        sys.setprofile(self)
        threading.setprofile(self)
        try:
            _probe()
            if self.probes == seen:
                self.tampering.append("the grader's profiler could not be installed")
            try:
                out = fn(*args)
            except (_Alarm, KeyboardInterrupt):
                raise
            except BaseException:
                self._still_there()
                raise
            self._still_there()
            return out
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
            if jit is not None:
                jit._enabled.enabled = jit_was


def _library_identity(fn) -> list[str]:
    """The function itself is one of the library's (imported under the exercise's name)."""
    import functools
    import inspect

    candidates = [fn, getattr(fn, "__func__", None)]
    if isinstance(fn, functools.partial):
        candidates.append(fn.func)
    try:
        candidates.append(inspect.unwrap(fn))
    except Exception:  # noqa: BLE001 - a __wrapped__ loop
        pass
    for c in candidates:
        try:
            module = getattr(c, "__module__", None)
            if isinstance(module, str) and (module == "tinyformer" or module.startswith("tinyformer.")):
                return [f"{module}.{getattr(c, '__qualname__', getattr(c, '__name__', '?'))}"]
        except Exception:  # noqa: BLE001
            continue
    return []


def _defining_count(fn) -> int | None:
    """The execution count of the cell that defined ``fn`` (IPython names each cell's code)."""
    try:
        import inspect

        from IPython import get_ipython

        code = inspect.unwrap(fn).__code__
        count = get_ipython().compile._filename_map.get(code.co_filename)
        return count if isinstance(count, int) else None
    except Exception:  # noqa: BLE001 - not a plain function, or not IPython
        return None


def _private_engine(path: str):
    """A private copy of the judging engine: whatever the notebook did to tinyformer.course.engine
    (replacing run_cases, portable, …) does not reach the harvest."""
    import importlib.util

    name = "_tinyformer_grader_engine"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def judge_function(fn, cases: list, keys: dict, timeout: float, engine) -> dict:
    """Call ``fn`` on a fresh copy of every case (the engine's run_cases semantics) under a time
    limit and the profiler; its record: portable outputs, the exception, the mutated arguments,
    honesty flags, seconds."""
    rec: dict = {"found": True, "callable": callable(fn), "what": "", "outputs": [], "error": None, "mutated": [],
                 "flags": [], "seconds": 0.0, "count": None}
    if not rec["callable"]:
        rec["what"] = engine.describe(fn)
        return rec
    rec["count"] = _defining_count(fn)
    rec["flags"] = _library_identity(fn)
    profiler = _Profiler(keys)
    outputs, mutated = [], set()
    start = time.perf_counter()
    before = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(0.01, float(timeout)))
    try:
        with engine._one_thread():
            for case in cases:
                args = engine._clone(case)
                try:
                    out = profiler.call(fn, args)
                except (_Alarm, KeyboardInterrupt):
                    raise
                except BaseException as err:  # noqa: BLE001 - SystemExit included: the reader's to see
                    rec["error"] = (type(err).__name__, engine._error_text(err))
                    break
                mutated.update(engine._changed(case, args))
                outputs.append(engine.portable(out))
        grad_args = keys.get("grad_args") or []
        if grad_args and rec["error"] is None and not mutated:
            with engine._one_thread():
                rec["grads"] = [engine.gradients(lambda *a: profiler.call(fn, a), case, grad_args)
                                for case in cases]
    except (_Alarm, KeyboardInterrupt):
        rec["error"] = ("TimeoutError", f"the function ran for more than {float(timeout):g} s")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    rec["seconds"] = round(time.perf_counter() - start, 4)
    rec["outputs"], rec["mutated"] = outputs, sorted(mutated)
    rec["flags"] += [h for h in profiler.hits if h not in rec["flags"]]
    if rec["error"] is None or rec["error"][0] != "TimeoutError":
        rec["tampering"] = list(dict.fromkeys(profiler.tampering))
    return rec


def _save(results: dict, path: str) -> None:
    import torch

    tmp = path + ".tmp"
    try:
        torch.save(results, tmp)
    except OSError:  # over the file size limit: drop the outputs that made it so
        for rec in results.values():
            if rec.get("outputs"):
                rec["outputs"], rec["error"] = None, ("OutputTooLarge", "the outputs are too large to be judged")
        torch.save(results, tmp)
    os.replace(tmp, path)


def harvest(namespace: dict, config_path: str) -> None:
    """In the kernel, after the notebook ran: judge_function on each exercise's function, the
    results saved after each exercise (a crash later keeps the ones before)."""
    import torch

    with open(config_path) as f:
        cfg = json.load(f)
    os.unlink(config_path)
    cases = torch.load(cfg["cases"], weights_only=True)
    os.unlink(cfg["cases"])
    engine = _private_engine(cfg["engine"])
    try:  # the builders of module arguments (chapter 3) are registered by the chapters' modules
        import tinyformer.course  # noqa: F401

        engine.BUILDERS.update(sys.modules["tinyformer.course.engine"].BUILDERS)
    except Exception:  # noqa: BLE001 - a notebook that broke its own import: its cases may still run
        pass
    results: dict = {}
    before = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        for name, function in cfg["functions"].items():
            if function not in namespace:
                results[name] = {"found": False}
            else:
                try:
                    results[name] = judge_function(namespace[function], cases[name], cfg["keys"][name],
                                                   cfg["exercise_timeout"], engine)
                except _Alarm:   # the alarm went off just as the exercise ended
                    results[name] = {"found": True, "callable": True, "outputs": [], "mutated": [], "flags": [],
                                     "error": ("TimeoutError", "the function ran out of time"), "seconds": 0.0}
            _save(results, cfg["results"])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
