"""Tests for tinyformer.blocks against independent references.

References are PyTorch's own ``nn.LayerNorm`` and ``nn.RMSNorm``, a feed-forward network and a whole
transformer block written out below from torch primitives (``F.layer_norm``, ``F.linear``,
``F.scaled_dot_product_attention``, ``F.gelu``) on the module's weights, and closed forms; never
outputs of the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.testing import assert_close

from tinyformer.attention import MultiHeadAttention
from tinyformer.blocks import (
    FeedForward,
    LayerNorm,
    RMSNorm,
    TransformerBlock,
    TransformerStack,
    block_param_count,
    init_gpt2_,
    residual_writers,
    stream_rms,
)

DT = torch.float64


def rand(gen: torch.Generator, *shape: int, dtype: torch.dtype = DT) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(4321)


@torch.no_grad()
def randomize_(module: nn.Module, gen: torch.Generator) -> nn.Module:
    """Give every parameter a random, non-trivial value: layer-norm gains around 1 (never the
    initial ones), biases and layer-norm shifts of size ~0.3, weights of size ~1/√fan_in."""
    for name, p in module.named_parameters():
        noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
        if p.dim() == 2:
            p.copy_(noise / math.sqrt(p.shape[1]))
        elif name.endswith("weight"):  # a norm's gain
            p.copy_(1 + 0.5 * noise)
        else:
            p.copy_(0.3 * noise)
    return module


def tril_by_definition(T: int) -> torch.Tensor:
    """``mask[i, j] = (i >= j)``, built from index comparisons."""
    return torch.arange(T).unsqueeze(1) >= torch.arange(T).unsqueeze(0)


def gelu_by_formula(z: torch.Tensor) -> torch.Tensor:
    """The exact GELU, z·Φ(z), with Φ the standard normal CDF."""
    return 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))


# --------------------------------------------------------------------------------------------
# References written from torch primitives
# --------------------------------------------------------------------------------------------


def ref_ln(ln: LayerNorm, x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), ln.weight, ln.bias, ln.eps)


def ref_attention(attn: MultiHeadAttention, x: torch.Tensor, causal: bool, mask=None) -> torch.Tensor:
    """Multi-head self-attention from F.linear and torch's own scaled dot-product attention."""
    H, D = attn.n_heads, attn.d_model // attn.n_heads
    q, k, v = (
        F.linear(x, lin.weight, lin.bias).unflatten(-1, (H, D)).transpose(-3, -2)  # (..., H, T, D)
        for lin in (attn.q_proj, attn.k_proj, attn.v_proj)
    )
    if mask is None:
        heads = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    else:
        full = mask & tril_by_definition(x.shape[-2]) if causal else mask
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=full)
    merged = heads.transpose(-3, -2).flatten(-2)  # (..., T, d_model)
    return F.linear(merged, attn.o_proj.weight, attn.o_proj.bias)


def ref_ffn(ffn: FeedForward, x: torch.Tensor, activation: str = "gelu") -> torch.Tensor:
    act = F.gelu if activation == "gelu" else F.relu
    h = act(F.linear(x, ffn.up_proj.weight, ffn.up_proj.bias))
    return F.linear(h, ffn.down_proj.weight, ffn.down_proj.bias)


def ref_block(block: TransformerBlock, x, norm: str, causal: bool, mask=None, residual: bool = True,
              activation: str = "gelu"):
    """The block written out by hand, both placements, with or without the residual additions."""

    def add(a, b):
        return a + b if residual else b

    if norm == "pre":
        x = add(x, ref_attention(block.attn, ref_ln(block.ln_1, x), causal, mask))
        return add(x, ref_ffn(block.ffn, ref_ln(block.ln_2, x), activation))
    x = ref_ln(block.ln_1, add(x, ref_attention(block.attn, x, causal, mask)))
    return ref_ln(block.ln_2, add(x, ref_ffn(block.ffn, x, activation)))


def make_block(gen, d_model=12, n_heads=3, d_ff=None, norm="pre", causal=True, dtype=DT, **kwargs):
    block = TransformerBlock(d_model, n_heads, d_ff, norm, causal, **kwargs).to(dtype)
    return randomize_(block, gen)


def test_reference_attention_agrees_with_a_loop(gen):
    """The by-hand attention is itself checked once against per-head Python loops."""
    d_model, n_heads, T = 6, 2, 4
    attn = randomize_(MultiHeadAttention(d_model, n_heads).to(DT), gen)
    x = rand(gen, T, d_model)
    D = d_model // n_heads
    q, k, v = (x @ lin.weight.T + lin.bias for lin in (attn.q_proj, attn.k_proj, attn.v_proj))
    heads = []
    for h in range(n_heads):
        sl = slice(h * D, (h + 1) * D)
        rows = []
        for i in range(T):
            scores = torch.stack([q[i, sl] @ k[j, sl] / math.sqrt(D) for j in range(i + 1)])
            w = torch.exp(scores - scores.max())
            w = w / w.sum()
            rows.append(sum(w[j] * v[j, sl] for j in range(i + 1)))
        heads.append(torch.stack(rows))
    expected = torch.cat(heads, -1) @ attn.o_proj.weight.T + attn.o_proj.bias
    with torch.no_grad():
        assert_close(ref_attention(attn, x, causal=True), expected)
        assert_close(attn(x), expected)


