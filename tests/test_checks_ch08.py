"""Chapter 8's checks: every solution passes, every stub is 'not implemented yet', every registered
mistake is caught by its own hint whatever the seed, and wrong answers written here, the way a
learner would write them, fail with the hint that names their slip. These generic tests are written
once, in tests/exercise_suite.py; the ``globals().update(SUITE...)`` lines below take in (and name)
those this chapter runs.

The solutions and wrong answers below are written independently of ``tinyformer.course.ch08``: the
cached attention step with matmul, einsum, torch's F.scaled_dot_product_attention and a loop over
the new queries; the byte count by arithmetic. The references are checked against
F.scaled_dot_product_attention over the whole sequence (is_causal=True, its last T rows), against
the library's cache (LayerCache.append and a MultiHeadAttention layer decoding through a KVCache),
against kv_cache_bytes, against the bytes a GPT's own cache holds once filled (cache.nbytes() and
the sizes of its tensors), and against numbers worked out by hand (Llama-2-7B's 2 GiB per 4096-token
sequence). The chapter notebook (book/08-kv-cache.ipynb) is optional here: the tests that read it
are skipped while it does not exist.
"""

from __future__ import annotations

import math
import textwrap

import exercise_suite
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from exercise_suite import SEEDS, verdict_for

from tinyformer import checks
from tinyformer.attention import MultiHeadAttention, merge_heads, split_heads
from tinyformer.course import ch08, engine
from tinyformer.kvcache import KVCache, kv_cache_bytes
from tinyformer.model import GPT, GPTConfig

from conftest import BOOK, define

CHAPTER = ["attend_with_cache", "cache_bytes"]
DRILLS: list[str] = []
ALL = CHAPTER + DRILLS
NOTEBOOK = BOOK / "08-kv-cache.ipynb"
F64 = torch.float64
GiB = 2 ** 30

# --------------------------------------------------------------------------- solutions (exercise cells)

SOLUTIONS = {
    "attend_with_cache": '''\
import math

import torch


def attend_with_cache(q, k_new, v_new, k_cache, v_cache):
    """One decoding step of one attention layer with a KV cache.
    q, k_new, v_new: (B, H, T, d), the T new positions; k_cache, v_cache:
    (B, H, L, d), the L earlier ones (L may be 0). Returns (out, k_all,
    v_all): out (B, H, T, d), and the keys and values of every position,
    the new ones appended, (B, H, L + T, d)."""
    # BEGIN SOLUTION
    L, T = k_cache.shape[-2], q.shape[-2]
    k_all = torch.cat((k_cache, k_new), dim=-2)     # (B, H, L + T, d)
    v_all = torch.cat((v_cache, v_new), dim=-2)
    scores = q @ k_all.transpose(-2, -1) / math.sqrt(q.shape[-1])
    # new query i sits at position L + i: it sees keys 0 ... L + i
    allowed = torch.ones(T, L + T, dtype=torch.bool, device=q.device)
    allowed = allowed.tril(diagonal=L)              # (T, L + T)
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v_all     # (B, H, T, d)
    return out, k_all, v_all
    # END SOLUTION
''',
    "cache_bytes": '''\
def cache_bytes(n_layer, n_head, n_kv_head, d_model, T, batch_size=1,
                bytes_per_element=2):
    """The bytes a KV cache holds for batch_size sequences of T tokens:
    a key and a value vector per key/value head, layer and position."""
    # BEGIN SOLUTION
    d_head = d_model // n_head                  # the width of one head
    per_token = 2 * n_layer * n_kv_head * d_head    # keys and values
    return per_token * T * batch_size * bytes_per_element
    # END SOLUTION
''',
}

SUITE = exercise_suite.Chapter(CHAPTER, DRILLS, SOLUTIONS, NOTEBOOK)
solution = SUITE.solution


# --------------------------------------------------------------------------- 8.1, as learners write it


def learner_attend(*, cache="append", diagonal="S-T", scale=True, softmax_dim=-1, fill=-math.inf, api="matmul",
                   values="append", cat_dim=2, transpose=True, returned="out,k,v"):
    """A learner's cached attention step, with the slip chosen by the keywords.

    cache: "append" (right), "prepend". diagonal: the tril diagonal of the (T, S) mask, S the number
    of keys: "S-T" (right: L), "0" (top-left), "S-T-1", "S-T+1", "none" (no mask), "TxT" (a (T, T)
    causal mask). fill: what hidden scores become. api: "matmul", "einsum" or "sdpa"
    (F.scaled_dot_product_attention with the boolean mask). values: "append" (right) or "new" (the
    new values alone). cat_dim: the axis appended along. transpose: q @ k_all.transpose(2, 3).
    returned: "out,k,v" (right), "out,v,k" (swapped), "out" (the output alone).
    """
    def attend_with_cache(q, k_new, v_new, k_cache, v_cache):
        parts = (k_cache, k_new) if cache == "append" else (k_new, k_cache)
        k_all = torch.cat(parts, dim=cat_dim)
        v_all = torch.cat((v_cache, v_new), dim=cat_dim) if cache == "append" else torch.cat((v_new, v_cache), 2)
        v_used = v_all if values == "append" else v_new
        T, S = q.shape[2], k_all.shape[2]
        if diagonal == "none":
            mask = None
        elif diagonal == "TxT":
            mask = torch.tril(torch.ones(T, T)).bool()
        else:
            shift = {"S-T": S - T, "0": 0, "S-T-1": S - T - 1, "S-T+1": S - T + 1}[diagonal]
            mask = torch.tril(torch.ones(T, S), diagonal=shift).bool()
        if api == "sdpa":
            out = F.scaled_dot_product_attention(q, k_all, v_used, attn_mask=mask, scale=None if scale else 1.0)
        else:
            keys = k_all.transpose(2, 3) if transpose else k_all
            scores = q @ keys if api == "matmul" else torch.einsum("bhqd,bhkd->bhqk", q, k_all)
            if scale:
                scores = scores / math.sqrt(q.shape[3])
            if mask is not None:
                scores = scores.masked_fill(~mask, fill)
            weights = F.softmax(scores, dim=softmax_dim)
            out = weights @ v_used if api == "matmul" else torch.einsum("bhqk,bhkd->bhqd", weights, v_used)
        if returned == "out":
            return out
        return (out, k_all, v_used) if returned == "out,k,v" else (out, v_used, k_all)
    return attend_with_cache


