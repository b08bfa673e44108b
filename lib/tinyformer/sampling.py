"""Chapter 5: decoding, turning next-token logits into text.

A language model gives, at every position, logits over the vocabulary
for the next token. Decoding repeats one step: run the model on the
context, take the last position's logits ``(B, V)``, pick a token, append
it. How the token is picked is the whole difference between the methods:

* **greedy** takes the most likely token (``top_k=1``): deterministic,
  and prone to loops;
* **temperature** divides the logits by ``temperature`` (the book's τ)
  before the softmax: τ < 1 sharpens the distribution, τ > 1 flattens it;
* **top-k** keeps only the ``k`` most likely tokens;
* **top-p** (nucleus) keeps the smallest set of most likely tokens whose
  probability reaches ``p``.

The order is fixed: temperature first, then top-k, then top-p, then a
softmax over the tokens that are left (so their probabilities are
renormalised to sum to 1). Sampling goes through ``torch.multinomial``
with an optional ``torch.Generator``, so a seeded generator reproduces a
sample exactly without touching the global random state.

Ties are broken by token index everywhere: among equal logits the lowest
index is kept first (top-k and top-p) and chosen first (greedy).
"""

from __future__ import annotations

import math
import numbers
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F

from tinyformer.validation import check_int


def _check_temperature(temperature) -> float:
    if (isinstance(temperature, bool)
            or not isinstance(temperature, numbers.Real)):
        raise TypeError(f"temperature must be a number, "
                        f"got {type(temperature).__name__}")
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number > 0, "
                         f"got {temperature!r}")
    return float(temperature)


def _check_p(name: str, p) -> float:
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise TypeError(f"{name} must be a number in (0, 1], "
                        f"got {type(p).__name__}")
    if not 0 < p <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {p!r}")
    return float(p)


def _check_logits(logits) -> None:
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a tensor, "
                        f"got {type(logits).__name__}")
    if logits.dim() == 0 or logits.size(-1) == 0:
        raise ValueError(f"logits must have a non-empty last (vocabulary) "
                         f"dimension, got shape {tuple(logits.shape)}")
    if not logits.is_floating_point():
        raise TypeError(f"logits must be floating point, got {logits.dtype}")


def apply_temperature(logits: torch.Tensor,
                      temperature: float) -> torch.Tensor:
    """``logits / temperature``: below 1 sharpens, above 1 flattens.
    ``(..., V)`` -> ``(..., V)``."""
    _check_logits(logits)
    return logits / _check_temperature(temperature)


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Set all but the ``k`` largest logits of each row to ``-inf``:
    ``(..., V)`` -> ``(..., V)``.

    Exactly ``k`` tokens survive: when several logits tie with the k-th
    largest, the lowest indices are kept. ``k >= V`` keeps every token.
    """
    _check_logits(logits)
    k = check_int("k", k)
    # a stable sort keeps equal logits in index order, so ties at the
    # k-th value are resolved in favour of the lowest indices
    order = logits.sort(dim=-1, descending=True, stable=True).indices
    drop = torch.zeros_like(logits, dtype=torch.bool)   # (..., V)
    drop.scatter_(-1, order[..., k:], True)             # all but the top k
    return logits.masked_fill(drop, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Set every logit outside the nucleus to ``-inf``: ``(..., V)`` ->
    ``(..., V)``.

    The nucleus is the smallest set of most likely tokens whose total
    probability reaches ``p`` (cumulative ``>= p``); the token that
    crosses ``p`` is inside, so the most likely token is always kept.
    Among tokens of equal probability the lowest index counts as more
    likely. ``p = 1`` keeps every token.
    """
    _check_logits(logits)
    p = _check_p("p", p)
    if p == 1:  # rounding in the cumulative sum must not drop a tail
        return logits.clone()
    sorted_logits, order = logits.sort(dim=-1, descending=True, stable=True)
    # at least float32: a bfloat16 cumulative sum misplaces the boundary
    dtype = torch.promote_types(logits.dtype, torch.float32)
    probs = sorted_logits.softmax(dim=-1, dtype=dtype)  # (..., V) sorted
    # mass of the tokens strictly before each one: a token is kept while
    # the nucleus in front of it has not yet reached p
    before = F.pad(probs.cumsum(dim=-1)[..., :-1], (1, 0))
    drop_sorted = before >= p                           # (..., V) sorted
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to V order
    return logits.masked_fill(drop, float("-inf"))


