"""Chapter 2: attention.

Shapes follow the book: ``(B, T, d_model)`` for a batch of ``B`` sequences
of ``T`` tokens with ``d_model`` features each; a layer with ``n_heads``
heads gives each head ``d_head = d_model // n_heads`` of them. Vectors are
rows, so a projection is ``x @ W`` (as in PyTorch). A boolean mask is
``True`` where attention is allowed; the attention ``weights`` have shape
``(..., T_q, T_k)``. Every mask is built on the device of the input, so the
same code runs on a CPU and a GPU.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn as nn
import torch.nn.functional as F

from tinyformer.positions import RotaryEmbedding
from tinyformer.validation import _check_kv_heads, _require_tensor, check_int


def _require_matrix(name: str, W, rows: int, cols: int | None = None) -> None:
    """A floating-point ``(rows, cols)`` matrix (any number of columns if
    ``cols`` is None)."""
    _require_tensor(name, W, 2)
    if (W.dim() != 2 or W.shape[0] != rows
            or (cols is not None and W.shape[1] != cols)):
        want = f"({rows}, {'n' if cols is None else cols})"
        raise ValueError(f"{name} must be a {want} matrix, where {rows} is "
                         f"the width d_model of x, "
                         f"got shape {tuple(W.shape)}")


def _check_scale(scale) -> float | None:
    """``None`` (meaning 1/√d_k) or a finite real number."""
    if scale is None:
        return None
    if (isinstance(scale, bool) or not isinstance(scale, numbers.Real)
            or not math.isfinite(scale)):
        raise TypeError(f"scale must be None or a finite real number, "
                        f"got {scale!r}")
    return float(scale)


def _check_mask(mask, shape, device: torch.device) -> None:
    """Raise unless ``mask`` is a boolean tensor on ``device`` that
    broadcasts to ``shape``, the shape of the attention weights. It runs
    before a mask is combined with another, so that the error names the
    caller's ``mask`` rather than failing inside the combination."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = (mask.dtype if isinstance(mask, torch.Tensor)
               else type(mask).__name__)
        raise TypeError(f"mask must be a boolean tensor (True where "
                        f"attention is allowed), got {got}")
    if mask.device != device:
        raise ValueError(f"mask is on device {mask.device}, but the queries "
                         f"and keys are on {device}")
    try:
        torch.broadcast_shapes(mask.shape, tuple(shape))
    except RuntimeError:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not "
                         f"broadcast to the attention weights' shape "
                         f"{tuple(shape)}") from None


def softmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """A numerically stable softmax: subtracting the maximum leaves the
    result unchanged (it cancels between numerator and denominator) but
    keeps ``exp`` from overflowing."""
    shifted = scores - scores.amax(dim=dim, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)


def causal_mask(T: int, device=None) -> torch.Tensor:
    """``(T, T)`` boolean mask, ``True`` on and below the diagonal: token
    ``i`` may attend to tokens ``0..i`` (itself included) and never to a
    later one."""
    T = check_int("T", T)
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def simple_attention(x: torch.Tensor) -> torch.Tensor:
    """Parameter-free causal self-attention:
    ``y_i = sum_{j<=i} softmax_j(x_i . x_j) x_j``.

    ``x`` is ``(..., T, d_model)``; the output has the same shape. There
    are no weights: every token is its own query, key and value, and
    scores are not scaled.
    """
    _require_tensor("x", x, 2)
    T = x.shape[-2]
    scores = x @ x.transpose(-2, -1)                  # (..., T, T)
    allowed = causal_mask(T, x.device)                # (T, T)
    scores = scores.masked_fill(~allowed, float("-inf"))
    return softmax(scores, dim=-1) @ x                # (..., T, d_model)


