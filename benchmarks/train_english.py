"""What the chapter 6 configuration learns of English in a fixed CPU budget.

    python benchmarks/train_english.py [--seconds 90] [--quick] [--out PATH]

Issue 11: the validation loss the chapter's configuration reaches in a fixed CPU budget (90 s by
default) on the English corpus that needs no download (``english_split()``: CPython's
documentation prose, every 10th paragraph held out), with the tokens per second and the rate of a
2048² float32 matmul measured in the same run.

Configuration: a byte-level BPE of 512 tokens trained on the training split; the GPT of chapter 5
at 4 layers, 4 heads, width 128, 128-token windows, batch 16; AdamW (lr 2e-3, β = (0.9, 0.95),
weight decay 0.1), 50 warm-up steps and cosine decay to lr/10, gradient clipping at 1. The number
of steps is the budget divided by the time of a step (25 steps timed minus 5, so that start-up
costs are left out), so the run lasts about the budget.
The loss is reported per token and per character of text (the tokenizer's compression makes the
two differ), and as perplexity per token. Writes benchmarks/results/train_english.md.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import torch

from tinyformer import seed_everything
from tinyformer.data import english_split
from tinyformer.model import GPT, GPTConfig, training_flops_per_token
from tinyformer.tokenizers import BPETokenizer
from tinyformer.training import train

VOCAB, T, BATCH, LR, WARMUP = 512, 128, 16, 2e-3, 50
RESULTS = Path(__file__).resolve().parent / "results" / "train_english.md"


def matmul_gflops(n: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=90.0)
    ap.add_argument("--quick", action="store_true", help="a 5-second budget (a smoke test)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    budget = 5.0 if a.quick else a.seconds
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    peak = matmul_gflops(1024 if a.quick else 2048)
    train_text, val_text = english_split()
    tok = BPETokenizer.train(train_text, VOCAB)
    train_ids, val_ids = (torch.tensor(tok.encode(t)) for t in (train_text, val_text))
    config = GPTConfig(vocab_size=tok.vocab_size, block_size=T, n_layer=4, n_head=4, d_model=128)

    def probe_seconds(n: int) -> float:    # the speed, on a throw-away copy
        seed_everything(0)
        start = time.perf_counter()
        train(GPT(config), train_ids, steps=n, batch_size=BATCH, lr=LR, warmup=2, progress=False)
        return time.perf_counter() - start

    step_s = (probe_seconds(25) - probe_seconds(5)) / 20   # without the start-up cost
    steps = max(10, int(budget / step_s))

    seed_everything(0)
    model = GPT(config)
    start = time.perf_counter()
    hist = train(model, train_ids, steps=steps, batch_size=BATCH, lr=LR, warmup=min(WARMUP, steps // 5),
                 val_data=val_ids, eval_every=steps, eval_batches=20, progress=False)
    seconds = time.perf_counter() - start
    val = hist["val_loss"][-1]
    chars_per_token = len(val_text) / len(val_ids)
    tok_s = steps * BATCH * T / seconds
    gflops = tok_s * training_flops_per_token(config) / 1e9
    text = "\n".join([
        f"Chapter 6 configuration on English (pydoc_data prose), budget {budget:.0f} s"
        f"{', --quick (not a measurement)' if a.quick else ''}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads.",
        "",
        "| steps | seconds | tokens/s | model GFLOP/s | matmul GFLOP/s | val loss (nats/token) "
        "| nats/char | perplexity |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {steps:,} | {seconds:.1f} | {tok_s:,.0f} | {gflops:.1f} | {peak:.1f} | {val:.3f} "
        f"| {val / chars_per_token:.3f} | {math.exp(val):.1f} |",
        "",
        f"BPE of {tok.vocab_size} tokens ({chars_per_token:.2f} characters per token on the "
        f"validation text); GPT 4L 4H d128, T {T}, batch {BATCH}; training loss at the end "
        f"{sum(hist['loss'][-20:]) / 20:.3f} nats/token.",
    ]) + "\n"
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text, encoding="utf-8")
    print(text, end="")
    return 0 if math.isfinite(val) else 1


if __name__ == "__main__":
    raise SystemExit(main())
