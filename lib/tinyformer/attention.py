"""Chapter 2: attention.

Shapes follow the book: ``(B, T, C)`` for a batch of ``B`` sequences of ``T`` tokens with ``C``
features each; vectors are rows, so a projection is ``x @ W`` (as in PyTorch). A boolean mask is
``True`` where attention is allowed.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def _require_tensor(name: str, t, min_rank: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() < min_rank:
        raise ValueError(f"{name} must have at least {min_rank} dimensions (..., T, d), "
                         f"got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")


def softmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """A numerically stable softmax: subtracting the maximum leaves the result unchanged
    (it cancels between numerator and denominator) but keeps ``exp`` from overflowing."""
    shifted = scores - scores.amax(dim=dim, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)


def causal_mask(T: int, device=None) -> torch.Tensor:
    """``(T, T)`` boolean mask, ``True`` on and below the diagonal: token ``i`` may attend to
    tokens ``0..i`` (itself included) and never to a later one."""
    if isinstance(T, bool) or not isinstance(T, int):
        raise TypeError(f"T must be an int, got {type(T).__name__}")
    if T < 1:
        raise ValueError(f"T must be at least 1, got {T}")
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def simple_attention(x: torch.Tensor) -> torch.Tensor:
    """Parameter-free causal self-attention: ``y_i = sum_{j<=i} softmax_j(x_i . x_j) x_j``.

    ``x`` is ``(..., T, d)``; the output has the same shape. There are no weights: every token
    is its own query, key and value, and scores are not scaled.
    """
    _require_tensor("x", x, 2)
    T = x.shape[-2]
    scores = x @ x.transpose(-2, -1)                                   # (..., T, T)
    scores = scores.masked_fill(~causal_mask(T, x.device), float("-inf"))
    return softmax(scores, dim=-1) @ x                                  # (..., T, d)


def scaled_dot_product_attention(q, k, v, mask=None):
    """``softmax(mask(q kᵀ / √d_k)) v``, returning ``(out, weights)``.

    q: ``(..., T_q, d_k)``; k: ``(..., T_k, d_k)``; v: ``(..., T_k, d_v)``; leading dimensions
    broadcast. ``mask`` is boolean, ``True`` where attention is allowed, and broadcasts to
    ``(..., T_q, T_k)``. Returns ``out`` ``(..., T_q, d_v)`` and ``weights`` ``(..., T_q, T_k)``,
    whose rows sum to 1.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _require_tensor(name, t, 2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share their last dimension d_k, "
                         f"got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of positions T_k, "
                         f"got k {tuple(k.shape)} and v {tuple(v.shape)}")
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)                  # (..., T_q, T_k)
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError("mask must be a boolean tensor (True where attention is allowed)")
        try:
            torch.broadcast_shapes(mask.shape, scores.shape)
        except RuntimeError:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast "
                f"to the scores' shape {tuple(scores.shape)}"
            ) from None
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    return weights @ v, weights           # (..., T_q, d_v), (..., T_q, T_k)


def attention_head(x, W_Q, W_K, W_V, causal: bool = True):
    """One attention head with explicit weight matrices (row vectors: ``Q = x W_Q``).

    x: ``(..., T, d_model)``; W_Q, W_K: ``(d_model, d_k)``; W_V: ``(d_model, d_v)``.
    Returns ``(..., T, d_v)``.
    """
    Q, K, V = x @ W_Q, x @ W_K, x @ W_V
    mask = causal_mask(x.shape[-2], x.device) if causal else None
    return scaled_dot_product_attention(Q, K, V, mask)[0]


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(..., T, n_heads·d_head)`` → ``(..., n_heads, T, d_head)``: head ``h`` owns the
    contiguous slice ``h·d_head : (h+1)·d_head`` of the features."""
    *lead, T, C = x.shape
    return x.reshape(*lead, T, n_heads, C // n_heads).transpose(-3, -2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(..., n_heads, T, d_head)`` → ``(..., T, n_heads·d_head)``: concatenates the heads."""
    *lead, H, T, D = x.shape
    return x.transpose(-3, -2).reshape(*lead, T, H * D)


def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads: int, causal: bool = True):
    """Multi-head attention with explicit ``(d_model, d_model)`` weights, no biases.

    Each head attends with its own slice of ``Q, K, V``; the heads' outputs are concatenated
    and mixed by ``W_O``. Returns ``(..., T, d_model)``.
    """
    Q, K, V = (split_heads(x @ W, n_heads) for W in (W_Q, W_K, W_V))   # (..., H, T, d_head)
    mask = causal_mask(x.shape[-2], x.device) if causal else None
    heads, _ = scaled_dot_product_attention(Q, K, V, mask)             # (..., H, T, d_head)
    return merge_heads(heads) @ W_O                                     # (..., T, d_model)


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention with ``n_heads`` heads of width ``d_model // n_heads``.

    The projections are ``nn.Linear`` modules ``q_proj, k_proj, v_proj, o_proj``; head ``h`` uses
    the contiguous slice ``h·d_head : (h+1)·d_head`` of each, as ``torch.nn.MultiheadAttention``
    does, so weights map across one to one.
    """

    def __init__(self, d_model: int, n_heads: int, causal: bool = True, bias: bool = True):
        super().__init__()
        for name, val in (("d_model", d_model), ("n_heads", n_heads)):
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise ValueError(f"{name} must be a positive int, got {val!r}")
        if d_model % n_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.d_model, self.n_heads, self.causal = d_model, n_heads, causal
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.o_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                return_weights: bool = False):
        """x: ``(..., T, d_model)``. ``mask`` (optional, boolean, broadcasting to
        ``(..., n_heads, T, T)``) is combined with the causal mask when ``causal=True``.
        Returns ``(..., T, d_model)``, and the weights ``(..., n_heads, T, T)`` if asked."""
        _require_tensor("x", x, 2)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have last dimension d_model={self.d_model}, "
                             f"got shape {tuple(x.shape)}")
        T = x.shape[-2]
        q = split_heads(self.q_proj(x), self.n_heads)                   # (..., H, T, d_head)
        k = split_heads(self.k_proj(x), self.n_heads)
        v = split_heads(self.v_proj(x), self.n_heads)
        if self.causal:
            causal = causal_mask(T, x.device)
            mask = causal if mask is None else mask & causal
        heads, weights = scaled_dot_product_attention(q, k, v, mask)   # (..., H, T, d_head)
        out = self.o_proj(merge_heads(heads))                           # (..., T, d_model)
        return (out, weights) if return_weights else out


def attention_flops(T: int, d_model: int) -> int:
    """Multiply-adds ×2 spent on ``QKᵀ`` and ``weights·V`` for one sequence: ``4·T²·d_model``
    (the projections, ``8·T·d_model²``, are not counted)."""
    return 4 * T * T * d_model


__all__ = [
    "attention_flops", "attention_head", "causal_mask", "merge_heads", "multi_head_attention",
    "MultiHeadAttention", "scaled_dot_product_attention", "simple_attention", "softmax", "split_heads",
]
