"""Chapter 10: looking inside a trained GPT.

Every activation the chapter reads has a name, the one TransformerLens
gives it, so that a reader can move on to that library (per block ``l``)::

    hook_embed, hook_pos_embed                  the embeddings, (B, T, d_model) and (T, d_model)
    blocks.{l}.hook_resid_pre                   the stream entering block l
    blocks.{l}.ln1.hook_normalized              what the attention reads
    blocks.{l}.attn.hook_q / hook_k / hook_v    (B, T, n_heads, d_head)
    blocks.{l}.attn.hook_pattern                (B, n_heads, T_q, T_k), read only
    blocks.{l}.attn.hook_z                      each head's output (B, T, n_heads, d_head)
    blocks.{l}.hook_attn_out                    what the attention adds (B, T, d_model)
    blocks.{l}.hook_resid_mid                   the stream after it
    blocks.{l}.ln2.hook_normalized              what the feed-forward network reads
    blocks.{l}.hook_mlp_out                     what the feed-forward network adds
    blocks.{l}.hook_resid_post                  the stream leaving block l
    ln_final.hook_normalized                    the stream the LM head reads

:func:`hooks` runs the model with functions at those points (each may
return a replacement), :func:`run_with_cache` records them,
:func:`attention_patterns` stacks every layer's pattern, :func:`logit_lens`
reads the stream through the final norm and the LM head after every block,
:func:`ablate_heads` switches heads off, and :func:`induction_score` and
:func:`previous_token_score` measure what a head attends to. All of them use
PyTorch's module hooks, removed on the way out, so the model is never
changed. The names assume pre-norm blocks (GPT-2's layout, the book's
default). Two differences from TransformerLens 4 (reference/ checks the
rest against it): its ``hook_pos_embed`` is broadcast to ``(B, T,
d_model)``, and its ``hook_normalized`` is a layer norm's value before the
gain and bias (here, as in TransformerLens 3, the norm's output).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager

import torch
import torch.nn as nn

from tinyformer.attention import attend_heads
from tinyformer.validation import check_int

_BLOCK = re.compile(r"blocks\.(\d+)\.(.+)")
_PER_BLOCK = ("hook_resid_pre", "ln1.hook_normalized", "attn.hook_q", "attn.hook_k",
              "attn.hook_v", "attn.hook_pattern", "attn.hook_z", "hook_attn_out",
              "hook_resid_mid", "ln2.hook_normalized", "hook_mlp_out", "hook_resid_post")


def hook_names(model) -> list[str]:
    """Every hook point of ``model``, block by block."""
    _check_model(model)
    names = ["hook_embed"]
    if getattr(model, "position_embedding", None) is not None:
        names.append("hook_pos_embed")
    for layer in range(len(model.blocks.blocks)):
        names += [f"blocks.{layer}.{n}" for n in _PER_BLOCK]
    return names + ["ln_final.hook_normalized"]


def _check_model(model) -> None:
    blocks = getattr(getattr(model, "blocks", None), "blocks", None)
    if not isinstance(model, nn.Module) or blocks is None or not hasattr(model, "lm_head"):
        raise TypeError(f"model must be a tinyformer GPT, got {type(model).__name__}")
    if any(b.norm != "pre" for b in blocks):
        raise ValueError("the hook names follow TransformerLens and assume pre-norm blocks; "
                         "this model's blocks are post-norm")


def _check_idx(idx) -> None:
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.is_floating_point():
        got = tuple(idx.shape) if isinstance(idx, torch.Tensor) else type(idx).__name__
        raise ValueError(f"idx must be a (B, T) tensor of token ids, got {got}")


def _heads(t: torch.Tensor, d_head: int) -> torch.Tensor:
    return t.unflatten(-1, (-1, d_head))              # (B, T, H, d_head)


def _replace(fn, name, value):
    out = fn(value, name)
    if out is None:
        return value
    if not isinstance(out, torch.Tensor) or out.shape != value.shape:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"the hook at {name!r} must return None or a tensor of shape "
                         f"{tuple(value.shape)}, got {got}")
    return out


@contextmanager
def hooks(model, fns: Mapping[str, Callable]):
    """Inside the ``with``, each ``fns[name](activation, name)`` runs when the
    forward pass reaches the hook point ``name`` (:func:`hook_names`); if it
    returns a tensor of the same shape, that replaces the activation
    downstream. ``attn.hook_pattern`` is read only: the pattern is recomputed
    from the queries and keys (the chapter 2 weights), not used by the
    forward pass. The hooks are removed on the way out, error or not."""
    _check_model(model)
    known = set(hook_names(model))
    unknown = [n for n in fns if n not in known]
    if unknown:
        raise ValueError(f"unknown hook name(s) {unknown}; this model has e.g. "
                         f"{sorted(known)[:4]} (see hook_names(model))")
    handles = []

    def out_hook(module, name, view=None):
        fn = fns[name]

        def hook(mod, args, output):
            if view is None:
                return _replace(fn, name, output)
            return _replace(fn, name, _heads(output, view)).flatten(-2)
        handles.append(module.register_forward_hook(hook))

    def in_hook(module, name, view=None):
        fn = fns[name]

        def hook(mod, args):
            x = args[0]
            x = _replace(fn, name, x if view is None else _heads(x, view))
            return (x if view is None else x.flatten(-2), *args[1:])
        handles.append(module.register_forward_pre_hook(hook))

    try:
        if "hook_embed" in fns:
            out_hook(model.token_embedding, "hook_embed")
        if "hook_pos_embed" in fns:
            out_hook(model.position_embedding, "hook_pos_embed")
        for layer, block in enumerate(model.blocks.blocks):
            attn, d_head = block.attn, block.attn.d_head
            wanted = {m.group(2): n for n in fns
                      if (m := _BLOCK.fullmatch(n)) and int(m.group(1)) == layer}
            points = {"hook_resid_pre": (in_hook, block), "ln1.hook_normalized": (out_hook, block.ln_1),
                      "attn.hook_q": (out_hook, attn.q_proj), "attn.hook_k": (out_hook, attn.k_proj),
                      "attn.hook_v": (out_hook, attn.v_proj), "attn.hook_z": (in_hook, attn.o_proj),
                      "hook_attn_out": (out_hook, attn), "hook_resid_mid": (in_hook, block.ln_2),
                      "ln2.hook_normalized": (out_hook, block.ln_2), "hook_mlp_out": (out_hook, block.ffn),
                      "hook_resid_post": (out_hook, block)}
            for point, name in wanted.items():
                if point == "attn.hook_pattern":
                    _pattern_hook(attn, fns[name], name, handles)
                else:
                    kind, module = points[point]
                    kind(module, name, d_head if point.startswith("attn.hook_") else None)
        if "ln_final.hook_normalized" in fns:
            out_hook(model.blocks.ln_f, "ln_final.hook_normalized")
        yield model
    finally:
        for h in handles:
            h.remove()


def _pattern_hook(attn, fn, name, handles) -> None:
    """Record q, k and v as the projections make them, and when the layer has
    run, compute its weights from them as the readable path does."""
    seen = {}
    for key in ("q", "k", "v"):
        module = getattr(attn, f"{key}_proj")
        handles.append(module.register_forward_hook(
            lambda mod, args, out, key=key: seen.__setitem__(key, out)))

    def hook(mod, args, output):
        mask = args[1] if len(args) > 1 else None
        _, weights = attend_heads(seen["q"], seen["k"], seen["v"], mod.n_heads, mod.causal, mask,
                                  mod.scale, mod.rotary, False, mod.n_kv_heads)
        if fn(weights, name) is not None:
            raise ValueError(f"{name!r} is read only: its hook must return None")
    handles.append(attn.register_forward_hook(hook))


def run_with_cache(model, idx: torch.Tensor, names: Iterable[str] | None = None):
    """Run ``model`` on ``idx`` ``(B, T)`` and record the activations at
    ``names`` (every hook point by default). Returns ``(logits (B, T, V),
    {name: tensor})``, the tensors detached."""
    _check_idx(idx)
    names = hook_names(model) if names is None else list(names)
    cache = {}

    def record(value, name):
        cache[name] = value.detach()
    with torch.no_grad(), hooks(model, {n: record for n in names}):
        logits = model(idx)
    return logits, cache


def attention_patterns(model, idx: torch.Tensor) -> torch.Tensor:
    """Every head's attention weights on ``idx`` ``(B, T)``:
    ``(n_layer, B, n_heads, T, T)``, each row summing to one over the keys
    its query may see."""
    return _per_layer(model, idx, "attn.hook_pattern")


def _per_layer(model, idx, point: str) -> torch.Tensor:
    """The activation at ``blocks.{l}.<point>`` of every block, stacked:
    ``(n_layer, ...)``."""
    _check_model(model)
    names = [f"blocks.{layer}.{point}" for layer in range(len(model.blocks.blocks))]
    _, cache = run_with_cache(model, idx, names)
    return torch.stack([cache[n] for n in names])


def logit_lens(model, idx: torch.Tensor) -> torch.Tensor:
    """The logit lens: the final layer norm and the LM head applied to the
    residual stream before block 0 and after every block,
    ``(n_layer + 1, B, T, V)``. Its last entry is the model's own output."""
    _check_model(model)
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.hook_resid_post"
                                           for layer in range(len(model.blocks.blocks))]
    _, cache = run_with_cache(model, idx, names)             # one forward pass
    with torch.no_grad():
        stream = torch.stack([cache[n] for n in names])    # (n_layer + 1, B, T, d_model)
        return model.lm_head(model.blocks.ln_f(stream))


