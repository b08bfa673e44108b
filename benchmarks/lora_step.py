"""The time of a LoRA training step against a full fine-tuning step, and of an unmerged forward pass
against a merged one, on chapter 9's model.

    python benchmarks/lora_step.py [--quick] [--out PATH]

Chapter 9 fine-tunes chapter 6's English GPT (tinyformer.pretrained: 4 layers, width 128) fully and
with LoRA adapters of rank 8 (on all six linear maps of every block, or on q and v only). Its
claims about time are counts, the same on every machine: a LoRA step does fewer FLOPs than a full
one but launches more tensor operations. This script measures what those counts become in time on
the machine at hand, as ratios measured in one run: for each batch size (16 and 64 windows of 128
tokens), one warm-up step of each kind, then the kinds interleaved (full, LoRA six, LoRA q and v,
full, …) so that changes in the machine's load hit all alike, and the median of the repeats. The
inference rows time one forward pass of a batch (no gradients) with the adapters unmerged and
after merge_lora. The chapter's account: the adapters save FLOPs (no gradients for the frozen
weights) but add memory traffic (each adapter reads its layer's input again and scales and adds a
full-size output), and both grow with the batch, so the ratio of LoRA to full stays about the same
from batch 16 to 64 rather than shrinking as a fixed cost per operation would make it. Two threads
(the machine's cores). Writes benchmarks/results/lora_step.md (or ``--out``) and prints the table.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path

import torch
from train_throughput import load_average  # the same report of the machine's load

from tinyformer.lora import add_lora, merge_lora
from tinyformer.pretrained import english_gpt

THREADS = 2
SIX = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj")
KINDS = {"full fine-tuning": None, "LoRA r 8, all six maps": SIX, "LoRA r 8, q and v": ("q_proj", "v_proj")}
RESULTS = Path(__file__).resolve().parent / "results" / "lora_step.md"


def make(base, targets):
    m = copy.deepcopy(base).train()
    if targets is None:
        return m.requires_grad_(True)
    torch.manual_seed(0)
    return add_lora(m, targets, 8, 8.0)


def training_step(model, opt, x, y) -> float:
    start = time.perf_counter()
    model.loss(x, y).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def forward(model, x) -> float:
    start = time.perf_counter()
    with torch.no_grad():
        model(x)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="batch 2 and 2 repeats (a smoke test)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.set_num_threads(THREADS)
    base, _ = english_gpt()
    repeats, batches = (2, (2,)) if args.quick else (9, (16, 64))
    g = torch.Generator().manual_seed(0)
    rows = []
    for B in batches:
        x = torch.randint(0, 512, (B, 128), generator=g)
        y = torch.randint(0, 512, (B, 128), generator=g)
        models = {k: make(base, t) for k, t in KINDS.items()}
        opts = {k: torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-6)
                for k, m in models.items()}
        times = {k: [] for k in KINDS}
        for k in KINDS:                                  # warm-up
            training_step(models[k], opts[k], x, y)
        for _ in range(repeats):
            for k in KINDS:
                times[k].append(training_step(models[k], opts[k], x, y))
        full = statistics.median(times["full fine-tuning"])
        for k in KINDS:
            med = statistics.median(times[k])
            rows.append((f"training step, batch {B}", k, 1000 * med, med / full))
        adapted = make(base, SIX).eval()
        merged = merge_lora(copy.deepcopy(adapted))
        f_times = {"unmerged": [], "merged": []}
        forward(adapted, x), forward(merged, x)
        for _ in range(repeats):
            f_times["unmerged"].append(forward(adapted, x))
            f_times["merged"].append(forward(merged, x))
        ref = statistics.median(f_times["merged"])
        for k in ("merged", "unmerged"):
            med = statistics.median(f_times[k])
            rows.append((f"forward pass, batch {B}", f"LoRA r 8, all six maps, {k}", 1000 * med, med / ref))
    lines = ["| measured | kind | median (ms) | against the first row of its group |", "| --- | --- | --- | --- |"]
    lines += [f"| {what} | {kind} | {ms:.1f} | {ratio:.2f}× |" for what, kind, ms, ratio in rows]
    note = (f"\n{repeats} interleaved repeats, medians; {THREADS} threads; torch {torch.__version__}; "
            f"load average before: {load_average()}{'; --quick' if args.quick else ''}\n")
    text = "\n".join(lines) + "\n" + note
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
