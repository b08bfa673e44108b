"""Chapter 5: the whole GPT.

Token ids ``idx`` ``(B, T)`` become vectors (a token embedding, plus a
position vector unless the positions are rotary or absent), pass through
``n_layer`` transformer blocks (chapter 3) and a final layer norm, and the
**LM head** turns each position's vector back into ``vocab_size`` logits,
the scores of every possible next token: ``(B, T, vocab_size)``.

Everything here is assembled from the earlier chapters' modules;
:class:`GPTConfig` chooses among them. The helpers at the end count the
model's parameters and the FLOPs of a training step in closed form.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from tinyformer.blocks import NORMS, TransformerStack, block_param_count, init_gpt2_
from tinyformer.kvcache import KVCache
from tinyformer.positions import LearnedPositions, sinusoidal_positions
from tinyformer.validation import (
    _check_bool,
    _check_eps,
    _check_kv_heads,
    _check_std,
    _require_ids,
    _require_vocab,
    check_int,
)

POSITIONS = ("learned", "sinusoidal", "rotary", "none")


@dataclass
class GPTConfig:
    """The sizes and choices that define a GPT. ``d_ff`` defaults to
    ``4·d_model``; ``positions`` is ``"learned"`` (GPT-2), ``"sinusoidal"``,
    ``"rotary"`` or ``"none"``; ``norm`` is ``"pre"`` or ``"post"``.
    ``fused_attention`` lets attention use torch's fused kernel when the
    weights are not asked for, and layer norm use ``F.layer_norm`` (same
    outputs, faster). ``n_kv_head`` (default ``n_head``) below ``n_head``
    makes the attention grouped-query: fewer key/value heads, a smaller
    KV cache (chapter 8)."""

    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    d_model: int
    d_ff: int | None = None
    positions: str = "learned"
    norm: str = "pre"
    bias: bool = True
    tie_weights: bool = True
    eps: float = 1e-5
    init_std: float = 0.02
    fused_attention: bool = True
    n_kv_head: int | None = None

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head",
                     "d_model"):
            setattr(self, name, check_int(name, getattr(self, name)))
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be divisible "
                             f"by n_head ({self.n_head})")
        self.d_ff = (4 * self.d_model if self.d_ff is None
                     else check_int("d_ff", self.d_ff))
        self.n_kv_head = _check_kv_heads(self.n_head, self.n_kv_head)
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got "
                             f"{self.positions!r}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got "
                             f"{self.norm!r}")
        if self.positions == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"positions='sinusoidal' needs an even "
                             f"d_model (sin/cos pairs), got {self.d_model}")
        if self.positions == "rotary" and self.d_head % 2:
            raise ValueError(f"positions='rotary' needs an even d_head = "
                             f"d_model // n_head, got {self.d_head}")
        for name in ("bias", "tie_weights", "fused_attention"):
            _check_bool(name, getattr(self, name))
        self.eps = _check_eps(self.eps)
        self.init_std = _check_std(self.init_std)

    @property
    def d_head(self) -> int:
        """Width of one attention head: ``d_model // n_head``."""
        return self.d_model // self.n_head

    @property
    def d_kv(self) -> int:
        """Width of the key and value projections: ``n_kv_head · d_head``."""
        return self.n_kv_head * self.d_head

    @classmethod
    def gpt2(cls, **changes) -> GPTConfig:
        """GPT-2 small (Radford et al., 2019): 124M parameters."""
        sizes = dict(vocab_size=50257, block_size=1024, n_layer=12,
                     n_head=12, d_model=768)
        return cls(**{**sizes, **changes})


def _check_config(config) -> GPTConfig:
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a GPTConfig, got "
                        f"{type(config).__name__}")
    return config


