"""Chapter 8 (the KV cache): the exercises, their test inputs, references, known mistakes and hints.

Exercise 8.1 (``attend_with_cache``) is one decoding step of one attention layer with a cache: the
new positions' keys and values are appended after the cached ones, and new query ``i``, at position
``L + i``, attends to keys ``0 … L + i``. Its fixed cases come first, so that the first failing case
(and the hint) never depends on the seed: an empty cache with ``T > 1`` (plain causal attention),
one new query after ``L > 0`` cached positions (the usual decoding step), and a chunk of ``T > 1``
new queries after ``L > 0`` cached ones (where the mask matters among the new queries); then random
sizes. A mask shifted by ``L - 1`` leaves the first query of an empty cache no key at all: the
registered mistake gives that row NaN (``masked_fill`` with -inf, then a softmax), and a diagnosis
names the same slip when the row holds anything else (zeros, as torch's fused kernel gives, or the
uniform average a large negative fill gives). Keys appended but values overwritten cannot return:
the weights over ``L + T`` keys meet ``T`` values, and an error hint names the slip from the
messages of ``@`` (on the single-query case), ``einsum`` and ``F.scaled_dot_product_attention``.

Exercise 8.2 (``cache_bytes``) counts the bytes a cache holds,
``2 · n_layer · n_kv_head · (d_model // n_head) · T · batch_size · bytes_per_element``. As in 5.2,
only an int passes (NumPy integers and 0-d integer tensors are read as ints) and a float that
equals the count is told to return an int. Every slip multiplies the count by a factor (½ for the
forgotten 2, ``n_head / n_kv_head`` for the query heads cached, …); the fixed cases (Llama-2-7B,
Llama-2-70B with grouped-query attention, a multi-query model, fp32, a batch, the defaults, the
chapter's small model) give every slip, and every pair of slips, its own factors. Using ``n_head``
instead of ``n_kv_head`` and ``d_model`` instead of ``n_kv_head · d_head`` are one slip in numbers
(``n_head · d_head = d_model``), so they share a hint. A ``diagnose`` names two slips when exactly
one pair of unrelated slips explains the reader's count on every case, wrong defaults, and a count
in KiB, MiB or GiB (or kB, MB, GB).

Library answers: for 8.1, the library's cache (``LayerCache``, ``KVCache``) and its attention
(``MultiHeadAttention``, ``scaled_dot_product_attention``, ``attend_heads``); for 8.2,
``kv_cache_bytes`` and ``KVCache`` (whose ``nbytes`` is the count).
"""

from __future__ import annotations

import math

import torch

from tinyformer.attention import causal_mask, scaled_dot_product_attention
from tinyformer.course.engine import Exercise, register, safe_diagnosis
from tinyformer.course.engine import as_int as _as_int
from tinyformer.course.engine import randint as _randint
from tinyformer.kvcache import kv_cache_bytes

CHAPTER = "08-kv-cache"
F64 = torch.float64


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=F64)


# --------------------------------------------------------------------------- 8.1 attention with a KV cache


def _cache_case(g, B: int, H: int, L: int, T: int, d: int) -> tuple:
    """(q, k_new, v_new, k_cache, v_cache): T new positions after L cached ones."""
    return (_randn(g, B, H, T, d), _randn(g, B, H, T, d), _randn(g, B, H, T, d),
            _randn(g, B, H, L, d), _randn(g, B, H, L, d))


def _attend_cases(g):
    """Fixed sizes first (B, H, L, T, d), so that the first failing case never depends on the seed:

    0. an empty cache, L = 0, and T = 4 new positions: plain causal attention (d = 3 != T, so that
       q @ k_all without the transpose raises here).
    1. one new query after L = 5 cached positions: the usual decoding step (values that were not
       appended, one position against six keys, make ``@`` raise here).
    2. a chunk of T = 3 new queries after L = 4 cached ones: the mask matters among the new queries.

    Then three random sizes: B 1-3, H 1-4, L 0-9, T 1-5, d 2-8.
    """
    cases = [_cache_case(g, 2, 2, 0, 4, 3), _cache_case(g, 2, 3, 5, 1, 4), _cache_case(g, 1, 2, 4, 3, 5)]
    for _ in range(3):
        cases.append(_cache_case(g, _randint(g, 1, 3), _randint(g, 1, 4), _randint(g, 0, 9), _randint(g, 1, 5),
                                 _randint(g, 2, 8)))
    return cases


