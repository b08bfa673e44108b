"""Tests for tinyformer.positions and the rotary path of tinyformer.attention / tinyformer.blocks.

References are closed forms written here with Python's ``math`` module (sinusoids), Python's own
binary formatting (``format(t, "b")``), complex arithmetic (rotary embeddings: each pair is a
complex number multiplied by ``exp(i·p·θ)``), 2×2 rotation matrices built in the test, and
PyTorch's ``F.scaled_dot_product_attention`` (also with ALiBi's bias as a float mask), the ALiBi
paper's slope recipe transcribed; never outputs of the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.testing import assert_close

from tinyformer.attention import MultiHeadAttention, attend_heads
from tinyformer.blocks import TransformerBlock, TransformerStack
from tinyformer.positions import (
    LearnedPositions,
    RotaryEmbedding,
    alibi_bias,
    alibi_slopes,
    apply_rotary,
    binary_positions,
    frequencies,
    sinusoidal_positions,
)

DT = torch.float64
META = torch.device("meta")


def rand(gen: torch.Generator, *shape: int, dtype: torch.dtype = DT) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(2024)


def exact(a: torch.Tensor, b: torch.Tensor) -> None:
    assert_close(a, b, rtol=0, atol=0)


# --------------------------------------------------------------------------------------------
# Independent references
# --------------------------------------------------------------------------------------------


def thetas(d: int, base: float = 10000.0) -> list[float]:
    """θ_i = 1 / base^(2i/d), i = 0 … d/2 - 1, in plain Python floats."""
    return [1.0 / base ** (2 * i / d) for i in range(d // 2)]


def pe_closed_form(T: int, d: int, base: float = 10000.0, offset: int = 0) -> torch.Tensor:
    """PE[t, 2i] = sin(p·θ_i), PE[t, 2i+1] = cos(p·θ_i) with p = offset + t, from math.sin/cos."""
    rows = []
    for p in range(offset, offset + T):
        row = []
        for theta in thetas(d, base):
            row += [math.sin(p * theta), math.cos(p * theta)]
        rows.append(row)
    return torch.tensor(rows, dtype=DT)


def binary_closed_form(T: int, d: int, offset: int = 0) -> torch.Tensor:
    """Row t: the bits of offset + t as Python writes them, least significant first, zero-padded."""
    rows = []
    for p in range(offset, offset + T):
        bits = format(p, "b")[::-1].ljust(d, "0")
        assert len(bits) == d, "the reference needs enough columns"
        rows.append([float(c) for c in bits])
    return torch.tensor(rows, dtype=DT)


def shift_matrix(d: int, k: int, base: float = 10000.0) -> torch.Tensor:
    """Block-diagonal (d, d) M_k with PE[t] @ M_k = PE[t + k] (row vectors), built from 2×2
    rotations: [sin a, cos a] @ [[cos b, -sin b], [sin b, cos b]] = [sin(a+b), cos(a+b)]."""
    M = torch.zeros(d, d, dtype=DT)
    for i, theta in enumerate(thetas(d, base)):
        b = k * theta
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor(
            [[math.cos(b), -math.sin(b)], [math.sin(b), math.cos(b)]], dtype=DT)
    return M


def rope_ref(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """RoPE with complex numbers: pair (x[2i], x[2i+1]) is z = x[2i] + i·x[2i+1]; the token at
    position p = offset + t becomes z·exp(i·p·θ_i). Computed in float64, returned in x's dtype."""
    *lead, T, d = x.shape
    z = torch.view_as_complex(x.to(DT).reshape(*lead, T, d // 2, 2).contiguous())  # (..., T, d/2)
    p = torch.arange(offset, offset + T, dtype=DT)[:, None]                          # (T, 1)
    angle = p * torch.tensor(thetas(d, base), dtype=DT)                              # (T, d/2)
    rotated = z * torch.exp(1j * angle)                                              # complex128
    return torch.view_as_real(rotated).reshape(*lead, T, d).to(x.dtype)


def tril_by_definition(T: int) -> torch.Tensor:
    return torch.arange(T).unsqueeze(1) >= torch.arange(T).unsqueeze(0)


def ref_mha(attn: MultiHeadAttention, x: torch.Tensor, causal: bool, rotary: bool, mask=None):
    """Multi-head self-attention by hand: F.linear projections, split heads, rope_ref on each
    head's q and k, torch's scaled dot-product attention, concatenate, o_proj."""
    H, D = attn.n_heads, attn.d_model // attn.n_heads
    q, k, v = (
        F.linear(x, lin.weight, lin.bias).unflatten(-1, (H, D)).transpose(-3, -2)  # (..., H, T, D)
        for lin in (attn.q_proj, attn.k_proj, attn.v_proj)
    )
    if rotary:
        q, k = rope_ref(q), rope_ref(k)
    if mask is None:
        heads = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    else:
        full = mask & tril_by_definition(x.shape[-2]) if causal else mask
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=full)
    merged = heads.transpose(-3, -2).flatten(-2)                                    # (..., T, d_model)
    return F.linear(merged, attn.o_proj.weight, attn.o_proj.bias)


def make_mha(d_model=16, n_heads=4, causal=True, rotary=True, seed=0) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(d_model, n_heads, causal, rotary=rotary).to(DT)


def test_references_agree_with_each_other():
    """rope_ref and the sinusoid closed form describe the same rotation: rotating the pair (0, 1)
    of every frequency by p·θ_i gives (-sin, cos), i.e. the sinusoidal row with sin negated."""
    d, T = 8, 6
    x = torch.tensor([0.0, 1.0] * (d // 2), dtype=DT).expand(T, d)
    rotated = rope_ref(x)
    pe = pe_closed_form(T, d)
    assert_close(rotated[:, 0::2], -pe[:, 0::2])
    assert_close(rotated[:, 1::2], pe[:, 1::2])
    # the shift matrix does shift one row of the closed form
    assert_close(pe_closed_form(1, d, offset=2) @ shift_matrix(d, 3), pe_closed_form(1, d, offset=5))


# --------------------------------------------------------------------------------------------
# frequencies and sinusoidal_positions
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("d, base", [(2, 10000.0), (8, 10000.0), (64, 10000.0), (6, 100.0), (10, 2.0), (4, 7)])
def test_frequencies_closed_form(d, base):
    f = frequencies(d, base)
    assert f.shape == (d // 2,) and f.dtype == DT
    assert_close(f, torch.tensor(thetas(d, base), dtype=DT), rtol=1e-14, atol=0)
    assert f[0].item() == 1.0


SIN_CASES = [
    # (T, d, base, offset)
    (1, 2, 10000.0, 0),
    (7, 8, 10000.0, 0),
    (16, 64, 10000.0, 0),
    (5, 6, 100.0, 3),
    (4, 10, 2.0, 0),
    (9, 4, 500, 1),
    (3, 16, 10000.0, 10_000),
    (2, 32, 10000.0, 123_456),
    (6, 12, 10.0, 99_999),
]


@pytest.mark.parametrize("T, d, base, offset", SIN_CASES)
def test_sinusoidal_closed_form_float64(T, d, base, offset):
    PE = sinusoidal_positions(T, d, base, offset=offset, dtype=DT)
    assert PE.shape == (T, d) and PE.dtype == DT
    assert_close(PE, pe_closed_form(T, d, base, offset), rtol=0, atol=1e-9)


@pytest.mark.parametrize("T, d, base, offset", SIN_CASES)
def test_sinusoidal_closed_form_float32(T, d, base, offset):
    """The float32 table is the float64 one rounded: angles like 10_000·θ_0 computed in float32
    would be off by ~1e-3 radians, far more than this tolerance."""
    PE = sinusoidal_positions(T, d, base, offset=offset)
    assert PE.dtype == torch.float32
    assert_close(PE.double(), pe_closed_form(T, d, base, offset), rtol=0, atol=2e-7)


def test_sinusoidal_large_table_last_rows():
    """A whole table of 10_001 positions: the last rows (t = 10_000) still match the closed form."""
    PE = sinusoidal_positions(10_001, 8)
    assert_close(PE[-3:].double(), pe_closed_form(3, 8, offset=9_998), rtol=0, atol=2e-7)
    every_1000th = torch.cat([pe_closed_form(1, 8, offset=t) for t in range(0, 10_001, 1000)])
    assert_close(PE[::1000].double(), every_1000th, rtol=0, atol=2e-7)


def test_sinusoidal_interleaving():
    d, T = 12, 50
    PE = sinusoidal_positions(T, d, dtype=DT)
    t = torch.arange(T, dtype=DT)
    # column 0 is sin(t) (θ_0 = 1), column 1 is cos(t)
    assert_close(PE[:, 0], torch.tensor([math.sin(p) for p in range(T)], dtype=DT))
    assert_close(PE[:, 1], torch.tensor([math.cos(p) for p in range(T)], dtype=DT))
    for i, theta in enumerate(thetas(d)):
        s, c = PE[:, 2 * i], PE[:, 2 * i + 1]
        # columns 2i and 2i+1 share one frequency: they are the sine and cosine of one angle
        assert_close(s**2 + c**2, torch.ones(T, dtype=DT))
        assert_close(torch.atan2(s, c), torch.atan2(torch.sin(t * theta), torch.cos(t * theta)))


def test_sinusoidal_row_zero():
    for d in (2, 8, 30):
        for dtype in (torch.float32, DT):
            exact(sinusoidal_positions(1, d, dtype=dtype)[0], torch.tensor([0.0, 1.0] * (d // 2), dtype=dtype))


@pytest.mark.parametrize("k", [1, 5, 37, 10_000])
def test_sinusoidal_offset_is_a_slice_of_a_longer_table(k):
    T, d = 9, 16
    for dtype in (torch.float32, DT):
        assert_close(sinusoidal_positions(T, d, offset=k, dtype=dtype),
                     sinusoidal_positions(k + T, d, dtype=dtype)[k:], rtol=0, atol=1e-7)


def test_sinusoidal_dtype_device_and_range():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, DT):
        PE = sinusoidal_positions(40, 8, dtype=dtype)
        assert PE.dtype == dtype and PE.device.type == "cpu"
        assert PE.abs().max() <= 1
    PE = sinusoidal_positions(2000, 64, dtype=DT)
    assert PE.abs().max() <= 1
    assert PE.min() < -0.999 and PE.max() > 0.999     # the sines do swing over the whole range
    meta = sinusoidal_positions(5, 8, device=META, dtype=torch.float16)
    assert (meta.device, meta.dtype, meta.shape) == (META, torch.float16, (5, 8))
    meta = sinusoidal_positions(5, 8, device="meta")
    assert meta.device == META


@pytest.mark.parametrize("d, base", [(8, 10000.0), (16, 10000.0), (6, 50.0)])
@pytest.mark.parametrize("k", [1, 2, 3, 17, 100, -1, -9])
def test_sinusoidal_shift_property(d, base, k):
    """One fixed matrix M_k, built from 2×2 rotations without looking at t, maps every row PE[t]
    to PE[t + k]: a shift in position is a linear map of the encoding."""
    T = 200
    PE = sinusoidal_positions(T, d, base, dtype=DT)
    M = shift_matrix(d, k, base)
    if k >= 0:
        assert_close(PE[:T - k] @ M, PE[k:], rtol=0, atol=1e-10)
    else:
        assert_close(PE[-k:] @ M, PE[:T + k], rtol=0, atol=1e-10)
    # also at large positions
    far = sinusoidal_positions(5, d, base, offset=50_000, dtype=DT)
    shifted = sinusoidal_positions(5, d, base, offset=50_000 + k, dtype=DT)
    assert_close(far @ M, shifted, rtol=0, atol=1e-9)


@pytest.mark.parametrize("k", [0, 1, 4, 25, 300])
def test_sinusoidal_dot_product_depends_on_distance_only(k):
    d, T = 32, 120
    PE = sinusoidal_positions(T + k, d, dtype=DT)
    dots = (PE[:T] * PE[k:k + T]).sum(-1)                           # PE[t]·PE[t+k] for every t
    expected = sum(math.cos(k * theta) for theta in thetas(d))
    assert_close(dots, torch.full((T,), expected, dtype=DT), rtol=0, atol=1e-10)
    if k == 0:
        assert_close(dots, torch.full((T,), d / 2, dtype=DT))


# --------------------------------------------------------------------------------------------
# binary_positions
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("T, d, offset", [
    (1, 1, 0), (2, 1, 0), (1, 1, 1), (8, 3, 0), (5, 4, 11), (16, 4, 0), (20, 10, 1000), (7, 12, 3),
    (3, 70, 2**62 + 5), (4, 64, 0), (3, 63, 2**62),
])
def test_binary_closed_form(T, d, offset):
    PE = binary_positions(T, d, offset=offset)
    assert PE.shape == (T, d) and PE.dtype == torch.float32
    exact(PE.double(), binary_closed_form(T, d, offset))
    if d > 63:
        assert not PE[:, 63:].any()                   # columns past bit 62 stay zero


def test_binary_dtype_and_device():
    exact(binary_positions(6, 5, dtype=DT), binary_closed_form(6, 5))
    assert binary_positions(6, 5, dtype=torch.int64).dtype == torch.int64
    PE = binary_positions(6, 5, device=META)
    assert PE.device == META and PE.shape == (6, 5)


@pytest.mark.parametrize("d", [1, 2, 3, 8])
def test_binary_exactly_two_to_the_d_positions(d):
    n = 2**d
    exact(binary_positions(n, d).double(), binary_closed_form(n, d))
    exact(binary_positions(1, d, offset=n - 1).double(), binary_closed_form(1, d, n - 1))
    with pytest.raises(ValueError, match=rf"\bd={d}\b"):
        binary_positions(n + 1, d)
    with pytest.raises(ValueError, match=rf"\bd={d}\b"):
        binary_positions(1, d, offset=n)
    with pytest.raises(ValueError, match=rf"\bd={d}\b"):
        binary_positions(3, d, offset=n - 2)


# --------------------------------------------------------------------------------------------
# LearnedPositions
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("std", [0.02, 0.5, 3])
def test_learned_weight_shape_and_std(std):
    torch.manual_seed(0)
    lp = LearnedPositions(500, 64, std=std)
    w = lp.weight
    assert isinstance(w, nn.Parameter) and w.shape == (500, 64) and w.requires_grad
    assert [n for n, _ in lp.named_parameters()] == ["weight"]
    # 32_000 samples: the sample std is within ~0.4 % of std (one sigma), so 5 % cannot flake
    assert abs(w.std().item() / std - 1) < 0.05
    assert abs(w.mean().item()) < 0.05 * std
    assert LearnedPositions(8, 4, std=0).weight.abs().max() == 0


def test_learned_forward_rows_and_offset():
    lp = LearnedPositions(10, 6)
    for T, offset in [(1, 0), (4, 0), (10, 0), (3, 2), (1, 9), (5, 5)]:
        out = lp(T, offset)
        assert out.shape == (T, 6)
        exact(out, torch.stack([lp.weight[offset + t] for t in range(T)]))
    exact(lp(4, offset=3), lp.weight[3:7])


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_learned_tensor_lookup_with_batch_shape(gen, dtype):
    lp = LearnedPositions(10, 5)
    positions = torch.tensor([[3, 1, 0], [9, 2, 2]], dtype=dtype)
    out = lp(positions)
    assert out.shape == (2, 3, 5)
    for b in range(2):
        for t in range(3):
            exact(out[b, t], lp.weight[int(positions[b, t])])
    exact(lp(torch.tensor(7, dtype=dtype)), lp.weight[7])            # a 0-d position
    # a one-dimensional uint8 tensor as long as max_len must not be read as a boolean mask
    p = torch.tensor([1, 0, 0, 1, 0, 0, 0, 0, 0, 3], dtype=dtype)
    exact(lp(p), torch.stack([lp.weight[int(i)] for i in p]))
    assert lp(torch.zeros(0, 3, dtype=dtype)).shape == (0, 3, 5)


def test_learned_gradients_reach_only_the_rows_used(gen):
    lp = LearnedPositions(12, 4).double()
    positions = torch.tensor([[1, 4], [4, 7]])
    up = rand(gen, 2, 2, 4)
    (lp(positions) * up).sum().backward()
    expected = torch.zeros(12, 4, dtype=DT)
    expected[1] += up[0, 0]
    expected[4] += up[0, 1] + up[1, 0]
    expected[7] += up[1, 1]
    assert_close(lp.weight.grad, expected)

    lp.weight.grad = None
    up = rand(gen, 3, 4)
    (lp(3, offset=5) * up).sum().backward()
    expected = torch.zeros(12, 4, dtype=DT)
    expected[5:8] = up
    assert_close(lp.weight.grad, expected)


def test_learned_rejects_positions_past_max_len():
    lp = LearnedPositions(10, 4)
    lp(10)
    lp(1, offset=9)
    lp(torch.tensor([0, 9]))
    for T, offset in [(11, 0), (1, 10), (2, 9), (8, 5)]:
        with pytest.raises(ValueError, match=r"max_len=10"):
            lp(T, offset)
    for bad in ([10], [0, 3, 10], [[2], [57]], [-1], [3, -2]):
        with pytest.raises(ValueError, match=r"max_len=10"):
            lp(torch.tensor(bad))


def test_learned_rejects_non_integer_positions():
    lp = LearnedPositions(10, 4)
    for bad in (torch.tensor([1.0, 2.0]), torch.tensor([True, False]), torch.tensor([1 + 0j])):
        with pytest.raises(TypeError, match=r"^positions must be an integer tensor"):
            lp(bad)
    with pytest.raises(TypeError, match=r"^T must be an integer"):
        lp(2.0)
    with pytest.raises(TypeError, match=r"^T must be an integer"):
        lp(True)


def test_learned_on_module_device_and_dtype():
    lp = LearnedPositions(10, 4).to(DT)
    assert lp(3).dtype == DT and lp(torch.tensor([1, 2])).dtype == DT
    meta = LearnedPositions(10, 4).to(META)
    out = meta(3, offset=2)
    assert out.device == META and out.shape == (3, 4)


# --------------------------------------------------------------------------------------------
# apply_rotary and RotaryEmbedding
# --------------------------------------------------------------------------------------------

ROPE_CASES = [
    # (shape, offset, base)
    ((5, 2), 0, 10000.0),
    ((3, 7, 8), 0, 10000.0),
    ((2, 3, 6, 16), 4, 10000.0),
    ((4, 12), 1000, 10000.0),
    ((2, 9, 6), 3, 100.0),
    ((1, 5, 10), 0, 2.5),
    ((3, 64), 54_321, 10000.0),
]


@pytest.mark.parametrize("shape, offset, base", ROPE_CASES)
def test_apply_rotary_matches_complex_reference(gen, shape, offset, base):
    x = rand(gen, *shape)
    out = apply_rotary(x, offset=offset, base=base)
    assert out.shape == x.shape and out.dtype == DT
    assert_close(out, rope_ref(x, offset, base), rtol=0, atol=1e-10)
    # float32 in, float32 out, close to the float64 reference
    x32 = x.float()
    out32 = apply_rotary(x32, offset=offset, base=base)
    assert out32.dtype == torch.float32
    assert_close(out32.double(), rope_ref(x32.double(), offset, base), rtol=0, atol=2e-5)


@pytest.mark.parametrize("shape, offset, base", ROPE_CASES)
def test_rotary_embedding_matches_complex_reference(gen, shape, offset, base):
    x = rand(gen, *shape)
    rope = RotaryEmbedding(shape[-1], base)
    assert_close(rope(x, offset), rope_ref(x, offset, base), rtol=0, atol=1e-10)
    assert_close(rope(x.float(), offset).double(), rope_ref(x, offset, base), rtol=0, atol=2e-5)


def test_apply_rotary_preserves_each_pair_norm(gen):
    x = rand(gen, 2, 3, 40, 16)
    for offset in (0, 7, 5000):
        out = apply_rotary(x, offset=offset)
        assert_close(out.unflatten(-1, (8, 2)).norm(dim=-1), x.unflatten(-1, (8, 2)).norm(dim=-1))
        assert_close(RotaryEmbedding(16)(x, offset).norm(dim=-1), x.norm(dim=-1))


def test_apply_rotary_position_zero_is_the_identity(gen):
    x = rand(gen, 3, 6, 8)
    exact(apply_rotary(x)[..., 0, :], x[..., 0, :])
    exact(RotaryEmbedding(8)(x)[..., 0, :], x[..., 0, :])
    one = x[..., :1, :]
    exact(apply_rotary(one), one)
    assert not torch.allclose(apply_rotary(x)[..., 1:, :], x[..., 1:, :])  # later rows do turn


@pytest.mark.parametrize("k", [1, 3, 64, 1000])
def test_apply_rotary_offset_is_a_slice_of_a_longer_rotation(gen, k):
    T = 7
    longer = rand(gen, 2, k + T, 12)
    x = longer[:, k:]
    assert_close(apply_rotary(x, offset=k), apply_rotary(longer)[:, k:], rtol=0, atol=1e-12)
    assert_close(RotaryEmbedding(12)(x, offset=k), apply_rotary(longer)[:, k:], rtol=0, atol=1e-12)
    assert_close(apply_rotary(x, k), rope_ref(longer)[:, k:], rtol=0, atol=1e-10)


@pytest.mark.parametrize("s", [1, 2, 7, 100, 1234, 10_000])
def test_rotary_scores_depend_on_relative_position_only(gen, s):
    """<rope(q) at m, rope(k) at n> is unchanged when both move by s: the whole score matrix of a
    sequence placed at positions s, s+1, … equals the one at 0, 1, …"""
    T, d = 10, 16
    q, k = rand(gen, 2, T, d), rand(gen, 2, T, d)
    scores = apply_rotary(q) @ apply_rotary(k).transpose(-2, -1)             # (2, T, T)
    shifted = apply_rotary(q, offset=s) @ apply_rotary(k, offset=s).transpose(-2, -1)
    assert_close(shifted, scores, rtol=0, atol=1e-9)
    rope = RotaryEmbedding(d)
    assert_close(rope(q, s) @ rope(k, s).transpose(-2, -1), scores, rtol=0, atol=1e-9)
    # the scores are not those without positions: the rotation does something
    assert (scores - q @ k.transpose(-2, -1)).abs().max() > 0.1


def test_rotary_score_of_single_vectors_depends_on_m_minus_n(gen):
    """One query and one key placed at arbitrary positions m and n: the score is a function of
    m - n, equal to q·R((n - m)θ)k, i.e. to the score with the query at 0 and the key at n - m."""
    d = 8
    q, k = rand(gen, 1, d), rand(gen, 1, d)

    def score(m: int, n: int) -> float:
        return (apply_rotary(q, offset=m) * apply_rotary(k, offset=n)).sum().item()

    def score_ref(m: int, n: int) -> float:
        return (rope_ref(q, m) * rope_ref(k, n)).sum().item()

    for m, n in [(0, 0), (3, 1), (1, 3), (10, 2), (0, 9), (57, 57)]:
        base_score = score(m, n)
        assert base_score == pytest.approx(score_ref(m, n), abs=1e-10)
        for s in (1, 5, 33, 999, 123_456):
            assert score(m + s, n + s) == pytest.approx(base_score, abs=1e-9)
        if n >= m:
            assert score(0, n - m) == pytest.approx(base_score, abs=1e-10)
    # and it does depend on the distance
    assert len({round(score(0, n), 6) for n in range(6)}) == 6


def test_rotary_embedding_follows_growing_lengths_dtypes_and_devices(gen):
    d = 12
    rope = RotaryEmbedding(d)
    calls = [(3, 0, DT), (1, 0, DT), (8, 0, torch.float32), (20, 0, DT), (5, 30, DT), (1, 35, torch.float32),
             (100, 0, DT), (4, 250, DT), (2, 7, torch.float32), (600, 0, DT)]
    for T, offset, dtype in calls:
        x = rand(gen, 2, T, d, dtype=dtype)
        out = rope(x, offset)
        assert out.dtype == dtype and out.shape == x.shape
        atol = 1e-12 if dtype == DT else 1e-6
        assert_close(out, apply_rotary(x, offset), rtol=0, atol=atol)
        assert_close(out.double(), rope_ref(x.double(), offset), rtol=0, atol=1e-10 if dtype == DT else 2e-5)
        assert rope.cos.dtype == dtype and rope.sin.dtype == dtype       # the table follows x's dtype
        assert rope.cos.shape[0] >= offset + T and rope.cos.shape[1] == d // 2
    for dtype in (DT, torch.float32):
        # same dtype, a length the table already covers: only the device changes
        out = rope(torch.empty(2, 7, d, device=META, dtype=dtype))
        assert out.device == META and rope.cos.device == META and rope.sin.device == META
        x = rand(gen, 7, d, dtype=dtype)
        assert_close(rope(x, 3).double(), rope_ref(x.double(), 3), rtol=0, atol=2e-5)  # back on the CPU
        assert rope.cos.device.type == "cpu" and rope.sin.device.type == "cpu"


def test_rotary_embedding_table_grows(gen):
    rope = RotaryEmbedding(6)
    for T, offset in [(2, 0), (5, 0), (1, 40), (300, 0), (3, 1000)]:
        x = rand(gen, T, 6)
        assert_close(rope(x, offset), rope_ref(x, offset), rtol=0, atol=1e-10)
        assert rope.cos.shape[0] >= offset + T


def test_rotary_embedding_has_no_parameters_or_persistent_state(gen):
    rope = RotaryEmbedding(8)
    rope(rand(gen, 50, 8))
    assert list(rope.parameters()) == [] and rope.state_dict() == {}
    with_rot, without = make_mha(rotary=True), make_mha(rotary=False)
    with_rot(rand(gen, 2, 5, 16))
    assert with_rot.state_dict().keys() == without.state_dict().keys()
    with_rot.load_state_dict(without.state_dict(), strict=True)       # checkpoints load both ways
    without.load_state_dict(with_rot.state_dict(), strict=True)
    assert "d_head=8" in repr(rope)


def test_rotary_embedding_base(gen):
    x = rand(gen, 6, 10)
    assert_close(RotaryEmbedding(10, base=30.0)(x, 2), rope_ref(x, 2, 30.0), rtol=0, atol=1e-12)
    assert_close(apply_rotary(x, 2, base=30), rope_ref(x, 2, 30.0), rtol=0, atol=1e-12)


def test_rotary_gradient_is_the_inverse_rotation(gen):
    """Rotation is orthogonal, so the gradient of <rope(x), g> with respect to x is rope⁻¹(g)."""
    x = rand(gen, 5, 8).requires_grad_()
    g = rand(gen, 5, 8)
    (apply_rotary(x, 3) * g).sum().backward()
    z = torch.view_as_complex(g.reshape(5, 4, 2).contiguous())
    angle = torch.arange(3, 8, dtype=DT)[:, None] * torch.tensor(thetas(8), dtype=DT)
    expected = torch.view_as_real(z * torch.exp(-1j * angle)).reshape(5, 8)
    assert_close(x.grad, expected)


def test_rotary_table_built_in_inference_mode_still_trains(gen):
    """A table grown while generating under torch.inference_mode must not poison training."""
    rope = RotaryEmbedding(8)
    with torch.inference_mode():
        rope(rand(gen, 20, 8))
    x = rand(gen, 5, 8).requires_grad_()
    rope(x).sum().backward()
    assert x.grad is not None and x.grad.shape == (5, 8)


# --------------------------------------------------------------------------------------------
# MultiHeadAttention(rotary=True), TransformerBlock, TransformerStack
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("rotary", [True, False])
@pytest.mark.parametrize("shape", [(2, 9, 16), (9, 16), (2, 3, 5, 16)])
def test_mha_rotary_matches_by_hand(gen, causal, rotary, shape):
    attn = make_mha(16, 4, causal, rotary)
    assert isinstance(attn.rotary, RotaryEmbedding) if rotary else attn.rotary is None
    x = rand(gen, *shape)
    assert_close(attn(x), ref_mha(attn, x, causal, rotary), rtol=0, atol=1e-10)


@pytest.mark.parametrize("causal", [True, False])
def test_mha_rotary_with_a_mask_matches_by_hand(gen, causal):
    attn = make_mha(12, 2, causal, True)
    x = rand(gen, 3, 7, 12)
    mask = torch.rand(3, 1, 1, 7, generator=gen) > 0.3                  # key padding
    mask[..., 0] = True
    assert_close(attn(x, mask), ref_mha(attn, x, causal, True, mask), rtol=0, atol=1e-10)


def test_mha_rotary_false_is_unchanged(gen):
    """rotary=False builds the same layer (same random draws, same weights) as before the option
    existed, and computes plain multi-head attention."""
    torch.manual_seed(7)
    plain = MultiHeadAttention(16, 4).double()
    torch.manual_seed(7)
    explicit = MultiHeadAttention(16, 4, rotary=False).double()
    torch.manual_seed(7)
    rot = MultiHeadAttention(16, 4, rotary=True).double()
    for p, e, r in zip(plain.parameters(), explicit.parameters(), rot.parameters(), strict=True):
        exact(p, e)
        exact(p, r)
    x = rand(gen, 2, 6, 16)
    exact(plain(x), explicit(x))
    assert_close(plain(x), ref_mha(plain, x, True, False), rtol=0, atol=1e-10)
    assert (rot(x) - plain(x)).abs().max() > 1e-3
    # the first query of a causal layer sees only its own key (weight 1), so rotation cannot change it
    exact(rot(x)[:, 0], plain(x)[:, 0])


def test_permutation_equivariance_without_positions_and_not_with_rotary(gen):
    x = rand(gen, 2, 8, 16)
    perm = torch.tensor([3, 0, 7, 1, 6, 2, 5, 4])
    plain = make_mha(causal=False, rotary=False)
    assert_close(plain(x[:, perm]), plain(x)[:, perm], rtol=0, atol=1e-10)
    rot = make_mha(causal=False, rotary=True)
    assert (rot(x[:, perm]) - rot(x)[:, perm]).abs().max() > 1e-3


@pytest.mark.parametrize("rotary", [True, False])
def test_causal_rotary_is_still_causal(gen, rotary):
    attn = make_mha(causal=True, rotary=rotary)
    x = rand(gen, 2, 10, 16)
    out, weights = attn(x, return_weights=True)
    assert weights.shape == (2, 4, 10, 10)
    assert (weights.masked_select(~tril_by_definition(10)) == 0).all()
    x2 = x.clone()
    x2[:, 6:] = rand(gen, 2, 4, 16)
    exact(attn(x2)[:, :6], out[:, :6])
    assert (attn(x2)[:, 6:] - out[:, 6:]).abs().max() > 1e-3


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("s", [0, 1, 17, 1000, 99_999])
@pytest.mark.parametrize("rotate_with", ["apply_rotary", "reference"])
def test_mha_rotary_output_unchanged_by_shifting_all_positions(gen, causal, s, rotate_with):
    """Every score depends on m - n only, so placing the whole sequence at s, s+1, … (a wrapper
    that calls attend_heads with its own rotate) leaves the layer's output unchanged."""
    attn = make_mha(16, 4, causal, True)
    x = rand(gen, 2, 9, 16)
    if rotate_with == "apply_rotary":
        def rotate(t):
            return apply_rotary(t, offset=s)
    else:
        def rotate(t):
            return rope_ref(t, s)

    def shifted_forward(x):
        q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
        merged, weights = attend_heads(q, k, v, attn.n_heads, attn.causal, None, attn.scale, rotate=rotate)
        return attn.o_proj(merged), weights

    out, weights = attn(x, return_weights=True)
    out_s, weights_s = shifted_forward(x)
    assert_close(out_s, out, rtol=0, atol=1e-9)
    assert_close(weights_s, weights, rtol=0, atol=1e-9)


def test_attend_heads_rotate_sees_each_head(gen):
    """rotate receives the split heads (..., n_heads, T, d_head), queries then keys."""
    seen = []

    def rotate(t):
        seen.append(tuple(t.shape))
        return t

    q, k, v = rand(gen, 2, 5, 12), rand(gen, 2, 5, 12), rand(gen, 2, 5, 12)
    merged, _ = attend_heads(q, k, v, 3, rotate=rotate)
    assert seen == [(2, 3, 5, 4), (2, 3, 5, 4)]
    assert_close(merged, attend_heads(q, k, v, 3)[0])


def ref_pre_block(block: TransformerBlock, x: torch.Tensor) -> torch.Tensor:
    def ln(m, t):
        return F.layer_norm(t, (t.shape[-1],), m.weight, m.bias, m.eps)

    x = x + ref_mha(block.attn, ln(block.ln_1, x), True, True)
    return x + block.ffn(ln(block.ln_2, x))


def test_transformer_block_and_stack_with_rotary(gen):
    torch.manual_seed(3)
    block = TransformerBlock(16, 4, rotary=True).double()
    torch.manual_seed(3)
    plain = TransformerBlock(16, 4).double()
    assert isinstance(block.attn.rotary, RotaryEmbedding) and plain.attn.rotary is None
    n = sum(p.numel() for p in block.parameters())
    assert n == sum(p.numel() for p in plain.parameters())             # rotary adds no parameters
    x = rand(gen, 2, 7, 16)
    assert_close(block(x), ref_pre_block(block, x), rtol=0, atol=1e-10)
    assert (block(x) - plain(x)).abs().max() > 1e-3

    stack = TransformerStack(3, 16, 4, rotary=True).double()
    assert all(isinstance(b.attn.rotary, RotaryEmbedding) for b in stack.blocks)
    assert sum(p.numel() for p in stack.parameters()) == sum(
        p.numel() for p in TransformerStack(3, 16, 4).parameters())
    out, stream = stack(x, return_stream=True)
    assert out.shape == x.shape and len(stream) == 4 and torch.isfinite(out).all()
    assert stack.state_dict().keys() == TransformerStack(3, 16, 4).state_dict().keys()
    post = TransformerBlock(16, 4, norm="post", causal=False, rotary=True)
    assert post(x.float()).shape == x.shape


def test_rotary_refuses_cross_attention(gen):
    attn = make_mha(causal=False, rotary=True)
    x, context = rand(gen, 2, 5, 16), rand(gen, 2, 7, 16)
    with pytest.raises(ValueError, match=r"rotary"):
        attn(x, context=context)
    with pytest.raises(ValueError, match=r"rotary"):
        attn(x, context=x.clone())
    assert_close(attn(x, context=x), attn(x))                           # self-attention spelled out
    with pytest.raises(ValueError):
        make_mha(causal=True, rotary=True)(x, context=context)


# --------------------------------------------------------------------------------------------
# Bad input: each error names the argument
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("call, error, pattern", [
    # odd d
    (lambda: sinusoidal_positions(4, 7), ValueError, r"^d must be even.*got 7"),
    (lambda: frequencies(5), ValueError, r"^d must be even"),
    (lambda: apply_rotary(torch.zeros(4, 5)), ValueError, r"last dimension of x must be even"),
    (lambda: RotaryEmbedding(9), ValueError, r"^d_head must be even.*got 9"),
    (lambda: MultiHeadAttention(6, 2, rotary=True), ValueError, r"^d_head must be even"),
    # T < 1, T not an int
    (lambda: sinusoidal_positions(0, 4), ValueError, r"^T must be at least 1"),
    (lambda: sinusoidal_positions(-3, 4), ValueError, r"^T must be at least 1"),
    (lambda: binary_positions(0, 4), ValueError, r"^T must be at least 1"),
    (lambda: LearnedPositions(8, 4)(0), ValueError, r"^T must be at least 1"),
    (lambda: sinusoidal_positions(4.0, 4), TypeError, r"^T must be an integer"),
    (lambda: sinusoidal_positions(True, 4), TypeError, r"^T must be an integer"),
    (lambda: binary_positions("4", 4), TypeError, r"^T must be an integer"),
    (lambda: binary_positions(False, 4), TypeError, r"^T must be an integer"),
    (lambda: sinusoidal_positions(4, 4.0), TypeError, r"^d must be an integer"),
    (lambda: binary_positions(4, 0), ValueError, r"^d must be at least 1"),
    # negative offset
    (lambda: sinusoidal_positions(4, 4, offset=-1), ValueError, r"^offset must be at least 0"),
    (lambda: binary_positions(4, 4, offset=-2), ValueError, r"^offset must be at least 0"),
    (lambda: LearnedPositions(8, 4)(2, offset=-1), ValueError, r"^offset must be at least 0"),
    (lambda: apply_rotary(torch.zeros(3, 4), offset=-1), ValueError, r"^offset must be at least 0"),
    (lambda: RotaryEmbedding(4)(torch.zeros(3, 4), offset=-5), ValueError, r"^offset must be at least 0"),
    (lambda: apply_rotary(torch.zeros(3, 4), offset=1.5), TypeError, r"^offset must be an integer"),
    # base
    (lambda: sinusoidal_positions(4, 4, base=1.0), ValueError, r"^base must be a finite number > 1"),
    (lambda: sinusoidal_positions(4, 4, base=0.5), ValueError, r"^base must be"),
    (lambda: sinusoidal_positions(4, 4, base=-10), ValueError, r"^base must be"),
    (lambda: sinusoidal_positions(4, 4, base=float("nan")), ValueError, r"^base must be"),
    (lambda: sinusoidal_positions(4, 4, base=float("inf")), ValueError, r"^base must be"),
    (lambda: apply_rotary(torch.zeros(3, 4), base=1), ValueError, r"^base must be"),
    (lambda: RotaryEmbedding(4, base=float("nan")), ValueError, r"^base must be"),
    (lambda: RotaryEmbedding(4, base="10000"), TypeError, r"^base must be a number"),
    (lambda: frequencies(4, base=True), TypeError, r"^base must be a number"),
    # too long a sequence
    (lambda: binary_positions(17, 4), ValueError, r"d=4 bits"),
    (lambda: LearnedPositions(8, 4)(9), ValueError, r"max_len=8"),
    (lambda: LearnedPositions(8, 4)(torch.tensor([8])), ValueError, r"max_len=8"),
    # apply_rotary / RotaryEmbedding input
    (lambda: apply_rotary([[1.0, 2.0]]), TypeError, r"^x must be a torch.Tensor"),
    (lambda: apply_rotary(np.zeros((3, 4))), TypeError, r"^x must be a torch.Tensor"),
    (lambda: apply_rotary(torch.zeros(3, 4, dtype=torch.int64)), TypeError, r"^x must be a floating-point"),
    (lambda: apply_rotary(torch.zeros(4)), ValueError, r"^x must have shape \(\.\.\., T, d\)"),
    (lambda: RotaryEmbedding(4)(torch.zeros(4)), ValueError, r"^x must have shape"),
    (lambda: RotaryEmbedding(4)(torch.zeros(3, 6)), ValueError, r"d_head=4"),
    (lambda: RotaryEmbedding(4)(torch.zeros(3, 4, dtype=torch.int32)), TypeError, r"^x must be a floating"),
    (lambda: RotaryEmbedding(4)("x"), TypeError, r"^x must be a torch.Tensor"),
    # rotary flag
    (lambda: MultiHeadAttention(8, 2, rotary=1), TypeError, r"^rotary must be True or False"),
    (lambda: MultiHeadAttention(8, 2, rotary="yes"), TypeError, r"^rotary must be True or False"),
    (lambda: TransformerBlock(8, 2, rotary=None), TypeError, r"^rotary must be True or False"),
    # LearnedPositions construction
    (lambda: LearnedPositions(0, 4), ValueError, r"^max_len must be at least 1"),
    (lambda: LearnedPositions(8, 2.0), TypeError, r"^d must be an integer"),
    (lambda: LearnedPositions(8, 4, std=-1), ValueError, r"^std must be"),
    (lambda: LearnedPositions(8, 4, std=float("nan")), ValueError, r"^std must be"),
])
def test_bad_input_names_the_argument(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


# --------------------------------------------------------------------------------------------
# Devices: tensors are built on the input's device. The meta device has no data, so mixing a
# CPU-built table into a meta computation raises, just as CPU and GPU would.
# --------------------------------------------------------------------------------------------


def test_everything_on_meta():
    x = torch.empty(2, 3, 5, 8, device=META)
    assert apply_rotary(x, offset=4).device == META
    assert RotaryEmbedding(8)(x, 2).device == META
    assert sinusoidal_positions(5, 8, device=META).device == META
    assert binary_positions(5, 8, device=META).device == META
    assert frequencies(8, device=META).device == META
    assert LearnedPositions(10, 8).to(META)(5).device == META
    attn = MultiHeadAttention(16, 2, rotary=True).to(META)
    assert attn(torch.empty(2, 5, 16, device=META)).device == META
    stack = TransformerStack(2, 16, 2, rotary=True).to(META)
    assert stack(torch.empty(2, 5, 16, device=META)).device == META


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_matches_cpu(gen):
    x = rand(gen, 2, 3, 9, 8)
    assert_close(apply_rotary(x.cuda(), offset=5).cpu(), apply_rotary(x, offset=5))
    rope = RotaryEmbedding(8)
    assert_close(rope(x.cuda(), 5).cpu(), rope_ref(x, 5))
    assert rope.cos.device.type == "cuda"
    assert_close(rope(x, 5), rope_ref(x, 5))
    PE = sinusoidal_positions(20, 8, device="cuda", offset=3)
    assert PE.device.type == "cuda"
    assert_close(PE.cpu(), sinusoidal_positions(20, 8, offset=3))
    B = binary_positions(20, 8, device="cuda")
    assert B.device.type == "cuda"
    exact(B.cpu(), binary_positions(20, 8))
    lp = LearnedPositions(10, 4).cuda()
    assert lp(3).device.type == "cuda"
    assert lp(torch.tensor([1, 2], device="cuda")).device.type == "cuda"
    attn = make_mha(rotary=True)
    h = rand(gen, 2, 6, 16)
    expected = attn(h)
    assert_close(attn.cuda()(h.cuda()).cpu(), expected)


# --------------------------------------------------------------------------- ALiBi


def paper_slopes(n):
    """The slopes of the ALiBi paper's reference code (Press et al., 2022), transcribed."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_slopes(2 * closest)[0::2][:n - closest]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 8, 12, 16])
def test_alibi_slopes_are_the_papers(n):
    assert_close(alibi_slopes(n), torch.tensor(paper_slopes(n), dtype=torch.float64), rtol=1e-14, atol=0)
    assert alibi_slopes(n).dtype == torch.float64


def test_alibi_slopes_for_eight_heads_halve_from_one_half():
    assert alibi_slopes(8).tolist() == [2.0 ** -j for j in range(1, 9)]


@pytest.mark.parametrize("T", [1, 2, 7])
def test_alibi_bias_closed_form(T):
    slopes = [0.5, 0.25, 3.0]
    bias = alibi_bias(T, torch.tensor(slopes, dtype=torch.float64))
    expected = [[[-s * (m - n) if n <= m else -math.inf for n in range(T)] for m in range(T)] for s in slopes]
    assert bias.dtype == torch.float64 and bias.shape == (3, T, T)
    assert torch.equal(bias, torch.tensor(expected, dtype=torch.float64))
    assert not torch.signbit(bias.diagonal(dim1=-2, dim2=-1)).any()          # +0 on the diagonal, not -0


def test_alibi_bias_of_a_list_is_float32():
    assert alibi_bias(3, [0.5]).dtype == torch.float32


@pytest.mark.parametrize(("slopes", "match"), [
    ([], "one number per head"), ([[0.5]], "one number per head"), ([0.5, -1.0], "positive"),
    ([0.0], "positive"), ([math.inf], "finite"), ([math.nan], "positive"),
])
def test_alibi_bias_refuses_bad_slopes(slopes, match):
    with pytest.raises(ValueError, match=match):
        alibi_bias(4, slopes)


def test_alibi_bias_refuses_a_bad_length():
    with pytest.raises((TypeError, ValueError), match="T"):
        alibi_bias(0, [0.5])


def test_alibi_attention_matches_torch_with_a_float_mask():
    """ALiBiAttention equals torch's scaled_dot_product_attention given the bias as an additive float mask,
    with the layer's own projections."""
    from tinyformer.attention import merge_heads, split_heads
    from tinyformer.experiments.ch04 import ALiBiAttention

    torch.manual_seed(0)
    attn = MultiHeadAttention(12, 3, causal=True).double()
    layer = ALiBiAttention(attn, [0.5, 0.25, 0.125]).double()
    x = torch.randn(2, 6, 12, dtype=torch.float64)
    q, k, v = (split_heads(p(x), 3) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    t = torch.arange(6)
    mask = torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64)[:, None, None] * (t[None, :] - t[:, None])
    mask = mask.masked_fill(t[None, :] > t[:, None], -math.inf)
    expected = attn.o_proj(merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)))
    out, weights = layer(x, return_weights=True)
    assert_close(out, expected)
    assert_close(layer(x), expected)
    assert weights.shape == (2, 3, 6, 6) and torch.all(weights.triu(1) == 0)
