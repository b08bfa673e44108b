"""The fused attention path (torch's scaled_dot_product_attention) against the
readable chapter 2 path: same outputs, same gradients, same handling of a
query row with no allowed key."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from tinyformer import attention
from tinyformer.attention import MultiHeadAttention, attend_heads
from tinyformer.blocks import TransformerBlock, TransformerStack

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5),
       torch.float64: dict(rtol=1e-12, atol=1e-12)}


def _pair(dtype, causal=True, rotary=False, bias=True, d_model=16,
          n_heads=4):
    """Two layers with the same weights, one readable and one fused."""
    torch.manual_seed(0)
    plain = MultiHeadAttention(d_model, n_heads, causal, bias=bias,
                               rotary=rotary).to(dtype)
    with torch.no_grad():   # non-zero biases, so they are tested too
        for p in plain.parameters():
            p.normal_(0, 0.3)
    fused = copy.deepcopy(plain)
    fused.fused = True
    return plain, fused


def _run(layer, x, **kwargs):
    x = x.detach().clone().requires_grad_()
    ctx = kwargs.pop("context", None)
    if ctx is not None:
        ctx = ctx.detach().clone().requires_grad_()
        kwargs["context"] = ctx
    out = layer(x, **kwargs)
    # a random cotangent, so every output element matters
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1),
                    dtype=out.dtype)
    (out * g).sum().backward()
    grads = {n: p.grad for n, p in layer.named_parameters()}
    grads["x"] = x.grad
    if ctx is not None:
        grads["context"] = ctx.grad
    return out, grads


def _assert_same(plain, fused, x, dtype, **kwargs):
    out_p, g_p = _run(plain, x, **kwargs)
    out_f, g_f = _run(fused, x, **kwargs)
    torch.testing.assert_close(out_f, out_p, **TOL[dtype])
    assert g_p.keys() == g_f.keys()
    for name in g_p:
        assert g_p[name] is not None, name
        torch.testing.assert_close(g_f[name], g_p[name], **TOL[dtype],
                                   msg=lambda m, n=name: f"{n}: {m}")
    return out_p, out_f, g_f


def _padding_mask(B, T):
    """(B, 1, 1, T) keys allowed; sequence 1 is left-padded by 3 tokens."""
    keep = torch.ones(B, T, dtype=torch.bool)
    keep[1, :3] = False
    return keep[:, None, None, :]


CASES = [
    dict(causal=True),
    dict(causal=False),
    dict(causal=True, rotary=True),
    dict(causal=False, rotary=True),
    dict(causal=True, bias=False),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_fused_equals_readable_outputs_and_gradients(case, dtype):
    plain, fused = _pair(dtype, **case)
    x = torch.randn(3, 7, 16, dtype=dtype)
    _assert_same(plain, fused, x, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [True, False])
def test_fused_with_a_padding_mask(causal, dtype):
    plain, fused = _pair(dtype, causal=causal)
    x = torch.randn(2, 6, 16, dtype=dtype)
    _assert_same(plain, fused, x, dtype, mask=_padding_mask(2, 6))


@pytest.mark.parametrize("shape", [(7, 16), (2, 3, 5, 16), (1, 1, 4, 16)])
def test_fused_with_other_batch_dims(shape):
    plain, fused = _pair(torch.float64, causal=True, rotary=True)
    _assert_same(plain, fused, torch.randn(shape, dtype=torch.float64),
                 torch.float64)


def test_fused_cross_attention():
    plain, fused = _pair(torch.float64, causal=False)
    x, ctx = torch.randn(2, 4, 16).double(), torch.randn(2, 9, 16).double()
    keys = torch.rand(2, 1, 1, 9) > 0.3
    _assert_same(plain, fused, x, torch.float64, context=ctx, mask=keys)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [True, False])
def test_all_masked_query_row_gives_zero_and_finite_gradients(causal,
                                                               dtype):
    """DESIGN §6: a query with no allowed key gets a zero output and finite
    gradients, on both paths. Without biases the layer's output is o_proj of
    the merged heads, so the row is exactly zero."""
    plain, fused = _pair(dtype, causal=causal, bias=False)
    T = 5
    mask = torch.ones(2, 1, T, T, dtype=torch.bool)
    mask[0, :, 2, :] = False          # query 2 of sequence 0 sees nothing
    mask[1, :, :, :] = False          # sequence 1 sees nothing at all
    x = torch.randn(2, T, 16, dtype=dtype)
    out_p, out_f, g_f = _assert_same(plain, fused, x, dtype, mask=mask)
    for out in (out_p, out_f):
        assert torch.all(out[0, 2] == 0) and torch.all(out[1] == 0)
        assert out[0, 3].abs().sum() > 0
    for name, g in g_f.items():
        assert torch.isfinite(g).all(), name


def test_fused_layer_really_calls_torch_kernel(monkeypatch):
    """Otherwise the equality tests above would compare a path with itself."""
    calls = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", spy)
    plain, fused = _pair(torch.float32)
    x = torch.randn(2, 5, 16)
    plain(x)
    assert calls == []
    fused(x)
    assert len(calls) == 1 and calls[0].get("is_causal") is True
    fused(x, mask=_padding_mask(2, 5))
    assert len(calls) == 2 and calls[1]["attn_mask"] is not None
    assert not calls[1].get("is_causal", False)


def test_fused_layer_returns_the_readable_weights_when_asked():
    plain, fused = _pair(torch.float64)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    out_p, w_p = plain(x, return_weights=True)
    out_f, w_f = fused(x, return_weights=True)
    torch.testing.assert_close(w_f, w_p, rtol=0, atol=0)
    torch.testing.assert_close(out_f, out_p, rtol=0, atol=0)


def test_attend_heads_fused_matches_and_has_no_weights():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 6, 8, dtype=torch.float64) for _ in range(3))
    scale = 0.37                         # a non-default scale is kept
    ref, w = attend_heads(q, k, v, 2, True, scale=scale)
    out, none = attend_heads(q, k, v, 2, True, scale=scale, fused=True)
    assert w is not None and none is None
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_fused_is_off_by_default_and_validated():
    assert MultiHeadAttention(8, 2).fused is False
    assert TransformerBlock(8, 2).attn.fused is False
    assert all(b.attn.fused for b in TransformerStack(2, 8, 2,
                                                      fused=True).blocks)
    with pytest.raises(TypeError, match="fused"):
        MultiHeadAttention(8, 2, fused=1)


# --- layer norm's fused path (the same flag, in blocks) -------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_layer_norm_equals_readable_and_torch(dtype):
    from tinyformer.blocks import LayerNorm

    torch.manual_seed(0)
    x = (torch.randn(3, 5, 12, dtype=dtype) * 4 + 2)
    g = torch.randn(3, 5, 12, dtype=dtype)
    results = []
    for make in (lambda: LayerNorm(12, 1e-3), lambda: LayerNorm(12, 1e-3, fused=True),
                 lambda: torch.nn.LayerNorm(12, eps=1e-3)):
        torch.manual_seed(1)
        ln = make().to(dtype)
        with torch.no_grad():
            ln.weight.normal_()
            ln.bias.normal_()
        xi = x.clone().requires_grad_()
        out = ln(xi)
        (out * g).sum().backward()
        results.append((out, xi.grad, ln.weight.grad, ln.bias.grad))
    for other in results[1:]:
        for a, b in zip(other, results[0]):
            torch.testing.assert_close(a, b, **TOL[dtype])
    assert LayerNorm(4).fused is False and "fused" not in repr(LayerNorm(4))
    with pytest.raises(TypeError, match="fused"):
        LayerNorm(4, fused="no")


def test_fused_flag_reaches_every_layer_norm():
    stack = TransformerStack(2, 8, 2, fused=True)
    norms = [m for m in stack.modules() if type(m).__name__ == "LayerNorm"]
    assert len(norms) == 5 and all(n.fused for n in norms)
    plain = TransformerStack(2, 8, 2)
    assert not any(getattr(m, "fused", False) for m in plain.modules())
