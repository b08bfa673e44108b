"""Tests for tinyformer.attention against independent references.

References are PyTorch's own ``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention``,
or explicit loops written from the definitions; never outputs of the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.testing import assert_close
from torch.utils.flop_counter import FlopCounterMode

from tinyformer.attention import (
    MultiHeadAttention,
    attend_heads,
    attention_flops,
    attention_head,
    causal_mask,
    merge_heads,
    multi_head_attention,
    scaled_dot_product_attention,
    simple_attention,
    softmax,
    split_heads,
)

DT = torch.float64


def rand(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=DT)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def tril_by_definition(T_q: int, T_k: int | None = None) -> torch.Tensor:
    """``mask[i, j] = (i >= j)``, built from index comparisons."""
    T_k = T_q if T_k is None else T_k
    i = torch.arange(T_q).unsqueeze(1)
    j = torch.arange(T_k).unsqueeze(0)
    return i >= j


def random_mask(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """A random boolean mask with at least one allowed key per query row (column 0)."""
    m = torch.rand(*shape, generator=gen) > 0.4
    m[..., 0] = True
    return m


def ref_weights(q, k, mask=None):
    """softmax(q kᵀ / √d_k) with torch's softmax, masked entries set to -inf first."""
    scores = torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


# --------------------------------------------------------------------------------------------
# scaled_dot_product_attention
# --------------------------------------------------------------------------------------------

SDPA_CASES = {
    # id: (q shape, k shape, v shape, mask kind)
    "plain": ((2, 5, 4), (2, 5, 4), (2, 5, 4), None),
    "causal": ((2, 6, 4), (2, 6, 4), (2, 6, 4), "causal"),
    "unbatched": ((5, 3), (5, 3), (5, 3), None),
    "unbatched-causal": ((5, 3), (5, 3), (5, 3), "causal"),
    "Tq!=Tk": ((2, 3, 4), (2, 7, 4), (2, 7, 4), None),
    "Tq!=Tk-masked": ((2, 3, 4), (2, 7, 4), (2, 7, 4), "random"),
    "dv!=dk": ((2, 5, 4), (2, 5, 4), (2, 5, 9), None),
    "dv!=dk-causal": ((2, 5, 4), (2, 5, 4), (2, 5, 9), "causal"),
    "5d-batch": ((2, 3, 4, 5, 6), (2, 3, 4, 5, 6), (2, 3, 4, 5, 2), "causal"),
    "T=1": ((2, 1, 4), (2, 1, 4), (2, 1, 4), None),
    "T=1-causal": ((2, 1, 4), (2, 1, 4), (2, 1, 4), "causal"),
    "broadcast-lead-dims": ((2, 3, 5, 4), (1, 3, 5, 4), (2, 1, 5, 4), None),
}


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "v_shape", "mask_kind"), SDPA_CASES.values(), ids=SDPA_CASES.keys()
)
def test_sdpa_matches_torch(gen, q_shape, k_shape, v_shape, mask_kind):
    q, k, v = rand(gen, *q_shape), rand(gen, *k_shape), rand(gen, *v_shape)
    T_q, T_k = q_shape[-2], k_shape[-2]
    if mask_kind is None:
        mask = None
    elif mask_kind == "causal":
        mask = tril_by_definition(T_q, T_k)
    else:
        mask = random_mask(gen, T_q, T_k)

    out, weights = scaled_dot_product_attention(q, k, v, mask)

    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.dtype == DT
    assert out.shape == expected.shape
    assert_close(out, expected)

    lead = torch.broadcast_shapes(q_shape[:-2], k_shape[:-2])
    assert weights.shape == (*lead, T_q, T_k)
    assert_close(weights, ref_weights(q, k, mask).expand(*lead, T_q, T_k))
    assert_close(weights.sum(-1), torch.ones(*lead, T_q, dtype=DT))
    if mask is not None:
        blocked = ~mask.expand_as(weights)
        assert torch.all(weights[blocked] == 0)  # exactly zero, not merely small
        assert torch.all(weights[~blocked] > 0)


@pytest.mark.parametrize(
    ("qkv_shape", "mask_shape"),
    [
        ((2, 3, 5, 4), (5, 5)),  # (T_q, T_k) mask against (B, H, T_q, T_k)
        ((2, 3, 5, 4), (2, 1, 5, 5)),  # (B, 1, T_q, T_k) against (B, H, T_q, T_k)
        ((2, 3, 5, 4), (2, 1, 1, 5)),  # key-padding style
        ((2, 5, 4), (1, 5, 5)),
        ((2, 3, 5, 4), (2, 3, 5, 5)),  # full shape
    ],
    ids=["TqTk", "B1TqTk", "B11Tk", "1TqTk", "full"],
)
def test_sdpa_mask_broadcasting(gen, qkv_shape, mask_shape):
    q, k, v = (rand(gen, *qkv_shape) for _ in range(3))
    mask = random_mask(gen, *mask_shape)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert_close(weights, ref_weights(q, k, mask))
    assert torch.all(weights[~mask.expand_as(weights)] == 0)


def test_sdpa_mask_is_applied_per_batch_element(gen):
    """A (B, 1, T, T) mask must reach batch element b only; check it against a loop."""
    B, H, T, d = 3, 2, 4, 5
    q, k, v = (rand(gen, B, H, T, d) for _ in range(3))
    mask = random_mask(gen, B, 1, T, T)
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    for b in range(B):
        for h in range(H):
            w = ref_weights(q[b, h], k[b, h], mask[b, 0])
            assert_close(out[b, h], w @ v[b, h])