def head_means(model, idx: torch.Tensor) -> torch.Tensor:
    """Each head's output (``hook_z``) averaged over the batch and the
    positions of ``idx``: ``(n_layer, n_heads, d_head)``, what mean ablation
    puts in a head's place."""
    return _per_layer(model, idx, "attn.hook_z").mean(dim=(1, 2))   # over B and T


@contextmanager
def ablate_heads(model, heads: Iterable[tuple[int, int]], means: torch.Tensor | None = None):
    """Inside the ``with``, the heads ``(layer, head)`` are switched off:
    their outputs (``hook_z``) are replaced by zero, or by ``means``
    (:func:`head_means`, ``(n_layer, n_heads, d_head)``) for mean ablation.
    The model is unchanged afterwards. An empty ``heads`` changes nothing."""
    _check_model(model)
    blocks = model.blocks.blocks
    heads = list(heads)
    for h in heads:
        if (not isinstance(h, tuple) or len(h) != 2 or not 0 <= h[0] < len(blocks)
                or not 0 <= h[1] < blocks[0].attn.n_heads):
            raise ValueError(f"heads must be (layer, head) pairs with 0 <= layer < "
                             f"{len(blocks)} and 0 <= head < {blocks[0].attn.n_heads}, got {h!r}")
    n_heads, d_head = blocks[0].attn.n_heads, blocks[0].attn.d_head
    if means is not None and tuple(means.shape) != (len(blocks), n_heads, d_head):
        raise ValueError(f"means must have shape (n_layer, n_heads, d_head) = "
                         f"{(len(blocks), n_heads, d_head)}, got {tuple(means.shape)}")
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def switch_off(layer):
        def fn(z, name):                              # z: (B, T, n_heads, d_head)
            z = z.clone()
            for head in by_layer[layer]:
                z[..., head, :] = 0.0 if means is None else means[layer, head]
            return z
        return fn
    with hooks(model, {f"blocks.{layer}.attn.hook_z": switch_off(layer) for layer in by_layer}):
        yield model


