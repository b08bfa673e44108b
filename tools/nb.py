"""Keep the book's notebook pairs honest.

    python tools/nb.py execute [book/NN-slug.md ...]   execute each chapter from its .md source,
                                                      write the paired .ipynb with outputs
                                                      (byte-identical on re-execution), record
                                                      the run time in book/timings.json (with the
                                                      time of a fixed workload, "_calibration")
    python tools/nb.py check-sync                      fail if any .md/.ipynb pair disagrees
    python tools/nb.py readers                         write the reader notebooks (notebooks/) and
                                                      the exercise notebooks (notebooks/exercises/)
    python tools/nb.py check-readers [--html DIR]      fail if a generated notebook is missing, stale
                                                      or holds MyST syntax; with --html (the built
                                                      website, _build/html) also if a figure or
                                                      equation number differs from the website's

Chapters run in their own directory (book/) on the CPU, in a kernel with the pinned numerics
(tinyformer/numerics.env); the Preface runs last because it quotes the other chapters' run times.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
TIMINGS = BOOK / "timings.json"
PREFACE = "00-"


def chapters() -> list[Path]:
    return sorted(BOOK.glob("[0-9][0-9]-*.md"))


def _cells(nb) -> list[tuple]:
    """What must agree between the two files of a pair: cell kinds, sources and tags."""
    return [(c.cell_type, c.source.strip(), tuple(c.get("metadata", {}).get("tags", []))) for c in nb.cells]


def check_sync() -> int:
    bad = 0
    for md in chapters():
        ipynb = md.with_suffix(".ipynb")
        if not ipynb.exists():
            print(f"{ipynb.relative_to(ROOT)} is missing: run `make execute`")
            bad += 1
            continue
        a = _cells(jupytext.read(md))
        b = _cells(nbformat.read(ipynb, as_version=4))
        if a != b:
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            print(f"{md.relative_to(ROOT)} and {ipynb.name} disagree (first at cell {first}): run `make execute`")
            bad += 1
    print(f"check-sync: {len(chapters())} pairs, {bad} out of sync")
    return 1 if bad else 0


def execute(md: Path, timeout: int = 600) -> float:
    from tinyformer.setup import pinned_env

    nb = jupytext.read(md)
    # Stored outputs are the CPU reference, made with the pinned numerics (tinyformer/numerics.env)
    # whatever the machine that makes them, so that nbval reproduces them on any x86-64 CPU.
    env = pinned_env()
    env["CUDA_VISIBLE_DEVICES"] = ""
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(md.parent)}}).execute(env=env)
    seconds = time.perf_counter() - start
    nb.metadata.pop("widgets", None)
    for i, cell in enumerate(nb.cells):  # stable ids, so re-execution is byte-identical
        cell.id = hashlib.sha1(f"{i}:{cell.source}".encode()).hexdigest()[:8]
    jupytext.write(nb, md.with_suffix(".ipynb"))
    jupytext.write(nb, md, fmt="md:myst")  # same inputs; rewrites the pairing header identically
    return seconds


# A fixed workload, run with the pinned numerics before the chapters: 20 training steps of a 4-layer
# GPT. Its time says how fast the machine that made book/timings.json is, so that the chapters'
# three-minute budget can be checked against the machine the budget was set on (tests/test_notebooks.py).
CALIBRATION = """
import time, torch, tinyformer
from tinyformer.model import GPT, GPTConfig
tinyformer.seed_everything(0)
model = GPT(GPTConfig(vocab_size=128, block_size=128, n_layer=4, n_head=4, d_model=128))
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
gen = torch.Generator().manual_seed(0)
def step():
    x = torch.randint(0, 128, (16, 128), generator=gen)
    loss = torch.nn.functional.cross_entropy(model(x)[:, :-1].reshape(-1, 128), x[:, 1:].reshape(-1))
    opt.zero_grad(); loss.backward(); opt.step()
for _ in range(3):
    step()
start = time.perf_counter()
for _ in range(20):
    step()
print(time.perf_counter() - start)
"""


def calibrate(repeats: int = 3) -> float:
    """Seconds the fixed workload takes here, pinned: the fastest of ``repeats`` runs."""
    import subprocess

    from tinyformer.setup import pinned_env

    runs = [float(subprocess.run([sys.executable, "-c", CALIBRATION], env=pinned_env(), check=True,
                                 capture_output=True, text=True).stdout) for _ in range(repeats)]
    return round(min(runs), 2)


def run_execute(paths: list[str]) -> int:
    targets = [Path(p).resolve() for p in paths] if paths else chapters()
    preface = [p for p in chapters() if p.name.startswith(PREFACE)]
    if any(not p.name.startswith(PREFACE) for p in targets):  # new run times: the Preface quotes them
        targets = list(dict.fromkeys(targets + preface))
    targets.sort(key=lambda p: (p.name.startswith(PREFACE), p.name))  # the Preface last
    timings = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
    if any(not p.name.startswith(PREFACE) for p in targets):  # the times below are this machine's
        timings["_calibration"] = calibrate()
        print(f"calibration: {timings['_calibration']:.2f} s", flush=True)
    for md in targets:
        if md.name.startswith(PREFACE):
            TIMINGS.write_text(json.dumps(timings, indent=1, sort_keys=True) + "\n")
        print(f"executing {md.relative_to(ROOT)} ...", flush=True)
        seconds = execute(md)
        recorded = timings.get(md.stem)
        if recorded is None or abs(seconds - recorded) > 0.25 * recorded:  # keep files stable under noise
            timings[md.stem] = round(seconds, 1)
        print(f"  {seconds:.1f} s", flush=True)
    TIMINGS.write_text(json.dumps(timings, indent=1, sort_keys=True) + "\n")
    return 0


def readers() -> int:
    from tinyformer.course.reader import ReaderError, write_readers

    try:
        written = write_readers(ROOT)
    except ReaderError as err:
        print(f"readers: {err}")
        return 1
    for path in written:
        print(f"wrote {path.relative_to(ROOT)}")
    print(f"readers: {len(written)} notebook(s) written")
    return 0


def check_readers(html: str | None = None) -> int:
    from tinyformer.course.reader import check_readers as problems_in

    problems = problems_in(ROOT, Path(html) if html else None)
    for line in problems:
        print(line)
    print(f"check-readers: {len(problems)} problem(s)")
    return 1 if problems else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("execute")
    ex.add_argument("paths", nargs="*")
    sub.add_parser("check-sync")
    sub.add_parser("readers")
    cr = sub.add_parser("check-readers")
    cr.add_argument("--html", help="the built website (_build/html): compare figure and equation numbers")
    a = ap.parse_args(argv)
    if a.cmd == "execute":
        return run_execute(a.paths) or readers()
    if a.cmd == "readers":
        return readers()
    if a.cmd == "check-readers":
        return check_readers(a.html)
    return check_sync()


if __name__ == "__main__":
    sys.exit(main())