def attend_overwrite(q, k_new, v_new, k_cache, v_cache):
    """'Updates' the cache by replacing it with the new keys and values."""
    k_cache, v_cache = k_new, v_new
    out = F.scaled_dot_product_attention(q, k_cache, v_cache, is_causal=True)
    return out, k_cache, v_cache


def attend_new_keys_only(q, k_new, v_new, k_cache, v_cache):
    """Appends correctly, then attends with the new keys and values instead of the whole cache."""
    k_all = torch.cat([k_cache, k_new], dim=2)
    v_all = torch.cat([v_cache, v_new], dim=2)
    out = F.scaled_dot_product_attention(q, k_new, v_new, is_causal=True)
    return out, k_all, v_all


def attend_is_causal(q, k_new, v_new, k_cache, v_cache):
    """is_causal=True with fewer queries than keys: torch aligns the mask top-left."""
    k = torch.cat([k_cache, k_new], dim=-2)
    v = torch.cat([v_cache, v_new], dim=-2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True), k, v


def attend_sliced_mask(q, k_new, v_new, k_cache, v_cache):
    """The first T rows of the full causal mask (the last T are right)."""
    k = torch.cat([k_cache, k_new], dim=-2)
    v = torch.cat([v_cache, v_new], dim=-2)
    S, T = k.shape[-2], q.shape[-2]
    mask = torch.tril(torch.ones(S, S, dtype=torch.bool))[:T]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), k, v


def attend_prepend_unmasked(q, k_new, v_new, k_cache, v_cache):
    """The new positions in front, and no mask."""
    k = torch.cat([k_new, k_cache], dim=2)
    v = torch.cat([v_new, v_cache], dim=2)
    return F.scaled_dot_product_attention(q, k, v), k, v


def attend_scaled_by_length(q, k_new, v_new, k_cache, v_cache):
    """Divides the scores by √(L + T), the number of keys, instead of √d."""
    out, k, v = learner_attend()(q, k_new, v_new, k_cache, v_cache)
    S = k.shape[2]
    mask = torch.ones(q.shape[2], S, dtype=torch.bool).tril(S - q.shape[2])
    scores = (q @ k.transpose(-1, -2) / math.sqrt(S)).masked_fill(~mask, -math.inf)
    return scores.softmax(-1) @ v, k, v


def attend_float32(q, k_new, v_new, k_cache, v_cache):
    out, k, v = learner_attend()(q.float(), k_new.float(), v_new.float(), k_cache.float(), v_cache.float())
    return out.double(), k.double(), v.double()


def _step(q, k_new, v_new, k_cache, v_cache):
    """What every learner below shares: the appended keys and values, the scaled scores."""
    k_all, v_all = torch.cat((k_cache, k_new), dim=2), torch.cat((v_cache, v_new), dim=2)
    return k_all, v_all, q @ k_all.transpose(2, 3) / math.sqrt(q.shape[3])


def attend_causal_for_chunks(q, k_new, v_new, k_cache, v_cache):
    """is_causal for chunks only: right for one new query, top-left for a chunk after a cache."""
    k_all, v_all, _ = _step(q, k_new, v_new, k_cache, v_cache)
    return F.scaled_dot_product_attention(q, k_all, v_all, is_causal=q.shape[2] > 1), k_all, v_all


def attend_tril_for_chunks(q, k_new, v_new, k_cache, v_cache):
    k_all, v_all, scores = _step(q, k_new, v_new, k_cache, v_cache)
    T, S = q.shape[2], k_all.shape[2]
    if T > 1:
        scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), -math.inf)
    return scores.softmax(-1) @ v_all, k_all, v_all


def attend_diagonal_t_minus_one(q, k_new, v_new, k_cache, v_cache):
    k_all, v_all, scores = _step(q, k_new, v_new, k_cache, v_cache)
    T, S = q.shape[2], k_all.shape[2]
    scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(T - 1), -math.inf)
    return scores.softmax(-1) @ v_all, k_all, v_all


def attend_scaled_after_softmax(q, k_new, v_new, k_cache, v_cache):
    k_all, v_all, scores = _step(q, k_new, v_new, k_cache, v_cache)
    T, S = q.shape[2], k_all.shape[2]
    scores = scores * math.sqrt(q.shape[3])                    # unscaled again: the 1/√d comes later
    weights = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T), -math.inf).softmax(-1)
    return weights / math.sqrt(q.shape[3]) @ v_all, k_all, v_all


def attend_masked_after_softmax(q, k_new, v_new, k_cache, v_cache):
    k_all, v_all, scores = _step(q, k_new, v_new, k_cache, v_cache)
    T, S = q.shape[2], k_all.shape[2]
    weights = scores.softmax(-1) * torch.ones(T, S, dtype=torch.bool).tril(S - T)
    return weights @ v_all, k_all, v_all


def attend_float_mask_invert(q, k_new, v_new, k_cache, v_cache):
    k_all, v_all, scores = _step(q, k_new, v_new, k_cache, v_cache)
    T, S = q.shape[2], k_all.shape[2]
    mask = torch.ones(T, S).tril(S - T)                        # floats
    return scores.masked_fill(~mask, -math.inf).softmax(-1) @ v_all, k_all, v_all


def attend_float_mask_fill(q, k_new, v_new, k_cache, v_cache):
    k_all, v_all, scores = _step(q, k_new, v_new, k_cache, v_cache)
    T, S = q.shape[2], k_all.shape[2]
    hidden = torch.ones(T, S).triu(S - T + 1)                  # floats: 1 where hidden
    return scores.masked_fill(hidden, -math.inf).softmax(-1) @ v_all, k_all, v_all


def attend_first_chunk_causal_only(q, k_new, v_new, k_cache, v_cache):
    """The library's rule without its else branch: is_causal for a first chunk, no mask otherwise."""
    k_all, v_all = torch.cat((k_cache, k_new), dim=2), torch.cat((v_cache, v_new), dim=2)
    first_chunk = k_cache.shape[2] == 0 and q.shape[2] > 1
    return F.scaled_dot_product_attention(q, k_all, v_all, is_causal=first_chunk), k_all, v_all


def attend_inverted_fill(q, k_new, v_new, k_cache, v_cache):
    k_all, v_all = torch.cat((k_cache, k_new), dim=2), torch.cat((v_cache, v_new), dim=2)
    T, S = q.shape[2], k_all.shape[2]
    allowed = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
    scores = (q @ k_all.transpose(2, 3) / math.sqrt(q.shape[3])).masked_fill(allowed, -math.inf)
    return scores.softmax(-1) @ v_all, k_all, v_all


