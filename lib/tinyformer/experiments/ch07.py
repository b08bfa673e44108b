"""Chapter 7 (scaling laws): a laboratory of small runs on the synthetic language.

The chapter fits scaling laws to runs the reader trains: GPTs of a few widths, each trained with
its own cosine schedule on a given number of tokens of :func:`~tinyformer.data.synthetic_corpus`'s
language, read one word at a time (:func:`word_data`), and scored on held-out sentences. The
language can be generated without end, so a run never sees a sentence twice unless it is asked to,
and its entropy is known from its grammar (:func:`~tinyformer.data.synthetic_entropy`): the floor
a fitted irreducible loss can be checked against. :func:`run` trains one model and returns its
size, its tokens, its compute and its held-out loss; :func:`sweep` runs a grid with a progress
bar, keeping every finished run in a JSON file so an interrupted sweep resumes where it stopped.
:func:`window_floor` bounds the best loss a model that sees only its window can reach.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from tinyformer.data import synthetic_corpus, words
from tinyformer.model import GPT, GPTConfig, training_flops_per_token
from tinyformer.scaling import count_params, training_flops
from tinyformer.training import estimate_loss, train
from tinyformer.validation import check_int

#: The shape every run shares: only the width changes (n_layer and the context stay fixed, so the
#: parameter count grows as d_model²).
N_LAYER, N_HEAD, BLOCK_SIZE, BATCH_SIZE = 2, 2, 24, 32


def word_data(n_train: int = 100_000, n_val: int = 2_000, seed: int = 0):
    """Token ids of ``n_train`` training and ``n_val`` validation sentences of the synthetic
    language, drawn with different seeds (the language is small: most validation sentences also
    occur among the training ones), one token per word or mark.
    Returns ``(train_ids, val_ids, vocab)``; the vocabulary is every word either half uses."""
    n_train, n_val = check_int("n_train", n_train), check_int("n_val", n_val)
    train_words = words(synthetic_corpus(n_train, seed=seed).text)
    val_words = words(synthetic_corpus(n_val, seed=seed + 10_000).text)
    vocab = sorted(set(train_words) | set(val_words))
    index = {w: i for i, w in enumerate(vocab)}
    as_ids = lambda ws: torch.tensor([index[w] for w in ws])  # noqa: E731
    return as_ids(train_words), as_ids(val_words), vocab


def config_for(d_model: int, vocab_size: int) -> GPTConfig:
    """The sweep's GPT of width ``d_model`` (2 layers, 2 heads, a 24-token window)."""
    return GPTConfig(vocab_size=vocab_size, block_size=BLOCK_SIZE, n_layer=N_LAYER, n_head=N_HEAD,
                     d_model=check_int("d_model", d_model))