def attend_with_cache_reference(q, k_new, v_new, k_cache, v_cache):
    L, T = k_cache.shape[-2], q.shape[-2]
    k_all = torch.cat((k_cache, k_new), dim=-2)                      # (B, H, L + T, d)
    v_all = torch.cat((v_cache, v_new), dim=-2)
    allowed = causal_mask(L + T, q.device)[L:]                      # (T, L + T): query i sees keys 0 … L + i
    out, _ = scaled_dot_product_attention(q, k_all, v_all, allowed)
    return out, k_all, v_all


def _attend(*, cache="append", shift="L", scale=True, dim=-1, mask_after=False, mask_use="fill"):
    """Attention with a cache, with the mistakes named by the keywords; the defaults are right.

    cache: "append" (right), "overwrite" (k_all = k_new, v_all = v_new: the new positions alone,
    causally masked among themselves), "new only" (k_all and v_all right, but the attention over
    the new positions alone) or "prepend" (the new positions before the cached ones, the mask as if
    they were after them). shift: the diagonal of the (T, L + T) mask's tril, "L"
    (right), "0" (top-left: the new queries as if they started at position 0), "L-1", "L+1", or
    "none" (no mask); "chunks top-left" (is_causal only for chunks), "first chunk only" (a causal
    mask for the first chunk, none after a cache) and "chunks L-1" (no mask for one query, L - 1 for
    chunks). scale: divide the scores by √d (True), by d ("d"), by √(L + T) ("keys"), or the weights
    ("after"). dim: the softmax's axis. mask_use: "fill" (-inf where not allowed), "inverted" (-inf
    where allowed) or "added" (a float 0/1 mask added to the scores, as F.scaled_dot_product_attention
    does with a float attn_mask). A query row with no allowed key comes out NaN.
    """
    def wrong(q, k_new, v_new, k_cache, v_cache):
        L, T = k_cache.shape[-2], q.shape[-2]
        if cache == "new only":
            out, _, _ = _attend(cache="overwrite")(q, k_new, v_new, k_cache, v_cache)
            return out, torch.cat((k_cache, k_new), dim=-2), torch.cat((v_cache, v_new), dim=-2)
        if cache == "overwrite":
            k_all, v_all, L = k_new, v_new, 0
        elif cache == "prepend":
            k_all, v_all = torch.cat((k_new, k_cache), dim=-2), torch.cat((v_new, v_cache), dim=-2)
        else:
            k_all, v_all = torch.cat((k_cache, k_new), dim=-2), torch.cat((v_cache, v_new), dim=-2)
        scores = q @ k_all.transpose(-2, -1)                          # (B, H, T, L + T)
        if scale is True:
            scores = scores / math.sqrt(q.shape[-1])
        elif scale == "keys":                                         # √(number of keys)
            scores = scores / math.sqrt(L + T)
        elif scale == "d":
            scores = scores / q.shape[-1]
        if shift == "chunks top-left":                                # is_causal=(T > 1)
            shift_now = "none" if T == 1 else "0"
        elif shift == "first chunk only":                             # is_causal=(L == 0 and T > 1), else none
            shift_now = "0" if L == 0 and T > 1 else "none"
        elif shift == "chunks L-1":                                   # no mask for one query, tril(L - 1) else
            shift_now = "none" if T == 1 else "L-1"
        else:
            shift_now = shift
        allowed = None
        if shift_now != "none":
            diagonal = {"L": L, "0": 0, "L-1": L - 1, "L+1": L + 1, "T-1": T - 1}[shift_now]
            allowed = torch.ones(T, L + T, dtype=torch.bool).tril(diagonal=diagonal)
            if mask_use == "triu":                                   # the upper triangle allowed
                allowed = torch.ones(T, L + T, dtype=torch.bool).triu(diagonal=diagonal)
            if mask_use == "added":
                scores = scores + allowed.to(scores.dtype)
            elif mask_use == "zero":                                 # hidden scores set to 0, not -inf
                scores = scores.masked_fill(~allowed, 0.0)
            elif mask_use == "inverted":
                scores = scores.masked_fill(allowed, float("-inf"))
            elif not mask_after:
                scores = scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(scores, dim=dim)
        if mask_after and allowed is not None:
            weights = weights * allowed                               # not renormalised
        if scale == "after":
            weights = weights / math.sqrt(q.shape[-1])
        return weights @ v_all, k_all, v_all
    return wrong