def test_sdpa_uses_sqrt_dk_scaling(gen):
    """With one key the output is v whatever the scale; with two keys check the scale."""
    q = torch.tensor([[2.0, 0.0, 0.0, 0.0]], dtype=DT)  # d_k = 4, √d_k = 2
    k = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], dtype=DT)
    v = torch.tensor([[1.0], [0.0]], dtype=DT)
    # scores = [2/2, 0/2] = [1, 0]  →  weight on the first key = e / (e + 1)
    out, weights = scaled_dot_product_attention(q, k, v)
    e = math.e
    assert_close(weights, torch.tensor([[e / (e + 1), 1 / (e + 1)]], dtype=DT))
    assert_close(out, torch.tensor([[e / (e + 1)]], dtype=DT))


# --------------------------------------------------------------------------------------------
# causal_mask
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("T", [1, 2, 5, 17])
def test_causal_mask(T):
    m = causal_mask(T)
    assert m.dtype == torch.bool
    assert m.shape == (T, T)
    assert torch.equal(m, tril_by_definition(T))


def test_causal_mask_T1_is_true():
    assert causal_mask(1).tolist() == [[True]]


def test_causal_mask_small_explicit():
    assert causal_mask(3).tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, True],
    ]


# --------------------------------------------------------------------------------------------
# simple_attention
# --------------------------------------------------------------------------------------------


def simple_attention_loop(x: torch.Tensor) -> torch.Tensor:
    """y_i = Σ_{j≤i} softmax_j(x_i·x_j) x_j, for a single (T, d) sequence, with Python loops."""
    T, d = x.shape
    y = torch.zeros(T, d, dtype=x.dtype)
    for i in range(T):
        scores = [float(x[i] @ x[j]) for j in range(i + 1)]
        m = max(scores)
        exps = [math.exp(s - m) for s in scores]
        z = sum(exps)
        for j in range(i + 1):
            y[i] += exps[j] / z * x[j]
    return y


@pytest.mark.parametrize("shape", [(1, 3), (6, 4), (2, 5, 3), (2, 2, 4, 3)], ids=str)
def test_simple_attention_matches_loop(gen, shape):
    x = rand(gen, *shape)
    y = simple_attention(x)
    assert y.shape == x.shape
    flat_x, flat_y = x.reshape(-1, *shape[-2:]), y.reshape(-1, *shape[-2:])
    for xs, ys in zip(flat_x, flat_y, strict=True):
        assert_close(ys, simple_attention_loop(xs))


def test_simple_attention_first_row_is_x0(gen):
    x = rand(gen, 3, 7, 4)
    assert_close(simple_attention(x)[:, 0], x[:, 0])


# --------------------------------------------------------------------------------------------
# softmax
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_matches_torch(gen, dim):
    s = rand(gen, 4, 6, 5) * 3
    assert_close(softmax(s, dim=dim), torch.softmax(s, dim=dim))


# Rows whose maxima are far apart (+1000, -1000, ordinary) and a row with a large spread inside it.
# Only a softmax that subtracts *each row's own* maximum gets all of them right.
SPREAD_ROWS = torch.tensor(
    [
        [1000.0, 999.0, 998.0, 1000.5],
        [-1000.0, -1001.0, -999.5, -1003.0],
        [0.3, -1.2, 2.0, 0.0],
        [800.0, -800.0, 0.0, 1.0],
    ],
    dtype=DT,
)


def softmax_by_definition(s: torch.Tensor) -> torch.Tensor:
    """exp(s_j - m) / Σ exp(s_i - m) with m each row's maximum, row by row with math.exp."""
    rows = []
    for row in s.tolist():
        m = max(row)
        e = [math.exp(v - m) for v in row]
        rows.append([v / sum(e) for v in e])
    return torch.tensor(rows, dtype=s.dtype)


def agrees_on_spread_rows(fn) -> bool:
    """The comparison the stable-softmax test makes, so it can be run on wrong softmaxes too."""
    p = fn(SPREAD_ROWS)
    want = softmax_by_definition(SPREAD_ROWS)
    return bool(torch.isfinite(p).all()) and torch.allclose(p, want, rtol=1e-10, atol=1e-300)


def shifted_softmax(shift):
    """exp(s - shift(s)) normalised per row: right only when shift(s) is each row's maximum."""

    def fn(s):
        e = (s - shift(s)).exp()
        return e / e.sum(-1, keepdim=True)

    return fn


WRONG_SOFTMAXES = {
    "naive": shifted_softmax(lambda s: 0.0),
    "global-max": shifted_softmax(lambda s: s.max()),
    "row-min": shifted_softmax(lambda s: s.amin(-1, keepdim=True)),
    "row-mean": shifted_softmax(lambda s: s.mean(-1, keepdim=True)),
}


def test_softmax_is_stable_on_rows_with_different_maxima():
    assert agrees_on_spread_rows(softmax)
    assert agrees_on_spread_rows(lambda s: torch.softmax(s, dim=-1))  # the reference agrees too
    assert agrees_on_spread_rows(shifted_softmax(lambda s: s.amax(-1, keepdim=True)))  # the right shift
    assert_close(softmax(SPREAD_ROWS.T, dim=0), softmax_by_definition(SPREAD_ROWS).T)


@pytest.mark.parametrize("wrong", WRONG_SOFTMAXES.values(), ids=WRONG_SOFTMAXES.keys())
def test_stable_softmax_test_rejects_wrong_softmaxes(wrong):
    """The comparison above discriminates: each of these plausible softmaxes fails it."""
    assert not agrees_on_spread_rows(wrong)


def test_softmax_of_an_all_masked_row_is_nan():
    """The library's softmax stays the textbook formula: a row with no finite score is 0/0
    (the chapter shows this; scaled_dot_product_attention handles such rows itself)."""
    p = softmax(torch.tensor([[float("-inf")] * 3, [0.0, 1.0, 2.0]], dtype=DT))
    assert torch.isnan(p[0]).all()
    assert torch.isfinite(p[1]).all()


