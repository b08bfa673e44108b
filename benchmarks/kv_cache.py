"""Cached against uncached generation: 256 new tokens after a 1-token prompt, same model, same tokens.

    python benchmarks/kv_cache.py [--quick] [--out PATH]

Issue 12: the chapter 5 GPT at 4 layers, 4 heads, width 128, vocabulary 65 and a 320-token
context (so the window never slides) generates 256 tokens with ``generate(use_cache=False)`` and
with ``generate(use_cache=True)``; the cached run must be at least 5× faster, measured in one run,
and give identical tokens (sampling with the same seeded generator).

Method: ``torch.set_num_threads(2)`` (the machine's cores); one warm-up of each, then the runs
interleaved (uncached, cached, uncached, …) so that changes in the machine's load hit both alike;
medians of the repeats. The ratio is the median uncached time over the median cached time.

At this size a cached step is a few hundred microseconds of small kernels, so the cost of each
call matters more than its arithmetic. The ablation rows show what each measure buys, each row
adding one to the row above it: a straightforward cache (``torch.cat`` to grow, three projection
kernels, ``torch.no_grad``), then storage allocated once, then one stacked q/k/v product, then
inference mode, and last the small-kernel settings ``generate`` uses (oneDNN off, whose exact
GELU costs a fixed ~6 µs a call; one thread for one-row matrices) — which is ``generate`` itself.
Writes benchmarks/results/kv_cache.md (or ``--out``) and prints the table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from train_throughput import load_average  # the same report of the machine's load

from tinyformer.kvcache import KVCache, LayerCache
from tinyformer.model import GPT, GPTConfig
from tinyformer.sampling import generate, sample_next

THREADS = 2
CONFIG = GPTConfig(vocab_size=65, block_size=320, n_layer=4, n_head=4, d_model=128)
NEW_TOKENS, TARGET = 256, 5.0
RESULTS = Path(__file__).resolve().parent / "results" / "kv_cache.md"


# --- the ablation: a straightforward cache, then one measure at a time -------------------------

class GrowingLayer(LayerCache):
    """A straightforward cache: ``torch.cat`` makes new tensors at every step."""

    def __init__(self, k, v, stacked: bool):
        super().__init__(k[:, :, :0], v[:, :, :0])
        self.stacked = stacked

    def append(self, k, v):
        self.k, self.v = torch.cat((self.k, k), dim=2), torch.cat((self.v, v), dim=2)
        self.length = self.max_len = self.k.shape[2]
        self.max_len += 1          # never full: it grows
        return self.k, self.v

    def _project(self, attn, x, start):
        if self.stacked:
            return super()._project(attn, x, start)
        B, T, _ = x.shape          # three kernels, one per projection
        return tuple(p(x).view(B, T, -1, attn.d_head).transpose(1, 2)
                     for p in (attn.q_proj, attn.k_proj, attn.v_proj))


class ThreeKernels(LayerCache):
    """Preallocated storage, three projection kernels."""

    stacked = False

    def _project(self, attn, x, start):
        return GrowingLayer._project(self, attn, x, start)


def make_cache(model, kind: str) -> KVCache:
    cache = model.new_cache(1)
    if kind == "growing":
        cache.layers = [GrowingLayer(layer.k, layer.v, stacked=False) for layer in cache.layers]
    elif kind == "preallocated":
        cache.layers = [ThreeKernels(layer.k, layer.v) for layer in cache.layers]
    return cache


def decode_loop(model, prompt, n: int, kind: str, mode, seed: int) -> torch.Tensor:
    """The cached loop of ``generate`` without its settings: ``mode`` is no_grad or inference."""
    gen = torch.Generator().manual_seed(seed)
    with mode():
        cache = make_cache(model, kind)
        tokens = [prompt]
        logits = model(prompt, cache=cache)[:, -1]
        for step in range(n):
            nxt = sample_next(logits, generator=gen)
            tokens.append(nxt)
            if step < n - 1:
                logits = model(nxt, cache=cache)[:, -1]
        return torch.cat(tokens, dim=1)


def variants(model, prompt, n: int, seed: int) -> dict:
    def gen(use_cache):
        return lambda: generate(model, prompt, n, use_cache=use_cache,
                                generator=torch.Generator().manual_seed(seed))
    return {
        "uncached: generate(use_cache=False)": gen(False),
        "straightforward cache": lambda: decode_loop(model, prompt, n, "growing", torch.no_grad, seed),
        "+ storage allocated once": lambda: decode_loop(model, prompt, n, "preallocated", torch.no_grad,
                                                        seed),
        "+ one stacked q/k/v product": lambda: decode_loop(model, prompt, n, "stacked", torch.no_grad,
                                                           seed),
        "+ inference mode": lambda: decode_loop(model, prompt, n, "stacked", torch.inference_mode, seed),
        "+ small-kernel settings = generate(use_cache=True)": gen(True),
    }


def measure(quick: bool) -> tuple[dict, dict]:
    torch.manual_seed(0)
    model = GPT(CONFIG).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    n, repeats = (16, 1) if quick else (NEW_TOKENS, 7)
    runs = variants(model, prompt, n, seed=1)
    times = {name: [] for name in runs}
    outputs = {name: run() for name, run in runs.items()}       # warm-up, and the tokens
    for _ in range(repeats):                                      # interleaved
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}, outputs


def table(medians: dict, outputs: dict, quick: bool, load: str) -> tuple[str, bool]:
    names = list(medians)
    base, cached = medians[names[0]], medians[names[-1]]
    same = all(torch.equal(outputs[names[0]], out) for out in outputs.values())
    ratio = base / cached
    ok = ratio >= TARGET and same
    n = outputs[names[0]].shape[1] - 1
    c = CONFIG
    lines = [
        f"Generation of {n} tokens after a 1-token prompt, GPT {c.n_layer}L {c.n_head}H d{c.d_model} "
        f"V{c.vocab_size} block {c.block_size}, torch {torch.__version__}, {THREADS} threads"
        f"{', --quick (not a measurement)' if quick else ''}. Load average (1, 5, 15 min): {load}.",
        "",
        "| decoding | total (ms) | per token (ms) | speed-up over uncached |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name in names:
        t = medians[name]
        lines.append(f"| {name} | {t * 1e3:.1f} | {t / n * 1e3:.3f} | {base / t:.1f}× |")
    lines += [
        "",
        f"Cached over uncached: **{ratio:.1f}×** (target ≥ {TARGET:.0f}×), identical tokens in every "
        f"row: {'yes' if same else 'NO'} → {'pass' if ok else 'FAIL'}.",
        "Each ablation row adds one measure to the row above it; the last row is the library's "
        "generate(use_cache=True).",
    ]
    return "\n".join(lines) + "\n", ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="16 tokens, one repeat (a smoke test)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    torch.set_num_threads(THREADS)
    start_load = load_average()
    medians, outputs = measure(a.quick)
    text, ok = table(medians, outputs, a.quick, f"{start_load} at start, {load_average()} at end")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text, encoding="utf-8")
    print(text, end="")
    return 0 if ok or a.quick else 1


if __name__ == "__main__":
    raise SystemExit(main())