CACHE_OVERWRITE = ("the cache was overwritten: k_all and v_all must hold the L cached positions followed by the T "
                   "new ones, torch.cat((k_cache, k_new), dim=-2), so that the new queries attend to every earlier "
                   "position too (yours attend to the new positions only).")
CACHE_NEW_ONLY = ("your k_all and v_all are right, but the attention used the new keys and values alone: score the "
                  "new queries against k_all, all L + T positions, and mix v_all, so that they see the cached "
                  "positions too.")
CACHE_TOP_LEFT = ("your mask places the new queries at positions 0 … T-1 (top-left: torch.ones(T, L + T).tril(), or "
                  "F.scaled_dot_product_attention(..., is_causal=True) with fewer queries than keys), so a single new "
                  "query sees key 0 alone. New query i sits at position L + i: shift the mask by L, "
                  ".tril(diagonal=L); a single new query needs no mask at all.")
CACHE_MINUS_ONE = ("your mask is shifted by L - 1: new query i sits at position L + i and must see keys 0 … L + i, "
                   "itself included, but yours stops at L + i - 1. Use .tril(diagonal=L) on the (T, L + T) mask.")
CACHE_PLUS_ONE = ("your mask is shifted by L + 1: new query i sees key L + i + 1, the next position, which is the "
                  "future. It may see keys 0 … L + i only: .tril(diagonal=L) on the (T, L + T) mask.")
CACHE_NO_MASK = ("no causal mask among the new queries: with T > 1 new positions, query i must not see the new "
                 "positions after it. Mask the scores with torch.ones(T, L + T, dtype=torch.bool).tril(diagonal=L) "
                 "(only a single new query, T = 1, needs no mask).")
CACHE_PREPEND = ("the new positions went in front of the cached ones: the cache holds positions 0 … L-1, so append "
                 "after them, torch.cat((k_cache, k_new), dim=-2), not torch.cat((k_new, k_cache), dim=-2).")
CACHE_SCALE = ("the scores are not scaled: divide q @ k_all.transpose(-2, -1) by √d, where d = q.shape[-1] is the "
               "width of a head.")
CACHE_AXIS = ("the softmax ran over dim=-2, the queries: each query's row of weights over the L + T keys must sum "
              "to 1, so use dim=-1.")
CACHE_VALUES = ("the weights (B, H, T, L + T) met values of another length: v_all must hold the values of all "
                "L + T positions, like k_all. Append v_new to v_cache too, torch.cat((v_cache, v_new), dim=-2).")
CACHE_MATMUL = ("a matrix product with mismatched shapes: the scores are q @ k_all.transpose(-2, -1), "
                "(B, H, T, d) times (B, H, d, L + T); then the weights (B, H, T, L + T) times v_all.")
CACHE_MASK_SHAPE = ("the mask and the scores differ in size: the scores are (B, H, T, L + T), T new queries against "
                    "the L + T keys held, so the mask is (T, L + T): torch.ones(T, L + T, "
                    "dtype=torch.bool).tril(diagonal=L).")
CACHE_CAT_DIM = ("append along the positions axis, torch.cat((k_cache, k_new), dim=-2): (B, H, L, d) and "
                 "(B, H, T, d) differ only there (and L may be 0).")
CACHE_CHUNKS_TOP_LEFT = ("right for one new query, wrong for a chunk: is_causal=True (or a plain .tril()) puts a "
                        "chunk's queries at positions 0 … T-1 of the L + T keys. This is the chapter's pitfall: with "
                        "L > 0 cached positions, new query i sits at position L + i, so the mask is "
                        ".tril(diagonal=L); is_causal is right only for the first chunk, L = 0.")
