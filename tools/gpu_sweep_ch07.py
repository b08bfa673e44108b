"""Chapter 7's sweep at GPU sizes: the chapter's grid extended to wider models and longer budgets.

    python tools/gpu_sweep_ch07.py            (on a machine with a CUDA GPU)
    python tools/gpu_sweep_ch07.py --check    (two tiny runs on the CPU, into a temporary file)

Trains the chapter's GPT (2 blocks, 2 heads, a 24-token window, batches of 32 windows, a cosine
schedule ending with the run, peak learning rate 1e-2, float32) on the synthetic language, exactly
as the chapter's CPU grid does (tinyformer.experiments.ch07.run), at every width in WIDTHS and
budget in STEPS with seeds 0 and 1, and writes lib/tinyformer/measured/<gpu>-ch07.json: the
machine, torch's version, the date, the recipe and every run (width, N, N_total, D, steps, seed,
held-out loss, seconds). The sweep keeps every finished run in that file as it goes, so an
interrupted run resumes. CI never runs this (it has no GPU); the --check mode is tested.
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import torch

from tinyformer import seed_everything
from tinyformer.experiments import ch07

MEASURED = Path(__file__).resolve().parents[1] / "lib" / "tinyformer" / "measured"
WIDTHS = (64, 128, 256, 512)
STEPS = (400, 800, 1600, 3200)
SEEDS = (0, 1)
CHECK = {"widths": (8, 12), "steps": (2,), "seeds": (0,), "n_train": 300, "n_val": 50}


def sweep(widths, steps, seeds, device, out: Path, n_train=100_000, n_val=2_000) -> dict:
    """Run the grid on ``device``, timing each run, and write ``out``; returns what it wrote."""
    seed_everything(0)
    train_ids, val_ids, vocab = ch07.word_data(n_train=n_train, n_val=n_val)
    per_step = ch07.BATCH_SIZE * ch07.BLOCK_SIZE
    grid = [(d, s * per_step, seed) for seed in seeds for d in widths for s in steps]
    runs_path = out.with_suffix(".runs.json")            # ch07.sweep's resumable record
    runs = []
    for d_model, tokens, seed in grid:
        start = time.perf_counter()
        r = ch07.sweep([(d_model, tokens, seed)], train_ids, val_ids, len(vocab), path=runs_path,
                       progress=False, device=device)[0]
        if device.type == "cuda":
            torch.cuda.synchronize()
        runs.append({**r, "seconds": round(time.perf_counter() - start, 2)})
        print(f"width {d_model:4d}, {r['steps']:5d} steps, seed {seed}: loss {r['loss']:.4f}", flush=True)
    record = {
        "script": "tools/gpu_sweep_ch07.py",
        "device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__, "python": platform.python_version(), "date": date.today().isoformat(),
        "recipe": {"n_layer": ch07.N_LAYER, "n_head": ch07.N_HEAD, "block_size": ch07.BLOCK_SIZE,
                   "batch_size": ch07.BATCH_SIZE, "lr": 1e-2, "schedule": "cosine, warm-up steps // 10",
                   "dtype": "float32", "train_sentences": n_train, "val_sentences": n_val},
        "note": "seconds include the first run's warm-up (CUDA context, kernels); a resumed run's are 0",
        "runs": runs,
    }
    out.write_text(json.dumps(record, indent=1) + "\n")
    runs_path.unlink(missing_ok=True)
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="two tiny runs on the CPU, to a temporary file")
    args = parser.parse_args(argv)
    if args.check:
        out = Path(tempfile.mkdtemp()) / "check-ch07.json"
        sweep(CHECK["widths"], CHECK["steps"], CHECK["seeds"], torch.device("cpu"), out,
              n_train=CHECK["n_train"], n_val=CHECK["n_val"])
        print(f"wrote {out}")
        return 0
    if not torch.cuda.is_available():
        print("no CUDA GPU here: run this on a GPU machine (or --check on the CPU)", file=sys.stderr)
        return 2
    name = re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name().lower()).strip("-")
    name = next((k for k in ("h100", "h200", "a100", "l4", "t4") if k in name), name)
    out = MEASURED / f"{name}-ch07.json"
    sweep(WIDTHS, STEPS, SEEDS, torch.device("cuda"), out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