class GPT(nn.Module):
    """A decoder-only transformer language model: ``model(idx)`` maps token
    ids ``(B, T)`` to next-token logits ``(B, T, vocab_size)``."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        c = self.config = _check_config(config)
        self.token_embedding = nn.Embedding(c.vocab_size, c.d_model)
        if c.positions == "learned":
            self.position_embedding = LearnedPositions(c.block_size,
                                                       c.d_model)
        elif c.positions == "sinusoidal":   # fixed: a buffer, built once
            table = sinusoidal_positions(c.block_size, c.d_model)
            self.register_buffer("position_table", table, persistent=False)
        self.blocks = TransformerStack(          # its final norm is ln_f
            c.n_layer, c.d_model, c.n_head, c.d_ff, c.norm, bias=c.bias,
            eps=c.eps, rotary=c.positions == "rotary",
            fused=c.fused_attention, n_kv_heads=c.n_kv_head)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        init_gpt2_(self, c.n_layer, c.init_std)
        nn.init.normal_(self.token_embedding.weight, 0.0, c.init_std)
        if c.positions == "learned":
            nn.init.normal_(self.position_embedding.weight, 0.0, c.init_std)
        if c.tie_weights:   # one matrix reads tokens in and writes them out
            self.lm_head.weight = self.token_embedding.weight

    def forward(self, idx: torch.Tensor, cache=None) -> torch.Tensor:
        """idx: integer token ids ``(B, T)``, ``T <= block_size``.
        Returns logits ``(B, T, vocab_size)``.

        With a ``cache`` (:meth:`new_cache`), idx holds only the *new*
        tokens: they take the positions after the ``cache.length`` already
        held, attend to those through the cache, and are appended to it."""
        start = 0 if cache is None else self._check_cache(cache, idx)
        self._check_idx(idx, start)
        return self.logits(idx, cache)

    def logits(self, idx: torch.Tensor, cache=None) -> torch.Tensor:
        """:meth:`forward` without checking ``idx`` first: for a loop that
        checked its input once, such as ``generate`` (a check of every id
        costs operations, and on a GPU a wait, at every step)."""
        start = 0 if cache is None else cache.length  # new tokens go after
        T = idx.shape[1]
        x = self.token_embedding(idx)                 # (B, T, d_model)
        if self.config.positions == "learned":        # rows start … start+T-1
            x = x + self.position_embedding(T, start)   # + (T, d_model)
        elif self.config.positions == "sinusoidal":
            x = x + self.position_table[start:start + T]
        held = None if cache is None else [layer.length for layer in cache]
        try:
            x = self.blocks(x, cache=cache)           # (B, T, d_model)
        except BaseException:  # an interrupted step (an error, Ctrl-C)
            for layer, n in zip(cache or (), held or ()):
                layer.length = n  # must not leave the cache advanced
            raise
        return self.lm_head(x)                        # (B, T, vocab_size)

    def new_cache(self, batch_size: int = 1, dtype=None, device=None):
        """An empty :class:`~tinyformer.kvcache.KVCache` for ``batch_size``
        sequences of up to ``block_size`` tokens, on the model's device
        and dtype unless told otherwise."""
        c, weight = self.config, self.token_embedding.weight
        return KVCache(c.n_layer, batch_size, c.n_kv_head, c.d_head,
                       c.block_size, dtype=dtype or weight.dtype,
                       device=device or weight.device)

    def _check_cache(self, cache, idx) -> int:
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (model.new_cache()), "
                            f"got {type(cache).__name__}")
        return cache.length

    def loss(self, idx: torch.Tensor,
             targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy (nats) of the next-token predictions for
        ``idx`` ``(B, T)`` against ``targets`` ``(B, T)``; a target of
        -100 is left out of the mean."""
        logits = self(idx)                            # (B, T, V)
        _require_ids("targets", targets, idx.shape,
                     f"have the shape of idx {tuple(idx.shape)}",
                     "integer token ids")
        V = self.config.vocab_size
        bad = (targets != -100) & ((targets < 0) | (targets >= V))
        if targets.device.type != "meta" and bad.any():
            raise ValueError(f"targets must be token ids in [0, vocab_size="
                             f"{V}) or -100 (ignored), got "
                             f"{int(targets[bad][0])}")
        return F.cross_entropy(logits.view(-1, V), targets.reshape(-1),
                               ignore_index=-100)

    def _check_idx(self, idx, start: int = 0) -> None:
        _require_ids("idx", idx, None, "be a 2-D tensor of token ids (B, T)",
                     "integer token ids")
        T, c = idx.shape[1], self.config
        if not 1 <= T <= c.block_size - start:
            held = f" after the {start} the cache holds" if start else ""
            raise ValueError(f"idx has {T} positions; the model takes 1 to "
                             f"block_size={c.block_size}{held}")
        _require_vocab(idx, c.vocab_size)