def _check_qkv(q, k, v) -> None:
    """q ``(..., T_q, d_k)``, k ``(..., T_k, d_k)``, v ``(..., T_k, d_v)``,
    leading dims broadcasting."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        _require_tensor(name, t, 2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share their last dimension d_k, "
                         f"got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of positions "
                         f"T_k, got k {tuple(k.shape)} and "
                         f"v {tuple(v.shape)}")
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the leading (batch) dimensions of q, k and v "
                         f"must broadcast, got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}") from None


def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    """``softmax(mask(q kᵀ · scale)) v``, returning ``(out, weights)``;
    ``scale`` defaults to 1/√d_k.

    q: ``(..., T_q, d_k)``; k: ``(..., T_k, d_k)``; v: ``(..., T_k, d_v)``;
    leading dimensions broadcast. ``mask`` is boolean, ``True`` where
    attention is allowed, and broadcasts to ``(..., T_q, T_k)``. Returns
    ``out`` ``(..., T_q, d_v)`` and ``weights`` ``(..., T_q, T_k)``.
    A query row with no allowed key gets zero weights and a zero output
    (as in ``torch.nn.functional.scaled_dot_product_attention``); every
    other row of weights sums to 1.
    """
    _check_qkv(q, k, v)
    scale = _check_scale(scale)
    if scale is None:
        scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale          # (..., T_q, T_k)
    if mask is None:
        weights = softmax(scores, dim=-1)
    else:
        _check_mask(mask, scores.shape, scores.device)
        empty = ~mask.any(dim=-1, keepdim=True)       # (..., T_q, 1): no key
        # -inf gives masked keys exactly zero weight. An empty row would
        # be all -inf, whose softmax is 0/0 = NaN (and NaN gradients), so
        # it gets harmless scores of 0 and then zero weights.
        scores = scores.masked_fill(~mask, float("-inf"))
        scores = scores.masked_fill(empty, 0.0)
        weights = softmax(scores, dim=-1).masked_fill(empty, 0.0)
    out = weights @ v                                 # (..., T_q, d_v)
    return out, weights                               # weights (..., T_q, T_k)


def attention_head(x, W_Q, W_K, W_V, causal: bool = True):
    """One attention head with explicit weight matrices (row vectors:
    ``q = x W_Q``).

    x: ``(..., T, d_model)``; W_Q, W_K: ``(d_model, d_k)``;
    W_V: ``(d_model, d_v)``. Returns ``(..., T, d_v)``.
    """
    _require_tensor("x", x, 2)
    for name, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V)):
        _require_matrix(name, W, x.shape[-1])
    if W_Q.shape[1] != W_K.shape[1]:
        raise ValueError(f"W_Q and W_K must have the same number of "
                         f"columns d_k, got {tuple(W_Q.shape)} and "
                         f"{tuple(W_K.shape)}")
    mask = causal_mask(x.shape[-2], x.device) if causal else None
    q, k = x @ W_Q, x @ W_K                           # (..., T, d_k)
    v = x @ W_V                                       # (..., T, d_v)
    return scaled_dot_product_attention(q, k, v, mask)[0]


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(..., T, n_heads·d_head)`` → ``(..., n_heads, T, d_head)``: head
    ``h`` owns the contiguous slice ``h·d_head : (h+1)·d_head`` of the
    features."""
    _require_tensor("x", x, 2)
    n_heads = check_int("n_heads", n_heads)
    *lead, T, width = x.shape
    if width % n_heads != 0:
        raise ValueError(f"the last dimension of x ({width}) must be "
                         f"divisible by n_heads ({n_heads})")
    x = x.reshape(*lead, T, n_heads, width // n_heads)
    return x.transpose(-3, -2)                      # (..., n_heads, T, d_head)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(..., n_heads, T, d_head)`` → ``(..., T, n_heads·d_head)``:
    concatenates the heads."""
    _require_tensor("x", x, 3)
    *lead, n_heads, T, d_head = x.shape
    x = x.transpose(-3, -2)                         # (..., T, n_heads, d_head)
    return x.reshape(*lead, T, n_heads * d_head)


def repeat_kv(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Grouped-query attention: ``(..., n_kv_heads, T, d_head)`` →
    ``(..., n_heads, T, d_head)``, each key/value head repeated for the
    ``n_heads // n_kv_heads`` query heads of its group (query head ``h``
    reads key/value head ``h // group``)."""
    group = n_heads // t.shape[-3]
    return t if group == 1 else t.repeat_interleave(group, dim=-3)


def attend_heads(q, k, v, n_heads: int, causal: bool = False, mask=None,
                 scale=None, rotate=None, fused: bool = False,
                 n_kv_heads: int | None = None):
    """The core of multi-head attention, on projected queries, keys and
    values.

    q: ``(..., T_q, d_model)``; k, v: ``(..., T_k, n_kv_heads·d_head)``
    (``n_kv_heads`` defaults to ``n_heads``, so that k and v are as wide as
    q; fewer is grouped-query attention, each key/value head shared by
    ``n_heads // n_kv_heads`` query heads). Splits them into heads, masks
    (``causal`` needs ``T_q == T_k``; ``mask`` broadcasts to
    ``(..., n_heads, T_q, T_k)``), attends, and
    concatenates the heads again. ``rotate`` (optional) is applied to each
    head's queries and keys before the scores, where rotary position
    embeddings act (chapter 4). Returns ``(merged (..., T_q, d_model),
    weights (..., n_heads, T_q, T_k))``.

    ``fused=True`` computes the same thing with torch's fused
    ``scaled_dot_product_attention``, which never stores the weights
    (``weights`` is then ``None``): faster, and what a model uses when it
    trains. A query row with no allowed key still gets a zero output and
    finite gradients there, as on the readable path.
    """
    n_kv_heads = _check_kv_heads(n_heads, n_kv_heads)
    q = split_heads(q, n_heads)                     # (..., n_heads, T, d_head)
    k, v = (split_heads(t, n_kv_heads) for t in (k, v))  # n_kv_heads heads
    if rotate is not None:
        q, k = rotate(q), rotate(k)        # rotary positions (chapter 4)
    k, v = repeat_kv(k, n_heads), repeat_kv(v, n_heads)
    _check_qkv(q, k, v)
    T_q, T_k = q.shape[-2], k.shape[-2]
    if mask is not None:
        # validate the caller's mask before it is combined with anything
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2],
                                      v.shape[:-2])   # (..., n_heads)
        _check_mask(mask, (*lead, T_q, T_k), q.device)
    if causal:
        if T_q != T_k:
            raise ValueError(f"a causal mask needs as many queries as keys, "
                             f"got T_q={T_q}, T_k={T_k}")
        if fused and mask is None:        # the kernel masks by itself
            heads = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                   scale=scale)
            return merge_heads(heads), None
        allowed = causal_mask(T_q, q.device)          # (T, T), on q's device
        mask = allowed if mask is None else mask & allowed
    if fused:
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                               scale=scale)
        return merge_heads(heads), None
    # heads: (..., n_heads, T_q, d_head)
    heads, weights = scaled_dot_product_attention(q, k, v, mask, scale)
    return merge_heads(heads), weights


