"""Chapter 8: the key-value cache.

A decoder generates one token at a time. Without a cache, every step runs
the model on the whole prefix again, although the keys and values of the
earlier positions cannot change: causal attention never lets an earlier
position see a later one. The cache keeps them. Each attention layer
owns a slice of it; a step projects only the new positions, **appends**
their keys and values, and lets the new queries attend to everything
held so far.

Shapes: a layer's keys and values are ``(B, n_kv_heads, T, d_head)``,
where ``n_kv_heads`` is ``n_heads`` for ordinary multi-head attention and
fewer for grouped-query attention (one key/value head per group of query
heads). The storage is allocated once, for ``max_len`` positions, so a
step writes into it instead of growing tensors with ``torch.cat``.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from tinyformer.attention import causal_mask, scaled_dot_product_attention
from tinyformer.validation import check_int


class LayerCache:
    """One attention layer's keys and values, ``k`` and ``v`` of shape
    ``(B, n_kv_heads, max_len, d_head)``, of which the first ``length``
    positions are filled."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor):
        self.k, self.v = k, v               # views into the KVCache's storage
        self.max_len = k.shape[-2]
        self.length = 0                     # positions held so far
        self._stacked = None                # (key, (W_qkv, b_qkv)): see _project

    def append(self, k: torch.Tensor, v: torch.Tensor):
        """Write the new positions' ``k``, ``v`` ``(B, n_kv_heads, T, d_head)``
        after the ones held, and return the keys and values of every
        position so far, ``(B, n_kv_heads, length + T, d_head)``."""
        start, end = self.length, self.length + k.shape[-2]
        if end > self.max_len:
            raise ValueError(f"the cache is full: it holds {start} of "
                             f"max_len={self.max_len} positions and cannot "
                             f"take {k.shape[-2]} more; start a new cache "
                             f"(or clear() this one)")
        if k.requires_grad or v.requires_grad:   # a run with gradients:
            return self._append_with_grad(k, v)  # see below
        self.k[:, :, start:end] = k         # in place: no new tensor
        self.v[:, :, start:end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def _append_with_grad(self, k, v):
        """The cache keeps values, not graphs: the new positions keep their
        gradient, the earlier ones are constants (as in Transformer-XL)."""
        start, end = self.length, self.length + k.shape[-2]
        self.k[:, :, start:end] = k.detach()
        self.v[:, :, start:end] = v.detach()
        self.length = end
        return (torch.cat((self.k[:, :, :start], k), dim=2),
                torch.cat((self.v[:, :, :start], v), dim=2))

    def attend(self, attn, x, mask=None, context=None,
               return_weights: bool = False):
        """Causal self-attention of the layer ``attn`` (a
        ``MultiHeadAttention``) for ``T`` new positions ``x``
        ``(B, T, d_model)``, whose keys and values join the cache.
        ``attn(x, cache=layer_cache)`` calls this. Returns
        ``(B, T, d_model)`` (and the weights ``(B, n_heads, T, length)``
        if asked)."""
        self._check(attn, x, mask, context)
        B, T, _ = x.shape
        H, H_kv, d = attn.n_heads, attn.n_kv_heads, attn.d_head
        start = self.length               # position of the first new token
        # q (B, H, T, d); k and v (B, H_kv, T, d)
        q, k, v = self._project(attn, x, start)
        if attn.rotary is not None:       # rotate by the true positions
            q, k = attn.rotary(q, start), attn.rotary(k, start)
        k, v = self.append(k, v)          # (B, H_kv, start + T, d): all so far
        # new query i sits at position start + i and sees keys 0 … start + i:
        # one new query sees every key (no mask); a first chunk is ordinary
        # causal attention; a later chunk needs the mask shifted by start
        causal = start == 0 and T > 1
        mask = (None if T == 1 or causal else torch.ones(
            T, start + T, dtype=torch.bool, device=x.device).tril(start))
        if attn.fused and not return_weights:   # torch's kernel groups heads
            heads = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=causal, scale=attn.scale,
                enable_gqa=H_kv < H)
            weights = None
        else:   # group the query heads by the key/value head they share
            q = q.view(B, H_kv, H // H_kv, T, d)     # (B, H_kv, group, T, d)
            k, v = k.unsqueeze(2), v.unsqueeze(2)    # (B, H_kv, 1, ·, d)
            if causal:
                mask = causal_mask(T, x.device)
            heads, weights = scaled_dot_product_attention(q, k, v, mask,
                                                          attn.scale)
            heads = heads.view(B, H, T, d)
            weights = weights.view(B, H, T, start + T)
        out = attn.o_proj(heads.transpose(1, 2).reshape(B, T, attn.d_model))
        return (out, weights) if return_weights else out

    def _project(self, attn, x: torch.Tensor, start: int):
        """``q_proj``, ``k_proj`` and ``v_proj`` of ``x`` ``(B, T, d_model)``,
        split into heads: ``(B, H, T, d)``, ``(B, H_kv, T, d)`` twice.

        When the three are plain ``nn.Linear`` layers without hooks, as one
        matrix product:
        one kernel instead of three, because at one token per step a call
        costs more than its arithmetic. The stacked weights are a copy kept
        in this layer cache (memory traded for speed), so a new cache, such
        as each call of ``generate`` makes, starts from the weights as they
        are; within a cache the copy is rebuilt whenever a weight's storage
        or version counter changes (an optimizer step, ``load_state_dict``,
        an in-place edit of the parameter). An edit through ``p.data``, or an
        in-place edit of inference tensors, bumps no version: a cache already
        in use, even after ``clear()``, keeps the old copy, and a new cache
        sees the edit. With gradients on it is stacked afresh and not kept,
        so that gradients reach the weights. Any other module (a wrapped
        layer, such as chapter 9's LoRA) or a projection with hooks (pruning,
        the old ``weight_norm``, a forward hook) is called as it is."""
        lins = (attn.q_proj, attn.k_proj, attn.v_proj)
        B, T, _ = x.shape
        # a hook must run, so a projection with one is called
        if not all(type(lin) is nn.Linear and not lin._forward_hooks
                   and not lin._forward_pre_hooks for lin in lins):
            return tuple(lin(x).view(B, T, -1, attn.d_head).transpose(1, 2)
                         for lin in lins)
        params = [p for lin in lins for p in (lin.weight, lin.bias)
                  if p is not None]
        # inference tensors (a model built under inference_mode) have no
        # version counter (and cannot be changed outside inference mode)
        key = tuple((id(p), p.data_ptr(), None if p.is_inference() else p._version)
                    for p in params)
        kept = self._stacked
        if torch.is_grad_enabled() or kept is None or kept[0] != key:
            W = torch.cat([lin.weight for lin in lins])  # (d_model+2·d_kv, ·)
            b = (None if attn.q_proj.bias is None
                 else torch.cat([lin.bias for lin in lins]))
            kept = (key, (W, b))
            if not torch.is_grad_enabled():
                self._stacked = kept
        qkv = F.linear(x, *kept[1])                 # (B, T, d_model + 2·d_kv)
        qkv = qkv.view(B, T, -1, attn.d_head).transpose(1, 2)
        return qkv.split((attn.n_heads, attn.n_kv_heads, attn.n_kv_heads),
                         dim=1)

    def _check(self, attn, x, mask, context) -> None:
        if context is not None or mask is not None or not attn.causal:
            raise ValueError("a KV cache works with causal self-attention "
                             "only: no mask= or context=, and causal=True")
        if x.dim() != 3:
            raise ValueError(f"with a cache, x must be (B, T, d_model), got "
                             f"shape {tuple(x.shape)}")
        want = (x.shape[0], attn.n_kv_heads, attn.d_head)
        got = (self.k.shape[0], self.k.shape[1], self.k.shape[3])
        if got != want:
            raise ValueError(f"the cache holds (batch, n_kv_heads, d_head) = "
                             f"{got}, but this layer and x need {want}")
        if self.k.device != x.device or self.k.dtype != x.dtype:
            raise ValueError(f"the cache is {self.k.dtype} on "
                             f"{self.k.device}, but x is {x.dtype} on "
                             f"{x.device}")


class KVCache:
    """The keys and values of every layer of a model, for ``batch_size``
    sequences of up to ``max_len`` positions.

    Two tensors, ``k`` and ``v`` of shape
    ``(n_layer, batch_size, n_kv_heads, max_len, d_head)``, are allocated
    once; ``cache[i]`` is layer ``i``'s :class:`LayerCache`. Pass the cache
    to ``GPT.forward(idx, cache=...)``: the model then reads only the new
    tokens ``idx``, places them at positions ``length, length+1, …``, and
    appends their keys and values. Build one with
    ``GPT.new_cache(batch_size)``.
    """

    def __init__(self, n_layer: int, batch_size: int, n_kv_heads: int,
                 d_head: int, max_len: int, *, dtype=torch.float32,
                 device=None):
        shape = tuple(check_int(name, value) for name, value in (
            ("n_layer", n_layer), ("batch_size", batch_size),
            ("n_kv_heads", n_kv_heads), ("max_len", max_len),
            ("d_head", d_head)))
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating-point torch.dtype, "
                            f"got {dtype!r}")
        # (n_layer, B, n_kv_heads, max_len, d_head), zeros never read
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.layers = [LayerCache(self.k[i], self.v[i])
                       for i in range(n_layer)]

    def __getitem__(self, i: int) -> LayerCache:
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def batch_size(self) -> int:
        """The number of sequences the cache holds."""
        return self.k.shape[1]

    @property
    def max_len(self) -> int:
        """The positions the storage has room for."""
        return self.k.shape[3]

    @property
    def length(self) -> int:
        """Positions held by the last layer: the next token's position
        once a step has finished."""
        return self.layers[-1].length

    def clear(self) -> None:
        """Forget every position (the storage is kept and overwritten, and
        so is each layer's stacked q/k/v copy: see ``LayerCache._project``)."""
        for layer in self.layers:
            layer.length = 0

    def nbytes(self, allocated: bool = False) -> int:
        """Bytes of the keys and values held (``allocated=True``: of the
        whole storage, ``max_len`` positions)."""
        per_position = 2 * self.k[:, :, :, 0].numel() * self.k.element_size()
        return per_position * (self.max_len if allocated else self.length)

    def __repr__(self) -> str:
        n_layer, B, H, T, d = self.k.shape
        return (f"KVCache(n_layer={n_layer}, batch_size={B}, n_kv_heads={H}, "
                f"d_head={d}, length={self.length}, max_len={T}, "
                f"dtype={self.k.dtype})")


def kv_cache_bytes(n_layer: int, n_kv_heads: int, d_head: int, T: int,
                   bytes_per_element: int = 2, batch_size: int = 1) -> int:
    """``2 · n_layer · n_kv_heads · d_head · T · bytes_per_element`` per
    sequence (times ``batch_size``): a key and a value vector per head, per
    layer, per position. Ordinary multi-head attention has
    ``n_kv_heads = n_heads``."""
    sizes = [check_int(name, value) for name, value in (
        ("n_layer", n_layer), ("n_kv_heads", n_kv_heads),
        ("d_head", d_head), ("T", T),
        ("bytes_per_element", bytes_per_element),
        ("batch_size", batch_size))]
    return 2 * math.prod(sizes)


__all__ = ["KVCache", "LayerCache", "kv_cache_bytes"]