def attend_scaled_by_d(q, k_new, v_new, k_cache, v_cache):
    k_all, v_all = torch.cat((k_cache, k_new), dim=2), torch.cat((v_cache, v_new), dim=2)
    T, S = q.shape[2], k_all.shape[2]
    allowed = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
    scores = (q @ k_all.transpose(2, 3) / q.shape[3]).masked_fill(~allowed, -math.inf)
    return scores.softmax(-1) @ v_all, k_all, v_all


def attend_float_mask_to_sdpa(q, k_new, v_new, k_cache, v_cache):
    k_all, v_all = torch.cat((k_cache, k_new), dim=2), torch.cat((v_cache, v_new), dim=2)
    T, S = q.shape[2], k_all.shape[2]
    mask = torch.ones(T, S, dtype=q.dtype).tril(diagonal=S - T)           # 0.0 / 1.0: added, not applied
    return F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask), k_all, v_all


def attend_chunks_minus_one(q, k_new, v_new, k_cache, v_cache):
    k_all, v_all = torch.cat((k_cache, k_new), dim=2), torch.cat((v_cache, v_new), dim=2)
    T, S = q.shape[2], k_all.shape[2]
    mask = None if T == 1 else torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T - 1)
    return F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask), k_all, v_all


def attend_zero_fill(q, k_new, v_new, k_cache, v_cache):
    k_all, v_all = torch.cat((k_cache, k_new), dim=2), torch.cat((v_cache, v_new), dim=2)
    T, S = q.shape[2], k_all.shape[2]
    allowed = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
    scores = torch.where(allowed, q @ k_all.transpose(2, 3) / math.sqrt(q.shape[3]), 0.0)
    return scores.softmax(-1) @ v_all, k_all, v_all


def attend_triu(q, k_new, v_new, k_cache, v_cache):
    k_all, v_all = torch.cat((k_cache, k_new), dim=2), torch.cat((v_cache, v_new), dim=2)
    T, S = q.shape[2], k_all.shape[2]
    allowed = torch.ones(T, S, dtype=torch.bool).triu(diagonal=S - T)   # meant tril
    scores = (q @ k_all.transpose(2, 3) / math.sqrt(q.shape[3])).masked_fill(~allowed, -math.inf)
    return scores.softmax(-1) @ v_all, k_all, v_all


def attend_hide_mask_to_sdpa(q, k_new, v_new, k_cache, v_cache):
    """A 'hide the future' mask, as masked_fill wants it, given to sdpa, whose True means 'attend'."""
    k_all, v_all = torch.cat((k_cache, k_new), dim=2), torch.cat((v_cache, v_new), dim=2)
    T, S = q.shape[2], k_all.shape[2]
    future = torch.ones(T, S, dtype=torch.bool).triu(diagonal=S - T + 1)
    return F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=future), k_all, v_all


ATTEND_WRONG = [
    (attend_overwrite, "the cache was overwritten: k_all and v_all must hold the L cached positions"),
    (attend_new_keys_only, "your k_all and v_all are right, but the attention used the new keys and values alone"),
    (learner_attend(diagonal="0"), "your mask places the new queries at positions 0 … T-1 (top-left"),
    (attend_is_causal, "your mask places the new queries at positions 0 … T-1 (top-left"),
    (attend_sliced_mask, "your mask places the new queries at positions 0 … T-1 (top-left"),
    (learner_attend(diagonal="S-T-1"), "your mask is shifted by L - 1"),
    (learner_attend(diagonal="S-T-1", api="sdpa"), "your mask is shifted by L - 1"),
    (learner_attend(diagonal="S-T-1", fill=-1e9), "your mask is shifted by L - 1"),
    (learner_attend(diagonal="S-T+1"), "your mask is shifted by L + 1"),
    (learner_attend(diagonal="S-T+1", api="einsum"), "your mask is shifted by L + 1"),
    (learner_attend(diagonal="none"), "no causal mask among the new queries"),
    (learner_attend(diagonal="none", api="sdpa"), "no causal mask among the new queries"),
    (learner_attend(cache="prepend"), "the new positions went in front of the cached ones"),
    (attend_prepend_unmasked, "the new positions went in front of the cached ones"),
    (learner_attend(scale=False), "the scores are not scaled: divide q @ k_all.transpose(-2, -1) by √d"),
    (learner_attend(scale=False, api="sdpa"), "the scores are not scaled: divide q @ k_all.transpose(-2, -1) by √d"),
    (learner_attend(softmax_dim=2), "the softmax ran over dim=-2, the queries"),
    (learner_attend(values="new"), "your function raised RuntimeError: Expected size for first two dimensions of "
                                   "batch2 tensor to be: [6, 6] but got: [6, 1]. Hint: the weights (B, H, T, L + T) "
                                   "met values of another length"),
    (learner_attend(values="new", api="einsum"), "the weights (B, H, T, L + T) met values of another length"),
    (learner_attend(values="new", api="sdpa"), "the weights (B, H, T, L + T) met values of another length"),
    (learner_attend(transpose=False), "a matrix product with mismatched shapes: the scores are "
                                      "q @ k_all.transpose(-2, -1)"),
    (learner_attend(diagonal="TxT"), "the mask and the scores differ in size"),
    (learner_attend(diagonal="TxT", api="sdpa"), "the mask and the scores differ in size"),
    (learner_attend(cat_dim=3), "append along the positions axis"),
    (learner_attend(cat_dim=1), "append along the positions axis"),
    (learner_attend(returned="out,v,k"), "k_all and v_all are swapped"),
    (learner_attend(returned="out"), "return a tuple (out, k_all, v_all)"),
    (attend_scaled_by_length, "you divided the scores by √(L + T), the number of keys"),
    (attend_causal_for_chunks, "right for one new query, wrong for a chunk"),
    (attend_tril_for_chunks, "right for one new query, wrong for a chunk"),
    (attend_diagonal_t_minus_one, "your mask's diagonal is T - 1"),
    (attend_scaled_after_softmax, "the 1/√d went on the weights after the softmax"),
    (attend_masked_after_softmax, "you masked the weights after the softmax"),
    (attend_float_mask_invert, "and `~` needs a boolean one"),
    (attend_float_mask_fill, "masked_fill got a float mask"),
    (attend_float32, "computed in float32 and cast back"),
    (lambda *a: learner_attend()(*a)[:2], "returned a tuple of 2 items; return a tuple (out, k_all, v_all)"),
    (lambda q, k_new, v_new, k_cache, v_cache: (learner_attend()(q, k_new, v_new, k_cache, v_cache)[0], k_cache,
                                                v_cache),
     "k_all shape (2, 2, 0, 3), expected (2, 2, 4, 3) for q of shape (2, 2, 4, 3), k_new of shape (2, 2, 4, 3)"),
    (lambda *a: None, "returned None; return a tuple (out, k_all, v_all)"),
    (attend_first_chunk_causal_only, "a chunk after a cache, L > 0 and T > 1, got no mask"),
    (attend_inverted_fill, "your mask is inverted: you hid the allowed keys"),
    (attend_scaled_by_d, "you divided the scores by d, the width of a head"),
    (attend_float_mask_to_sdpa, "a 0/1 float mask was ADDED to the scores"),
    (attend_chunks_minus_one, "for a chunk your mask's diagonal is L - 1"),
    (attend_zero_fill, "the hidden scores were set to 0"),
    (attend_triu, "your mask keeps the upper triangle (triu)"),
    (attend_hide_mask_to_sdpa, "your mask is inverted: you hid the allowed keys"),
]