def _check_patterns(patterns) -> None:
    if (not isinstance(patterns, torch.Tensor) or patterns.dim() < 4
            or patterns.shape[-1] != patterns.shape[-2]):
        got = tuple(patterns.shape) if isinstance(patterns, torch.Tensor) else type(patterns).__name__
        raise ValueError(f"patterns must be attention weights (..., B, n_heads, T, T), got {got}")


def _offset_score(patterns: torch.Tensor, offset: int, first: int) -> torch.Tensor:
    """The mean over queries ``t >= first`` of the weight on key
    ``t - offset``, and over the batch: ``patterns`` ``(..., B, H, T, T)``
    -> ``(..., H)``."""
    T = patterns.shape[-1]
    t = torch.arange(first, T, device=patterns.device)
    picked = patterns[..., t, t - offset]                # (..., B, H, len(t))
    return picked.mean(dim=-1).mean(dim=-2)


def induction_score(patterns: torch.Tensor, period: int) -> torch.Tensor:
    """How much each head behaves as an induction head on a sequence that
    repeats with ``period`` (token ``t`` equals token ``t - period``): the
    mean weight from each query ``t >= period`` on the key ``t - period + 1``,
    the token that followed the previous occurrence of the current one.
    ``patterns`` ``(..., B, n_heads, T, T)`` (from :func:`attention_patterns`)
    -> ``(..., n_heads)``: 1 for a perfect induction head."""
    _check_patterns(patterns)
    T = patterns.shape[-1]
    if check_int("period", period) >= T:
        raise ValueError(f"period must be below the sequence length T={T}, got {period}")
    return _offset_score(patterns, period - 1, period)


def previous_token_score(patterns: torch.Tensor) -> torch.Tensor:
    """The mean weight each head puts on the previous token (queries
    ``t >= 1``): ``(..., B, n_heads, T, T)`` -> ``(..., n_heads)``."""
    _check_patterns(patterns)
    return _offset_score(patterns, 1, 1)


def repeated_tokens(vocab_size: int, period: int, batch: int = 8, repeats: int = 2,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """``batch`` sequences of ``period`` random tokens, each said ``repeats``
    times: ``(batch, repeats * period)``, the test of an induction head."""
    for name, v in (("vocab_size", vocab_size), ("period", period), ("batch", batch), ("repeats", repeats)):
        check_int(name, v)
    span = torch.randint(vocab_size, (batch, period), generator=generator)
    return span.repeat(1, repeats)