CACHE_T_MINUS_ONE = ("your mask's diagonal is T - 1: new query i sees keys 0 … T - 1 + i, which depends on the "
                     "chunk's length, not on where it starts. It sits at position L + i: .tril(diagonal=L).")
CACHE_SCALE_KEYS = ("you divided the scores by √(L + T), the number of keys: the scale is √d, the width of a head "
                    "(q.shape[-1]), whatever the number of positions.")
CACHE_SCALE_AFTER = ("the 1/√d went on the weights after the softmax: each row then sums to 1/√d, not 1. Scale the "
                     "scores before the softmax.")
CACHE_MASK_AFTER = ("you masked the weights after the softmax (weights * mask): the rows no longer sum to 1. Fill "
                    "the disallowed scores with -inf before the softmax, which renormalises over the allowed keys.")
CACHE_FLOAT_MASK = ("your mask is a float tensor (torch.ones(...).tril(...) makes 0.0/1.0 numbers), and `~` "
                    "needs a boolean one. Build it with dtype=torch.bool (or convert it, mask.bool()).")
CACHE_FLOAT_FILL = ("masked_fill got a float mask (torch.ones(...).tril(...) makes 0.0/1.0 numbers): it needs a "
                    "boolean one. Build it with dtype=torch.bool (or convert it, mask.bool()).")
CACHE_FIRST_CHUNK_ONLY = ("right for the first chunk (is_causal) and for one new query (no mask), but a chunk after "
                         "a cache, L > 0 and T > 1, got no mask: its query i must not see the new positions after "
                         "it. One rule covers every case: .tril(diagonal=L) on the (T, L + T) mask.")
CACHE_INVERTED = ("your mask is inverted: you hid the allowed keys and kept the others. masked_fill puts -inf "
                  "where the mask is True, so fill where it is False, scores.masked_fill(~allowed, float('-inf')); "
                  "and F.scaled_dot_product_attention's boolean attn_mask means True = may attend, so pass the "
                  "allowed mask, not a 'hide' mask.")
CACHE_SCALE_D = ("you divided the scores by d, the width of a head: divide by its square root, √d "
                 "(math.sqrt(q.shape[-1])).")
CACHE_ADDED_MASK = ("a 0/1 float mask was ADDED to the scores (F.scaled_dot_product_attention adds a float "
                    "attn_mask), which hides nothing: pass a boolean mask, dtype=torch.bool, True where a query may "
                    "attend, or fill the disallowed scores with -inf.")
CACHE_CHUNKS_MINUS_ONE = ("right for one new query, but for a chunk your mask's diagonal is L - 1, so new query i "
                          "does not see itself (position L + i): .tril(diagonal=L).")
CACHE_ZERO_FILL = ("the hidden scores were set to 0, which the softmax still weights (e^0 = 1): fill them with "
                   "-inf, so that they get weight 0.")
CACHE_TRIU = ("your mask keeps the upper triangle (triu): each query is allowed the keys AFTER its position. The "
              "allowed keys are on and below the shifted diagonal: .tril(diagonal=L).")
CACHE_SWAPPED = ("k_all and v_all are swapped: return (out, k_all, v_all), the keys second and the values third.")
CACHE_GENERIC = ("append the new keys and values after the cached ones, torch.cat((k_cache, k_new), dim=-2); the "
                 "scores q @ k_all.transpose(-2, -1) / √d are (B, H, T, L + T); new query i sits at position L + i "
                 "and sees keys 0 … L + i, so fill the scores where torch.ones(T, L + T, "
                 "dtype=torch.bool).tril(diagonal=L) is False with -inf; softmax over the last axis; times v_all.")