def test_softmax_handles_minus_inf():
    s = torch.tensor([[0.0, float("-inf"), 1.0]], dtype=DT)
    p = softmax(s)
    assert p[0, 1] == 0
    assert_close(p, torch.softmax(s, dim=-1))


# --------------------------------------------------------------------------------------------
# attention_head, multi_head_attention, split_heads, merge_heads
# --------------------------------------------------------------------------------------------


def ref_head(x, W_Q, W_K, W_V, causal):
    """One head for a single (T, d_model) sequence, from the definition."""
    Q, K, V = x @ W_Q, x @ W_K, x @ W_V
    T = x.shape[0]
    scores = Q @ K.T / math.sqrt(W_K.shape[1])
    if causal:
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ V


def ref_multi_head(x, W_Q, W_K, W_V, W_O, n_heads, causal):
    """Per-head loop over contiguous column slices, concatenated, then W_O."""
    d_head = W_Q.shape[1] // n_heads
    outs = []
    for h in range(n_heads):
        sl = slice(h * d_head, (h + 1) * d_head)
        outs.append(ref_head(x, W_Q[:, sl], W_K[:, sl], W_V[:, sl], causal))
    return torch.cat(outs, dim=-1) @ W_O


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("lead", [(), (3,), (2, 2)], ids=str)
def test_attention_head_matches_reference(gen, causal, lead):
    d_model, d_k, d_v, T = 6, 4, 3, 5
    x = rand(gen, *lead, T, d_model)
    W_Q, W_K, W_V = rand(gen, d_model, d_k), rand(gen, d_model, d_k), rand(gen, d_model, d_v)
    out = attention_head(x, W_Q, W_K, W_V, causal=causal)
    assert out.shape == (*lead, T, d_v)
    for xs, ys in zip(x.reshape(-1, T, d_model), out.reshape(-1, T, d_v), strict=True):
        assert_close(ys, ref_head(xs, W_Q, W_K, W_V, causal))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("d_model", "n_heads"), [(8, 1), (8, 2), (12, 3), (12, 12)])
@pytest.mark.parametrize("lead", [(), (2,)], ids=str)
def test_multi_head_attention_matches_reference(gen, causal, d_model, n_heads, lead):
    T = 5
    x = rand(gen, *lead, T, d_model)
    W_Q, W_K, W_V, W_O = (rand(gen, d_model, d_model) for _ in range(4))
    out = multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, causal=causal)
    assert out.shape == (*lead, T, d_model)
    for xs, ys in zip(x.reshape(-1, T, d_model), out.reshape(-1, T, d_model), strict=True):
        assert_close(ys, ref_multi_head(xs, W_Q, W_K, W_V, W_O, n_heads, causal))


@pytest.mark.parametrize("n_heads", [1, 2, 3, 6])
@pytest.mark.parametrize("lead", [(), (2,), (2, 3)], ids=str)
def test_split_merge_heads(gen, n_heads, lead):
    T, C = 4, 6
    d_head = C // n_heads
    x = rand(gen, *lead, T, C)
    s = split_heads(x, n_heads)
    assert s.shape == (*lead, n_heads, T, d_head)
    for h in range(n_heads):
        assert torch.equal(s[..., h, :, :], x[..., h * d_head : (h + 1) * d_head])
    assert torch.equal(merge_heads(s), x)
    y = rand(gen, *lead, n_heads, T, d_head)
    assert torch.equal(split_heads(merge_heads(y), n_heads), y)


# --------------------------------------------------------------------------------------------
# MultiHeadAttention vs torch.nn.MultiheadAttention
# --------------------------------------------------------------------------------------------


def make_pair(d_model, n_heads, causal, bias=True, seed=0):
    torch.manual_seed(seed)
    ours = MultiHeadAttention(d_model, n_heads, causal=causal, bias=bias).to(DT)
    theirs = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True, dtype=DT)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(
            torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
        )
        theirs.out_proj.weight.copy_(ours.o_proj.weight)
        if bias:
            theirs.in_proj_bias.copy_(
                torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias])
            )
            theirs.out_proj.bias.copy_(ours.o_proj.bias)
    return ours, theirs


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("d_model", "n_heads"), [(8, 1), (8, 2), (12, 3), (16, 4), (6, 6)])
def test_mha_matches_torch(gen, d_model, n_heads, causal, bias):
    B, T = 3, 7
    ours, theirs = make_pair(d_model, n_heads, causal, bias)
    x = rand(gen, B, T, d_model)
    attn_mask = ~tril_by_definition(T) if causal else None  # torch: True = NOT allowed
    expected, expected_w = theirs(
        x, x, x, attn_mask=attn_mask, need_weights=True, average_attn_weights=False
    )
    out, weights = ours(x, return_weights=True)
    assert out.shape == (B, T, d_model)
    assert weights.shape == (B, n_heads, T, T)
    assert_close(out, expected)
    assert_close(weights, expected_w)
    assert_close(ours(x), expected)  # default return is the output alone


@pytest.mark.parametrize("causal", [True, False])
def test_mha_unbatched_and_extra_lead_dims(gen, causal):
    d_model, n_heads, T = 8, 2, 5
    ours, theirs = make_pair(d_model, n_heads, causal)
    attn_mask = ~tril_by_definition(T) if causal else None
    x = rand(gen, 2, 3, T, d_model)
    out = ours(x)
    assert out.shape == x.shape
    for idx in [(0, 0), (0, 2), (1, 1)]:
        expected, _ = theirs(x[idx], x[idx], x[idx], attn_mask=attn_mask, need_weights=False)
        assert_close(out[idx], expected)  # unbatched (T, d) reference
        assert_close(ours(x[idx]), expected)  # our module on an unbatched input