# --------------------------------------------------------------------------------------------
# LayerNorm
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(7,), (3, 7), (2, 5, 16), (2, 3, 4, 1), (1, 1, 33)], ids=str)
@pytest.mark.parametrize("eps", [1e-5, 1e-12, 0.1, 3.0])
def test_layer_norm_matches_torch(gen, shape, eps):
    d = shape[-1]
    ours = LayerNorm(d, eps).to(DT)
    theirs = nn.LayerNorm(d, eps=eps).to(DT)
    x = rand(gen, *shape) * 3 + 1.5  # not already centred or of unit scale
    assert_close(ours(x), theirs(x))  # initial gain 1, bias 0
    with torch.no_grad():
        ours.weight.copy_(rand(gen, d))
        ours.bias.copy_(rand(gen, d))
        theirs.weight.copy_(ours.weight)
        theirs.bias.copy_(ours.bias)

    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    out1, out2 = ours(x1), theirs(x2)
    assert out1.shape == x.shape
    assert out1.dtype == DT
    assert_close(out1, out2)
    upstream = rand(gen, *shape)
    (out1 * upstream).sum().backward()
    (out2 * upstream).sum().backward()
    assert_close(x1.grad, x2.grad)
    assert_close(ours.weight.grad, theirs.weight.grad)
    assert_close(ours.bias.grad, theirs.bias.grad)


def test_layer_norm_by_its_equations(gen):
    """Mean 0 and (biased) variance 1 per token at gain 1, bias 0; eps inside the square root."""
    x = rand(gen, 4, 6, 10) * 5 - 2
    y = LayerNorm(10, eps=1e-12).to(DT)(x)
    assert_close(y.mean(-1), torch.zeros(4, 6, dtype=DT))
    assert_close(y.var(-1, unbiased=False), torch.ones(4, 6, dtype=DT))
    # a large eps makes the difference between sqrt(var + eps) and sqrt(var) + eps visible
    x = torch.tensor([[1.0, -1.0]], dtype=DT)  # mean 0, biased variance 1
    assert_close(LayerNorm(2, eps=3.0).to(DT)(x), x / 2)  # 1 / sqrt(1 + 3)


def test_layer_norm_normalises_each_token_on_its_own(gen):
    """Changing one token (or the batch around it) leaves the other tokens' outputs unchanged."""
    ln = randomize_(LayerNorm(8).to(DT), gen)
    x = rand(gen, 3, 5, 8)
    x2 = x.clone()
    x2[1, 2] = 100 * rand(gen, 8)
    y, y2 = ln(x), ln(x2)
    keep = torch.ones(3, 5, dtype=torch.bool)
    keep[1, 2] = False
    assert_close(y[keep], y2[keep])
    assert not torch.allclose(y[1, 2], y2[1, 2])


@pytest.mark.parametrize("d", [1, 4, 768])
def test_layer_norm_parameters(d):
    ln = LayerNorm(d)
    params = dict(ln.named_parameters())
    assert list(params) == ["weight", "bias"]
    assert params["weight"].shape == (d,)
    assert params["bias"].shape == (d,)
    assert torch.equal(ln.weight.detach(), torch.ones(d))
    assert torch.equal(ln.bias.detach(), torch.zeros(d))
    assert all(p.requires_grad for p in params.values())
    assert ln.eps == 1e-5
    # same names and shapes as torch's: state dicts load both ways
    theirs = nn.LayerNorm(d)
    theirs.load_state_dict(ln.state_dict())
    ln.load_state_dict(theirs.state_dict())


def test_layer_norm_d_one_is_the_bias(gen):
    """With one feature, x - mean is 0: the output is the bias, whatever x."""
    ln = randomize_(LayerNorm(1).to(DT), gen)
    x = rand(gen, 5, 1) * 10
    assert_close(ln(x), ln.bias.detach().expand(5, 1))


def test_layer_norm_float32(gen):
    x = rand(gen, 2, 3, 16, dtype=torch.float32)
    ours, theirs = LayerNorm(16), nn.LayerNorm(16)
    with torch.no_grad():
        ours.weight.copy_(rand(gen, 16, dtype=torch.float32))
        ours.bias.copy_(rand(gen, 16, dtype=torch.float32))
        theirs.load_state_dict(ours.state_dict())
    out = ours(x)
    assert out.dtype == torch.float32
    assert_close(out, theirs(x))


# --------------------------------------------------------------------------------------------
# RMSNorm
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(7,), (3, 7), (2, 5, 16), (1, 1, 33)], ids=str)
@pytest.mark.parametrize("eps", [1e-6, 1e-12, 0.5])
def test_rms_norm_matches_torch(gen, shape, eps):
    d = shape[-1]
    ours = RMSNorm(d, eps).to(DT)
    theirs = nn.RMSNorm(d, eps=eps).to(DT)
    x = rand(gen, *shape) * 2 + 0.7
    assert_close(ours(x), theirs(x))
    with torch.no_grad():
        ours.weight.copy_(rand(gen, d))
        theirs.weight.copy_(ours.weight)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    out1, out2 = ours(x1), theirs(x2)
    assert_close(out1, out2)
    upstream = rand(gen, *shape)
    (out1 * upstream).sum().backward()
    (out2 * upstream).sum().backward()
    assert_close(x1.grad, x2.grad)
    assert_close(ours.weight.grad, theirs.weight.grad)