def run(d_model: int, tokens: int, train_ids, val_ids, vocab_size: int, seed: int = 0,
        lr: float = 1e-2, device=None) -> dict:
    """Train one GPT of width ``d_model`` on ``tokens`` training tokens (rounded down to whole
    steps of 32 x 24 tokens) with a cosine schedule that ends with the run, and return
    ``{"d_model", "N" (non-embedding parameters), "N_total", "D" (tokens seen), "C" (6·N·D),
    "C_full" (the FLOPs torch counts: :func:`flops_per_token` · D), "steps", "seed", "lr",
    "loss" (held-out, nats per token)}``. On ``device`` (default: the CPU) the run stays in float32,
    so that a GPU's runs follow the same recipe as the CPU's."""
    tokens = check_int("tokens", tokens, minimum=BATCH_SIZE * BLOCK_SIZE)
    steps = tokens // (BATCH_SIZE * BLOCK_SIZE)
    torch.manual_seed(seed)
    model = GPT(config_for(d_model, vocab_size))
    if device is not None:
        model = model.to(device)
    train(model, train_ids, steps=steps, batch_size=BATCH_SIZE, lr=lr, warmup=max(steps // 10, 1),
          weight_decay=0.0, eval_every=steps, eval_batches=1, seed=seed, progress=False, amp=False)
    N, D = count_params(model), steps * BATCH_SIZE * BLOCK_SIZE
    loss = estimate_loss(model, val_ids, batch_size=64, block_size=BLOCK_SIZE, n_batches=20)
    return {"d_model": d_model, "N": N, "N_total": count_params(model, non_embedding=False), "D": D,
            "C": training_flops(N, D), "C_full": flops_per_token(d_model, vocab_size) * D, "steps": steps,
            "seed": seed, "lr": lr, "loss": loss}


def flops_per_token(d_model: int, vocab_size: int) -> int:
    """Training FLOPs per token of the sweep's GPT of width ``d_model``, as torch's FLOP counter
    counts them: every weight that multiplies (the LM head included) and attention's two products
    over the whole window (:func:`~tinyformer.model.training_flops_per_token`). For these small
    widths this is far more than ``6·N``, whose ``N`` leaves out the head and attention."""
    return training_flops_per_token(config_for(d_model, vocab_size))


def window_floor(ids, entropy_rate: float, block_size: int = BLOCK_SIZE,
                 orders: int = 3) -> float:
    """A lower bound on the mean loss over a window's ``block_size``
    predictions for any model that sees only the window, on a stationary
    stream ``ids`` whose entropy rate (nats per token, given the whole
    past) is ``entropy_rate``.

    The prediction at position ``t`` sees ``t + 1`` tokens. For
    ``t < orders`` its loss is at least the entropy of the next token given
    the ``t + 1`` before it, estimated from ``ids``'s n-gram counts
    (plug-in estimates, which err low, so the bound stays a bound); every
    later prediction pays at least ``entropy_rate``."""
    block_size = check_int("block_size", block_size)
    orders = check_int("orders", orders, minimum=0)
    if orders >= block_size:
        raise ValueError(f"orders must be below block_size={block_size}, "
                         f"got {orders}")
    if not (isinstance(entropy_rate, (int, float)) and entropy_rate >= 0):
        raise ValueError(f"entropy_rate must be a non-negative number of "
                         f"nats, got {entropy_rate!r}")
    x = torch.as_tensor(ids).flatten().long()
    if len(x) < orders + 2:
        raise ValueError(f"ids must hold at least orders + 2 = {orders + 2} "
                         f"tokens, got {len(x)}")
    base = int(x.max()) + 1
    if base ** (orders + 1) >= 2 ** 63:
        raise ValueError(f"orders={orders} is too many for a vocabulary of "
                         f"{base}: each {orders + 1}-gram must fit one "
                         f"64-bit number")

    def joint(k):  # plug-in entropy of k consecutive tokens, as one number
        n = len(x) - k + 1
        code = torch.zeros(n, dtype=torch.int64)
        for j in range(k):
            code = code * base + x[j:n + j]
        p = torch.unique(code, return_counts=True)[1].double() / n
        return float(-(p * p.log()).sum())

    H = [0.0] + [joint(k) for k in range(1, orders + 2)]
    # the prediction at t < orders sees t + 1 tokens
    early = [max(H[t + 2] - H[t + 1], entropy_rate) for t in range(orders)]
    return (sum(early) + (block_size - orders) * entropy_rate) / block_size


def sweep(grid, train_ids, val_ids, vocab_size: int, path=None, progress: bool = True,
          device=None) -> list[dict]:
    """:func:`run` for every ``(d_model, tokens, seed)`` in ``grid``, in order. With ``path``,
    each finished run is appended to that JSON file and a run already there is read back instead
    of trained again, so an interrupted sweep loses at most the run in progress. ``device``
    is passed to :func:`run`."""
    grid = [tuple(g) for g in grid]
    done = {}
    if path is not None and Path(path).exists():
        for r in json.loads(Path(path).read_text()):
            done[(r["d_model"], r["tokens"], r["seed"])] = r
    results = []
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(grid), desc="sweep", unit="run", mininterval=2.0)  # a notebook keeps every redraw
    for d_model, tokens, seed in grid:
        key = (d_model, tokens, seed)
        if key not in done:
            r = run(d_model, tokens, train_ids, val_ids, vocab_size, seed=seed, device=device)
            done[key] = {**r, "tokens": tokens}
            if path is not None:
                tmp = Path(f"{path}.tmp")
                tmp.write_text(json.dumps(list(done.values())))
                os.replace(tmp, path)               # atomic: a kill never leaves half a file
        results.append(done[key])
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    return results


__all__ = ["BATCH_SIZE", "BLOCK_SIZE", "N_HEAD", "N_LAYER", "config_for", "flops_per_token", "run", "sweep",
           "window_floor", "word_data"]