@pytest.mark.parametrize("causal", [True, False])
def test_mha_extra_mask_combined(gen, causal):
    """A key-padding mask (B, 1, 1, T) is combined with the causal mask."""
    B, T, d_model, n_heads = 3, 6, 8, 2
    ours, theirs = make_pair(d_model, n_heads, causal)
    x = rand(gen, B, T, d_model)
    lengths = torch.tensor([6, 4, 2])
    keep = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T), True = real token
    attn_mask = ~tril_by_definition(T) if causal else None
    expected, expected_w = theirs(
        x,
        x,
        x,
        attn_mask=attn_mask,
        key_padding_mask=~keep,
        need_weights=True,
        average_attn_weights=False,
    )
    out, weights = ours(x, mask=keep[:, None, None, :], return_weights=True)
    assert_close(out, expected)
    assert_close(weights, expected_w)
    # padded keys get exactly zero weight, and (causal) future keys too
    assert torch.all(weights.masked_select(~keep[:, None, None, :].expand_as(weights)) == 0)
    if causal:
        assert torch.all(weights[..., ~tril_by_definition(T)] == 0)


@pytest.mark.parametrize("causal", [True, False])
def test_mha_causality_property(gen, causal):
    d_model, n_heads, B, T, t = 8, 2, 2, 6, 3
    ours, _ = make_pair(d_model, n_heads, causal)
    x = rand(gen, B, T, d_model)
    x2 = x.clone()
    x2[:, t:] = rand(gen, B, T - t, d_model)  # change tokens t.. only
    y, y2 = ours(x), ours(x2)
    if causal:
        assert_close(y[:, :t], y2[:, :t], rtol=0, atol=0)
    else:
        assert not torch.allclose(y[:, :t], y2[:, :t])
    assert not torch.allclose(y[:, t:], y2[:, t:])


def test_mha_bias_false_has_no_bias():
    m = MultiHeadAttention(8, 2, bias=False)
    for lin in (m.q_proj, m.k_proj, m.v_proj, m.o_proj):
        assert isinstance(lin, nn.Linear)
        assert lin.bias is None
    names = [n for n, _ in m.named_parameters()]
    assert not any("bias" in n for n in names)
    assert sum(p.numel() for p in m.parameters()) == 4 * 8 * 8


def test_mha_structure():
    m = MultiHeadAttention(12, 3)
    assert m.causal is True  # causal by default
    for lin in (m.q_proj, m.k_proj, m.v_proj, m.o_proj):
        assert isinstance(lin, nn.Linear)
        assert (lin.in_features, lin.out_features) == (12, 12)
        assert lin.bias is not None
    assert sum(p.numel() for p in m.parameters()) == 4 * (12 * 12 + 12)


# --------------------------------------------------------------------------------------------
# Bad inputs
# --------------------------------------------------------------------------------------------

_x = torch.zeros(2, 4, 8, dtype=DT)
_q = torch.zeros(2, 4, 8, dtype=DT)


def _W(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=DT)