def test_rms_norm_parameters_and_closed_form(gen):
    rms = RMSNorm(5)
    assert list(dict(rms.named_parameters())) == ["weight"]
    assert torch.equal(rms.weight.detach(), torch.ones(5))
    assert rms.eps == 1e-6
    nn.RMSNorm(5, eps=1e-6).load_state_dict(rms.state_dict())
    # no centring: a constant vector c maps to c / sqrt(c² + eps) per component
    x = torch.full((1, 5), 3.0, dtype=DT)
    assert_close(RMSNorm(5, eps=7.0).to(DT)(x), x / 4)  # 3 / sqrt(9 + 7)


# --------------------------------------------------------------------------------------------
# FeedForward
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["gelu", "relu"])
@pytest.mark.parametrize(("d_model", "d_ff"), [(8, None), (8, 5), (3, 17), (1, 1)])
@pytest.mark.parametrize("bias", [True, False])
def test_feed_forward_by_hand(gen, activation, d_model, d_ff, bias):
    ffn = randomize_(FeedForward(d_model, d_ff, activation, bias).to(DT), gen)
    d_ff = 4 * d_model if d_ff is None else d_ff
    assert (ffn.d_model, ffn.d_ff) == (d_model, d_ff)
    # row-vector convention: W_1 = up_proj.weight.T is (d_model, d_ff)
    W_1, W_2 = ffn.up_proj.weight.detach().T, ffn.down_proj.weight.detach().T
    assert W_1.shape == (d_model, d_ff)
    assert W_2.shape == (d_ff, d_model)
    b_1 = ffn.up_proj.bias.detach() if bias else torch.zeros(d_ff, dtype=DT)
    b_2 = ffn.down_proj.bias.detach() if bias else torch.zeros(d_model, dtype=DT)
    assert (ffn.up_proj.bias is None, ffn.down_proj.bias is None) == (not bias, not bias)
    act = gelu_by_formula if activation == "gelu" else (lambda z: torch.clamp(z, min=0))
    x = rand(gen, 2, 7, d_model)
    expected = act(x @ W_1 + b_1) @ W_2 + b_2
    out = ffn(x)
    assert out.shape == x.shape
    assert_close(out, expected)


def test_feed_forward_default_width_and_names():
    ffn = FeedForward(10)
    assert ffn.d_ff == 40
    assert ffn.up_proj.weight.shape == (40, 10)  # nn.Linear stores (out, in)
    assert ffn.down_proj.weight.shape == (10, 40)
    assert isinstance(ffn.act, nn.GELU)
    assert isinstance(FeedForward(10, activation="relu").act, nn.ReLU)
    assert sorted(n for n, _ in ffn.named_parameters()) == [
        "down_proj.bias", "down_proj.weight", "up_proj.bias", "up_proj.weight"
    ]


def test_feed_forward_relu_is_really_relu(gen):
    """relu and gelu differ (so the activation argument is not ignored)."""
    ffn = randomize_(FeedForward(4, 8, "relu").to(DT), gen)
    x = rand(gen, 6, 4)
    relu_out = ffn(x)
    ffn.act = nn.GELU()
    assert not torch.allclose(relu_out, ffn(x))


def test_feed_forward_is_position_wise(gen):
    """Permuting positions permutes the outputs, and the Jacobian has no cross-position blocks."""
    T, d_model = 6, 4
    ffn = randomize_(FeedForward(d_model, 12).to(DT), gen)
    x = rand(gen, 2, T, d_model)
    perm = torch.randperm(T, generator=gen)
    assert_close(ffn(x[:, perm]), ffn(x)[:, perm])

    J = torch.autograd.functional.jacobian(ffn, x[0])  # (T, d_model, T, d_model)
    assert J.shape == (T, d_model, T, d_model)
    for i in range(T):
        for j in range(T):
            block = J[i, :, j, :]
            if i == j:
                assert block.abs().max() > 1e-3  # the own token matters
            else:
                assert torch.equal(block, torch.zeros_like(block))


# --------------------------------------------------------------------------------------------
# TransformerBlock against the by-hand block
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    ("d_model", "n_heads", "d_ff", "shape"),
    [
        (12, 3, None, (2, 5)),
        (8, 1, 20, (3, 4)),
        (16, 4, 7, (1, 9)),
        (6, 6, None, (2, 3)),
        (12, 2, None, (2, 3, 4)),  # extra leading batch dimension
        (8, 2, None, (2, 1)),  # T = 1
        (8, 2, None, (6,)),  # no batch dimension at all
    ],
    ids=["basic", "one-head", "dff!=4d", "dhead=1", "4d-input", "T=1", "unbatched"],
)
def test_block_matches_by_hand(gen, norm, causal, d_model, n_heads, d_ff, shape):
    block = make_block(gen, d_model, n_heads, d_ff, norm, causal)
    assert block.ln_1.weight.detach().std() > 0.1  # the gains really are non-trivial
    x = rand(gen, *shape, d_model)
    out = block(x)
    assert out.shape == x.shape
    assert out.dtype == DT
    with torch.no_grad():
        expected = ref_block(block, x, norm, causal)
    assert_close(out, expected)


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("causal", [True, False])
def test_block_float32(gen, norm, causal):
    block = make_block(gen, 16, 4, None, norm, causal, dtype=torch.float32)
    x = rand(gen, 2, 6, 16, dtype=torch.float32)
    out = block(x)
    assert out.dtype == torch.float32
    with torch.no_grad():
        assert_close(out, ref_block(block, x, norm, causal))


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("causal", [True, False])
def test_block_without_residual(gen, norm, causal):
    block = make_block(gen, 12, 3, None, norm, causal, residual=False)
    x = rand(gen, 2, 5, 12)
    with torch.no_grad():
        out = block(x)
        assert_close(out, ref_block(block, x, norm, causal, residual=False))
        # and it really differs from the block with residuals on the same weights
        assert not torch.allclose(out, ref_block(block, x, norm, causal, residual=True))


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_relu_and_no_bias(gen, norm):
    block = make_block(gen, 8, 2, 24, norm, True, activation="relu", bias=False)
    assert all(m.bias is None for m in block.modules() if isinstance(m, nn.Linear))
    x = rand(gen, 2, 5, 8)
    with torch.no_grad():
        out = block(x)
        assert_close(out, ref_block(block, x, norm, True, activation="relu"))
        assert not torch.allclose(out, ref_block(block, x, norm, True, activation="gelu"))


