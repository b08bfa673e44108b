"""Chapter 2's checks: every solution passes, every stub is 'not implemented yet', and every
registered mistake is caught, by its hint, whatever the seed. These generic tests are written once,
in tests/exercise_suite.py; the ``globals().update(SUITE...)`` lines below take in (and name) those
this chapter runs.

The solutions and the wrong answers below are written here, the way a learner would write them,
independently of the known-wrong versions inside ``tinyformer.course.ch02``. The references are
checked against closed forms, explicit loops and PyTorch's own FLOP counter.
"""

from __future__ import annotations

import math

import exercise_suite
import numpy as np
import pytest
import torch
import torch.nn as nn
from exercise_suite import SEEDS, verdict_for
from torch.utils.flop_counter import FlopCounterMode

from tinyformer import checks
from tinyformer.attention import MultiHeadAttention
from tinyformer.course import ch02

from conftest import BOOK, chapter_notebooks, exercise_cells

CHAPTER = ["attention_by_hand", "previous_token_head", "sum_over_heads", "left_padded_causal_mask", "block_flops",
           "multi_head_attention"]
DRILLS = ["stable_softmax", "causal_mask", "attention_head"]
NOTEBOOK = BOOK / "02-attention.ipynb"

# --------------------------------------------------------------------------- solutions (exercise cells)

SOLUTIONS = {
    "attention_by_hand": '''\
import math


def attention_by_hand():
    """The weights (3, 3) and the output (3, 2) of the causal head of Exercise 2.1."""
    # BEGIN SOLUTION
    e = math.e
    weights = [[1, 0, 0],
               [e / (e + 1), 1 / (e + 1), 0],
               [e / (2 * e + 1), 1 / (2 * e + 1), e / (2 * e + 1)]]
    values = [[1, 0], [0, 2], [1, 2]]                # V = X W_V, one row per token
    out = [[sum(w[j] * values[j][c] for j in range(3)) for c in range(2)] for w in weights]
    return weights, out
    # END SOLUTION
''',
    "previous_token_head": '''\
import torch


def previous_token_head(n_pos):
    """W_Q, W_K (n_pos, n_pos) of a head that attends to the previous position."""
    # BEGIN SOLUTION
    W_Q = torch.zeros(n_pos, n_pos)
    for i in range(1, n_pos):
        W_Q[i, i - 1] = 60.0
    return W_Q, torch.eye(n_pos)
    # END SOLUTION
''',
    "sum_over_heads": '''\
def sum_over_heads(heads, W_O):
    """Σ_h heads[:, h] W_O^(h): (B, n_heads, T, d_head), (d_model, d_model) -> (B, T, d_model)."""
    # BEGIN SOLUTION
    d_head = heads.shape[-1]
    total = 0
    for h in range(heads.shape[1]):
        total = total + heads[:, h] @ W_O[h * d_head:(h + 1) * d_head, :]
    return total
    # END SOLUTION
''',
    "left_padded_causal_mask": '''\
import torch


def left_padded_causal_mask(lengths, T):
    """(B, T, T) bool: query i may see key j when j <= i and key j is a real token."""
    # BEGIN SOLUTION
    mask = torch.zeros(len(lengths), T, T, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        for i in range(T):
            for j in range(T - n, i + 1):
                mask[b, i, j] = True
    return mask
    # END SOLUTION
''',
    "block_flops": '''\
def block_flops(T, d_model, d_ff):
    """Forward FLOPs of one block's matrix products: (projections, attention, feed_forward)."""
    # BEGIN SOLUTION
    matmul = lambda m, k, n: 2 * m * k * n
    projections = 4 * matmul(T, d_model, d_model)
    attention = matmul(T, d_model, T) + matmul(T, T, d_model)
    feed_forward = matmul(T, d_model, d_ff) + matmul(T, d_ff, d_model)
    return projections, attention, feed_forward
    # END SOLUTION
''',
    "multi_head_attention": '''\
import math

import torch


def all_heads_at_once(x, W_Q, W_K, W_V, W_O, n_heads):
    """Causal multi-head attention, contiguous heads, no biases."""
    # BEGIN SOLUTION
    T, d_model = x.shape[-2:]
    d_head = d_model // n_heads
    q = torch.stack((x @ W_Q).split(d_head, dim=-1), dim=1)     # (B, H, T, d_head)
    k = torch.stack((x @ W_K).split(d_head, dim=-1), dim=1)
    v = torch.stack((x @ W_V).split(d_head, dim=-1), dim=1)
    s = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(d_head)
    later = torch.arange(T)[None, :] > torch.arange(T)[:, None]
    w = torch.softmax(s.masked_fill(later, -math.inf), dim=-1)
    heads = torch.einsum("bhij,bhjd->bhid", w, v)
    return torch.cat(heads.unbind(1), dim=-1) @ W_O
    # END SOLUTION
''',
    "stable_softmax": '''\
def stable_softmax(scores):
    # BEGIN SOLUTION
    z = scores - scores.max(dim=-1, keepdim=True).values
    return z.exp() / z.exp().sum(dim=-1, keepdim=True)
    # END SOLUTION
''',
    "causal_mask": '''\
import torch


def causal_mask(T):
    # BEGIN SOLUTION
    return torch.arange(T)[None, :] <= torch.arange(T)[:, None]
    # END SOLUTION
''',
    "attention_head": '''\
import math

import torch


def attention_head(x, W_Q, W_K, W_V):
    # BEGIN SOLUTION
    q, k, v = x @ W_Q, x @ W_K, x @ W_V
    s = torch.einsum("bid,bjd->bij", q, k) / math.sqrt(k.shape[-1])
    T = x.shape[1]
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, dim=-1) @ v
    # END SOLUTION
''',
}