CACHE_MISTAKES = [
    (_attend(cache="overwrite"), CACHE_OVERWRITE),
    (_attend(cache="new only"), CACHE_NEW_ONLY),
    (_attend(shift="0"), CACHE_TOP_LEFT),
    (_attend(shift="L-1"), CACHE_MINUS_ONE),
    (_attend(shift="L+1"), CACHE_PLUS_ONE),
    (_attend(shift="none"), CACHE_NO_MASK),
    (_attend(cache="prepend"), CACHE_PREPEND),
    (_attend(scale=False), CACHE_SCALE),
    (_attend(dim=-2), CACHE_AXIS),
    (_attend(shift="chunks top-left"), CACHE_CHUNKS_TOP_LEFT),
    (_attend(shift="T-1"), CACHE_T_MINUS_ONE),
    (_attend(scale="keys"), CACHE_SCALE_KEYS),
    (_attend(scale="after"), CACHE_SCALE_AFTER),
    (_attend(mask_after=True), CACHE_MASK_AFTER),
    (_attend(shift="first chunk only"), CACHE_FIRST_CHUNK_ONLY),
    (_attend(mask_use="inverted"), CACHE_INVERTED),
    (_attend(scale="d"), CACHE_SCALE_D),
    (_attend(mask_use="added"), CACHE_ADDED_MASK),
    (_attend(mask_use="zero"), CACHE_ZERO_FILL),
    (_attend(mask_use="triu"), CACHE_TRIU),
]


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-9, atol=1e-12))


def _sees_itself_not(case, out) -> bool:
    """Does ``out`` equal attention with the mask shifted by L - 1 on every query that sees a key
    (whatever it holds on the rows that see none)?"""
    q, _, _, k_cache, _ = case
    L, T = k_cache.shape[-2], q.shape[-2]
    shifted, _, _ = _attend(shift="L-1")(*case)
    seen = torch.ones(T, L + T, dtype=torch.bool).tril(diagonal=L - 1).any(dim=-1)      # (T,)
    return _close(out[..., seen, :], shifted[..., seen, :])


def _diagnose_cache(cases, outputs, refs):
    for (_, k_all, v_all), (_, k_ref, v_ref) in zip(outputs, refs):
        if _close(k_all, v_ref) and _close(v_all, k_ref) and not _close(k_ref, v_ref):
            return f"wrong output. Hint: {CACHE_SWAPPED}"
    for case, (_, k_all, v_all) in zip(cases, outputs):
        _, k_new, v_new, k_cache, v_cache = case
        if k_cache.shape[-2] and (_close(k_all, torch.cat((k_new, k_cache), dim=-2))
                                  or _close(v_all, torch.cat((v_new, v_cache), dim=-2))):
            return f"wrong output. Hint: {CACHE_PREPEND}"
    if all(_close(k_all, k_ref) and _close(v_all, v_ref) and _sees_itself_not(case, out)
           for case, (out, k_all, v_all), (_, k_ref, v_ref) in zip(cases, outputs, refs)):
        return f"wrong output. Hint: {CACHE_MINUS_ONE}"
    def inverted(case, out):      # the allowed keys hidden (a row that hides every key: NaN, or 0 in torch's sdpa)
        wrong_out, _, _ = _attend(mask_use="inverted")(*case)
        finite = torch.isfinite(wrong_out)
        if out.shape != wrong_out.shape:
            return False
        return None if not finite.any() else _close(out[finite], wrong_out[finite])   # None: undecided
    said = [inverted(case, out) if _close(k_all, k_ref) and _close(v_all, v_ref) else False
            for case, (out, k_all, v_all), (_, k_ref, v_ref) in zip(cases, outputs, refs)]
    if False not in said and True in said:
        return f"wrong output. Hint: {CACHE_INVERTED}"

    def chunk_minus_one(case, out, ref_out):      # one query right, a chunk's queries blind to themselves
        return _close(out, ref_out) if case[0].shape[-2] == 1 else _sees_itself_not(case, out)
    if any(case[0].shape[-2] > 1 for case in cases) and all(
            _close(k_all, k_ref) and _close(v_all, v_ref) and chunk_minus_one(case, out, ref_out)
            for case, (out, k_all, v_all), (ref_out, k_ref, v_ref) in zip(cases, outputs, refs)):
        return f"wrong output. Hint: {CACHE_CHUNKS_MINUS_ONE}"
    return None