@pytest.mark.parametrize("eps", [1e-5, 0.25])
def test_block_eps_reaches_both_norms(gen, eps):
    block = make_block(gen, 8, 2, eps=eps)
    assert block.ln_1.eps == eps
    assert block.ln_2.eps == eps
    x = rand(gen, 2, 4, 8) * 0.1  # small inputs, so that a large eps matters
    with torch.no_grad():
        assert_close(block(x), ref_block(block, x, "pre", True))


def test_block_default_arguments():
    block = TransformerBlock(16, 4)
    assert block.norm == "pre"
    assert block.residual is True
    assert block.attn.causal is True
    assert block.ffn.d_ff == 64
    assert isinstance(block.ffn.act, nn.GELU)
    assert block.ln_1.eps == block.ln_2.eps == 1e-5
    assert isinstance(block.ln_1, LayerNorm)
    assert isinstance(block.attn, MultiHeadAttention)  # chapter 2's attention, not a second copy
    assert block.d_model == 16
    assert list(dict(block.named_children())) == ["ln_1", "attn", "ln_2", "ffn"]


# --------------------------------------------------------------------------------------------
# Masks, causality
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("causal", [True, False])
def test_block_passes_a_padding_mask_on(gen, norm, causal):
    """Right padding: keys past each sequence's length are masked out for every query."""
    B, T, d_model = 3, 6, 8
    block = make_block(gen, d_model, 2, None, norm, causal)
    lengths = torch.tensor([6, 4, 1])
    keep = torch.arange(T)[None, :] < lengths[:, None]  # (B, T), True = real token
    mask = keep[:, None, None, :]  # (B, 1, 1, T): broadcasts over heads and queries
    x = rand(gen, B, T, d_model)
    with torch.no_grad():
        out = block(x, mask)
        assert_close(out, ref_block(block, x, norm, causal, mask))
        # the mask matters: without it the shorter sequences' outputs change
        assert not torch.allclose(out, block(x))
        # and a real token's output does not depend on what sits in the padding
        x2 = x.clone()
        x2[~keep] = 50 * rand(gen, int((~keep).sum()), d_model)
        assert_close(block(x2, mask)[keep], out[keep])


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_left_padding_matches_by_hand(gen, norm):
    """Left padding under the causal mask leaves pad queries with no allowed key; the block stays
    finite and agrees with the reference (torch gives such rows a zero attention output)."""
    B, T, d_model = 2, 5, 8
    block = make_block(gen, d_model, 2, None, norm, True)
    keep = torch.stack([torch.arange(T) >= T - n for n in (5, 2)])  # (B, T)
    mask = keep[:, None, None, :]
    x = rand(gen, B, T, d_model).requires_grad_()
    out = block(x, mask)
    assert torch.isfinite(out).all()
    with torch.no_grad():
        assert_close(out, ref_block(block, x, norm, True, mask))
    out[keep].sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_is_causal(gen, norm):
    T, d_model = 7, 8
    block = make_block(gen, d_model, 2, None, norm, True)
    x = rand(gen, 2, T, d_model)
    with torch.no_grad():
        out = block(x)
        for i in range(T - 1):
            x2 = x.clone()
            x2[:, i + 1:] = 10 * rand(gen, 2, T - i - 1, d_model)
            out2 = block(x2)
            assert_close(out2[:, : i + 1], out[:, : i + 1], rtol=0, atol=1e-12)
            assert not torch.allclose(out2[:, i + 1:], out[:, i + 1:])


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_causal_jacobian_is_block_lower_triangular(gen, norm):
    T, d_model = 5, 4
    block = make_block(gen, d_model, 2, None, norm, True)
    J = torch.autograd.functional.jacobian(block, rand(gen, T, d_model))  # (T, d, T, d)
    size = J.abs().sum(dim=(1, 3))  # (T, T): how much output i depends on input j
    assert torch.equal(size.triu(1), torch.zeros(T, T, dtype=DT))
    assert (size[tril_by_definition(T)] > 1e-6).all()


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_non_causal_block_sees_the_future(gen, norm):
    """The counterpart of the causality test, so that it can fail: without the causal mask,
    changing the last token changes the first token's output."""
    block = make_block(gen, 8, 2, None, norm, False)
    x = rand(gen, 1, 5, 8)
    x2 = x.clone()
    x2[:, -1] += 3 * rand(gen, 1, 8)  # not a constant shift, which layer norm would remove
    with torch.no_grad():
        assert not torch.allclose(block(x)[:, 0], block(x2)[:, 0])