def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads: int,
                         causal: bool = True):
    """Multi-head self-attention with explicit ``(d_model, d_model)``
    weights, no biases.

    Each head attends with its own slice of ``Q, K, V``; the heads' outputs
    are concatenated and mixed by ``W_O``. Returns ``(..., T, d_model)``.
    """
    _require_tensor("x", x, 2)
    d_model = x.shape[-1]
    n_heads = check_int("n_heads", n_heads)
    for name, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V), ("W_O", W_O)):
        _require_matrix(name, W, d_model, d_model)
    if d_model % n_heads != 0:
        raise ValueError(f"d_model ({d_model}) must be divisible by "
                         f"n_heads ({n_heads})")
    # merged: (..., T, d_model)
    merged, _ = attend_heads(x @ W_Q, x @ W_K, x @ W_V, n_heads, causal)
    return merged @ W_O


class MultiHeadAttention(nn.Module):
    """Multi-head attention with ``n_heads`` heads of width
    ``d_head = d_model // n_heads``.

    The projections are ``nn.Linear`` modules ``q_proj, k_proj, v_proj,
    o_proj``; head ``h`` uses the contiguous slice
    ``h·d_head : (h+1)·d_head`` of each, as ``torch.nn.MultiheadAttention``
    does, so weights map across one to one. ``scale`` multiplies the
    scores (default 1/√d_head). ``rotary=True`` rotates every head's
    queries and keys by their positions (chapter 4's RoPE), in
    ``self.rotary``. ``fused=True`` lets the layer call torch's fused
    kernel whenever the weights are not asked for (same outputs, faster).
    ``n_kv_heads`` (default ``n_heads``) below ``n_heads`` makes it
    grouped-query attention: ``k_proj`` and ``v_proj`` produce only
    ``n_kv_heads`` heads, each shared by a group of query heads
    (``n_kv_heads=1`` is multi-query attention). A ``cache``
    (chapter 8) lets it attend from new positions to earlier ones
    without recomputing their keys and values.
    """

    def __init__(self, d_model: int, n_heads: int, causal: bool = True,
                 bias: bool = True, scale=None, rotary: bool = False,
                 fused: bool = False, n_kv_heads: int | None = None):
        super().__init__()
        d_model = check_int("d_model", d_model)
        n_heads = check_int("n_heads", n_heads)
        if d_model % n_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by "
                             f"n_heads ({n_heads})")
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be True or False, got {causal!r}")
        self.d_model, self.n_heads, self.causal = d_model, n_heads, causal
        self.d_head = d_model // n_heads
        self.n_kv_heads = _check_kv_heads(n_heads, n_kv_heads)
        d_kv = self.n_kv_heads * self.d_head     # d_model unless grouped
        self.scale = _check_scale(scale)
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_kv, bias=bias)
        self.v_proj = nn.Linear(d_model, d_kv, bias=bias)
        self.o_proj = nn.Linear(d_model, d_model, bias=bias)
        if not isinstance(rotary, bool):
            raise TypeError(f"rotary must be True or False, got {rotary!r}")
        self.rotary = RotaryEmbedding(self.d_head) if rotary else None
        if not isinstance(fused, bool):
            raise TypeError(f"fused must be True or False, got {fused!r}")
        self.fused = fused

    def _check_input(self, name: str, t) -> None:
        _require_tensor(name, t, 2)
        if t.shape[-1] != self.d_model:
            raise ValueError(f"{name} must have last dimension "
                             f"d_model={self.d_model}, "
                             f"got shape {tuple(t.shape)}")

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                return_weights: bool = False, *,
                context: torch.Tensor | None = None, cache=None):
        """x: ``(..., T_q, d_model)`` gives the queries; keys and values
        come from ``context`` ``(..., T_k, d_model)`` when it is given
        (cross-attention), from ``x`` otherwise. ``mask`` (optional,
        boolean, broadcasting to ``(..., n_heads, T_q, T_k)``) is combined
        with the causal mask when ``causal=True``. Returns
        ``(..., T_q, d_model)``, and the weights
        ``(..., n_heads, T_q, T_k)`` if asked. With a ``cache``
        (chapter 8), x holds only the new positions."""
        self._check_input("x", x)
        if cache is not None:       # decoding with a KV cache (chapter 8)
            return cache.attend(self, x, mask, context, return_weights)
        if context is None:
            context = x                               # self-attention
        elif self.causal:
            raise ValueError("cross-attention (context=...) is not causal: "
                             "the keys belong to another sequence, so "
                             "'later' means nothing. Build the layer with "
                             "causal=False.")
        else:
            self._check_input("context", context)
        if context is not x and self.rotary is not None:
            raise ValueError("rotary positions need self-attention: the "
                             "keys of context=... have no positions of "
                             "their own to rotate by")
        q = self.q_proj(x)                            # (..., T_q, d_model)
        k = self.k_proj(context)                      # (..., T_k, d_kv)
        v = self.v_proj(context)                      # (..., T_k, d_kv)
        merged, weights = attend_heads(q, k, v, self.n_heads, self.causal,
                                       mask, self.scale, self.rotary,
                                       self.fused and not return_weights,
                                       self.n_kv_heads)
        out = self.o_proj(merged)                     # (..., T_q, d_model)
        return (out, weights) if return_weights else out


def attention_flops(T: int, d_model: int) -> int:
    """Multiply-adds ×2 spent on ``QKᵀ`` and ``weights·V`` for one
    sequence: ``4·T²·d_model`` (the projections, ``8·T·d_model²``, are not
    counted)."""
    T, d_model = check_int("T", T), check_int("d_model", d_model)
    return 4 * T * T * d_model


__all__ = [
    "attend_heads", "attention_flops", "attention_head", "causal_mask",
    "merge_heads", "multi_head_attention", "MultiHeadAttention",
    "repeat_kv", "scaled_dot_product_attention", "simple_attention",
    "softmax", "split_heads",
]