BAD_CALLS = {
    "d_model%n_heads": (lambda: MultiHeadAttention(10, 3), ValueError, r"d_model.*n_heads"),
    "n_heads=0": (lambda: MultiHeadAttention(8, 0), ValueError, r"n_heads"),
    "d_model=0": (lambda: MultiHeadAttention(0, 1), ValueError, r"d_model"),
    "x-last-dim": (
        lambda: MultiHeadAttention(8, 2)(torch.zeros(2, 4, 6)),
        ValueError,
        r"\bx\b.*d_model",
    ),
    "x-rank-1": (lambda: MultiHeadAttention(8, 2)(torch.zeros(8)), ValueError, r"\bx\b"),
    "x-not-tensor": (lambda: MultiHeadAttention(8, 2)([[0.0] * 8]), TypeError, r"\bx\b"),
    "x-int": (
        lambda: MultiHeadAttention(8, 2)(torch.zeros(2, 4, 8, dtype=torch.long)),
        TypeError,
        r"\bx\b",
    ),
    "simple-rank-1": (lambda: simple_attention(torch.zeros(5)), ValueError, r"\bx\b"),
    "simple-int": (
        lambda: simple_attention(torch.zeros(3, 4, dtype=torch.int64)),
        TypeError,
        r"\bx\b",
    ),
    "q-not-tensor": (lambda: scaled_dot_product_attention([[1.0]], _q, _q), TypeError, r"\bq\b"),
    "k-not-tensor": (lambda: scaled_dot_product_attention(_q, 1.0, _q), TypeError, r"\bk\b"),
    "v-not-tensor": (lambda: scaled_dot_product_attention(_q, _q, None), TypeError, r"\bv\b"),
    "q-int": (
        lambda: scaled_dot_product_attention(torch.zeros(4, 8, dtype=torch.int64), _q, _q),
        TypeError,
        r"\bq\b",
    ),
    "v-int": (
        lambda: scaled_dot_product_attention(_q, _q, torch.ones(2, 4, 8, dtype=torch.int32)),
        TypeError,
        r"\bv\b",
    ),
    "q-rank-1": (
        lambda: scaled_dot_product_attention(torch.zeros(8), _q, _q),
        ValueError,
        r"\bq\b",
    ),
    "dk-mismatch": (
        lambda: scaled_dot_product_attention(_q, torch.zeros(2, 4, 7, dtype=DT), _q),
        ValueError,
        r"\bq\b.*\bk\b",
    ),
    "Tk-mismatch": (
        lambda: scaled_dot_product_attention(_q, _q, torch.zeros(2, 5, 8, dtype=DT)),
        ValueError,
        r"\bk\b.*\bv\b",
    ),
    "mask-not-bool": (
        lambda: scaled_dot_product_attention(_q, _q, _q, torch.ones(4, 4)),
        TypeError,
        r"mask",
    ),
    "mask-int": (
        lambda: scaled_dot_product_attention(_q, _q, _q, torch.ones(4, 4, dtype=torch.long)),
        TypeError,
        r"mask",
    ),
    "mask-no-broadcast": (
        lambda: scaled_dot_product_attention(_q, _q, _q, torch.ones(3, 4, dtype=torch.bool)),
        ValueError,
        r"mask",
    ),
    "mask-batch-no-broadcast": (
        lambda: scaled_dot_product_attention(_q, _q, _q, torch.ones(3, 4, 4, dtype=torch.bool)),
        ValueError,
        r"mask",
    ),
    "causal_mask(0)": (lambda: causal_mask(0), ValueError, r"\bT\b"),
    "causal_mask(-3)": (lambda: causal_mask(-3), ValueError, r"\bT\b"),
    "causal_mask(2.5)": (lambda: causal_mask(2.5), TypeError, r"\bT\b"),
    "causal_mask('4')": (lambda: causal_mask("4"), TypeError, r"\bT\b"),
    "causal_mask(True)": (lambda: causal_mask(True), TypeError, r"\bT\b"),
    # integer arguments
    "MHA-d_model-str": (lambda: MultiHeadAttention("8", 2), TypeError, r"^d_model must be an integer"),
    "MHA-n_heads-float": (lambda: MultiHeadAttention(8, 2.0), TypeError, r"^n_heads must be an integer, got float"),
    "MHA-causal-not-bool": (lambda: MultiHeadAttention(8, 2, causal="yes"), TypeError, r"causal"),
    "MHA-scale-str": (lambda: MultiHeadAttention(8, 2, scale="1"), TypeError, r"scale"),
    "MHA-scale-nan": (lambda: MultiHeadAttention(8, 2, scale=float("nan")), TypeError, r"scale"),
    "sdpa-scale-bool": (lambda: scaled_dot_product_attention(_q, _q, _q, scale=True), TypeError, r"scale"),
    "sdpa-lead-no-broadcast": (
        lambda: scaled_dot_product_attention(_q, torch.zeros(3, 4, 8, dtype=DT), torch.zeros(3, 4, 8, dtype=DT)),
        ValueError,
        r"\bq\b.*\bk\b",
    ),
    # split_heads / merge_heads
    "split-n_heads=0": (lambda: split_heads(_x, 0), ValueError, r"^n_heads must be at least 1, got 0"),
    "split-n_heads-float": (lambda: split_heads(_x, 2.0), TypeError, r"^n_heads must be an integer"),
    "split-indivisible": (lambda: split_heads(_x, 3), ValueError, r"\bx\b.*\(8\).*n_heads \(3\)"),
    "split-rank-1": (lambda: split_heads(torch.zeros(8), 2), ValueError, r"\bx\b"),
    "split-not-tensor": (lambda: split_heads([[1.0, 2.0]], 2), TypeError, r"\bx\b"),
    "merge-rank-2": (lambda: merge_heads(torch.zeros(4, 8)), ValueError, r"\bx\b.*3 dimensions"),
    "merge-int": (lambda: merge_heads(torch.zeros(2, 4, 8, dtype=torch.long)), TypeError, r"\bx\b"),
    # attention_head
    "head-W_Q-rows": (
        lambda: attention_head(_x, torch.zeros(7, 4, dtype=DT), torch.zeros(8, 4, dtype=DT), _W(8, 4)),
        ValueError,
        r"^W_Q\b.*\(7, 4\)",
    ),
    "head-W_K-cols": (
        lambda: attention_head(_x, _W(8, 4), _W(8, 5), _W(8, 4)),
        ValueError,
        r"W_Q.*W_K",
    ),
    "head-W_V-int": (
        lambda: attention_head(_x, _W(8, 4), _W(8, 4), torch.zeros(8, 4, dtype=torch.long)),
        TypeError,
        r"^W_V\b",
    ),
    "head-W_Q-rank-3": (lambda: attention_head(_x, _W(1, 8, 4), _W(8, 4), _W(8, 4)), ValueError, r"^W_Q\b"),
    "head-x-int": (
        lambda: attention_head(_x.long(), _W(8, 4), _W(8, 4), _W(8, 4)),
        TypeError,
        r"^x\b",
    ),
    # multi_head_attention
    "mha-fn-n_heads=0": (lambda: multi_head_attention(_x, *[_W(8, 8)] * 4, 0), ValueError, r"^n_heads"),
    "mha-fn-n_heads-float": (lambda: multi_head_attention(_x, *[_W(8, 8)] * 4, 2.0), TypeError, r"^n_heads"),
    "mha-fn-indivisible": (
        lambda: multi_head_attention(_x, *[_W(8, 8)] * 4, 3),
        ValueError,
        r"d_model \(8\).*n_heads \(3\)",
    ),
    "mha-fn-W_O-shape": (
        lambda: multi_head_attention(_x, *[_W(8, 8)] * 3, _W(8, 6), 2),
        ValueError,
        r"^W_O\b.*\(8, 6\)",
    ),
    "mha-fn-W_K-rows": (
        lambda: multi_head_attention(_x, _W(8, 8), _W(6, 8), _W(8, 8), _W(8, 8), 2),
        ValueError,
        r"^W_K\b",
    ),
    "mha-fn-x-rank-1": (lambda: multi_head_attention(torch.zeros(8), *[_W(8, 8)] * 4, 2), ValueError, r"^x\b"),
    # MultiHeadAttention.forward: the caller's mask is checked before it meets the causal mask
    "MHA-float-mask": (
        lambda: MultiHeadAttention(8, 2)(torch.zeros(2, 4, 8), mask=torch.ones(4, 4)),
        TypeError,
        r"^mask must be a boolean tensor",
    ),
    "MHA-float-mask-noncausal": (
        lambda: MultiHeadAttention(8, 2, causal=False)(torch.zeros(2, 4, 8), mask=torch.ones(4, 4)),
        TypeError,
        r"^mask must be a boolean tensor",
    ),
    "MHA-list-mask": (
        lambda: MultiHeadAttention(8, 2)(torch.zeros(2, 4, 8), mask=[[True] * 4] * 4),
        TypeError,
        r"^mask must be a boolean tensor",
    ),
    "MHA-mask-no-broadcast": (
        lambda: MultiHeadAttention(8, 2)(torch.zeros(2, 4, 8), mask=torch.ones(3, 4, dtype=torch.bool)),
        ValueError,
        r"^mask of shape \(3, 4\) does not broadcast",
    ),
    "MHA-mask-batch-no-broadcast": (
        lambda: MultiHeadAttention(8, 2)(torch.zeros(2, 4, 8), mask=torch.ones(3, 1, 1, 4, dtype=torch.bool)),
        ValueError,
        r"^mask\b",
    ),
    # cross-attention
    "MHA-causal-context": (
        lambda: MultiHeadAttention(8, 2)(torch.zeros(2, 4, 8), context=torch.zeros(2, 6, 8)),
        ValueError,
        r"not causal.*causal=False",
    ),
    "MHA-context-width": (
        lambda: MultiHeadAttention(8, 2, causal=False)(torch.zeros(2, 4, 8), context=torch.zeros(2, 6, 5)),
        ValueError,
        r"^context\b.*d_model",
    ),
    "MHA-context-int": (
        lambda: MultiHeadAttention(8, 2, causal=False)(torch.zeros(2, 4, 8), context=torch.zeros(2, 6, 8).long()),
        TypeError,
        r"^context\b",
    ),
    "MHA-context-batch-no-broadcast": (
        lambda: MultiHeadAttention(8, 2, causal=False)(torch.zeros(2, 4, 8), context=torch.zeros(3, 6, 8)),
        ValueError,
        r"leading \(batch\) dimensions",
    ),
    "MHA-context-batch-no-broadcast-masked": (
        lambda: MultiHeadAttention(8, 2, causal=False)(
            torch.zeros(2, 4, 8), context=torch.zeros(3, 6, 8), mask=torch.ones(6, dtype=torch.bool)
        ),
        ValueError,
        r"leading \(batch\) dimensions",
    ),
    "attend_heads-causal-Tq!=Tk": (
        lambda: attend_heads(torch.zeros(3, 8), torch.zeros(5, 8), torch.zeros(5, 8), 2, causal=True),
        ValueError,
        r"T_q=3.*T_k=5",
    ),
}


