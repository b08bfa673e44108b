"""Chapter 3: the transformer block.

A block reads the **residual stream** ``x`` of shape ``(B, T, d_model)`` and
adds two things to it: what multi-head attention gathers from the other
positions, and what a position-wise feed-forward network computes from each
position on its own. Layer norm keeps the sublayers' inputs at a fixed scale; where it sits
("pre" or "post" the residual addition) is the block's ``norm`` argument.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from tinyformer.attention import MultiHeadAttention
from tinyformer.validation import _check_bool, _check_eps, _check_features, check_int

NORMS = ("pre", "post")
ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU}


class LayerNorm(nn.Module):
    """Layer norm over the last dimension, exactly as ``torch.nn.LayerNorm``.

    Each token's vector is shifted to mean 0 and scaled to variance 1 (the
    biased variance, with ``eps`` inside the square root), then multiplied by
    a learned gain (``weight``, ones at the start) and shifted by a learned
    ``bias`` (zeros at the start). ``fused=True`` computes the same with
    torch's one-kernel ``F.layer_norm`` (faster; chapter 5's model uses it).
    """

    def __init__(self, d: int, eps: float = 1e-5, fused: bool = False):
        super().__init__()
        self.d, self.eps = check_int("d", d), _check_eps(eps)
        self.fused = _check_bool("fused", fused)
        self.weight = nn.Parameter(torch.ones(d))   # the gain, γ
        self.bias = nn.Parameter(torch.zeros(d))    # β

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_features("x", x, self.d)
        if self.fused:
            return F.layer_norm(x, (self.d,), self.weight, self.bias,
                                self.eps)
        mean = x.mean(dim=-1, keepdim=True)                  # (..., 1)
        var = x.var(dim=-1, keepdim=True, unbiased=False)    # (..., 1)
        x_hat = (x - mean) / torch.sqrt(var + self.eps)      # (..., d)
        return x_hat * self.weight + self.bias

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}" + (", fused=True" * self.fused)


class RMSNorm(nn.Module):
    """Root-mean-square norm, as ``torch.nn.RMSNorm``: no mean is subtracted
    and there is no bias; each vector is divided by the root of its mean
    square (plus ``eps``) and multiplied by a learned gain."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.d, self.eps = check_int("d", d), _check_eps(eps)
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_features("x", x, self.d)
        ms = x.pow(2).mean(dim=-1, keepdim=True)             # (..., 1)
        return x * torch.rsqrt(ms + self.eps) * self.weight

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}"


class FeedForward(nn.Module):
    """The position-wise feed-forward network: ``act(x W_1 + b_1) W_2 + b_2``.

    ``up_proj`` widens each token's vector from ``d_model`` to ``d_ff``
    (4·d_model by default), the non-linearity acts on each of the ``d_ff``
    numbers, and ``down_proj`` maps back. No position sees another.
    """

    def __init__(self, d_model: int, d_ff: int | None = None,
                 activation: str = "gelu", bias: bool = True):
        super().__init__()
        d_model = check_int("d_model", d_model)
        d_ff = 4 * d_model if d_ff is None else check_int("d_ff", d_ff)
        _check_bool("bias", bias)
        if not isinstance(activation, str) or activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of "
                             f"{sorted(ACTIVATIONS)}, got {activation!r}")
        self.d_model, self.d_ff = d_model, d_ff
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)     # W_1, b_1
        self.act = ACTIVATIONS[activation]()
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)   # W_2, b_2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_features("x", x, self.d_model)
        return self.down_proj(self.act(self.up_proj(x)))