SUITE = exercise_suite.Chapter(CHAPTER, DRILLS, SOLUTIONS, NOTEBOOK)
solution = SUITE.solution


# --------------------------------------------------------------------------- wrong answers, as learners write them

E = math.e
HAND_V = torch.tensor([[1.0, 0], [0, 2], [1, 2]])


def hand(scale=0.5, causal=True, rows=True, values=HAND_V, out_from=None, normalise=True, transpose=False):
    """Exercise 2.1 worked with torch, with a learner's slip chosen by the keywords."""
    X = torch.tensor([[1.0, 0], [0, 1], [1, 1]])
    Q = X @ torch.tensor([[0.0, 0, 0, 0], [1, 1, 0, 0]])
    K = X @ torch.tensor([[1.0, 1, 0, 0], [0, 0, 1, 1]])
    s = Q @ K.T * scale
    if causal:
        s = s.masked_fill(torch.triu(torch.ones(3, 3), 1) == 1, -1e30)
    e = s.exp()
    if normalise:
        e = e / (e.sum(1, keepdim=True) if rows else e.sum(0, keepdim=True))
    w = e.T if transpose else e
    return w, (out_from if out_from is not None else w) @ values


def hand_out_wrong():
    w, _ = hand()
    return w, w.T @ HAND_V


def hand_rounded():
    w, out = hand()
    return [[round(v, 3) for v in row] for row in w.tolist()], [[round(v, 3) for v in row] for row in out.tolist()]


def hand_out_transposed():
    w, out = hand()
    return w, out.T


def prev_head(where=-1, strength=60.0, n_extra=0, fill=None):
    def previous_token_head(n_pos):
        W_Q = torch.zeros(n_pos, n_pos + n_extra)
        for i in range(n_pos):
            if 0 <= i + where < n_pos:
                W_Q[i, i + where] = strength
        if fill is not None:
            W_Q[0, 0] = fill
        return W_Q, torch.eye(n_pos, n_pos + n_extra)
    return previous_token_head


def prev_zeros(n_pos):
    return torch.zeros(n_pos, n_pos), torch.zeros(n_pos, n_pos)


def sums(block_of, divide=False):
    def sum_over_heads(heads, W_O):
        n_heads, d_head = heads.shape[1], heads.shape[3]
        out = sum(heads[:, h] @ block_of(W_O, h, d_head) for h in range(n_heads))
        return out / n_heads if divide else out
    return sum_over_heads


def sum_reshaped(heads, W_O):
    B, H, T, D = heads.shape
    return heads.reshape(B, T, H * D) @ W_O


def sum_no_W_O(heads, W_O):
    return torch.cat([heads[:, h] for h in range(heads.shape[1])], dim=-1)


def padded(allowed, dtype=torch.bool, head_axis=False):
    def left_padded_causal_mask(lengths, T):
        i = torch.arange(T)[:, None]
        j = torch.arange(T)[None, :]
        m = torch.stack([allowed(i, j, T - int(n), int(n)) for n in lengths])
        m = m[:, None] if head_axis else m
        return m.to(dtype)
    return left_padded_causal_mask