@pytest.mark.parametrize(("call", "exc", "pattern"), BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_inputs_raise_clear_errors(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


# --------------------------------------------------------------------------------------------
# attention_flops
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("T", "d_model"), [(1, 1), (8, 16), (33, 24), (64, 12)])
def test_attention_flops_counts_the_matmuls(gen, T, d_model):
    """Count the FLOPs that torch actually performs in QKᵀ and weights·V."""
    q, k, v = (torch.randn(T, d_model, generator=gen) for _ in range(3))
    with FlopCounterMode(display=False) as counter:
        scaled_dot_product_attention(q, k, v, causal_mask(T))
    assert counter.get_total_flops() == attention_flops(T, d_model)
    with FlopCounterMode(display=False) as counter:  # split into heads, the total is the same
        attend_heads(q[None], k[None], v[None], n_heads=math.gcd(d_model, 4), causal=True)
    assert counter.get_total_flops() == attention_flops(T, d_model)


@pytest.mark.parametrize(("T", "d_model", "n_heads"), [(8, 16, 2), (20, 12, 3)])
def test_attention_flops_leaves_out_the_projections(gen, T, d_model, n_heads):
    """A whole MultiHeadAttention adds the four projections, 2·T·d_model² FLOPs each."""
    m = MultiHeadAttention(d_model, n_heads)
    x = torch.randn(1, T, d_model, generator=gen)
    with FlopCounterMode(display=False) as counter:
        m(x)
    assert counter.get_total_flops() == attention_flops(T, d_model) + 8 * T * d_model**2


@pytest.mark.parametrize(
    ("args", "exc", "pattern"),
    [((8.0, 4), TypeError, r"^T must be an integer"), ((8, 0), ValueError, r"^d_model must be at least 1")],
)
def test_attention_flops_validates(args, exc, pattern):
    with pytest.raises(exc, match=pattern):
        attention_flops(*args)
    assert attention_flops(np.int64(8), np.int32(4)) == attention_flops(8, 4)


def test_numpy_integers_are_integers(gen):
    x = rand(gen, 2, 5, 8)
    assert torch.equal(causal_mask(np.int64(5)), causal_mask(5))
    assert torch.equal(split_heads(x, np.int32(2)), split_heads(x, 2))
    m = MultiHeadAttention(np.int64(8), np.int64(2))
    assert (m.d_model, m.n_heads, m.d_head) == (8, 2, 4)
    assert all(type(v) is int for v in (m.d_model, m.n_heads, m.d_head))
    W = [rand(gen, 8, 8) for _ in range(4)]
    assert_close(multi_head_attention(x, *W, np.int64(2)), multi_head_attention(x, *W, 2))


# --------------------------------------------------------------------------------------------
# Rows with no allowed key (padding)
# --------------------------------------------------------------------------------------------


def test_torch_sdpa_gives_zeros_for_fully_masked_rows(gen):
    """The reference behaviour the library follows, verified rather than assumed."""
    q, k, v = (rand(gen, 3, 4) for _ in range(3))
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(out[1], torch.zeros(4, dtype=DT))
    assert torch.isfinite(out).all()


def test_sdpa_fully_masked_rows_match_torch_with_finite_gradients(gen):
    B, T_q, T_k, d = 2, 5, 4, 3
    mask = random_mask(gen, B, 1, T_q, T_k)
    mask[0, 0, 1] = False  # query 1 of batch element 0 may see nothing
    mask[1, 0, 3:] = False  # queries 3.. of batch element 1 may see nothing
    ours = [rand(gen, B, 2, T, d).requires_grad_() for T in (T_q, T_k, T_k)]
    theirs = [t.detach().clone().requires_grad_() for t in ours]

    out, weights = scaled_dot_product_attention(*ours, mask)
    expected = F.scaled_dot_product_attention(*theirs, attn_mask=mask)
    assert_close(out, expected)
    empty = ~mask.any(-1)  # (B, 1, T_q)
    assert torch.equal(weights[empty.expand(B, 2, T_q)], torch.zeros(int(empty.sum()) * 2, T_k, dtype=DT))
    assert torch.equal(out[empty.expand(B, 2, T_q)], torch.zeros(int(empty.sum()) * 2, d, dtype=DT))
    assert_close(weights.sum(-1), (~empty).to(DT).expand(B, 2, T_q))

    upstream = rand(gen, *out.shape)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    for a, b in zip(ours, theirs, strict=True):
        assert torch.isfinite(a.grad).all()
        assert_close(a.grad, b.grad)


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_sdpa_fully_masked_rows_compute_no_nan_at_all(gen):
    """Not even an intermediate NaN that a later step hides: anomaly mode raises on any backward
    step that returns NaN (the all -inf row of scores would give 0/0 in the softmax)."""
    q, k, v = (rand(gen, 2, 4, 3).requires_grad_() for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool).tril()
    mask[2] = False
    with torch.autograd.detect_anomaly(check_nan=True):
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        (out.sum() + weights.sum()).backward()
    assert not any(torch.isnan(t).any() for t in (out, weights, q.grad, k.grad, v.grad))


def ref_mha(m: MultiHeadAttention, x, context=None, mask=None, scale=None):
    """The module's computation rebuilt from its Linear layers and torch's own attention."""
    context = x if context is None else context
    H, D = m.n_heads, m.d_head
    q, k, v = (f(t).unflatten(-1, (H, D)).transpose(-3, -2) for f, t in
               ((m.q_proj, x), (m.k_proj, context), (m.v_proj, context)))  # (..., H, T, D)
    if m.causal:
        causal = tril_by_definition(x.shape[-2])
        mask = causal if mask is None else mask & causal
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return m.o_proj(heads.transpose(-3, -2).flatten(-2))


def test_mha_left_padding_is_finite_and_matches_unpadded(gen):
    """Left padding: pad queries (under the causal mask) have no allowed key at all."""
    B, T, d_model, n_heads = 3, 6, 8, 2
    m, _ = make_pair(d_model, n_heads, causal=True)
    lengths = [6, 4, 2]
    keep = torch.stack([torch.arange(T) >= T - n for n in lengths])  # (B, T), True = real token
    mask = keep[:, None, None, :]  # (B, 1, 1, T): no query may look at a pad
    x = rand(gen, B, T, d_model).requires_grad_()
    upstream = rand(gen, B, T, d_model)

    out, weights = m(x, mask=mask, return_weights=True)
    assert torch.isfinite(out).all()
    pad_rows = (~keep)[:, None, :].expand(B, n_heads, T)
    assert torch.equal(weights[pad_rows], torch.zeros(int(pad_rows.sum()), T, dtype=DT))
    assert_close(weights.sum(-1)[~pad_rows], torch.ones(int((~pad_rows).sum()), dtype=DT))
    assert_close(out, ref_mha(m, x, mask=mask))  # pad rows too: torch gives them zero heads

    loss = (out * upstream * keep[..., None]).sum()  # real positions only
    loss.backward()
    assert torch.isfinite(x.grad).all()
    for b, n in enumerate(lengths):
        alone = x[b, T - n :].detach().clone().requires_grad_()  # the unpadded sequence, no mask
        out_alone = m(alone)
        (out_alone * upstream[b, T - n :]).sum().backward()
        assert_close(out[b, T - n :], out_alone)
        assert_close(x.grad[b, T - n :], alone.grad)
        assert torch.equal(x.grad[b, : T - n], torch.zeros(T - n, d_model, dtype=DT))


# --------------------------------------------------------------------------------------------
# scale
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1.0, 0.25, 3, None])
@pytest.mark.parametrize("masked", [False, True])
def test_sdpa_scale_matches_torch(gen, scale, masked):
    q, k, v = rand(gen, 2, 3, 5, 4), rand(gen, 2, 3, 6, 4), rand(gen, 2, 3, 6, 2)
    mask = random_mask(gen, 5, 6) if masked else None
    out, weights = scaled_dot_product_attention(q, k, v, mask, scale=scale)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale))
    s = 1 / math.sqrt(4) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * s
    if masked:
        scores = scores.masked_fill(~mask, -math.inf)
    assert_close(weights, torch.softmax(scores, dim=-1))