def test_block_mask_errors_come_from_attention(gen):
    block = make_block(gen, 8, 2)
    x = rand(gen, 2, 5, 8)
    with pytest.raises(TypeError, match=r"^mask must be a boolean tensor"):
        block(x, torch.ones(5, 5))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 4\) does not broadcast"):
        block(x, torch.ones(4, 4, dtype=torch.bool))


# --------------------------------------------------------------------------------------------
# Gradients
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("init", ["default", "random"])
def test_gradients_reach_every_parameter(gen, norm, causal, init):
    block = TransformerBlock(8, 2, None, norm, causal).to(DT)
    if init == "random":
        randomize_(block, gen)
    x = rand(gen, 2, 5, 8).requires_grad_()
    (block(x) * rand(gen, 2, 5, 8)).sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().max() > 0
    for name, p in block.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        if name == "attn.k_proj.bias":
            # adding b_K to every key adds q·b_K to a whole row of scores, which the softmax
            # ignores: this gradient is zero, which checks the by-hand argument in the chapter
            assert p.grad.abs().max() < 1e-12, name
        else:
            assert (p.grad != 0).all(), name


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_gradients_match_by_hand(gen, norm):
    block = make_block(gen, 8, 2, 12, norm, True)
    x1 = rand(gen, 2, 4, 8).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    upstream = rand(gen, 2, 4, 8)
    (block(x1) * upstream).sum().backward()
    ours = {n: p.grad.clone() for n, p in block.named_parameters()}
    block.zero_grad()
    (ref_block(block, x2, norm, True) * upstream).sum().backward()
    assert_close(x1.grad, x2.grad)
    for n, p in block.named_parameters():
        assert_close(ours[n], p.grad, msg=n)


# --------------------------------------------------------------------------------------------
# TransformerStack
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("n_layer", [1, 3])
def test_stack_stream_and_output(gen, norm, n_layer):
    stack = randomize_(TransformerStack(n_layer, 8, 2, None, norm).to(DT), gen)
    assert len(stack.blocks) == n_layer
    assert all(isinstance(b, TransformerBlock) and b.norm == norm for b in stack.blocks)
    x = rand(gen, 2, 5, 8)
    with torch.no_grad():
        out, stream = stack(x, return_stream=True)
        assert len(stream) == n_layer + 1
        assert torch.equal(stream[0], x)
        h = x
        for i, block in enumerate(stack.blocks):
            h = ref_block(block, h, norm, True)
            assert_close(stream[i + 1], h)
        if norm == "pre":  # default: a final layer norm, after the last stream state
            assert isinstance(stack.ln_f, LayerNorm)
            assert_close(out, ref_ln(stack.ln_f, h))
        else:  # default: none, the stream is normalised already
            assert isinstance(stack.ln_f, nn.Identity)
            assert torch.equal(out, stream[-1])
        assert_close(stack(x), out)  # return_stream=False gives the output alone


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("final_norm", [True, False])
def test_stack_final_norm_override(gen, norm, final_norm):
    stack = randomize_(TransformerStack(2, 8, 2, norm=norm, final_norm=final_norm).to(DT), gen)
    assert isinstance(stack.ln_f, LayerNorm if final_norm else nn.Identity)
    x = rand(gen, 1, 4, 8)
    with torch.no_grad():
        out, stream = stack(x, return_stream=True)
        expected = ref_ln(stack.ln_f, stream[-1]) if final_norm else stream[-1]
        assert_close(out, expected)


def test_stack_passes_mask_and_block_kwargs(gen):
    stack = randomize_(
        TransformerStack(2, 8, 2, 16, "pre", False, bias=False, activation="relu", eps=1e-3).to(DT), gen
    )
    for block in stack.blocks:
        assert block.ffn.d_ff == 16
        assert block.attn.causal is False
        assert isinstance(block.ffn.act, nn.ReLU)
        assert block.ln_1.eps == block.ln_2.eps == 1e-3
        assert all(m.bias is None for m in block.modules() if isinstance(m, nn.Linear))
    mask = torch.tensor([True, True, True, False, False])[None, None, None, :]
    x = rand(gen, 1, 5, 8)
    with torch.no_grad():
        out, stream = stack(x, mask, return_stream=True)
        h = x
        for block in stack.blocks:
            h = ref_block(block, h, "pre", False, mask, activation="relu")
        assert_close(stream[-1], h)
        assert_close(out, F.layer_norm(h, (8,), stack.ln_f.weight, stack.ln_f.bias, 1e-3))
    assert stack.ln_f.eps == 1e-3  # the final norm uses the blocks' eps too


def test_stack_blocks_are_independent(gen):
    """n_layer separate blocks, not one block repeated."""
    stack = TransformerStack(3, 8, 2)
    ids = {id(p) for b in stack.blocks for p in b.parameters()}
    assert len(ids) == 3 * len(list(stack.blocks[0].parameters()))
    assert not torch.equal(stack.blocks[0].attn.q_proj.weight, stack.blocks[1].attn.q_proj.weight)


def test_stream_rms(gen):
    x = rand(gen, 3, 4, 5)
    assert stream_rms(x) == pytest.approx(math.sqrt(float((x**2).sum()) / x.numel()), rel=1e-12)
    assert isinstance(stream_rms(x), float)
    assert stream_rms(torch.full((2, 3), -2.0, requires_grad=True)) == pytest.approx(2.0)


