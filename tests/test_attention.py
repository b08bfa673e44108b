"""Tests for tinyformer.attention against independent references.

References are PyTorch's own ``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention``,
or explicit loops written from the definitions; never outputs of the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.testing import assert_close

from tinyformer.attention import (
    MultiHeadAttention,
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


@pytest.mark.parametrize("big", [1000.0, -1000.0])
def test_softmax_is_stable(big):
    s = torch.tensor([[big, big - 1.0, big - 2.0], [big, big, big]], dtype=DT)
    naive = s.exp() / s.exp().sum(-1, keepdim=True)
    assert torch.isnan(naive).all()  # the naive formula breaks here
    p = softmax(s)
    assert torch.isfinite(p).all()
    assert_close(p, torch.softmax(s, dim=-1))
    # shift invariance: the same as softmax of the small numbers
    assert_close(p, torch.softmax(s - big, dim=-1))


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
}


@pytest.mark.parametrize(("call", "exc", "pattern"), BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_inputs_raise_clear_errors(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


# --------------------------------------------------------------------------------------------
# attention_flops
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("T", "d"), [(1, 1), (8, 16), (128, 64), (1024, 768)])
def test_attention_flops_closed_form(T, d):
    # QKᵀ: T·T dot products of length d (2d flops each); weights·V: the same again.
    assert attention_flops(T, d) == 2 * (2 * T * T * d)
    assert attention_flops(2 * T, d) == 4 * attention_flops(T, d)
    assert attention_flops(T, 2 * d) == 2 * attention_flops(T, d)