@pytest.mark.parametrize("causal", [True, False])
def test_mha_scale_is_passed_through(gen, causal):
    d_model, n_heads = 12, 3
    x = rand(gen, 2, 5, d_model)
    default, _ = make_pair(d_model, n_heads, causal)
    explicit = MultiHeadAttention(d_model, n_heads, causal=causal, scale=1 / math.sqrt(4)).to(DT)
    unscaled = MultiHeadAttention(d_model, n_heads, causal=causal, scale=1.0).to(DT)
    explicit.load_state_dict(default.state_dict())
    unscaled.load_state_dict(default.state_dict())
    assert (default.scale, unscaled.scale) == (None, 1.0)
    assert_close(unscaled(x), ref_mha(unscaled, x, scale=1.0))
    assert_close(explicit(x), default(x))  # None means 1/√d_head
    assert not torch.allclose(unscaled(x), default(x))


# --------------------------------------------------------------------------------------------
# Cross-attention and the shared core
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("T_q", "T_k"), [(3, 7), (7, 3), (1, 5)])
@pytest.mark.parametrize("padded", [False, True])
def test_mha_cross_attention_matches_torch(gen, T_q, T_k, padded):
    B, d_model, n_heads = 2, 8, 2
    ours, theirs = make_pair(d_model, n_heads, causal=False)
    x, ctx = rand(gen, B, T_q, d_model), rand(gen, B, T_k, d_model)
    keep = random_mask(gen, B, T_k) if padded else torch.ones(B, T_k, dtype=torch.bool)
    expected, expected_w = theirs(
        x, ctx, ctx, key_padding_mask=~keep if padded else None, need_weights=True, average_attn_weights=False
    )
    out, weights = ours(x, mask=keep[:, None, None, :] if padded else None, return_weights=True, context=ctx)
    assert out.shape == (B, T_q, d_model)
    assert weights.shape == (B, n_heads, T_q, T_k)
    assert_close(out, expected)
    assert_close(weights, expected_w)