class TransformerBlock(nn.Module):
    """One transformer block: attention, then a feed-forward network, each
    added to the residual stream.

    ``norm="pre"`` (GPT-2 and most models since) normalises each sublayer's
    *input* and leaves the stream itself un-normalised::

        x = x + attn(ln_1(x));   x = x + ffn(ln_2(x))

    ``norm="post"`` (the original transformer) normalises *after* each
    addition, so the stream is re-normalised twice per block::

        x = ln_1(x + attn(x));   x = ln_2(x + ffn(x))

    ``residual=False`` drops the two additions (an experiment, not a model).
    ``rotary=True`` gives the attention rotary positions (chapter 4);
    ``fused=True`` lets attention and layer norm use torch's fused kernels
    (chapter 5); ``n_kv_heads`` makes the attention grouped-query
    (chapter 8).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None,
                 norm: str = "pre", causal: bool = True, *,
                 bias: bool = True, activation: str = "gelu",
                 residual: bool = True, eps: float = 1e-5,
                 rotary: bool = False, fused: bool = False,
                 n_kv_heads: int | None = None):
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"norm must be 'pre' or 'post', got {norm!r}")
        if not isinstance(residual, bool):
            raise TypeError(f"residual must be True or False, got "
                            f"{residual!r}")
        d_model = check_int("d_model", d_model)
        self.norm, self.residual = norm, residual
        self.ln_1 = LayerNorm(d_model, eps, fused)
        self.attn = MultiHeadAttention(d_model, n_heads, causal, bias=bias,
                                       rotary=rotary, fused=fused,
                                       n_kv_heads=n_kv_heads)
        self.ln_2 = LayerNorm(d_model, eps, fused)
        self.ffn = FeedForward(d_model, d_ff, activation, bias)
        self.d_model = self.attn.d_model

    def _add(self, x, update):
        return x + update if self.residual else update

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                cache=None) -> torch.Tensor:
        """x: ``(..., T, d_model)`` -> ``(..., T, d_model)``. ``mask``
        (boolean, True = may attend) and ``cache`` (this layer's
        ``kvcache.LayerCache``; x then holds only the new positions) are
        passed on to the attention."""
        _check_features("x", x, self.d_model)
        if self.norm == "pre":
            x = self._add(x, self._attend(self.ln_1(x), mask, cache))
            return self._add(x, self.ffn(self.ln_2(x)))
        x = self.ln_1(self._add(x, self._attend(x, mask, cache)))
        return self.ln_2(self._add(x, self.ffn(x)))

    def _attend(self, x, mask, cache):
        # cache= only when there is one: a sublayer swapped in for an
        # experiment need not know about caches
        if cache is None:
            return self.attn(x, mask)
        return self.attn(x, mask, cache=cache)


class TransformerStack(nn.Module):
    """``n_layer`` blocks on the residual stream, and a final layer norm
    (by default for pre-norm blocks, whose stream is never normalised
    otherwise; a post-norm stack ends normalised already)."""

    def __init__(self, n_layer: int, d_model: int, n_heads: int,
                 d_ff: int | None = None, norm: str = "pre",
                 causal: bool = True, final_norm: bool | None = None,
                 **block_kwargs):
        super().__init__()
        n_layer = check_int("n_layer", n_layer)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, norm, causal,
                             **block_kwargs)
            for _ in range(n_layer))
        if final_norm is not None:
            _check_bool("final_norm", final_norm)
        else:
            final_norm = norm == "pre"
        # the blocks' eps and kernel choice, here too
        eps = block_kwargs.get("eps", 1e-5)
        fused = block_kwargs.get("fused", False)
        self.ln_f = (LayerNorm(d_model, eps, fused) if final_norm
                     else nn.Identity())

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                return_stream: bool = False, cache=None):
        """x: ``(..., T, d_model)``. With ``return_stream=True`` also returns
        the list of ``n_layer + 1`` residual-stream states (the input, then
        the output of each block, before the final norm). ``cache`` (a
        ``kvcache.KVCache``) gives block ``i`` its layer ``cache[i]``."""
        if cache is not None and len(cache) != len(self.blocks):
            raise ValueError(f"the cache has {len(cache)} layers, the stack "
                             f"{len(self.blocks)} blocks")
        stream = [x]
        for i, block in enumerate(self.blocks):
            x = block(x, mask, None if cache is None else cache[i])
            stream.append(x)
        out = self.ln_f(x)
        return (out, stream) if return_stream else out


def residual_writers(module: nn.Module) -> list[nn.Linear]:
    """The linear maps that write into the residual stream: every
    attention's ``o_proj`` and every feed-forward network's ``down_proj``."""
    return [m.o_proj if isinstance(m, MultiHeadAttention) else m.down_proj
            for m in module.modules()
            if isinstance(m, (MultiHeadAttention, FeedForward))]


@torch.no_grad()
def init_gpt2_(module: nn.Module, n_layer: int | None = None,
               std: float = 0.02) -> nn.Module:
    """GPT-2's initialisation, in place: every linear weight ~ N(0, std²),
    biases 0, norms at gain 1 and bias 0. With ``n_layer`` given, the maps
    that write into the residual stream get std/√(2·n_layer) instead, so
    that the 2·n_layer additions do not grow the stream with depth."""
    if n_layer is not None:   # checked before anything is changed
        n_layer = check_int("n_layer", n_layer)
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (LayerNorm, RMSNorm, nn.LayerNorm)):
            nn.init.ones_(m.weight)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
    if n_layer is not None:
        for lin in residual_writers(module):
            nn.init.normal_(lin.weight, 0.0, std / math.sqrt(2 * n_layer))
    return module


def block_param_count(d_model: int, d_ff: int | None = None,
                      bias: bool = True, d_kv: int | None = None) -> int:
    """The parameters of one block, counted from its parts: four
    ``d_model × d_model`` projections, the two feed-forward maps, two layer
    norms (a gain and a bias each), and the biases if any. ``d_kv``
    (default ``d_model``) is the width of the key and value projections,
    ``n_kv_heads · d_head``, smaller with grouped-query attention."""
    d_model = check_int("d_model", d_model)
    d_ff = 4 * d_model if d_ff is None else check_int("d_ff", d_ff)
    d_kv = d_model if d_kv is None else check_int("d_kv", d_kv)
    _check_bool("bias", bias)
    attention = (2 * d_model * d_model + 2 * d_model * d_kv
                 + ((2 * d_model + 2 * d_kv) if bias else 0))
    ffn = 2 * d_model * d_ff + ((d_ff + d_model) if bias else 0)
    norms = 2 * 2 * d_model
    return attention + ffn + norms


def stream_rms(x: torch.Tensor) -> float:
    """The root-mean-square size of the vectors in ``x`` ``(..., d_model)``
    (per component), a float."""
    return float(x.detach().pow(2).mean().sqrt())


__all__ = [
    "FeedForward", "LayerNorm", "RMSNorm", "TransformerBlock",
    "TransformerStack", "block_param_count", "init_gpt2_", "residual_writers",
    "stream_rms",
]