def _check_sampling(temperature, top_k, top_p) -> None:
    _check_temperature(temperature)
    if top_k is not None:
        check_int("top_k", top_k)
    if top_p is not None:
        _check_p("top_p", top_p)


def next_token_distribution(logits: torch.Tensor, temperature: float = 1.0,
                            top_k: int | None = None,
                            top_p: float | None = None) -> torch.Tensor:
    """The probabilities the next token is drawn from, shape ``(B, V)``.

    Temperature divides the logits first, so it changes which tokens the
    nucleus holds; top-k, then top-p, remove tokens; the softmax then
    renormalises over the tokens that are left.
    """
    _check_sampling(temperature, top_k, top_p)
    logits = apply_temperature(logits, temperature)     # (B, V)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return logits.softmax(dim=-1)                       # (B, V)


def sample_next(logits: torch.Tensor, temperature: float = 1.0,
                top_k: int | None = None, top_p: float | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of ``logits`` ``(B, V)``, shape ``(B, 1)``."""
    _check_logits(logits)
    _check_sampling(temperature, top_k, top_p)
    return _draw(logits, temperature, top_k, top_p, generator)


def _draw(logits, temperature, top_k, top_p, generator) -> torch.Tensor:
    """:func:`sample_next` on arguments already checked (once per
    :func:`generate`, not at every step)."""
    if top_k == 1:  # greedy: the argmax (first on ties), no randomness
        return logits.argmax(dim=-1, keepdim=True)      # (B, 1)
    if temperature != 1:
        logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = logits.softmax(dim=-1)                      # (B, V)
    return torch.multinomial(probs, 1, generator=generator)   # (B, 1)


def _model_size(model: nn.Module, name: str):
    """``model.config.<name>``, else ``model.<name>``, else None."""
    value = getattr(getattr(model, "config", None), name, None)
    return getattr(model, name, None) if value is None else value


def context_length(model: nn.Module) -> int | None:
    """``model.config.block_size``, else ``model.block_size``, else None."""
    block_size = _model_size(model, "block_size")
    if block_size is None:
        return None
    return check_int("block_size", block_size)


def _check_generate(model, idx, generator, use_cache) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, "
                        f"got {type(model).__name__}")
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"idx must be a tensor of token ids, "
                        f"got {type(idx).__name__}")
    if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
        raise TypeError(f"idx must be an integer tensor, got {idx.dtype}")
    if idx.dim() != 2 or idx.numel() == 0:
        raise ValueError(f"idx must have shape (B, T) with B, T >= 1, "
                         f"got {tuple(idx.shape)}")
    if not isinstance(use_cache, bool):
        raise TypeError(f"use_cache must be a bool, "
                        f"got {type(use_cache).__name__}")
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, "
                        f"got {type(generator).__name__}")
    g, d = generator.device, idx.device
    if g.type != d.type or (None not in (g.index, d.index)
                            and g.index != d.index):
        raise ValueError(f"generator is on {g} but idx is on {d}; create "
                         f"it with torch.Generator(device=idx.device)")


def _last_logits(model: nn.Module, context: torch.Tensor) -> torch.Tensor:
    logits = model(context)                             # (B, T, V)
    if (not isinstance(logits, torch.Tensor) or logits.dim() != 3
            or logits.shape[:2] != context.shape):
        shape = getattr(logits, "shape", type(logits).__name__)
        raise ValueError(f"model must return logits of shape (B, T, V) for "
                         f"idx of shape {tuple(context.shape)}, got {shape}")
    return logits[:, -1, :]                             # (B, V)


def generate(model: nn.Module, idx: torch.Tensor, max_new_tokens: int,
             temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, use_cache: bool = True,
             generator: torch.Generator | None = None,
             eos_id: int | None = None) -> torch.Tensor:
    """The prompt ``idx`` ``(B, T)`` followed by ``max_new_tokens`` new
    tokens, shape ``(B, T + max_new_tokens)``, same dtype and device.

    ``eos_id`` (an end-of-text token id) stops a row once it has generated
    that token: every later token of the row is ``eos_id`` (a token drawn
    for it is replaced, so the random draws are those of the rows that run
    on), and decoding stops as soon as every row has finished, so the
    output may be shorter than ``T + max_new_tokens``. An ``eos_id`` in the
    prompt does not count.

    Each step feeds the model at most its last ``block_size`` tokens, so
    generation can run past the context window. The model runs in eval
    mode and gets its own mode back afterwards. ``top_k=1`` is greedy.

    ``use_cache=True`` (for a model with a ``new_cache`` method, such as
    ``GPT``) keeps every layer's keys and values (chapter 8): the prompt
    runs once, then each step runs the one new token (through
    ``model.logits``, which skips the input checks, if the model has it).
    Once the context window is full, every step refills the cache from the
    last ``block_size`` tokens, so that the tokens stay exactly those of
    ``use_cache=False``. Other models recompute the window every step.
    """
    _check_generate(model, idx, generator, use_cache)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=0)
    _check_sampling(temperature, top_k, top_p)
    if eos_id is not None:
        eos_id = check_int("eos_id", eos_id, minimum=0)
        V = _model_size(model, "vocab_size")
        if V is not None and eos_id >= V:
            raise ValueError(f"eos_id must be a token id below vocab_size={V}, "
                             f"got {eos_id}")
    block_size = context_length(model)
    sampling = (temperature, top_k, top_p, generator, eos_id)
    cached = use_cache and callable(getattr(model, "new_cache", None))
    was_training = model.training
    model.eval()        # no dropout while decoding
    try:
        # inference mode: no autograd bookkeeping at all, less per-call work
        with torch.inference_mode(), decoding_settings(model, idx, cached):
            if cached:
                out = _generate_cached(model, idx, max_new_tokens,
                                       block_size, sampling)
            else:
                out = _generate_uncached(model, idx, max_new_tokens,
                                         block_size, sampling)
    finally:
        model.train(was_training)
    return out.clone()      # an ordinary tensor, usable outside inference mode


@contextmanager
def decoding_settings(model, idx, cached: bool):
    """The settings ``generate`` decodes under, restored after: for the many
    small kernels of decoding (use it to time a step as ``generate`` runs it).
    oneDNN is switched off: its exact GELU costs a fixed ~6 µs a call on
    the CPU, ATen's own ~1 µs at this size. A cached step multiplies one
    row per sequence, too little work to share between threads, so it
    runs on one thread when the largest product is small."""
    threads = torch.get_num_threads()
    c = getattr(model, "config", None)
    width = getattr(c, "d_model", 0) * getattr(c, "d_ff", 0) or 0
    # below 2**19 multiply-adds in a step's largest product (d_model=128,
    # d_ff=512: 65,536 per sequence) a second thread cost more than it
    # saved on this book's 2-core machine; d_model=384 (589,824) keeps all
    one = (cached and idx.device.type == "cpu"
           and idx.shape[0] * width < 2 ** 19)
    mkldnn = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    if one:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = mkldnn
        if one:
            torch.set_num_threads(threads)


def _stop(idx_next, finished, eos_id):
    """Rows that finished earlier keep writing ``eos_id``; returns the next
    tokens ``(B, 1)``, the rows finished after this step ``(B, 1)`` and
    whether every row has (always False without an ``eos_id``)."""
    if eos_id is None:
        return idx_next, finished, False
    idx_next = idx_next.masked_fill(finished, eos_id)
    finished = finished | (idx_next == eos_id)
    return idx_next, finished, bool(finished.all())


def _generate_uncached(model, idx, max_new_tokens, block_size, sampling):
    *draw, eos_id = sampling
    finished = torch.zeros(idx.shape[0], 1, dtype=torch.bool, device=idx.device)
    for _ in range(max_new_tokens):
        # crop from the front: the newest tokens are the ones that matter
        context = idx if block_size is None else idx[:, -block_size:]
        logits = _last_logits(model, context)                     # (B, V)
        idx_next = _draw(logits, *draw).to(idx.dtype)             # (B, 1)
        idx_next, finished, done = _stop(idx_next, finished, eos_id)
        idx = torch.cat((idx, idx_next), dim=1)
        if done:
            break
    return idx                                  # (B, T + max_new_tokens)


def _generate_cached(model, idx, max_new_tokens, block_size, sampling):
    """:func:`generate`'s loop with a KV cache (chapter 8)."""
    if max_new_tokens == 0:
        return idx
    *draw, eos_id = sampling
    finished = torch.zeros(idx.shape[0], 1, dtype=torch.bool, device=idx.device)
    cache = model.new_cache(idx.shape[0])
    tokens = [idx]                              # the prompt, then (B, 1) each
    logits = model(idx[:, -block_size:], cache=cache)[:, -1]   # the prompt
    # the prompt was checked; sampled ids need no check at every step
    step_logits = getattr(model, "logits", model)
    for step in range(max_new_tokens):
        idx_next = _draw(logits, *draw).to(idx.dtype)             # (B, 1)
        idx_next, finished, done = _stop(idx_next, finished, eos_id)
        tokens.append(idx_next)
        if done or step == max_new_tokens - 1:
            break
        if cache.length < block_size:           # one new position: cheap
            logits = step_logits(idx_next, cache=cache)[:, -1]     # (B, V)
        else:   # window full: every position moves, so recompute them all
            cache.clear()
            window = torch.cat(tokens, dim=1)[:, -block_size:]
            logits = step_logits(window, cache=cache)[:, -1]
    return torch.cat(tokens, dim=1)             # (B, T + max_new_tokens)


def _sequences(samples, name: str) -> list[list[int]]:
    if isinstance(samples, torch.Tensor):
        if samples.dim() != 2:
            raise ValueError(f"{name} must be a (B, T) tensor or a list of "
                             f"token lists, got shape {tuple(samples.shape)}")
        return samples.tolist()
    if not isinstance(samples, (list, tuple)) or not all(
            isinstance(s, (list, tuple)) for s in samples):
        raise TypeError(f"{name} must be a (B, T) tensor or a list of "
                        f"token lists, got {type(samples).__name__}")
    return [list(s) for s in samples]


def _ngrams(seq: list, n: int) -> list[tuple]:
    return [tuple(seq[i:i + n]) for i in range(len(seq) - n + 1)]


def distinct_n(samples, n: int = 2) -> float:
    """Diversity across samples: the number of distinct n-grams divided by
    the number of n-grams, over all samples pooled (Li et al., 2016).

    1 when no n-gram occurs twice anywhere; near 0 when every sample says
    the same thing. ``samples``: a ``(B, T)`` tensor or lists of tokens."""
    n = check_int("n", n)
    grams = [g for s in _sequences(samples, "samples") for g in _ngrams(s, n)]
    if not grams:
        raise ValueError(f"samples hold no {n}-gram")
    return len(set(grams)) / len(grams)


def repetition(samples, n: int = 4) -> float:
    """Repetition within a sample: the share of each sample's n-grams that
    already occurred earlier in that sample, averaged over the samples
    (seq-rep-n of Welleck et al., 2020). A sample stuck in a loop scores
    close to 1; text that never repeats a phrase scores 0."""
    n = check_int("n", n)
    rates = []
    for s in _sequences(samples, "samples"):
        grams = _ngrams(s, n)
        if grams:
            rates.append(1 - len(set(grams)) / len(grams))
    if not rates:
        raise ValueError(f"samples hold no {n}-gram")
    return sum(rates) / len(rates)


def greedy(model: nn.Module, idx: torch.Tensor,
           max_new_tokens: int) -> torch.Tensor:
    """Greedy decoding: :func:`generate` with ``top_k=1``."""
    return generate(model, idx, max_new_tokens, top_k=1)