# --------------------------------------------------------------------------- 8.2, as learners write it


def learner_bytes(*, both=True, kv_heads=True, per_head=True, layers=True, tokens=True, batch=True, unit="bytes",
                  as_float=False, defaults=(1, 2)):
    """A learner's byte count, with the slip chosen by the keywords.

    both: keys and values. kv_heads: n_kv_head heads (False: n_head). per_head: d_model // n_head
    numbers a head (False: d_model). layers, tokens, batch: multiply by n_layer, T, batch_size.
    unit: "bytes" (right), "bits" (times 8), "elements" (no bytes_per_element), "GiB". as_float:
    d_head = d_model / n_head. defaults: (batch_size, bytes_per_element).
    """
    def cache_bytes(n_layer, n_head, n_kv_head, d_model, T, batch_size=defaults[0], bytes_per_element=defaults[1]):
        d_head = (d_model / n_head if as_float else d_model // n_head) if per_head else d_model
        heads = n_kv_head if kv_heads else n_head
        per_layer = (2 if both else 1) * heads * d_head          # numbers per position
        n = per_layer * (n_layer if layers else 1) * (T if tokens else 1) * (batch_size if batch else 1)
        if unit == "elements":
            return n
        if unit == "bits":
            return n * bytes_per_element * 8
        if unit == "GiB":
            return n * bytes_per_element / 2 ** 30
        return n * bytes_per_element
    return cache_bytes


def bytes_via_d_model(n_layer, n_head, n_kv_head, d_model, T, batch_size=1, bytes_per_element=2):
    """d_model numbers per key and per value: the width of all the query heads."""
    return 2 * n_layer * d_model * T * batch_size * bytes_per_element


def bytes_kv_head_width(n_layer, n_head, n_kv_head, d_model, T, batch_size=1, bytes_per_element=2):
    """d_head computed with n_kv_head: d_model // n_kv_head."""
    return 2 * n_layer * n_kv_head * (d_model // n_kv_head) * T * batch_size * bytes_per_element


def bytes_no_defaults(n_layer, n_head, n_kv_head, d_model, T, batch_size, bytes_per_element):
    return learner_bytes()(n_layer, n_head, n_kv_head, d_model, T, batch_size, bytes_per_element)


def bytes_numpy(n_layer, n_head, n_kv_head, d_model, T, batch_size=1, bytes_per_element=2):
    """A NumPy integer (right)."""
    sizes = np.array([2, n_layer, n_kv_head, d_model // n_head, T, batch_size, bytes_per_element], dtype=np.int64)
    return np.prod(sizes)


def bytes_0d_tensor(n_layer, n_head, n_kv_head, d_model, T, batch_size=1, bytes_per_element=2):
    return torch.tensor(learner_bytes()(n_layer, n_head, n_kv_head, d_model, T, batch_size, bytes_per_element))


def bytes_from_the_model(n_layer, n_head, n_kv_head, d_model, T, batch_size=1, bytes_per_element=2):
    """A cache of the right size on the meta device (right; the library's answer)."""
    dtype = {1: torch.float8_e4m3fn, 2: torch.float16, 4: torch.float32}[bytes_per_element]
    cache = KVCache(n_layer, batch_size, n_kv_head, d_model // n_head, T, dtype=dtype, device="meta")
    return cache.nbytes(allocated=True)


BYTES_WRONG = [
    (learner_bytes(both=False), "the cache holds a key AND a value vector per head, layer and position"),
    (learner_bytes(kv_heads=False), "you cached n_head heads (n_head · d_head = d_model)"),
    (bytes_via_d_model, "you cached n_head heads (n_head · d_head = d_model)"),
    (bytes_kv_head_width, "you cached n_head heads (n_head · d_head = d_model)"),
    (learner_bytes(per_head=False), "d_model is the width of all the heads together"),
    (learner_bytes(layers=False), "every layer has its own keys and values: multiply by n_layer"),
    (learner_bytes(tokens=False), "the cache holds every position: multiply by T"),
    (learner_bytes(batch=False), "each sequence of the batch has its own cache: multiply by batch_size"),
    (learner_bytes(unit="bits"), "you counted bits"),
    (learner_bytes(unit="elements"), "that is a number of elements, not of bytes"),
    (learner_bytes(unit="GiB"), "your count is in KiB, MiB or GiB"),
    (lambda *a: learner_bytes()(*a) / 1e6, "your count is in KiB, MiB or GiB"),
    (learner_bytes(as_float=True), "the count is right but it is a float: return an int"),
    (lambda *a: torch.tensor(float(learner_bytes()(*a))), "the count is right but it is a float: return an int"),
    (learner_bytes(defaults=(1, 4)), "your count is right when every argument is given but wrong with the defaults"),
    (learner_bytes(defaults=(8, 2)), "your count is right when every argument is given but wrong with the defaults"),
    (bytes_no_defaults, "batch_size and bytes_per_element have defaults"),
    (lambda n_layer, n_head, n_kv_head, d_model, T, bytes_per_element=2, batch_size=1:
     2 * n_layer * n_kv_head * (d_model // n_head) * T * batch_size * bytes_per_element,
     "your count reads the sixth argument as bytes_per_element"),
    (lambda n_layer, n_head, n_kv_head, d_model, T, batch_size=1, bytes_per_element=2:
     3 * n_layer * n_kv_head * (d_model // n_head) * T * batch_size * bytes_per_element,
     "you stored the queries too"),
    (learner_bytes(both=False, batch=False),
     "wrong count: two slips. Hint: the cache holds a key AND a value vector per head, layer and position: multiply "
     "by 2. And each sequence of the batch has its own cache: multiply by batch_size."),
    (learner_bytes(kv_heads=False, unit="elements"),
     "wrong count: two slips. Hint: each key holds d_model numbers in your count"),
    (lambda *a: learner_bytes()(*a) + 1,
     "for n_layer = 32, n_head = 32, n_kv_head = 32, d_model = 4096, T = 4096, batch_size = 1, bytes_per_element "
     "= 2 you counted 2,147,483,649 bytes; the cache holds 2,147,483,648 (1 too many). Hint: per layer, per "
     "sequence and per position"),
    (lambda *a: str(learner_bytes()(*a)), "returned a str; return the number of bytes, an int"),
    (lambda *a: (learner_bytes()(*a), "bytes"), "returned a tuple of 2 items; return the number of bytes, an int"),
    (lambda *a: None, "returned None; return the number of bytes, an int"),
    (lambda n_layer, n_head, n_kv_head, d_model, T, batch_size=1, bytes_per_element=2:
     2 * n_layer * (n_head // n_kv_head) * (d_model // n_head) * T * batch_size * bytes_per_element,
     "you multiplied by the group size n_head // n_kv_head"),
    (lambda *a: learner_bytes()(*a) // 2 ** 20, "your count is in KiB, MiB or GiB"),
]


WRONG = [("attend_with_cache", fn, phrase) for fn, phrase in ATTEND_WRONG] + \
        [("cache_bytes", fn, phrase) for fn, phrase in BYTES_WRONG]


# What a check must refuse without raising: the odd answers of every chapter, and this chapter's own.
BAD = {
    **exercise_suite.odd_answers((2, 2, 4, 3)),
    "triple": lambda *a: (torch.zeros(1, dtype=F64),) * 3,
    "triple-nan": lambda *a: tuple(torch.full((2, 2, 4, 3), math.nan, dtype=F64) for _ in range(3)),
    "triple-meta": lambda *a: tuple(torch.empty(2, 2, 4, 3, dtype=F64, device="meta") for _ in range(3)),
    "triple-numbers": lambda *a: (1, 2, 3),
    "triple-none": lambda *a: (None, None, None),
    "triple-lists": lambda *a: ([1.0], [2.0], [3.0]),
    "wrong-shape": lambda *a: torch.zeros(1, dtype=F64),
    "meta": lambda *a: torch.empty(2, 2, 4, 3, dtype=F64, device="meta"),
    "float": lambda *a: 7.5,
    "nan-float": lambda *a: math.nan,
    "inf-float": lambda *a: math.inf,
    "numpy-float": lambda *a: np.float64(1.0),
    "negative": lambda *a: -2 ** 31,
    "huge-int": lambda *a: 10 ** 400,
}


# --------------------------------------------------------------------------- the generic tests

# Written once, in tests/exercise_suite.py (its docstring says what each checks); chapter 8 runs these.
globals().update(
    # test_solution_passes, test_solution_passes_for_every_seed, test_solution_code_fits_the_page (79 columns),
    # test_stub_is_not_implemented
    SUITE.solution_tests(page_width=79)
    # test_the_chapter_has_a_cell_for_every_checked_exercise, test_chapter_solution_passes_for_every_seed
    | SUITE.notebook_tests()
    # test_nearly_right_fails (8.1's outputs times 1 + 1e-4 or 1e-7 fail; 8.2 is judged exactly, below)
    | SUITE.nearly_right_tests(["attend_with_cache"])
    # test_every_registered_mistake_is_caught_by_its_own_hint,
    # test_the_cases_tell_every_mistake_from_the_reference_and_the_others (apart by more than 1e-3 somewhere, so a
    # learner's version of a slip is never taken for another; 8.1's tuples of tensors compared as one vector)
    | SUITE.registered_mistake_tests(apart_by=1e-3, flattened=True)
    # the fixture wrong_verdicts; test_wrong_answer_gets_its_hint_whatever_the_seed (each answer of WRONG),
    # test_every_registered_hint_is_earned_by_a_wrong_answer, test_wrong_answers_get_different_verdicts
    | SUITE.wrong_answer_tests(WRONG)
    # test_any_wrong_answer_fails_without_raising (each answer of BAD), test_the_diagnoses_never_raise
    | SUITE.odd_answer_tests(BAD) | SUITE.diagnosis_tests()
    # test_seed_changes_the_inputs (float64 tensors), test_cases_travel_to_the_sandbox_and_back (these answers too)
    | SUITE.case_tests()
    | SUITE.travel_tests([BAD["triple"], BAD["triple-meta"], BAD["ndarray"], BAD["float"],
                          learner_attend(diagonal="0"), learner_attend(values="new"), learner_bytes(both=False),
                          learner_bytes(as_float=True)])
    # test_every_hint_is_written_once
    | SUITE.hint_tests()
)


# --------------------------------------------------------------------------- the registry


def test_chapter_eight_registry():
    SUITE.assert_registry(numbers=["8.1", "8.2"])
    assert checks.EXERCISES["attend_with_cache"].args == ("q", "k_new", "v_new", "k_cache", "v_cache")
    assert checks.EXERCISES["cache_bytes"].args == ("n_layer", "n_head", "n_kv_head", "d_model", "T", "batch_size",
                                                    "bytes_per_element")
    assert checks.EXERCISES["attend_with_cache"].item_names == ("out", "k_all", "v_all")


def test_the_library_answers_name_functions():
    for name in ALL:
        keys = engine.library_answer_keys(checks.EXERCISES[name])
        named = {dotted for *_, dotted in keys["code"]}
        assert all(any(n == a or n.startswith(a + ".") for n in named) for a in checks.EXERCISES[name].library_answers)
    named = {d for *_, d in engine.library_answer_keys(checks.EXERCISES["attend_with_cache"])["code"]}
    assert {"tinyformer.kvcache.LayerCache.append", "tinyformer.kvcache.LayerCache.attend",
            "tinyformer.attention.MultiHeadAttention.forward"} <= named


def test_a_step_that_calls_an_unfinished_exercise_is_told_so(capsys):
    def attend_with_cache(q, k_new, v_new, k_cache, v_cache):
        raise NotImplementedError("cache_bytes is not implemented yet")

    verdict = checks.check_attend_with_cache(attend_with_cache)
    exercise_suite.assert_it_calls_an_unfinished(verdict, "cache_bytes", "8.2")
    capsys.readouterr()


# --------------------------------------------------------------------------- learners' answers


def test_the_output_on_the_meta_device_is_named(capsys):
    right = solution("attend_with_cache")
    verdict = checks.check_attend_with_cache(lambda *a: tuple(t.to("meta") for t in right(*a)))
    assert not verdict and "a tensor on the meta device, which holds no values" in verdict.message
    verdict = checks.check_cache_bytes(lambda *a: torch.tensor(solution("cache_bytes")(*a)).to("meta"))
    assert not verdict and "a tensor on the meta device, which holds no values" in verdict.message
    capsys.readouterr()


def test_the_count_is_judged_exactly_and_as_an_int(capsys):
    right = solution("cache_bytes")
    for wrong in (lambda *a: right(*a) + 1, lambda *a: right(*a) - 1, lambda *a: float(right(*a)),
                  lambda *a: torch.tensor(float(right(*a))), lambda *a: right(*a) > 0,
                  lambda *a: right(*a) * (1 + 1e-12)):
        verdict = checks.check_cache_bytes(wrong)
        assert not verdict and verdict.status == checks.FAIL, verdict.message
    capsys.readouterr()


def test_the_empty_row_of_a_mask_shifted_by_l_minus_one_is_named_whatever_it_holds():
    """The registered mistake gives the first query of an empty cache NaN; torch's fused kernel gives it zeros and
    a fill of -1e9 the average of every value: the diagnosis names the same slip."""
    cases = checks.cases_for(checks.EXERCISES["attend_with_cache"], 0)
    for fn in (learner_attend(diagonal="S-T-1"), learner_attend(diagonal="S-T-1", api="sdpa"),
               learner_attend(diagonal="S-T-1", fill=-1e9)):
        outs = checks.run_cases(fn, cases).outputs
        first = outs[0][0][..., 0, :]                              # query 0 of an empty cache sees no key
        assert bool(first.isnan().all()) or bool((first == 0).all()) or torch.allclose(
            first, cases[0][2].mean(dim=-2))
        assert verdict_for("attend_with_cache", fn).message.endswith(f"Hint: {ch08.CACHE_MINUS_ONE}")


# --------------------------------------------------------------------------- other right answers pass


def attend_loop(q, k_new, v_new, k_cache, v_cache):
    """One new query at a time, each against the keys up to its own position (right)."""
    k_all, v_all = torch.cat((k_cache, k_new), 2), torch.cat((v_cache, v_new), 2)
    L = k_cache.shape[2]
    rows = []
    for i in range(q.shape[2]):
        scores = q[:, :, i:i + 1] @ k_all[:, :, :L + i + 1].transpose(2, 3) / q.shape[3] ** 0.5
        rows.append(torch.softmax(scores, dim=-1) @ v_all[:, :, :L + i + 1])
    return torch.cat(rows, dim=2), k_all, v_all


def attend_hide_future(q, k_new, v_new, k_cache, v_cache):
    """The positions to hide, triu(diagonal=L + 1), filled with -inf; no mask for a single query (right)."""
    k_all, v_all = torch.cat([k_cache, k_new], dim=-2), torch.cat([v_cache, v_new], dim=-2)
    L, T = k_cache.shape[-2], q.shape[-2]
    scores = torch.einsum("bhtd,bhsd->bhts", q, k_all) * q.shape[-1] ** -0.5
    if T > 1:
        future = torch.ones(T, L + T, dtype=torch.bool).triu(diagonal=L + 1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.einsum("bhts,bhsd->bhtd", scores.softmax(dim=-1), v_all), k_all, v_all


@pytest.mark.parametrize("right", [learner_attend(), learner_attend(api="einsum"), learner_attend(api="sdpa"),
                                   learner_attend(fill=-1e30), attend_loop, attend_hide_future])
def test_other_right_steps_pass(right):
    for seed in SEEDS:
        verdict = verdict_for("attend_with_cache", right, seed)
        assert verdict.passed, (seed, verdict.message)


@pytest.mark.parametrize("right", [learner_bytes(), bytes_numpy, bytes_0d_tensor, bytes_from_the_model,
                                   lambda L, H, H_kv, d, T, B=1, b=2: kv_cache_bytes(L, H_kv, d // H, T, b, B)])
def test_other_right_counts_pass(right):
    for seed in SEEDS:
        verdict = verdict_for("cache_bytes", right, seed)
        assert verdict.passed, (seed, verdict.message)


# --------------------------------------------------------------------------- the cases


def test_the_attention_cases_are_built_to_expose_the_mistakes():
    ex = checks.EXERCISES["attend_with_cache"]
    for seed in SEEDS:
        cases = checks.cases_for(ex, seed)
        sizes = []
        for q, k_new, v_new, k_cache, v_cache in cases:
            B, H, T, d = q.shape
            L = k_cache.shape[2]
            assert k_new.shape == v_new.shape == q.shape and k_cache.shape == v_cache.shape == (B, H, L, d)
            assert all(t.dtype == F64 for t in (q, k_new, v_new, k_cache, v_cache))
            sizes.append((B, H, L, T, d))
        # fixed first: an empty cache with a chunk, one query after a cache, a chunk after a cache
        assert sizes[:3] == [(2, 2, 0, 4, 3), (2, 3, 5, 1, 4), (1, 2, 4, 3, 5)]
        assert sizes[0][4] != sizes[0][3]              # q @ k_all without its transpose raises on the first case
        for B, H, L, T, d in sizes[3:]:
            assert 1 <= B <= 3 and 1 <= H <= 4 and 0 <= L <= 9 and 1 <= T <= 5 and 2 <= d <= 8


def test_the_count_cases():
    ex = checks.EXERCISES["cache_bytes"]
    for seed in SEEDS:
        cases = checks.cases_for(ex, seed)
        assert cases[0] == (32, 32, 32, 4096, 4096, 1, 2) and cases[1] == (80, 64, 8, 8192, 4096, 1, 2)
        assert cases[6] == (4, 4, 4, 128, 320, 1, 4)
        assert any(len(c) == 5 for c in cases) and any(len(c) == 6 for c in cases)
        assert all(len(c) in (5, 6, 7) for c in cases)
        full = [c for c in cases if len(c) == 7]
        assert any(c[2] == 1 < c[1] for c in cases)                           # multi-query
        assert any(1 < c[2] < c[1] for c in cases)                            # grouped-query
        assert any(c[5] > 2 for c in full) and any(c[6] == 4 for c in full)   # a batch; fp32
        assert all(type(x) is int and x > 0 for c in cases for x in c)
        assert all(c[3] % c[1] == 0 and c[1] % c[2] == 0 for c in cases)


# --------------------------------------------------------------------------- the grader's honesty flags


@pytest.mark.parametrize("name", ALL)
def test_honest_solutions_are_not_flagged(name):
    rec, verdict = exercise_suite.harvest(name, solution(name))
    assert rec["flags"] == [] and rec["tampering"] == [], rec["flags"]
    assert verdict.status == checks.PASS, verdict.message


LIBRARY_ANSWERS = [
    ("attend_with_cache", """
        import torch
        import torch.nn.functional as F
        from tinyformer.attention import causal_mask

        def attend_with_cache(q, k_new, v_new, k_cache, v_cache):
            L, T = k_cache.shape[-2], q.shape[-2]
            k, v = torch.cat((k_cache, k_new), dim=-2), torch.cat((v_cache, v_new), dim=-2)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(L + T)[L:]), k, v
        """, "tinyformer.attention.causal_mask"),
    ("attend_with_cache", """
        import torch
        from tinyformer.attention import causal_mask, scaled_dot_product_attention

        def attend_with_cache(q, k_new, v_new, k_cache, v_cache):
            L, T = k_cache.shape[-2], q.shape[-2]
            k, v = torch.cat((k_cache, k_new), dim=-2), torch.cat((v_cache, v_new), dim=-2)
            return scaled_dot_product_attention(q, k, v, causal_mask(L + T)[L:])[0], k, v
        """, "tinyformer.attention.scaled_dot_product_attention"),
    ("attend_with_cache", """
        import torch
        import torch.nn.functional as F
        from tinyformer.kvcache import KVCache

        def attend_with_cache(q, k_new, v_new, k_cache, v_cache):
            B, H, L, d = k_cache.shape
            T = q.shape[-2]
            layer = KVCache(1, B, H, d, L + T, dtype=q.dtype)[0]
            layer.append(k_cache, v_cache)
            k, v = layer.append(k_new, v_new)
            mask = torch.ones(T, L + T, dtype=torch.bool).tril(L)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), k.clone(), v.clone()
        """, "tinyformer.kvcache.LayerCache.append"),
    ("attend_with_cache", """
        import torch
        from tinyformer.attention import attend_heads, merge_heads

        def attend_with_cache(q, k_new, v_new, k_cache, v_cache):
            L, T, H = k_cache.shape[-2], q.shape[-2], q.shape[1]
            k, v = torch.cat((k_cache, k_new), dim=-2), torch.cat((v_cache, v_new), dim=-2)
            mask = torch.ones(T, L + T, dtype=torch.bool).tril(L)
            merged, _ = attend_heads(merge_heads(q), merge_heads(k), merge_heads(v), H, mask=mask)
            B, _, _, d = q.shape
            return merged.reshape(B, T, H, d).transpose(1, 2), k, v
        """, "tinyformer.attention.attend_heads"),
    ("cache_bytes", """
        from tinyformer.kvcache import kv_cache_bytes

        def cache_bytes(n_layer, n_head, n_kv_head, d_model, T, batch_size=1, bytes_per_element=2):
            return kv_cache_bytes(n_layer, n_kv_head, d_model // n_head, T, bytes_per_element, batch_size)
        """, "tinyformer.kvcache.kv_cache_bytes"),
    ("cache_bytes", """
        import torch
        from tinyformer.kvcache import KVCache

        def cache_bytes(n_layer, n_head, n_kv_head, d_model, T, batch_size=1, bytes_per_element=2):
            dtype = {1: torch.float8_e4m3fn, 2: torch.float16, 4: torch.float32}[bytes_per_element]
            cache = KVCache(n_layer, batch_size, n_kv_head, d_model // n_head, T, dtype=dtype, device="meta")
            return cache.nbytes(allocated=True)
        """, "tinyformer.kvcache.KVCache.__init__"),
]


@pytest.mark.parametrize("k", range(len(LIBRARY_ANSWERS)), ids=[f"{n}-{c}" for n, _, c in LIBRARY_ANSWERS])
def test_the_library_answer_is_flagged(k):
    name, source, caught = LIBRARY_ANSWERS[k]
    fn = define(textwrap.dedent(source), checks.EXERCISES[name].function)
    rec, verdict = exercise_suite.harvest(name, fn)
    assert caught in rec["flags"], rec["flags"]
    if verdict.passed:          # the in-book check names the call too
        exercise_suite.in_book_refuses(name, fn, rec["flags"])
    assert verdict.status == checks.PASS, verdict.message   # its outputs are right: the flag alone takes the credit


# --------------------------------------------------------------------------- the grader, end to end


def test_the_grader_judges_chapter_eight_in_its_sandbox(tmp_path):
    top_left = SOLUTIONS["attend_with_cache"].replace("tril(diagonal=L)", "tril()")
    assert top_left != SOLUTIONS["attend_with_cache"]
    rows = SUITE.graded(tmp_path, {"attend_with_cache": top_left, "cache_bytes": SOLUTIONS["cache_bytes"]})
    assert list(rows) == CHAPTER
    assert rows["attend_with_cache"][0] == checks.FAIL and ch08.CACHE_TOP_LEFT in rows["attend_with_cache"][1], rows
    assert rows["cache_bytes"][0] == checks.PASS, rows


# --------------------------------------------------------------------------- 8.1's reference


def test_attend_reference_is_causal_attention_over_the_whole_sequence():
    """With queries for the cached positions too, torch's causal attention over all L + T positions gives, in its
    last T rows, what one cached step gives the T new queries."""
    ex = checks.EXERCISES["attend_with_cache"]
    g = torch.Generator().manual_seed(8)
    for seed in SEEDS:
        for q, k_new, v_new, k_cache, v_cache in checks.cases_for(ex, seed):
            B, H, T, d = q.shape
            L = k_cache.shape[2]
            q_all = torch.cat((torch.randn(B, H, L, d, generator=g, dtype=F64), q), dim=2)
            k_all, v_all = torch.cat((k_cache, k_new), dim=2), torch.cat((v_cache, v_new), dim=2)
            full = F.scaled_dot_product_attention(q_all, k_all, v_all, is_causal=True)
            out, k_ref, v_ref = ch08.attend_with_cache_reference(q, k_new, v_new, k_cache, v_cache)
            assert out.dtype == F64 and out.shape == (B, H, T, d)
            torch.testing.assert_close(out, full[:, :, L:], rtol=1e-12, atol=1e-12)
            assert torch.equal(k_ref, k_all) and torch.equal(v_ref, v_all)


def test_one_new_query_attends_to_every_key():
    """T = 1: no mask; the weights are the softmax over every key held."""
    q, k_new, v_new, k_cache, v_cache = checks.cases_for(checks.EXERCISES["attend_with_cache"], 2)[1]
    assert q.shape[2] == 1 and k_cache.shape[2] > 0
    out, k_all, v_all = ch08.attend_with_cache_reference(q, k_new, v_new, k_cache, v_cache)
    weights = torch.softmax(q @ k_all.transpose(2, 3) / math.sqrt(q.shape[3]), dim=-1)
    torch.testing.assert_close(out, weights @ v_all, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("L,T", [(0, 4), (5, 1), (4, 3), (1, 1), (0, 1)])
def test_attend_reference_is_what_the_library_cache_computes(L, T):
    """A MultiHeadAttention layer decoding through a KVCache (L positions first, then T new ones) gives what the
    reference gives its projected queries, keys and values; the cache then holds the reference's k_all, v_all."""
    torch.manual_seed(L * 10 + T)
    B, H, d_model = 2, 4, 24
    attn = MultiHeadAttention(d_model, H).double()
    cache = KVCache(1, B, H, d_model // H, L + T, dtype=F64)
    x_old, x_new = torch.randn(B, L, d_model, dtype=F64), torch.randn(B, T, d_model, dtype=F64)
    with torch.no_grad():
        if L:
            attn(x_old, cache=cache[0])
        lib = attn(x_new, cache=cache[0])
        q, k_new, v_new = (split_heads(p(x_new), H) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
        k_cache, v_cache = (split_heads(p(x_old), H) for p in (attn.k_proj, attn.v_proj))
        out, k_all, v_all = ch08.attend_with_cache_reference(q, k_new, v_new, k_cache, v_cache)
        mine = attn.o_proj(merge_heads(out))
    torch.testing.assert_close(mine, lib, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(k_all, cache.k[0, :, :, :L + T], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(v_all, cache.v[0, :, :, :L + T], rtol=1e-12, atol=1e-12)


def test_layer_cache_append_returns_the_reference_keys_and_values():
    ex = checks.EXERCISES["attend_with_cache"]
    for q, k_new, v_new, k_cache, v_cache in checks.cases_for(ex, 4):
        B, H, L, d = k_cache.shape
        layer = KVCache(1, B, H, d, L + q.shape[2], dtype=F64)[0]
        layer.append(k_cache, v_cache)
        k, v = layer.append(k_new, v_new)
        _, k_ref, v_ref = ch08.attend_with_cache_reference(q, k_new, v_new, k_cache, v_cache)
        assert torch.equal(k, k_ref) and torch.equal(v, v_ref)


# --------------------------------------------------------------------------- 8.2's reference


def test_count_reference_is_kv_cache_bytes_and_the_solution():
    ex = checks.EXERCISES["cache_bytes"]
    for seed in SEEDS:
        for case in checks.cases_for(ex, seed):
            n_layer, n_head, n_kv_head, d_model, T, *rest = case
            batch_size, bytes_per_element = (list(rest) + [1, 2][len(rest):])[:2]
            ref = ch08.cache_bytes_reference(*case)
            assert type(ref) is int
            assert ref == kv_cache_bytes(n_layer, n_kv_head, d_model // n_head, T, bytes_per_element, batch_size)
            assert ref == solution("cache_bytes")(*case)
            assert ref == 2 * n_layer * n_kv_head * (d_model // n_head) * T * batch_size * bytes_per_element


def test_count_reference_by_hand():
    ref = ch08.cache_bytes_reference
    assert ref(32, 32, 32, 4096, 4096, 1, 2) == 2 * GiB == 2 ** 31              # Llama-2-7B: 512 KiB a token
    assert ref(32, 32, 32, 4096, 1) == 512 * 2 ** 10
    assert ref(80, 64, 8, 8192, 4096, 1, 2) == 1.25 * GiB                        # Llama-2-70B: 8 of 64 heads
    assert ref(80, 64, 64, 8192, 4096, 1, 2) == 10 * GiB                         # ... it would be 10 GiB with all
    assert ref(32, 71, 1, 4544, 2048, 1, 2) == 16 * 2 ** 20                      # Falcon-7B, multi-query: 16 MiB
    assert ref(12, 12, 12, 768, 1024, 1, 4) == 72 * 2 ** 20                      # GPT-2 small in fp32
    assert ref(32, 32, 8, 4096, 8192, 8, 2) == 8 * GiB                           # Mistral-7B, 8 sequences
    assert ref(24, 16, 16, 1024, 1024) == 96 * 2 ** 20                           # GPT-2 medium, the defaults
    assert ref(4, 4, 4, 128, 320, 1, 4) == 1.25 * 2 ** 20                        # the chapter's model: 4 KiB a token


@pytest.mark.parametrize("n_kv_head,dtype,batch_size,T", [(4, torch.float32, 1, 7), (2, torch.float32, 3, 11),
                                                          (1, torch.float64, 2, 16), (4, torch.float64, 3, 1)])
def test_count_reference_is_what_a_filled_cache_holds(n_kv_head, dtype, batch_size, T):
    """A GPT's own cache, filled with T tokens: cache.nbytes(), and the bytes of its keys and values so far."""
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=50, block_size=16, n_layer=3, n_head=4, d_model=32, n_kv_head=n_kv_head)
    model = GPT(config).to(dtype).eval()
    cache = model.new_cache(batch_size)
    idx = torch.randint(0, 50, (batch_size, T))
    with torch.no_grad():
        for chunk in (idx[:, :T // 2], idx[:, T // 2:]):      # a prompt, then the rest
            if chunk.shape[1]:
                model(chunk, cache=cache)
    assert cache.length == T
    held = sum(t[:, :, :, :T].numel() * t.element_size() for t in (cache.k, cache.v))
    element = torch.empty((), dtype=dtype).element_size()
    ref = ch08.cache_bytes_reference(3, 4, n_kv_head, 32, T, batch_size, element)
    assert ref == cache.nbytes() == held
    assert ch08.cache_bytes_reference(3, 4, n_kv_head, 32, 16, batch_size, element) == cache.nbytes(allocated=True)