def padded_causal_only(lengths, T):
    return torch.ones(T, T, dtype=torch.bool).tril()


def flops(proj=8, attn=4, ffn=4, as_tuple=True):
    def block_flops(T, d_model, d_ff):
        counts = (proj * T * d_model ** 2, attn * T * T * d_model, ffn * T * d_model * d_ff)
        return counts if as_tuple else sum(counts)
    return block_flops


def learner_mha(scale="head", causal=True, fill=-math.inf, softmax_first=False, keys_first=False, single=False,
                use_W_O=True, transposed_W=False, dim=-1, hide=1, renormalise=False):
    """A learner's causal MHA (a loop over heads), with the slip chosen by the keywords."""
    def all_heads_at_once(x, W_Q, W_K, W_V, W_O, n_heads):
        B, T, C = x.shape
        H = 1 if single else n_heads
        D = C // H
        lin = (lambda W: x @ W.T) if transposed_W else (lambda W: x @ W)
        q, k, v = lin(W_Q), lin(W_K), lin(W_V)
        later = torch.ones(T, T).triu(hide).bool()          # hide=0 hides the diagonal too
        outs = []
        for h in range(H):
            cols = slice(h * D, (h + 1) * D)
            qh, kh = q[..., cols], k[..., cols]
            s = torch.einsum("bid,bjd->bij", kh, qh) if keys_first else torch.einsum("bid,bjd->bij", qh, kh)
            s = s * {"head": 1 / math.sqrt(D), "model": 1 / math.sqrt(C), "times": math.sqrt(D), "none": 1.0,
                     "d": 1 / D}[scale]
            if softmax_first:
                w = torch.softmax(s, dim).masked_fill(later, 0.0)
                w = w / w.sum(-1, keepdim=True) if renormalise else w
            elif causal:
                w = torch.softmax(s.masked_fill(later, fill), dim)
            else:
                w = torch.softmax(s, dim)
            outs.append(w @ v[..., cols])
        cat = torch.cat(outs, dim=-1)
        if not use_W_O:
            return cat
        return cat @ W_O.T if transposed_W else cat @ W_O
    return all_heads_at_once


