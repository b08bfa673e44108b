"""Attention's cost against sequence length T: time, memory, and the library vs PyTorch's kernel.

    python benchmarks/attention_cost.py [--max-T 4096] [--repeats 5]

Everything is reported as ratios measured in one run (the machines are shared and noisy):
the time ratio between consecutive T (4.0 when T doubles means quadratic), the bytes of the
(T, T) weight matrix, and the library's time over torch.nn.functional.scaled_dot_product_attention.
Writes benchmarks/results/attention_cost.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from tinyformer import get_device, seed_everything
from tinyformer.attention import causal_mask, scaled_dot_product_attention


def median_seconds(fn, args: tuple, repeats: int) -> float:
    fn(*args)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-T", type=int, default=4096)
    ap.add_argument("--d", type=int, default=64, help="head width d_k")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    seed_everything(0)
    device = get_device()
    rows, prev = [], None
    T = 128
    while T <= a.max_T:
        q, k, v = (torch.randn(1, T, a.d, device=device) for _ in range(3))
        mask = causal_mask(T, device)
        ours = median_seconds(scaled_dot_product_attention, (q, k, v, mask), a.repeats)
        fused = median_seconds(F.scaled_dot_product_attention, (q, k, v, mask), a.repeats)
        weight_bytes = T * T * q.element_size()
        rows.append((T, ours * 1e3, (ours / prev) if prev else float("nan"), weight_bytes / 2**20, ours / fused))
        prev = ours
        T *= 2
    lines = [f"attention cost on {device} (d_k = {a.d}, median of {a.repeats})", "",
             "| T | ms | time ratio to T/2 | weights MiB | library / torch fused |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {T} | {ms:.2f} | {r:.2f} | {mib:.1f} | {f:.2f} |" for T, ms, r, mib, f in rows]
    text = "\n".join(lines) + "\n"
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "attention_cost.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