# --------------------------------------------------------------------------------------------
# init_gpt2_ and residual_writers
# --------------------------------------------------------------------------------------------


def test_residual_writers_are_o_proj_and_down_proj():
    stack = TransformerStack(3, 8, 2)
    writers = residual_writers(stack)
    expected = [m for b in stack.blocks for m in (b.attn.o_proj, b.ffn.down_proj)]
    assert len(writers) == 2 * 3
    assert len(writers) == len(expected)
    assert all(w is e for w, e in zip(writers, expected, strict=True))
    block = TransformerBlock(8, 2)
    assert [id(m) for m in residual_writers(block)] == [id(block.attn.o_proj), id(block.ffn.down_proj)]


def _sample_std(t: torch.Tensor) -> float:
    return float(t.detach().to(DT).std())


@pytest.mark.parametrize("n_layer", [None, 1, 12])
def test_init_gpt2(n_layer):
    """Linear weights std 0.02 (residual writers 0.02/√(2·n_layer) when n_layer is given), biases 0,
    norms at gain 1 and bias 0. With 256² ≥ 65,536 samples per matrix the sample standard deviation
    is within ~0.3% of the truth (one standard error); 5% is some 18 standard errors: cannot flake."""
    torch.manual_seed(0)
    d = 256
    stack = TransformerStack(2, d, 4)
    randomize_(stack, torch.Generator().manual_seed(1))  # start from non-GPT-2 values everywhere
    assert init_gpt2_(stack, n_layer) is stack
    writers = {id(m) for m in residual_writers(stack)}
    writer_std = 0.02 if n_layer is None else 0.02 / math.sqrt(2 * n_layer)
    for name, m in stack.named_modules():
        if isinstance(m, nn.Linear):
            want = writer_std if id(m) in writers else 0.02
            assert _sample_std(m.weight) == pytest.approx(want, rel=0.05), name
            assert abs(float(m.weight.detach().mean())) < want * 0.05, name
            assert torch.equal(m.bias.detach(), torch.zeros_like(m.bias)), name
        elif isinstance(m, LayerNorm):
            assert torch.equal(m.weight.detach(), torch.ones(d)), name
            assert torch.equal(m.bias.detach(), torch.zeros(d)), name


def test_init_gpt2_bad_n_layer_changes_nothing(gen):
    block = randomize_(TransformerBlock(8, 2), gen)
    before = {n: p.detach().clone() for n, p in block.named_parameters()}
    with pytest.raises(ValueError, match=r"^n_layer must be at least 1"):
        init_gpt2_(block, n_layer=0)
    assert all(torch.equal(p, before[n]) for n, p in block.named_parameters())


def test_init_gpt2_custom_std_and_other_modules():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(300, 300, bias=False), RMSNorm(300), nn.LayerNorm(300))
    with torch.no_grad():
        model[1].weight.fill_(3.0)
        model[2].weight.fill_(3.0)
        model[2].bias.fill_(3.0)
    init_gpt2_(model, std=0.1)
    assert _sample_std(model[0].weight) == pytest.approx(0.1, rel=0.05)
    assert torch.equal(model[1].weight.detach(), torch.ones(300))
    assert torch.equal(model[2].weight.detach(), torch.ones(300))
    assert torch.equal(model[2].bias.detach(), torch.zeros(300))


def test_init_gpt2_keeps_the_stream_from_growing():
    """The point of the scaling, measured: the stream's growth over a deep pre-norm stack is smaller
    with the residual writers scaled down."""
    torch.manual_seed(0)
    n_layer, d = 8, 64
    x = torch.randn(4, 16, d)
    growth = {}
    for scaled in (False, True):
        stack = init_gpt2_(TransformerStack(n_layer, d, 4), n_layer if scaled else None)
        with torch.no_grad():
            _, stream = stack(x, return_stream=True)
        growth[scaled] = stream_rms(stream[-1] - stream[0])
    assert growth[True] < 0.5 * growth[False]