register(Exercise(
    name="attend_with_cache", number="8.1", function="attend_with_cache", chapter=CHAPTER,
    args=("q", "k_new", "v_new", "k_cache", "v_cache"),
    library_answers=("tinyformer.kvcache.LayerCache", "tinyformer.kvcache.KVCache",
                     "tinyformer.attention.causal_mask",
                     "tinyformer.attention.MultiHeadAttention", "tinyformer.attention.scaled_dot_product_attention",
                     "tinyformer.attention.attend_heads"),
    make_cases=_attend_cases, reference=attend_with_cache_reference,
    returns="a tuple (out, k_all, v_all): out (B, H, T, d), and the keys and values of every position, "
            "(B, H, L + T, d)",
    item_names=("out", "k_all", "v_all"),
    mistakes=CACHE_MISTAKES,
    error_hints=[
        (RuntimeError, r"batch2 tensor to be: \[\d+, \d+\] but got: \[\d+, 1\]|"
                       r"einsum\(\): subscript \w+ has size \d+ for operand 1 which does not broadcast|"
                       r"expanded size of the tensor \(\d+\) must match the existing size \(\d+\) at non-singleton "
                       r"dimension 3", CACHE_VALUES),
        (RuntimeError, r"batch2 tensor to be|cannot be multiplied", CACHE_MATMUL),
        (RuntimeError, r"must match the size of tensor b", CACHE_MASK_SHAPE),
        (RuntimeError, r"Sizes of tensors must match except in dimension|stack expects each tensor to be equal size",
         CACHE_CAT_DIM),
        (TypeError, r"only implemented on integer and Boolean", CACHE_FLOAT_MASK),
        (RuntimeError, r"masked_fill_? only supports boolean masks", CACHE_FLOAT_FILL),
    ],
    diagnose=safe_diagnosis(_diagnose_cache), diagnose_hints=(CACHE_SWAPPED, CACHE_CHUNKS_MINUS_ONE),
    generic_hint=CACHE_GENERIC,
))


# --------------------------------------------------------------------------- 8.2 the bytes of a KV cache


def cache_bytes_reference(n_layer: int, n_head: int, n_kv_head: int, d_model: int, T: int, batch_size: int = 1,
                          bytes_per_element: int = 2) -> int:
    return kv_cache_bytes(n_layer, n_kv_head, d_model // n_head, T, bytes_per_element=bytes_per_element,
                          batch_size=batch_size)


def _bytes_cases(g):
    """(n_layer, n_head, n_kv_head, d_model, T[, batch_size, bytes_per_element]), fixed first:

    0. Llama-2-7B at 4096 tokens in fp16: 2**31 bytes, 2 GiB.
    1. Llama-2-70B, grouped-query attention (8 key/value heads for 64 query heads), 4096 tokens.
    2. Falcon-7B, multi-query attention (one key/value head for 71 query heads), 2048 tokens.
    3. GPT-2 small in fp32 (4 bytes), 1024 tokens.
    4. Mistral-7B (8 key/value heads for 32), 8 sequences of 8192 tokens.
    5. GPT-2 medium, batch_size and bytes_per_element left to their defaults (1 and 2).
    6. the chapter's small model (4 layers, 4 heads, width 128) in fp32 at 320 tokens.
    7. GPT-2 medium again, with batch_size = 4 given and bytes_per_element left to its default (so that
       the two defaulted parameters in the wrong order give another count).

    Then two random ones (n_kv_head a divisor of n_head, batch_size 2-16, 1, 2 or 4 bytes).
    """
    cases = [(32, 32, 32, 4096, 4096, 1, 2), (80, 64, 8, 8192, 4096, 1, 2), (32, 71, 1, 4544, 2048, 1, 2),
             (12, 12, 12, 768, 1024, 1, 4), (32, 32, 8, 4096, 8192, 8, 2), (24, 16, 16, 1024, 1024),
             (4, 4, 4, 128, 320, 1, 4), (24, 16, 16, 1024, 1024, 4)]
    for _ in range(2):
        n_head = (1, 2, 4, 6, 8, 12, 16, 32)[_randint(g, 0, 7)]
        divisors = [k for k in range(1, n_head + 1) if n_head % k == 0]
        n_kv_head = divisors[_randint(g, 0, len(divisors) - 1)]
        d_model = n_head * 8 * _randint(g, 1, 16)
        cases.append((_randint(g, 1, 48), n_head, n_kv_head, d_model, _randint(g, 1, 8192), _randint(g, 2, 16),
                      (1, 2, 4)[_randint(g, 0, 2)]))
    return cases