def gpt_param_count(config: GPTConfig) -> int:
    """The parameters of ``GPT(config)``, counted from its parts."""
    c = _check_config(config)
    d, V = c.d_model, c.vocab_size
    blocks = c.n_layer * block_param_count(d, c.d_ff, c.bias, c.d_kv)
    ln_f = 2 * d if c.norm == "pre" else 0   # post-norm ends normalised
    positions = c.block_size * d if c.positions == "learned" else 0
    lm_head = 0 if c.tie_weights else d * V             # tied: E itself
    return V * d + positions + blocks + ln_f + lm_head


def kaplan_estimate(config: GPTConfig) -> int:
    """Kaplan et al.'s (2020) approximation ``12·n_layer·d_model²``: the
    blocks' weight matrices when ``d_ff = 4·d_model``, nothing else."""
    c = _check_config(config)
    return 12 * c.n_layer * c.d_model ** 2


def matmul_params(config: GPTConfig) -> int:
    """``N_matmul``: the weights that multiply activations (every linear
    map, the LM head included whether tied or not), not the embedding
    lookups, norms or biases."""
    c = _check_config(config)
    per_block = (2 * c.d_model ** 2 + 2 * c.d_model * c.d_kv
                 + 2 * c.d_model * c.d_ff)
    return c.n_layer * per_block + c.d_model * c.vocab_size


def training_flops_per_token(config: GPTConfig, T: int | None = None) -> int:
    """FLOPs of one training step (forward + backward) per token, in the
    convention of PaLM's appendix B (Chowdhery et al., 2022):
    ``6·N_matmul + 12·n_layer·d_model·T``.

    A multiply-add is 2 FLOPs; the backward pass costs twice the forward.
    ``6·N_matmul`` covers the weights (:func:`matmul_params`); the second
    term covers attention's ``QKᵀ`` and ``weights·V`` over all ``T`` keys
    (``T`` defaults to ``block_size``). It is *not* halved for the causal
    mask, although half of those scores are masked out."""
    c = _check_config(config)
    T = c.block_size if T is None else check_int("T", T)
    return 6 * matmul_params(c) + 12 * c.n_layer * c.d_model * T


def decode_flops(config, prefix: int, cached: bool) -> int:
    """Forward FLOPs of one decoding step whose context holds ``prefix``
    tokens (the new token included), 2 per multiply-add.

    Uncached, the model reruns all ``prefix`` positions:
    ``2·N_matmul·prefix`` for the weights and ``4·n_layer·d_model·prefix²``
    for ``QKᵀ`` and ``weights·V``. Cached, only the new position runs:
    ``2·N_matmul + 4·n_layer·d_model·prefix``. (``N_matmul`` counts the LM
    head at every position, which is what ``model(idx)`` computes; the
    causal half of the scores is not subtracted.)"""
    c = _check_config(config)
    prefix = check_int("prefix", prefix)
    if not isinstance(cached, bool):
        raise TypeError(f"cached must be True or False, got {cached!r}")
    n = 1 if cached else prefix          # positions run through the model
    return 2 * matmul_params(c) * n + 4 * c.n_layer * c.d_model * prefix * n


__all__ = [
    "GPT", "GPTConfig", "decode_flops", "gpt_param_count", "kaplan_estimate",
    "matmul_params", "training_flops_per_token",
]
