"""Tests for Chapter 3's experiment scaffolding (tinyformer.experiments.ch03): taking a stack apart, the
regression task, and the measurements at initialisation. References are written out here from
the blocks' parts and torch primitives (autograd, torch.func, NumPy's least squares, closed
forms), never outputs of the code under test."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.testing import assert_close

from tinyformer.attention import MultiHeadAttention
from tinyformer.blocks import LayerNorm, TransformerBlock, TransformerStack
from tinyformer.experiments.ch03 import (
    ZeroSublayer,
    absolute_value_batch,
    affine_floor,
    attend_with_weights,
    block_grad_norms,
    block_jacobians,
    position_cosine,
    remove_norms_,
    remove_sublayer_,
    stream_grad_norms,
    sublayer_output_rms,
    sublayer_writes,
    train_regression,
)


def stack(n_layer=2, d_model=8, n_heads=2, **kw) -> TransformerStack:
    torch.manual_seed(0)
    return TransformerStack(n_layer, d_model, n_heads, **kw).double()


def x_input(B=2, T=5, d=8, seed=1) -> torch.Tensor:
    return torch.randn(B, T, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --------------------------------------------------------------------------------------------
# taking a stack apart
# --------------------------------------------------------------------------------------------


def test_zero_sublayer_returns_zeros_like_its_input():
    x = x_input()
    out = ZeroSublayer()(x, mask=torch.ones(5, 5, dtype=torch.bool))
    assert out.shape == x.shape and out.dtype == x.dtype and not out.any()


def test_remove_norms_leaves_x_plus_attention_plus_ffn():
    s = remove_norms_(stack())
    assert not any(isinstance(m, (LayerNorm, nn.LayerNorm)) for m in s.modules())
    x = x_input()
    expected = x
    for b in s.blocks:                                  # pre-norm without norms, by hand
        expected = expected + b.attn(expected)
        expected = expected + b.ffn(expected)
    assert_close(s(x), expected)


def test_remove_norms_of_a_post_norm_block():
    torch.manual_seed(0)
    block = remove_norms_(TransformerBlock(8, 2, norm="post").double())
    x = x_input()
    h = x + block.attn(x)
    assert_close(block(x), h + block.ffn(h))


def test_remove_attention_leaves_positions_apart():
    s = remove_sublayer_(stack(), "attn")
    assert all(isinstance(b.attn, ZeroSublayer) for b in s.blocks)
    x = x_input()
    expected = x
    for b in s.blocks:
        expected = expected + b.ffn(b.ln_2(expected))
    expected = s.ln_f(expected)
    assert_close(s(x), expected)
    # changing one position changes no other position's output
    x2 = x.clone()
    x2[:, 2] += 1.0
    diff = (s(x2) - s(x)).abs().amax(dim=(0, 2))
    assert diff[2] > 0 and torch.count_nonzero(diff) == 1


def test_remove_ffn_leaves_attention_only():
    s = remove_norms_(remove_sublayer_(stack(), "ffn"))
    x = x_input()
    expected = x
    for b in s.blocks:
        expected = expected + b.attn(expected)
    assert_close(s(x), expected)


@pytest.mark.parametrize(("fn", "args", "error", "match"), [
    (remove_sublayer_, ("mlp",), ValueError, "name must be one of"),
    (remove_norms_, (), TypeError, "torch.nn.Module"),
])
def test_taking_apart_rejects_bad_input(fn, args, error, match):
    target = stack() if fn is remove_sublayer_ else "not a module"
    with pytest.raises(error, match=match):
        fn(target, *args)


def test_a_module_without_blocks_is_refused():
    with pytest.raises(ValueError, match="no TransformerBlock"):
        remove_norms_(nn.Linear(3, 3))


# --------------------------------------------------------------------------------------------
# the regression task
# --------------------------------------------------------------------------------------------


def test_absolute_value_batch():
    x, y = absolute_value_batch(torch.Generator().manual_seed(0), 3, 4, 5)
    assert x.shape == y.shape == (3, 4, 5)
    assert torch.equal(y, torch.where(x < 0, -x, x))
    x2, _ = absolute_value_batch(torch.Generator().manual_seed(0), 3, 4, 5)
    assert torch.equal(x, x2)
    with pytest.raises(ValueError, match="T must be at least 1"):
        absolute_value_batch(torch.Generator(), 3, 0, 5)


def test_train_regression_fits_a_linear_map():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    A = torch.tensor([[1.0, -2.0], [0.5, 0.0], [0.0, 3.0]])

    def batch(gen):
        x = torch.randn(32, 3, generator=gen)
        return x, x @ A + 1.0

    losses = train_regression(model, batch, steps=300, lr=0.05)
    assert len(losses) == 300 and losses[-1] < 1e-3 < losses[0]
    assert_close(model.weight.detach().T, A, atol=0.02, rtol=0)
    with pytest.raises(ValueError, match="lr must be a positive number"):
        train_regression(model, batch, steps=1, lr=0)
    with pytest.raises(ValueError, match="steps must be at least 0"):
        train_regression(model, batch, steps=-1)


def test_affine_floor_matches_numpy_and_the_closed_form():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(20000, 3, generator=gen, dtype=torch.float64)
    y = torch.cat([x.abs(), 2 * x[:, :1] - 1], dim=1)        # |x| and an exactly affine column
    X1 = np.concatenate([x.numpy(), np.ones((len(x), 1))], axis=1)
    coef, *_ = np.linalg.lstsq(X1, y.numpy(), rcond=None)
    expected = float(((X1 @ coef - y.numpy()) ** 2).mean())
    assert affine_floor(x, y) == pytest.approx(expected, rel=1e-9)
    # per |x| column the floor is Var|x| = 1 - 2/pi for a standard normal; the affine column costs 0
    assert affine_floor(x, y[:, :3]) == pytest.approx(1 - 2 / math.pi, rel=0.03)
    assert affine_floor(x, y[:, 3:]) < 1e-20


@pytest.mark.parametrize(("x", "y", "match"), [
    (torch.zeros(4), torch.zeros(4, 1), "x must be a 2-D tensor"),
    (torch.zeros(4, 2), torch.zeros(5, 1), "same number of rows"),
    (torch.zeros(4, 2), [1, 2], "y must be a 2-D tensor"),
])
def test_affine_floor_rejects_bad_shapes(x, y, match):
    with pytest.raises(ValueError, match=match):
        affine_floor(x, y)


# --------------------------------------------------------------------------------------------
# measurements at initialisation
# --------------------------------------------------------------------------------------------


def _manual_grad_norms(s, x, seed, suffixes=None):
    g = torch.randn(s(x).shape, generator=torch.Generator().manual_seed(seed), dtype=x.dtype)
    params = [[(n, p) for n, p in b.named_parameters()
               if suffixes is None or any(n.endswith(k) for k in suffixes)] for b in s.blocks]
    flat = [p for block in params for _, p in block]
    grads = torch.autograd.grad((s(x) * g).sum(), flat)
    out, i = [], 0
    for block in params:
        out.append(math.sqrt(sum(float(grads[i + k].pow(2).sum()) for k in range(len(block)))))
        i += len(block)
    return out


def test_block_grad_norms_match_autograd():
    s, x = stack(n_layer=3), x_input()
    assert block_grad_norms(s, x, seed=3) == pytest.approx(_manual_grad_norms(s, x, 3), rel=1e-10)
    names = ("q_proj.weight", "k_proj.weight")
    assert block_grad_norms(s, x, seed=3, names=names) == pytest.approx(
        _manual_grad_norms(s, x, 3, names), rel=1e-10)
    assert all(p.grad is None for p in s.parameters())        # cleared afterwards


def test_block_jacobians_multiply_to_the_stacks_jacobian():
    s = stack(n_layer=3, d_model=4, n_heads=2)
    x = x_input(B=1, T=3, d=4)[0]                               # one sequence (T, d_model)
    jacs = block_jacobians(s, x)
    assert len(jacs) == 3 and all(j.shape == (12, 12) for j in jacs)

    def top_of_stream(z):
        for b in s.blocks:
            z = b(z)
        return z

    full = torch.autograd.functional.jacobian(top_of_stream, x).reshape(12, 12)
    assert_close(jacs[2] @ jacs[1] @ jacs[0], full)
    # without attention, no position's output depends on another position
    s_ffn = remove_sublayer_(stack(n_layer=1, d_model=4, n_heads=2), "attn")
    (j,) = block_jacobians(s_ffn, x)
    blocks = j.reshape(3, 4, 3, 4)
    for t in range(3):
        for u in range(3):
            assert (blocks[t, :, u].abs().sum() == 0) == (t != u)
    with pytest.raises(ValueError, match="one sequence"):
        block_jacobians(s, x[None])


def test_sublayer_output_rms_matches_a_manual_forward():
    s, x = stack(n_layer=2), x_input()
    sizes = sublayer_output_rms(s, x)
    expected = {"attn": [], "ffn": []}
    h = x
    for b in s.blocks:
        with torch.no_grad():
            a = b.attn(b.ln_1(h))
            h = h + a
            f = b.ffn(b.ln_2(h))
            h = h + f
        expected["attn"].append(float(a.pow(2).mean().sqrt()))
        expected["ffn"].append(float(f.pow(2).mean().sqrt()))
    assert sizes["attn"] == pytest.approx(expected["attn"], rel=1e-10)
    assert sizes["ffn"] == pytest.approx(expected["ffn"], rel=1e-10)
    assert not any(b.attn._forward_hooks or b.ffn._forward_hooks for b in s.blocks)


def test_sublayer_writes_sum_to_the_stream_of_a_pre_norm_stack():
    s, x = stack(n_layer=3), x_input()
    writes = sublayer_writes(s, x)
    assert writes.shape == (6, *x.shape)
    with torch.no_grad():
        _, stream = s(x, return_stream=True)
        b = s.blocks[1]
        a_1 = b.attn(b.ln_1(stream[1]))  # block 1's attention, by hand
    assert_close(x + writes.sum(dim=0), stream[-1])  # x_L = x_0 + all writes
    assert_close(writes[2], a_1)
    assert_close(writes[3], stream[2] - stream[1] - a_1)  # block 1's FFN
    assert not any(b.attn._forward_hooks or b.ffn._forward_hooks for b in s.blocks)
    with pytest.raises(TypeError):
        sublayer_writes("not a module", x)


def test_position_cosine():
    x = torch.randn(2, 4, 6, generator=torch.Generator().manual_seed(0))
    same = x[:, :1].expand(2, 4, 6)
    assert position_cosine(same) == pytest.approx(1.0)
    assert position_cosine(torch.eye(4)[None]) == pytest.approx(0.0)
    u = F.normalize(x.double(), dim=-1)
    pairs = [float(u[b, i] @ u[b, j]) for b in range(2) for i in range(4) for j in range(4) if i != j]
    assert position_cosine(x) == pytest.approx(sum(pairs) / len(pairs), rel=1e-10)
    with pytest.raises(ValueError, match="T >= 2"):
        position_cosine(torch.zeros(3, 1, 4))


def test_attend_with_weights_with_the_layers_own_weights_is_the_layer():
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4)
    x = torch.randn(2, 5, 16)
    out, weights = attn(x, return_weights=True)
    torch.testing.assert_close(attend_with_weights(attn, x, weights), out)


def test_attend_with_weights_uses_the_given_weights():
    """Uniform causal weights: each position's write is W_O applied to the mean of the values so far
    (computed here by SDPA with an all-zero score, i.e. a mask-only average)."""
    torch.manual_seed(1)
    attn = MultiHeadAttention(8, 2)
    x = torch.randn(3, 4, 8)
    T = x.shape[1]
    uniform = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    weights = uniform.expand(3, 2, T, T)
    v = attn.v_proj(x).view(3, T, 2, 4).transpose(1, 2)            # (B, H, T, d_head)
    q = torch.zeros_like(v)                                         # equal scores: a plain average
    avg = F.scaled_dot_product_attention(q, torch.zeros_like(v), v, is_causal=True)
    expected = attn.o_proj(avg.transpose(1, 2).reshape(3, T, 8))
    torch.testing.assert_close(attend_with_weights(attn, x, weights), expected)


def test_attend_with_weights_rejects_weights_of_the_wrong_shape():
    attn = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"weights must have shape \(B, n_heads, T, T\)"):
        attend_with_weights(attn, torch.randn(1, 4, 8), torch.ones(1, 4, 4))


def test_stream_grad_norms_match_autograd_on_the_input_and_the_top():
    torch.manual_seed(0)
    stack = TransformerStack(3, 8, 2).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    norms = stream_grad_norms(stack, x, seed=7)
    assert len(norms) == 4 and all(n.shape == (5,) for n in norms)
    x_in = x.clone().requires_grad_(True)
    out = stack(x_in)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=out.dtype)
    (grad_x,) = torch.autograd.grad((out * g).sum(), x_in)
    assert_close(norms[0], grad_x.pow(2).sum(dim=(0, 2)).sqrt())
    # the top of the stream feeds only ln_f: its gradient is ln_f's vector-Jacobian product with g
    top = stack(x, return_stream=True)[1][-1].detach().requires_grad_(True)
    (grad_top,) = torch.autograd.grad((stack.ln_f(top) * g).sum(), top)
    assert_close(norms[-1], grad_top.pow(2).sum(dim=(0, 2)).sqrt())
    assert all(p.grad is None for p in stack.parameters())


def test_scaled_norm_survives_a_gradient_that_squares_past_float64():
    from tinyformer.experiments.ch03 import scaled_norm

    gr = torch.full((8, 5, 64), 1e160, dtype=torch.float64)   # squared: 1e320, past float64's 1.8e308
    assert torch.isinf(gr.norm())
    assert_close(scaled_norm(gr, dim=(0, 2)), torch.full((5,), math.sqrt(8 * 64) * 1e160, dtype=torch.float64))
    assert math.isclose(scaled_norm(gr).item(), math.sqrt(8 * 5 * 64) * 1e160, rel_tol=1e-12)
    small = torch.randn(3, 4, dtype=torch.float64)
    assert_close(scaled_norm(small), torch.linalg.vector_norm(small))
    assert torch.equal(scaled_norm(torch.zeros(2, 3, dtype=torch.float64), dim=0), torch.zeros(3, dtype=torch.float64))
