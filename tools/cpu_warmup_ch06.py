"""Chapter 6's warm-up experiment over seeds, with its controls, on the CPU.

    TINYFORMER_NUM_THREADS=1 python tools/cpu_warmup_ch06.py [--seeds 0 1 2]

The chapter trains its 12-layer, 64-wide model four ways on one seed (post- or
pre-norm, with or without 150 warm-up steps), the 2 x 2 design. Three seeds of
every arm, and the controls (post-norm without warm-up at a lower rate, 3e-4,
and with the library's default gradient clipping at 1; a 30-step warm-up on
both placements; the two rates swapped after step 30), cost about 45 minutes
of CPU: more than a chapter may spend. This script runs them and writes
lib/tinyformer/measured/cpu-ch06-warmup.json, which the chapter reads; the
chapter re-runs seed 0 of the four arms itself (tests/test_measured.py checks
that this file's seed 0 agrees with a fresh run of one arm).

Per run: the training loss of every step, the gradient norm before clipping,
and the prediction spread (how much the predicted distribution varies from
position to position of 1,024 validation positions; 0 when the model ignores
its input) every 10 steps. It also runs the chapter's main configuration with
and without clipping (the chapter's clip question). Results are written after
every run; a re-run skips the runs already in the file (delete it to start
over). Run under the pinned numerics (lib/tinyformer/numerics.env).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import platform
import time
from datetime import date
from pathlib import Path

import torch
from gpu_sizes import corpus  # the chapter's corpus: BPE-512, every 10th paragraph held out

from tinyformer import seed_everything, training
from tinyformer.data import get_batch
from tinyformer.model import GPT, GPTConfig
from tinyformer.setup import _num_threads
from tinyformer.training import train

OUT = (Path(__file__).resolve().parents[1] / "lib" / "tinyformer" / "measured"
       / "cpu-ch06-warmup.json")
DEEP = dict(block_size=64, n_layer=12, n_head=4, d_model=64)
MAIN = dict(block_size=128, n_layer=4, n_head=4, d_model=128)
# name: (norm, warm-up steps, lr, clip, (n, lr of steps 1-n) when it differs)
ARMS = {
    "post": ("post", 0, 1e-3, None, None),
    "post-warmup": ("post", 150, 1e-3, None, None),
    "pre": ("pre", 0, 1e-3, None, None),
    "pre-warmup": ("pre", 150, 1e-3, None, None),
    "post-lr3e-4": ("post", 0, 3e-4, None, None),
    "post-clip1": ("post", 0, 1e-3, 1.0, None),
    # a short warm-up, 10 % of the run, on both placements
    "post-warmup30": ("post", 30, 1e-3, None, None),
    "pre-warmup30": ("pre", 30, 1e-3, None, None),
    "post-warmup60": ("post", 60, 1e-3, None, None),   # Exercise 6.4's prediction
    # which steps' rate decides the stay: the two rates swapped after step 30
    "post-lr3e-4-first30": ("post", 0, 1e-3, None, (30, 3e-4)),
    "post-lr3e-4-after30": ("post", 0, 3e-4, None, (30, 1e-3)),
    # and after step 10: the rate of steps 11-30 is what the two pairs share
    "post-lr3e-4-first10": ("post", 0, 1e-3, None, (10, 3e-4)),
    "post-lr3e-4-after10": ("post", 0, 3e-4, None, (10, 1e-3)),
}
SPREAD_EVERY = 10


def _r(values):  # six significant digits: the file stays small, the chapter prints fewer
    return [float(f"{v:.6g}") for v in values]


def prediction_spread(m, x):
    with torch.no_grad():
        p = m(x).softmax(-1).flatten(0, 1)  # (B·T, V)
    return 0.5 * (p - p.mean(0)).abs().sum(-1).mean().item()


@contextlib.contextmanager
def _first_steps_at(first):
    """With ``first`` = (n, lr), train's cosine schedule (which, with min_lr =
    lr and no warm-up, is the constant lr) gives that lr to steps 1-n instead."""
    if first is None:
        yield
        return
    n, first_lr = first

    def switched(step, max_lr, warmup, total, min_lr):
        return first_lr if step <= n else original(step, max_lr, warmup, total, min_lr)

    original = training.cosine_lr
    training.cosine_lr = switched
    try:
        yield
    finally:
        training.cosine_lr = original


def warmup_run(arm, seed, bpe, train_ids, xv, steps=300):
    norm, warmup, lr, clip, first = ARMS[arm]
    spreads, calls = {}, {"n": 0}

    def loss_fn(m, xb, yb):  # called once per step, before the step's update
        calls["n"] += 1
        if (calls["n"] - 1) % SPREAD_EVERY == 0:
            spreads[calls["n"]] = prediction_spread(m, xv)
        return m.loss(xb, yb)

    seed_everything(seed)
    m = GPT(GPTConfig(vocab_size=bpe.vocab_size, **DEEP, norm=norm))
    schedule = "cosine" if warmup or first else "constant"
    with _first_steps_at(first):
        h = train(m, train_ids, steps=steps, batch_size=16, lr=lr,
                  schedule=schedule, warmup=warmup, min_lr=lr, clip=clip,
                  seed=seed, loss_fn=loss_fn, progress=False)
    return {"loss": _r(h["loss"]), "grad_norm": _r(h["grad_norm"]),
            "spread_step": list(spreads), "spread": _r(spreads.values())}


def main_run(clip, seed, bpe, train_ids, val_ids):
    seed_everything(seed)
    m = GPT(GPTConfig(vocab_size=bpe.vocab_size, **MAIN))
    h = train(m, train_ids, steps=600, batch_size=16, lr=2e-3, warmup=50,
              clip=clip, seed=seed, val_data=val_ids, eval_every=100,
              eval_batches=20, progress=False)
    return {"loss": _r(h["loss"]), "grad_norm": _r(h["grad_norm"]),
            "val_step": h["val_step"], "val_loss": _r(h["val_loss"])}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 0])
    parser.add_argument("--main-seeds", type=int, nargs="*", default=[0, 1, 2])
    args = parser.parse_args()
    data = json.loads(OUT.read_text()) if OUT.exists() else {"runs": {}}
    data.update(
        about="Chapter 6's warm-up experiment (12 layers, 64 wide, 300 steps of 16 "
              "windows of 64 tokens, lr 1e-3, no clipping unless named) over seeds, "
              "and the main run with and without clipping; made by "
              "tools/cpu_warmup_ch06.py under the pinned numerics",
        cpu=platform.processor() or platform.machine(), torch=torch.__version__,
        threads=_num_threads(), date=str(date.today()),  # what seed_everything will set
        arms={k: dict(zip(("norm", "warmup", "lr", "clip", "first_steps"), v))
              for k, v in ARMS.items()},
        spread_every=SPREAD_EVERY)
    bpe, train_ids, val_ids = corpus()
    xv, _ = get_batch(val_ids, 16, 64, torch.Generator().manual_seed(0))
    todo = [(f"{arm}/seed{s}", lambda a=arm, s=s: warmup_run(a, s, bpe, train_ids, xv))
            for s in args.seeds for arm in ARMS]
    todo += [(f"main-{'clip1' if c else 'noclip'}/seed{s}",
              lambda c=c, s=s: main_run(c, s, bpe, train_ids, val_ids))
             for s in args.main_seeds for c in (1.0, None)]
    for name, fn in todo:
        if name in data["runs"]:
            continue
        start = time.perf_counter()
        data["runs"][name] = fn()
        data["runs"][name]["seconds"] = round(time.perf_counter() - start, 1)
        OUT.write_text(json.dumps(data, indent=1) + "\n")
        print(f"{name}: {data['runs'][name]['seconds']} s", flush=True)


if __name__ == "__main__":
    main()