# --------------------------------------------------------------------------------------------
# Parameter count
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("d_model", "n_heads", "d_ff"), [(8, 2, None), (8, 2, 5), (12, 3, 100), (64, 4, None), (6, 1, 6), (1, 1, 1)]
)
@pytest.mark.parametrize("bias", [True, False])
def test_block_param_count_matches_the_module(d_model, n_heads, d_ff, bias):
    block = TransformerBlock(d_model, n_heads, d_ff, bias=bias)
    linears = [m for m in block.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 6  # q, k, v, o, up, down
    assert all((lin.bias is not None) == bias for lin in linears)
    assert block_param_count(d_model, d_ff, bias) == sum(p.numel() for p in block.parameters())


@pytest.mark.parametrize("d", [1, 2, 64, 128, 768, 1024, 1600])
def test_block_param_count_closed_form(d):
    """12·d² from the matrices, 13·d from the biases (9·d) and the two layer norms (4·d)."""
    assert block_param_count(d) == 12 * d * d + 13 * d
    assert block_param_count(d, bias=False) == 12 * d * d + 4 * d


def test_block_param_count_gpt2_small():
    assert block_param_count(768) == 7_087_872
    assert sum(p.numel() for p in TransformerBlock(768, 12).parameters()) == 7_087_872
    assert block_param_count(np.int64(768), np.int64(3072)) == 7_087_872


# --------------------------------------------------------------------------------------------
# Bad input: clear errors naming the argument
# --------------------------------------------------------------------------------------------

X8 = torch.zeros(2, 3, 8)

BAD_CALLS = {
    "block-unknown-norm": (lambda: TransformerBlock(8, 2, norm="sandwich"), ValueError, r"^norm must be"),
    "block-norm-None": (lambda: TransformerBlock(8, 2, norm=None), ValueError, r"^norm must be"),
    "block-norm-Pre": (lambda: TransformerBlock(8, 2, norm="Pre"), ValueError, r"^norm must be.*'Pre'"),
    "block-d_model%n_heads": (lambda: TransformerBlock(10, 4), ValueError, r"d_model \(10\).*n_heads \(4\)"),
    "block-d_model-0": (lambda: TransformerBlock(0, 1), ValueError, r"^d_model must be at least 1"),
    "block-d_model-float": (lambda: TransformerBlock(8.0, 2), TypeError, r"^d_model must be an integer"),
    "block-n_heads-0": (lambda: TransformerBlock(8, 0), ValueError, r"^n_heads must be at least 1"),
    "block-d_ff-0": (lambda: TransformerBlock(8, 2, 0), ValueError, r"^d_ff must be at least 1"),
    "block-d_ff-negative": (lambda: TransformerBlock(8, 2, -4), ValueError, r"^d_ff must be at least 1"),
    "block-residual-int": (lambda: TransformerBlock(8, 2, residual=1), TypeError, r"^residual must be True or False"),
    "block-residual-str": (
        lambda: TransformerBlock(8, 2, residual="no"), TypeError, r"^residual must be True or False"
    ),
    "block-causal-str": (lambda: TransformerBlock(8, 2, causal="yes"), TypeError, r"^causal must be True or False"),
    "block-activation": (lambda: TransformerBlock(8, 2, activation="tanh"), ValueError, r"^activation must be one of"),
    "block-eps-0": (lambda: TransformerBlock(8, 2, eps=0), ValueError, r"^eps must be a positive number"),
    "block-x-last-dim": (lambda: TransformerBlock(8, 2)(torch.zeros(2, 3, 6)), ValueError, r"^x must have last dim"),
    "block-x-list": (lambda: TransformerBlock(8, 2)([[0.0] * 8]), TypeError, r"^x must be a torch.Tensor"),
    "block-x-int": (
        lambda: TransformerBlock(8, 2)(torch.zeros(2, 3, 8, dtype=torch.long)), TypeError, r"^x must be a floating"
    ),
    "block-x-0d": (lambda: TransformerBlock(8, 2)(torch.tensor(1.0)), ValueError, r"^x must"),
    "ln-x-last-dim": (lambda: LayerNorm(8)(torch.zeros(3, 7)), ValueError, r"^x must have last dimension 8"),
    "ln-x-list": (lambda: LayerNorm(8)([0.0] * 8), TypeError, r"^x must be a torch.Tensor"),
    "ln-x-int": (lambda: LayerNorm(8)(torch.zeros(3, 8, dtype=torch.int32)), TypeError, r"^x must be a floating"),
    "ln-eps-0": (lambda: LayerNorm(8, eps=0), ValueError, r"^eps must be a positive number"),
    "ln-eps-negative": (lambda: LayerNorm(8, eps=-1e-5), ValueError, r"^eps must be a positive number"),
    "ln-eps-nan": (lambda: LayerNorm(8, eps=float("nan")), ValueError, r"^eps must be a positive number"),
    "ln-eps-inf": (lambda: LayerNorm(8, eps=float("inf")), ValueError, r"^eps must be a positive number"),
    "ln-eps-str": (lambda: LayerNorm(8, eps="1e-5"), TypeError, r"^eps must be a number"),
    "ln-eps-bool": (lambda: LayerNorm(8, eps=True), TypeError, r"^eps must be a number"),
    "ln-d-0": (lambda: LayerNorm(0), ValueError, r"^d must be at least 1"),
    "ln-d-float": (lambda: LayerNorm(8.0), TypeError, r"^d must be an integer"),
    "rms-x-last-dim": (lambda: RMSNorm(8)(torch.zeros(3, 9)), ValueError, r"^x must have last dimension 8"),
    "rms-x-list": (lambda: RMSNorm(8)([0.0] * 8), TypeError, r"^x must be a torch.Tensor"),
    "rms-x-int": (lambda: RMSNorm(8)(torch.zeros(8, dtype=torch.long)), TypeError, r"^x must be a floating"),
    "rms-eps-0": (lambda: RMSNorm(8, eps=0.0), ValueError, r"^eps must be a positive number"),
    "rms-eps-nan": (lambda: RMSNorm(8, eps=float("nan")), ValueError, r"^eps must be a positive number"),
    "ffn-x-last-dim": (lambda: FeedForward(8)(torch.zeros(2, 3, 4)), ValueError, r"^x must have last dimension 8"),
    "ffn-x-list": (lambda: FeedForward(8)([0.0] * 8), TypeError, r"^x must be a torch.Tensor"),
    "ffn-x-int": (lambda: FeedForward(8)(torch.zeros(2, 8, dtype=torch.long)), TypeError, r"^x must be a floating"),
    "ffn-activation": (lambda: FeedForward(8, activation="swish"), ValueError, r"^activation must be one of"),
    "ffn-activation-case": (lambda: FeedForward(8, activation="GELU"), ValueError, r"^activation must be one of"),
    "ffn-d_ff-0": (lambda: FeedForward(8, 0), ValueError, r"^d_ff must be at least 1"),
    "ffn-d_ff-float": (lambda: FeedForward(8, 32.0), TypeError, r"^d_ff must be an integer"),
    "ffn-d_model-0": (lambda: FeedForward(0), ValueError, r"^d_model must be at least 1"),
    "stack-n_layer-0": (lambda: TransformerStack(0, 8, 2), ValueError, r"^n_layer must be at least 1"),
    "stack-n_layer-float": (lambda: TransformerStack(2.0, 8, 2), TypeError, r"^n_layer must be an integer"),
    "stack-unknown-norm": (lambda: TransformerStack(2, 8, 2, norm="mid"), ValueError, r"^norm must be"),
    "stack-d_model%n_heads": (lambda: TransformerStack(2, 9, 2), ValueError, r"d_model \(9\).*n_heads \(2\)"),
    "stack-x-last-dim": (lambda: TransformerStack(2, 8, 2)(torch.zeros(1, 3, 4)), ValueError, r"^x must have last"),
    "init-n_layer-0": (lambda: init_gpt2_(TransformerBlock(8, 2), n_layer=0), ValueError, r"^n_layer must be at"),
    "init-n_layer-float": (lambda: init_gpt2_(TransformerBlock(8, 2), 2.5), TypeError, r"^n_layer must be an int"),
    "count-d_model-0": (lambda: block_param_count(0), ValueError, r"^d_model must be at least 1"),
    "count-d_ff-0": (lambda: block_param_count(8, 0), ValueError, r"^d_ff must be at least 1"),
    "count-d_model-float": (lambda: block_param_count(8.0), TypeError, r"^d_model must be an integer"),
}


@pytest.mark.parametrize(("call", "exc", "pattern"), BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_inputs_raise_clear_errors(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_error_names_the_expected_and_given_shape():
    with pytest.raises(ValueError, match=r"last dimension 8, got shape \(2, 3, 6\)"):
        TransformerBlock(8, 2)(torch.zeros(2, 3, 6))


def test_numpy_integers_are_integers(gen):
    block = TransformerBlock(np.int64(8), np.int64(2), np.int32(16))
    assert block.d_model == 8 and type(block.d_model) is int
    assert block.ffn.d_ff == 16 and type(block.ffn.d_ff) is int
    assert len(TransformerStack(np.int64(2), 8, 2).blocks) == 2
    assert LayerNorm(np.int64(4)).d == 4
    assert LayerNorm(4, eps=np.float64(1e-3)).eps == 1e-3


def test_reprs_show_width_and_eps():
    assert repr(LayerNorm(8, 1e-3)) == "LayerNorm(8, eps=0.001)"
    assert repr(RMSNorm(8)) == "RMSNorm(8, eps=1e-06)"


# --------------------------------------------------------------------------------------------
# Devices: the meta device has no data, and mixing a CPU tensor (a mask built on the wrong device)
# into a meta computation raises, just as CPU and GPU would. A real GPU test runs where there is one.
# --------------------------------------------------------------------------------------------

META = torch.device("meta")


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("causal", [True, False])
def test_block_and_stack_on_meta(norm, causal):
    x = torch.empty(2, 5, 8, device=META)
    block = TransformerBlock(8, 2, norm=norm, causal=causal).to(META)
    assert block(x).device == META
    assert block(x, torch.ones(2, 1, 1, 5, dtype=torch.bool, device=META)).device == META
    stack = TransformerStack(2, 8, 2, norm=norm, causal=causal).to(META)
    out, stream = stack(x, return_stream=True)
    assert out.device == META and all(s.device == META for s in stream)
    for m in (LayerNorm(8), RMSNorm(8), FeedForward(8)):
        assert m.to(META)(x).device == META


def test_block_mask_on_another_device_is_named():
    block = TransformerBlock(8, 2).to(META)
    with pytest.raises(ValueError, match=r"^mask is on device cpu"):
        block(torch.empty(2, 5, 8, device=META), torch.ones(5, 5, dtype=torch.bool))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_on_cuda_matches_cpu(gen, norm):
    cpu = make_block(gen, 16, 4, None, norm, True)
    x = rand(gen, 2, 6, 16)
    keep = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    keep[1, ..., 4:] = False
    gpu = TransformerBlock(16, 4, norm=norm).to("cuda", DT)
    gpu.load_state_dict(cpu.state_dict())
    with torch.no_grad():
        for mask in (None, keep):
            out = gpu(x.cuda(), None if mask is None else mask.cuda())
            assert out.device.type == "cuda"
            assert_close(out.cpu(), cpu(x, mask))
    stack = TransformerStack(2, 16, 4, norm=norm).to("cuda", DT)
    out, stream = stack(x.cuda(), return_stream=True)
    assert out.device.type == "cuda" and all(s.device.type == "cuda" for s in stream)


@pytest.mark.parametrize("make, error, message", [
    (lambda: FeedForward(8, bias="no"), TypeError, r"^bias must be True or False"),
    (lambda: FeedForward(8, activation=["gelu"]), ValueError, r"^activation must be one of"),
    (lambda: TransformerStack(2, 8, 2, final_norm="no"), TypeError, r"^final_norm must be True or False"),
    (lambda: block_param_count(8, bias=1), TypeError, r"^bias must be True or False"),
])
def test_flags_must_be_bools_and_names(make, error, message):
    with pytest.raises(error, match=message):
        make()