def _attend(q, k, v, T):
    """(B, H, T, D) heads, causal, scaled: the part of MHA the split/merge slips leave alone."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def mha_split_no_transpose(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, C = x.shape
    q, k, v = ((x @ W).reshape(B, n_heads, T, C // n_heads) for W in (W_Q, W_K, W_V))
    return _attend(q, k, v, T).reshape(B, T, C) @ W_O


def mha_merge_no_transpose(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, C = x.shape
    q, k, v = ((x @ W).view(B, T, n_heads, C // n_heads).permute(0, 2, 1, 3) for W in (W_Q, W_K, W_V))
    return _attend(q, k, v, T).reshape(B, T, C) @ W_O


def mha_merge_last_two(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, C = x.shape
    q, k, v = ((x @ W).view(B, T, n_heads, C // n_heads).transpose(1, 2) for W in (W_Q, W_K, W_V))
    return _attend(q, k, v, T).transpose(-1, -2).reshape(B, T, C) @ W_O


def mha_merge_batch(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, C = x.shape
    q, k, v = ((x @ W).view(B, T, n_heads, C // n_heads).transpose(1, 2) for W in (W_Q, W_K, W_V))
    return _attend(q, k, v, T).transpose(0, 1).reshape(B, T, C) @ W_O


def mha_float32(x, W_Q, W_K, W_V, W_O, n_heads):
    """Everything in float32, cast back to the inputs' dtype at the end."""
    B, T, C = x.shape
    x, W_Q, W_K, W_V, W_O = (t.float() for t in (x, W_Q, W_K, W_V, W_O))
    q, k, v = ((x @ W).view(B, T, n_heads, C // n_heads).transpose(1, 2) for W in (W_Q, W_K, W_V))
    return (_attend(q, k, v, T).transpose(1, 2).reshape(B, T, C) @ W_O).double()


def mha_interleaved(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, C = x.shape
    heads = []
    for h in range(n_heads):
        qh, kh, vh = ((x @ W)[..., h::n_heads] for W in (W_Q, W_K, W_V))
        heads.append(_attend(qh[:, None], kh[:, None], vh[:, None], T)[:, 0])
    out = torch.stack(heads, dim=-1).reshape(B, T, C)          # feature d·n_heads + h, as it came
    return out @ W_O


def mha_same_slice(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, C = x.shape
    D = C // n_heads
    q, k, v = ((x @ W)[..., :D] for W in (W_Q, W_K, W_V))
    one = _attend(q[:, None], k[:, None], v[:, None], T)[:, 0]
    return torch.cat([one] * n_heads, dim=-1) @ W_O


def mha_view_after_transpose(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, C = x.shape
    q, k, v = ((x @ W).view(B, T, n_heads, C // n_heads).transpose(1, 2) for W in (W_Q, W_K, W_V))
    return _attend(q, k, v, T).transpose(1, 2).view(B, T, C) @ W_O


def mha_wrong_d_head(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, C = x.shape
    q, k, v = ((x @ W).reshape(B, T, n_heads, C // 2).transpose(1, 2) for W in (W_Q, W_K, W_V))
    return _attend(q, k, v, T).transpose(1, 2).reshape(B, T, C) @ W_O


def mha_float_d_head(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, C = x.shape
    q, k, v = ((x @ W).reshape(B, T, n_heads, C / n_heads).transpose(1, 2) for W in (W_Q, W_K, W_V))
    return _attend(q, k, v, T).transpose(1, 2).reshape(B, T, C) @ W_O


def softmax_shifted(shift, normalise=True, dim=-1):
    def stable_softmax(scores):
        e = torch.exp(scores - shift(scores))
        return e / e.sum(dim=dim, keepdim=True) if normalise else e
    return stable_softmax


def softmax_in_place(scores):
    scores -= scores.max(dim=-1, keepdim=True).values
    scores.exp_()
    return scores / scores.sum(dim=-1, keepdim=True)


def softmax_float32(scores):
    s = scores.float()
    return torch.softmax(s, dim=-1)


def mask_from(rule, dtype=torch.bool):
    def causal_mask(T):
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        return rule(i, j).to(dtype)
    return causal_mask


def learner_head(scale=lambda d_model, d_k, d_v: 1 / math.sqrt(d_k), dim=-1, keep=lambda i, j: j <= i, fill=-math.inf,
                 softmax_first=False, keys_first=False, transposed=(False, False, False), weights_too=False,
                 dtype=None):
    """A learner's head with the slip chosen by the keywords."""
    def attention_head(x, W_Q, W_K, W_V):
        if dtype is not None:
            x, W_Q, W_K, W_V = (t.to(dtype) for t in (x, W_Q, W_K, W_V))
        q, k, v = (x @ (W.T if t else W) for W, t in zip((W_Q, W_K, W_V), transposed))
        s = (k @ q.transpose(1, 2)) if keys_first else (q @ k.transpose(1, 2))
        s = s * scale(x.shape[-1], q.shape[-1], v.shape[-1])
        T = x.shape[1]
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        if softmax_first:
            w = torch.softmax(s, dim=dim) * keep(i, j)
        else:
            w = torch.softmax(torch.where(keep(i, j), s, torch.tensor(fill, dtype=s.dtype)), dim=dim)
        return (w @ v, w) if weights_too else w @ v
    return attention_head


def calls_unfinished_sum(x, W_Q, W_K, W_V, W_O, n_heads):
    def sum_over_heads(heads, W_O):
        raise NotImplementedError("sum_over_heads is not implemented yet")
    B, T, C = x.shape
    q, k, v = ((x @ W).reshape(B, T, n_heads, -1).transpose(1, 2) for W in (W_Q, W_K, W_V))
    return sum_over_heads(_attend(q, k, v, T), W_O)


NO_DIAGONAL, EVERYTHING = (lambda i, j: j < i), (lambda i, j: (i >= 0) & (j >= 0))

# (exercise, wrong function, a phrase its verdict must contain)
WRONG = [
    ("attention_by_hand", lambda: hand(scale=1.0), "unscaled scores"),
    ("attention_by_hand", lambda: hand(causal=False), "no causal mask"),
    ("attention_by_hand", lambda: hand(scale=1 / math.sqrt(2)), "divided the scores by √d_model = √2"),
    ("attention_by_hand", lambda: hand(scale=0.25), "divided the scores by d_k = 4"),
    ("attention_by_hand", lambda: hand(rows=False), "down the columns"),
    ("attention_by_hand", lambda: hand(values=torch.tensor([[1.0, 0], [0, 1], [1, 1]])), "averaged the rows of X"),
    ("attention_by_hand", hand_out_wrong, "weights are right but out is not"),
    ("attention_by_hand", lambda: hand(transpose=True), "weights are transposed"),
    ("attention_by_hand", lambda: hand(normalise=False), "do not sum to 1"),
    ("attention_by_hand", hand_out_transposed, "out shape (2, 3), expected (3, 2)"),
    ("attention_by_hand", lambda: hand()[0], "return a tuple (weights, out)"),
    ("previous_token_head", prev_head(where=0), "attends to the current token"),
    ("previous_token_head", prev_head(where=+1), "points at the next token"),
    ("previous_token_head", prev_head(strength=10.0), "not by enough"),
    ("previous_token_head", prev_head(strength=math.log(9 * 63)), "not by enough"),   # forgot the 1/√d_k
    ("previous_token_head", prev_zeros, "no key stands out"),
    ("previous_token_head", prev_head(fill=math.inf), "NaN or inf"),
    ("previous_token_head", prev_head(n_extra=1), "W_Q shape (4, 5), expected (4, 4)"),
    ("previous_token_head", lambda n_pos: prev_head()(n_pos)[0], "return a tuple (W_Q, W_K)"),
    ("sum_over_heads", sums(lambda W, h, D: W[:, h * D:(h + 1) * D].T), "took a block of columns"),
    ("sum_over_heads", sums(lambda W, h, D: W[:, h * D:(h + 1) * D]), "a block of columns does not fit"),
    ("sum_over_heads", sums(lambda W, h, D: W[h * D:(h + 1) * D], divide=True), "averaged the heads"),
    ("sum_over_heads", sums(lambda W, h, D: W[0:D]), "first block of W_O"),
    ("sum_over_heads", sum_no_W_O, "W_O is missing"),
    ("sum_over_heads", sum_reshaped, "mixes tokens and heads"),
    ("left_padded_causal_mask", padded(lambda i, j, s, n: (j <= i) & (j < n)), "RIGHT padding"),
    ("left_padded_causal_mask", padded(lambda i, j, s, n: (j >= s) | (i < 0)), "causal part is missing"),
    ("left_padded_causal_mask", padded(lambda i, j, s, n: j <= i), "causal mask alone"),
    ("left_padded_causal_mask", padded(lambda i, j, s, n: (j <= i) & (j > s)), "off by one"),
    ("left_padded_causal_mask", padded(lambda i, j, s, n: (j <= i) & (i >= s)), "applied to the queries"),
    ("left_padded_causal_mask", padded(lambda i, j, s, n: (j <= i) & (j >= s), head_axis=True), "mask[:, None]"),
    ("left_padded_causal_mask", padded(lambda i, j, s, n: (j <= i) & (j >= s), dtype=torch.int64),
     "return a torch.bool tensor"),
    ("left_padded_causal_mask", padded_causal_only, "output shape"),
    ("left_padded_causal_mask", padded(lambda i, j, s, n: (j < i) & (j >= s)), "hides the diagonal"),
    ("left_padded_causal_mask", padded(lambda i, j, s, n: ~((j <= i) & (j >= s))), "True must mean *allowed*"),
    ("left_padded_causal_mask", padded(lambda i, j, s, n: (j <= i) & (j >= s - 1)), "must stay hidden"),
    ("left_padded_causal_mask", padded(lambda i, j, s, n: (j <= i) & (j >= n)), "counts the REAL tokens"),
    ("left_padded_causal_mask", lambda lengths, T: list(padded(lambda i, j, s, n: (j <= i) & (j >= s))(lengths, T)),
     "return a torch.Tensor (torch.stack"),
    ("block_flops", flops(4, 2, 2), "multiply-adds"),
    ("block_flops", flops(proj=6), "W_O, the output projection"),
    ("block_flops", flops(proj=4), "projections: a multiply-add is 2 FLOPs"),
    ("block_flops", flops(attn=2), "count both products"),
    ("block_flops", flops(ffn=2), "two matmuls"),
    ("block_flops", flops(proj=6, ffn=2), "two matmuls"),
    ("block_flops", flops(proj=5), "projections: wrong count"),
    ("block_flops", lambda T, d_model, d_ff: (8 * T * d_model ** 2, 4 * T * T * d_model, 16 * T * d_model ** 2),
     "you assumed d_ff = 4·d_model"),
    ("block_flops", lambda T, d_model, d_ff: (8 * T * d_model ** 2, 4 * T * T * (d_model // 12),
                                              4 * T * d_model * d_ff), "the head count cancels"),
    ("block_flops", lambda T, d_model, d_ff: (8 * T * d_model ** 2, 4 * T * T * 64, 4 * T * d_model * d_ff),
     "the head count cancels"),
    ("block_flops", flops(as_tuple=False), "returned an int; return a tuple of three ints"),
    ("multi_head_attention", learner_mha(use_W_O=False), "never mixed"),
    ("multi_head_attention", learner_mha(scale="model"), "not by √d_model"),
    ("multi_head_attention", learner_mha(scale="times"), "multiplied the scores by √d_head"),
    ("multi_head_attention", learner_mha(scale="none"), "the scores are not scaled"),
    ("multi_head_attention", learner_mha(scale="d"), "divided the scores by d_head"),
    ("multi_head_attention", learner_mha(dim=-2), "ran over the queries"),
    ("multi_head_attention", learner_mha(hide=0), "the diagonal must be allowed"),
    ("multi_head_attention", mha_merge_last_two, "swapped the last two axes"),
    ("multi_head_attention", mha_merge_batch, "swapped the batch and head axes"),
    ("multi_head_attention", mha_float32, "computed in float32 and cast back"),
    ("multi_head_attention", mha_interleaved, "interleaved"),
    ("multi_head_attention", mha_split_no_transpose, "straight to (B, n_heads, T, d_head)"),
    ("multi_head_attention", mha_merge_no_transpose, "the merge reshapes"),
    ("multi_head_attention", mha_same_slice, "the same slice"),
    ("multi_head_attention", learner_mha(keys_first=True), "K Qᵀ"),
    ("multi_head_attention", learner_mha(fill=0.0), "set to 0"),
    ("multi_head_attention", learner_mha(softmax_first=True), "softmax came before the mask"),
    ("multi_head_attention", learner_mha(causal=False), "no causal mask"),
    ("multi_head_attention", learner_mha(single=True), "single head"),
    ("multi_head_attention", learner_mha(transposed_W=True), "x @ W.T"),
    ("multi_head_attention", mha_view_after_transpose, "not contiguous"),
    ("multi_head_attention", mha_wrong_d_head, "reshape with the wrong sizes"),
    ("multi_head_attention", mha_float_d_head, "integer division"),
    ("multi_head_attention", calls_unfinished_sum, "it calls sum_over_heads, which is not implemented yet "
                                                   "(Exercise 2.3)"),
    ("stable_softmax", softmax_shifted(lambda s: 0.0), "Subtract each row's maximum"),
    ("stable_softmax", softmax_shifted(lambda s: s.max(dim=0, keepdim=True).values, dim=0), "first axis"),
    ("stable_softmax", softmax_shifted(lambda s: s.max()), "maximum of the whole tensor"),
    ("stable_softmax", softmax_shifted(lambda s: s.min(dim=-1, keepdim=True).values), "each row's minimum"),
    ("stable_softmax", softmax_shifted(lambda s: s.mean(dim=-1, keepdim=True)), "each row's mean"),
    ("stable_softmax", softmax_shifted(lambda s: s.amax(dim=-1, keepdim=True), normalise=False), "do not sum to 1"),
    ("stable_softmax", lambda s: torch.exp(s - s.max(dim=-1).values), "pass keepdim=True"),
    ("stable_softmax", softmax_in_place, "changed its input `scores` in place (its output is right)"),
    ("stable_softmax", softmax_float32, "returned torch.float32 for torch.float64 inputs"),
    ("causal_mask", mask_from(NO_DIAGONAL), "diagonal must be True"),
    ("causal_mask", mask_from(lambda i, j: j > i), "True must mean *allowed*"),
    ("causal_mask", mask_from(lambda i, j: j >= i), "upper triangle"),
    ("causal_mask", mask_from(EVERYTHING), "nothing is masked"),
    ("causal_mask", mask_from(lambda i, j: j <= i, torch.float32), "dtype torch.float32; return a torch.bool"),
    ("causal_mask", mask_from(lambda i, j: j <= i, torch.int64), "dtype torch.int64; return a torch.bool"),
    ("causal_mask", mask_from(lambda i, j: j <= i, torch.uint8), "dtype torch.uint8; return a torch.bool"),
    ("attention_head", learner_head(scale=lambda dm, dk, dv: 1.0), "not scaled"),
    ("attention_head", learner_head(scale=lambda dm, dk, dv: 1 / dk), "divided by d_k"),
    ("attention_head", learner_head(scale=lambda dm, dk, dv: math.sqrt(dk)), "multiplied the scores by √d_k"),
    ("attention_head", learner_head(scale=lambda dm, dk, dv: dm ** -0.5), "divided by √d_model"),
    ("attention_head", learner_head(scale=lambda dm, dk, dv: dv ** -0.5), "divided by √d_v"),
    ("attention_head", learner_head(dim=1), "wrong axis"),
    ("attention_head", learner_head(keep=lambda i, j: j < i), "hides the diagonal"),
    ("attention_head", learner_head(keep=lambda i, j: j >= 0), "no causal mask"),
    ("attention_head", learner_head(fill=0.0), "set to 0"),
    ("attention_head", learner_head(softmax_first=True), "softmax came before the mask"),
    ("attention_head", learner_head(keys_first=True), "K Qᵀ"),
    ("attention_head", learner_head(transposed=(True, True, True)), "transposed matrices (x @ W.T)"),
    ("attention_head", learner_head(transposed=(True, True, False)), "do not transpose the weights"),
    ("attention_head", learner_head(weights_too=True), "returned a tuple of 2 items; return only the output"),
    ("attention_head", learner_head(dtype=torch.float32), "returned torch.float32 for torch.float64 inputs"),
]


# --------------------------------------------------------------------------- the generic tests

# Written once, in tests/exercise_suite.py (its docstring says what each checks); chapter 2 runs these. Its odd
# answers, whatever they return, are tried in tests/test_checks.py.
globals().update(
    # test_solution_passes, test_solution_passes_for_every_seed, test_stub_is_not_implemented
    SUITE.solution_tests()
    # test_nearly_right_fails
    | SUITE.nearly_right_tests(["sum_over_heads", "block_flops", "multi_head_attention", "stable_softmax",
                                "attention_head"])
    # the fixture wrong_verdicts; test_wrong_answer_gets_its_hint_whatever_the_seed (each answer of WRONG),
    # test_every_registered_hint_is_earned_by_a_wrong_answer, test_wrong_answers_get_different_verdicts
    | SUITE.wrong_answer_tests(WRONG)
    # test_seed_changes_the_inputs (never for 2.1 and 2.2, by design; for some seeds only for the mask and the FLOPs)
    | SUITE.case_tests(fixed=["attention_by_hand", "previous_token_head"],
                       sometimes_fixed=["causal_mask", "block_flops"], dtypes=(torch.float64, torch.int64))
)


# --------------------------------------------------------------------------- the registry


def test_chapter_two_registry():
    SUITE.assert_registry(numbers=["2.1", "2.2", "2.3", "2.4", "2.5", "2.6"],
                          functions={"multi_head_attention": "all_heads_at_once"})


# --------------------------------------------------------------------------- solutions and stubs


NOTEBOOK_SOLUTIONS = {name: source for path in chapter_notebooks() for name, source in exercise_cells(path).items()}


@pytest.mark.parametrize("name", sorted(NOTEBOOK_SOLUTIONS))
def test_chapter_solution_passes(name, capsys):
    """The chapters' own solution cells (those they have) pass their checks."""
    verdict = checks.check(name, exercise_suite.cell_function(name, NOTEBOOK_SOLUTIONS[name]))
    capsys.readouterr()
    assert verdict.passed, verdict.message


# --------------------------------------------------------------------------- wrong answers


def test_hand_rounding_to_three_decimals_passes(capsys):
    assert checks.check_attention_by_hand(hand_rounded)
    assert checks.check_attention_by_hand(lambda: hand())            # float32 tensors are fine here
    assert checks.check_attention_by_hand(lambda: tuple(t.numpy().tolist() for t in hand()))
    assert checks.check_attention_by_hand(lambda: tuple(t.numpy() for t in hand()))   # ndarrays read like lists
    assert checks.check_attention_by_hand(lambda: tuple(t.double().numpy() for t in hand()))
    verdict = checks.check_attention_by_hand(lambda: tuple(t.numpy() for t in hand(scale=1.0)))
    capsys.readouterr()
    assert not verdict and "unscaled scores" in verdict.message


@pytest.mark.parametrize("right", [
    learner_mha(softmax_first=True, renormalise=True),    # mask after the softmax, then renormalise (Raschka)
    learner_mha(fill=-1e9),                               # a finite fill underflows to exp() = 0 in float64
    learner_mha(fill=-1e5),
])
def test_other_right_ways_to_mask_pass(right):
    for seed in SEEDS:
        verdict = verdict_for("multi_head_attention", right, seed)
        assert verdict.passed, verdict.message


def test_previous_token_head_accepts_any_strong_enough_solution(capsys):
    assert checks.check_previous_token_head(prev_head(strength=8.0 * math.log(9.5 * 63)))   # just enough at 64
    assert checks.check_previous_token_head(lambda n: tuple(m.double() * 2 for m in prev_head()(n)))
    verdict = checks.check_previous_token_head(lambda n: tuple(np.asarray(m).tolist() for m in prev_head()(n)))
    capsys.readouterr()
    assert not verdict and "W_Q is a list of 4 items; return a torch.Tensor" in verdict.message


# --------------------------------------------------------------------------- the references


def test_by_hand_reference_is_the_closed_form():
    weights, out = ch02._by_hand_reference()
    e = math.e
    expected = torch.tensor([[1, 0, 0],
                             [e / (e + 1), 1 / (e + 1), 0],
                             [e / (2 * e + 1), 1 / (2 * e + 1), e / (2 * e + 1)]], dtype=torch.float64)
    torch.testing.assert_close(weights, expected)
    p = ch02.by_hand_inputs()
    torch.testing.assert_close(out, expected @ (p["X"] @ p["W_V"]))
    assert set(p) == {"X", "W_Q", "W_K", "W_V"} and p["W_Q"].shape == (2, 4)


@pytest.mark.parametrize("n_pos", [4, 16, 64])
def test_previous_token_reference_attends_to_the_previous_token(n_pos):
    W_Q, W_K = ch02._previous_token_reference(n_pos)
    s = (torch.eye(n_pos, dtype=torch.float64) @ W_Q) @ W_K.T / math.sqrt(n_pos)
    s = s.masked_fill(torch.ones(n_pos, n_pos).triu(1).bool(), -math.inf)
    w = torch.softmax(s, dim=-1)
    assert all(w[i, i - 1] >= 0.9 for i in range(1, n_pos))


def test_padding_reference_is_the_definition():
    for seed in SEEDS:
        for lengths, T in checks.cases_for(checks.EXERCISES["left_padded_causal_mask"], seed):
            mask = ch02._padded_mask(lengths, T)
            assert mask.shape == (len(lengths), T, T) and mask.dtype == torch.bool
            assert len(lengths) >= 3 and 1 in lengths.tolist() and T in lengths.tolist()
            for b, n in enumerate(lengths.tolist()):
                for i in range(T):
                    for j in range(T):
                        assert bool(mask[b, i, j]) == (j <= i and j >= T - n)


def test_sum_over_heads_reference_is_the_sum():
    for heads, W_O in checks.cases_for(checks.EXERCISES["sum_over_heads"], 3):
        H, D = heads.shape[1], heads.shape[3]
        total = sum(heads[:, h] @ W_O[h * D:(h + 1) * D] for h in range(H))
        torch.testing.assert_close(checks.EXERCISES["sum_over_heads"].reference(heads, W_O), total)


def counted(run) -> int:
    with FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops()


def counted_flops(T, d_model, d_ff, n_heads):
    """FLOPs of a real block's matrix products, counted by PyTorch on the meta device (no memory)."""
    with torch.device("meta"):
        attn = MultiHeadAttention(d_model, n_heads)
        ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        x = torch.empty(1, T, d_model)
    whole = counted(lambda: attn(x))
    projections = counted(lambda: [p(x) for p in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)])
    return projections, whole - projections, counted(lambda: ffn(x))


@pytest.mark.parametrize(("T", "d_model", "d_ff", "n_heads"),
                         [(1024, 768, 3072, 12), (7, 16, 40, 4), (200, 64, 256, 2)])
def test_block_flops_reference_counts_what_pytorch_counts(T, d_model, d_ff, n_heads):
    assert ch02.block_flops_reference(T, d_model, d_ff) == counted_flops(T, d_model, d_ff, n_heads)