def test_mha_context_none_is_self_attention(gen):
    m, _ = make_pair(8, 2, causal=False)
    x = rand(gen, 2, 5, 8)
    assert_close(m(x, context=None), m(x, context=x))


@pytest.mark.parametrize(("causal", "T_q", "T_k"), [(True, 4, 4), (False, 4, 4), (False, 3, 6)])
def test_attend_heads_matches_torch(gen, causal, T_q, T_k):
    B, n_heads, d_head = 2, 3, 4
    q, k, v = rand(gen, B, T_q, n_heads * d_head), rand(gen, B, T_k, n_heads * d_head), rand(gen, B, T_k, 12)
    mask = random_mask(gen, B, 1, T_q, T_k)
    merged, weights = attend_heads(q, k, v, n_heads, causal=causal, mask=mask)
    full = mask & tril_by_definition(T_q, T_k) if causal else mask
    heads = F.scaled_dot_product_attention(
        *(t.unflatten(-1, (n_heads, d_head)).transpose(1, 2) for t in (q, k, v)), attn_mask=full
    )  # (B, n_heads, T_q, d_head)
    assert merged.shape == (B, T_q, n_heads * d_head)
    assert weights.shape == (B, n_heads, T_q, T_k)
    assert_close(merged, heads.transpose(1, 2).flatten(-2))
    assert torch.all(weights[~full.expand_as(weights)] == 0)


# --------------------------------------------------------------------------------------------
# Devices: every mask is built where the input lives. The `meta` device has no data, so a test on
# it costs nothing, and mixing a CPU tensor into a meta computation raises, just as mixing CPU and
# GPU would: these tests catch a mask built on the wrong device without needing a GPU.
# --------------------------------------------------------------------------------------------

META = torch.device("meta")


def test_meta_device_catches_a_cpu_mask():
    """The premise of the tests below: combining a CPU-built mask with meta tensors fails."""
    scores = torch.empty(2, 4, 4, device=META)
    with pytest.raises(RuntimeError):
        scores.masked_fill(~causal_mask(4), float("-inf"))
    assert causal_mask(4, device=META).device == META


def test_simple_attention_on_meta():
    assert simple_attention(torch.empty(2, 5, 4, device=META)).device == META


@pytest.mark.parametrize("causal", [True, False])
def test_functions_on_meta(causal):
    x = torch.empty(2, 5, 8, device=META)
    W = [torch.empty(8, 8, device=META) for _ in range(4)]
    assert attention_head(x, *W[:3], causal=causal).device == META
    assert multi_head_attention(x, *W, 2, causal=causal).device == META
    merged, weights = attend_heads(x, x, x, 2, causal=causal, mask=torch.ones(5, 5, dtype=torch.bool, device=META))
    assert (merged.device, weights.device) == (META, META)
    out, weights = scaled_dot_product_attention(x, x, x, torch.ones(5, 5, dtype=torch.bool, device=META))
    assert (out.device, weights.device) == (META, META)


@pytest.mark.parametrize("causal", [True, False])
def test_mha_on_meta(causal):
    m = MultiHeadAttention(8, 2, causal=causal).to(META)
    x = torch.empty(2, 5, 8, device=META)
    out, weights = m(x, return_weights=True)
    assert (out.device, weights.device) == (META, META)
    assert weights.shape == (2, 2, 5, 5)
    keep = torch.ones(2, 1, 1, 5, dtype=torch.bool, device=META)
    assert m(x, mask=keep).device == META
    if not causal:
        assert m(x, context=torch.empty(2, 7, 8, device=META)).shape == (2, 5, 8)


def test_mha_mask_on_another_device_is_named():
    m = MultiHeadAttention(8, 2).to(META)
    with pytest.raises(ValueError, match=r"^mask is on device cpu"):
        m(torch.empty(2, 5, 8, device=META), mask=torch.ones(5, 5, dtype=torch.bool))