def _count(n_layer, n_head, n_kv_head, d_model, T, batch_size=1, bytes_per_element=2, *, kv=2, heads="kv",
           width="head", layers=True, positions=True, batch=True, element="bytes"):
    """The count with the slips named by the keywords; the defaults are right."""
    heads_n = {"kv": n_kv_head, "all": n_head, "group": n_head // n_kv_head}[heads]
    total = kv * heads_n * (d_model // n_head if width == "head" else d_model)
    total *= (n_layer if layers else 1) * (T if positions else 1) * (batch_size if batch else 1)
    return total * {"bytes": bytes_per_element, "bits": 8 * bytes_per_element, "none": 1}[element]


def _bytes(**slips):
    def wrong(n_layer, n_head, n_kv_head, d_model, T, batch_size=1, bytes_per_element=2):
        return _count(n_layer, n_head, n_kv_head, d_model, T, batch_size, bytes_per_element, **slips)
    return wrong


BYTES_FLOAT = ("the count is right but it is a float: return an int (a number of bytes is a whole number; use // "
               "for d_model // n_head, or int(...)).")
BYTES_DEFAULTS = ("your count is right when every argument is given but wrong with the defaults: batch_size=1 (one "
                  "sequence) and bytes_per_element=2 (16-bit numbers, fp16 or bf16).")
BYTES_ORDER = ("your count reads the sixth argument as bytes_per_element: the exercise's signature is (n_layer, "
               "n_head, n_kv_head, d_model, T, batch_size=1, bytes_per_element=2), batch_size first (the library's "
               "kv_cache_bytes takes them the other way round, which is why it names both when it calls). A call "
               "such as cache_bytes(..., T, 8) means a batch of 8 sequences.")
BYTES_UNITS = ("your count is in KiB, MiB or GiB (or kB, MB, GB), divided with / or //: return it in bytes, "
               "without dividing by 1024 or 1000.")
BYTES_GENERIC = ("per layer, per sequence and per position the cache holds a key AND a value vector for each of the "
                 "n_kv_head key/value heads, d_head = d_model // n_head numbers each: "
                 "2 · n_layer · n_kv_head · d_head · T · batch_size numbers, bytes_per_element bytes each.")

# (the slips, the hint, the part of the count it touches: two slips combine when their parts differ)
BYTES_SLIPS = [
    (dict(kv=1), "the cache holds a key AND a value vector per head, layer and position: multiply by 2.", "kv"),
    (dict(kv=3), "you stored the queries too (3 vectors per head): the cache keeps keys and values only, since a "
                 "position's query is used once, at its own step, and never again.", "kv"),
    (dict(heads="all"),
     "each key holds d_model numbers in your count: you cached n_head heads (n_head · d_head = d_model), or took "
     "d_head = d_model // n_kv_head. With grouped-query attention only the n_kv_head key/value heads are stored, "
     "each d_head = d_model // n_head wide: n_kv_head · d_model / n_head numbers per key (and as many per "
     "value).", "heads"),
    (dict(heads="group"),
     "you multiplied by the group size n_head // n_kv_head, the query heads that share a key/value head: the "
     "cache stores the n_kv_head key/value heads themselves, so multiply by n_kv_head.", "heads"),
    (dict(width="d_model"), "d_model is the width of all the heads together: one head is d_head = d_model // n_head "
                            "wide, so each key/value head stores d_model // n_head numbers per position.", "width"),
    (dict(layers=False), "every layer has its own keys and values: multiply by n_layer.", "layers"),
    (dict(positions=False), "the cache holds every position: multiply by T, the number of tokens (yours is the size "
                            "of one position's keys and values).", "positions"),
    (dict(batch=False), "each sequence of the batch has its own cache: multiply by batch_size.", "batch"),
    (dict(element="bits"), "you counted bits: bytes_per_element is already in bytes (2 for fp16), so do not multiply "
                           "by 8.", "element"),
    (dict(element="none"), "that is a number of elements, not of bytes: multiply by bytes_per_element (2 for fp16 or "
                           "bf16, 4 for fp32).", "element"),
]

BYTES_MISTAKES = [(_bytes(**slips), hint) for slips, hint, _ in BYTES_SLIPS]


def _two_slips(cases, outputs) -> tuple[str, str] | None:
    """The hints of the one pair of unrelated slips whose count is the reader's on every case; None if no
    pair, or more than one, gives it."""
    got = [_as_int(o) for o in outputs]
    if None in got:
        return None
    found = [(a[1], b[1]) for i, a in enumerate(BYTES_SLIPS) for b in BYTES_SLIPS[i + 1:]
             if a[2] != b[2] and all(_count(*case, **a[0], **b[0]) == o for case, o in zip(cases, got))]
    return found[0] if len(found) == 1 else None


def _case_text(case) -> str:
    names = ("n_layer", "n_head", "n_kv_head", "d_model", "T", "batch_size", "bytes_per_element")
    said = ", ".join(f"{n} = {v}" for n, v in zip(names, case))
    left = names[len(case):]
    return said if not left else f"{said} ({' and '.join(left)} left to {'its' if len(left) == 1 else 'their'} default)"


def _diagnose_bytes(cases, outputs, refs):
    if all(type(o) is float and o == r for o, r in zip(outputs, refs)):
        return f"wrong output. Hint: {BYTES_FLOAT}"
    pair = _two_slips(cases, outputs)
    if pair is not None:
        first, second = pair
        return f"wrong count: two slips. Hint: {first} And {second[0].lower()}{second[1:]}"
    def swapped(case):   # the two defaulted parameters read in the other order
        head, rest = case[:5], list(case[5:]) + [None] * (7 - len(case))
        batch, element = rest
        return cache_bytes_reference(*head, **({} if element is None else {"batch_size": element}),
                                     **({} if batch is None else {"bytes_per_element": batch}))
    if all(_as_int(o) == swapped(c) for c, o in zip(cases, outputs)) and any(
            swapped(c) != r for c, r in zip(cases, refs)):
        return f"wrong output. Hint: {BYTES_ORDER}"
    if all(o == r for c, o, r in zip(cases, outputs, refs) if len(c) == 7) and any(
            o != r for c, o, r in zip(cases, outputs, refs) if len(c) == 5):
        return f"wrong output. Hint: {BYTES_DEFAULTS}"
    if any(all(type(o) in (int, float) and (math.isclose(o * unit, r, rel_tol=1e-9) or o == r // unit)
               for o, r in zip(outputs, refs))
           for unit in (2 ** 10, 2 ** 20, 2 ** 30, 10 ** 3, 10 ** 6, 10 ** 9)):
        return f"wrong output. Hint: {BYTES_UNITS}"
    for case, out, ref in zip(cases, outputs, refs):
        if not (type(out) in (int, float) and math.isfinite(out)):
            return None
        if out != ref:
            off = abs(out - ref)
            return (f"for {_case_text(case)} you counted {out:,} bytes; the cache holds {ref:,} ({off:,} too "
                    f"{'many' if out > ref else 'few'}). Hint: {BYTES_GENERIC}")
    return None


register(Exercise(
    name="cache_bytes", number="8.2", function="cache_bytes", chapter=CHAPTER,
    args=("n_layer", "n_head", "n_kv_head", "d_model", "T", "batch_size", "bytes_per_element"),
    library_answers=("tinyformer.kvcache.kv_cache_bytes", "tinyformer.kvcache.KVCache"),
    make_cases=_bytes_cases, reference=cache_bytes_reference, returns="the number of bytes, an int",
    rtol=0.0, atol=0.0, compare=lambda case, out, ref: type(out) is int and out == ref,
    mistakes=BYTES_MISTAKES,
    error_hints=[
        (TypeError, r"missing \d required positional arguments?: '",
         "batch_size and bytes_per_element have defaults: cache_bytes(n_layer, n_head, n_kv_head, d_model, T) means "
         "one sequence of 2-byte numbers, so write def cache_bytes(..., T, batch_size=1, bytes_per_element=2)."),
    ],
    diagnose=safe_diagnosis(_diagnose_bytes), diagnose_hints=(BYTES_FLOAT, BYTES_DEFAULTS, BYTES_UNITS, BYTES_ORDER),
    generic_hint=BYTES_GENERIC,
))
