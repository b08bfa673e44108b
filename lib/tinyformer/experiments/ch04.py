"""Chapter 4 (positions): one small model with each way of giving positions, and its tasks.

:class:`PositionLM` is a causal language model whose variants differ only in their position
scheme (none, learned, sinusoidal, binary, rotary; and ALiBi, a distance penalty in every
attention layer, :class:`ALiBiAttention`); the chapter trains each on the look-back task
of :mod:`~tinyformer.experiments.toy` and on a reversal task whose rule depends on absolute
positions (:func:`reverse_batch`), with a per-token loss (:func:`token_loss`) and the accuracy at
each position (:func:`accuracy_by_position`). :func:`draw_position_paths` draws where positions
enter a model.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from tinyformer.validation import _require_ids, _require_vocab, check_int
from tinyformer.viz import FONT, PART_COLOURS, add_node, arrow, box, schematic_axes

# -----------------------------------------------------------------------------
# The model and its tasks
# -----------------------------------------------------------------------------


POSITION_SCHEMES = ("none", "learned", "sinusoidal", "binary", "rotary")


class ALiBiAttention(nn.Module):
    """Causal self-attention with ALiBi (Press et al., 2022): the layer
    ``attn`` (a :class:`~tinyformer.attention.MultiHeadAttention`, whose
    projections it uses) with the bias of
    :func:`~tinyformer.positions.alibi_bias` added to every head's scores:
    no position vectors, only a penalty ``slope · distance``, steeper in
    some heads than in others. Wrapping the layer keeps its initial
    weights, so an ALiBi model starts where the other schemes do."""

    def __init__(self, attn: nn.Module, slopes):
        super().__init__()
        if getattr(attn, "rotary", None) is not None or not attn.causal:
            raise ValueError("attn must be a causal layer without rotary "
                             "positions")
        slopes = torch.as_tensor(slopes, dtype=torch.float32)
        if slopes.shape != (attn.n_heads,):
            raise ValueError(f"slopes must hold one number per head "
                             f"(n_heads={attn.n_heads}), got shape "
                             f"{tuple(slopes.shape)}")
        self.attn = attn
        self.register_buffer("slopes", slopes)

    def forward(self, x: torch.Tensor, mask=None, cache=None,
                return_weights: bool = False):
        """x: ``(..., T, d_model)`` -> ``(..., T, d_model)``, and the weights
        ``(..., n_heads, T, T)`` if asked."""
        from tinyformer.attention import merge_heads, split_heads
        from tinyformer.positions import alibi_bias

        if mask is not None or cache is not None:
            raise ValueError("ALiBiAttention takes no mask and no cache")
        a, T = self.attn, x.shape[-2]
        q, k, v = (split_heads(proj(x), a.n_heads)   # (..., h, T, d_head)
                   for proj in (a.q_proj, a.k_proj, a.v_proj))
        scores = q @ k.transpose(-2, -1) / a.d_head ** 0.5   # (..., h, T, T)
        scores = scores + alibi_bias(T, self.slopes, x.device)
        weights = scores.softmax(dim=-1)             # -inf: weight 0
        out = a.o_proj(merge_heads(weights @ v))     # (..., T, d_model)
        return (out, weights) if return_weights else out


class PositionLM(nn.Module):
    """A small causal language model that differs between variants only in
    how it learns where a token sits: token embedding, plus an absolute
    position table at the input (``"learned"``, ``"sinusoidal"``,
    ``"binary"``), then a :class:`~tinyformer.blocks.TransformerStack`
    whose attention rotates queries and keys (``"rotary"``) or not, then a
    linear head. ``"none"`` gives no positions at all. ``"alibi"`` (not one
    of :data:`POSITION_SCHEMES`, which the chapter compares) wraps every
    attention layer in :class:`ALiBiAttention` with ``slopes`` (default:
    the paper's slopes for ``n_heads`` heads).

    ``max_len`` bounds the learned table only (the other schemes have no
    maximum; the binary one counts up to ``2**d_model``). Token ids
    ``(B, T)`` give logits ``(B, T, vocab_size)``.
    """

    def __init__(self, vocab_size: int, d_model: int = 64, n_layer: int = 2,
                 n_heads: int = 4, positions: str = "learned",
                 max_len: int = 64, causal: bool = True, slopes=None):
        super().__init__()
        from tinyformer.blocks import TransformerStack
        from tinyformer.positions import LearnedPositions, alibi_slopes

        if positions not in POSITION_SCHEMES + ("alibi",):
            raise ValueError(f"positions must be one of {POSITION_SCHEMES} "
                             f"or 'alibi', got {positions!r}")
        if slopes is not None and positions != "alibi":
            raise ValueError("slopes is for positions='alibi' only")
        self.vocab_size = check_int("vocab_size", vocab_size)
        self.d_model = check_int("d_model", d_model)
        self.max_len = check_int("max_len", max_len)
        if positions == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"d_model must be even for sinusoidal positions "
                             f"(sin/cos pairs), got {self.d_model}")
        self.positions = positions
        self.tok = nn.Embedding(self.vocab_size, self.d_model)
        self.stack = TransformerStack(n_layer, self.d_model, n_heads,
                                      causal=causal,
                                      rotary=positions == "rotary")
        if positions == "alibi":
            if slopes is None:               # the paper's, for n_heads heads
                slopes = alibi_slopes(n_heads)
            for block in self.stack.blocks:
                block.attn = ALiBiAttention(block.attn, slopes)
        self.head = nn.Linear(self.d_model, self.vocab_size)
        # made last, so that under one seed every scheme starts from the
        # same token embedding, blocks and head
        self.pos = (LearnedPositions(self.max_len, self.d_model)
                    if positions == "learned" else None)

    def position_table(self, T: int, offset: int = 0):
        """The ``(T, d_model)`` vectors added at the input for positions
        ``offset … offset+T-1``, or ``None`` (no positions, or rotary)."""
        from tinyformer.positions import binary_positions, sinusoidal_positions

        device = self.tok.weight.device
        if self.positions == "learned":
            return self.pos(T, offset)
        if self.positions == "sinusoidal":
            return sinusoidal_positions(T, self.d_model, offset=offset,
                                        device=device)
        if self.positions == "binary":
            return binary_positions(T, self.d_model, offset=offset,
                                    device=device)
        return None

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        _require_ids("idx", idx, None, "be a 2-D tensor of token ids (B, T)",
                     "integer token ids")
        if self.positions == "learned" and idx.shape[1] > self.max_len:
            raise ValueError(f"idx has {idx.shape[1]} positions, but the "
                             f"learned table has max_len={self.max_len}")
        _require_vocab(idx, self.vocab_size)
        x = self.tok(idx)                                   # (B, T, d_model)
        table = self.position_table(idx.shape[1])           # (T, d_model)
        if table is not None:
            x = x + table
        return self.head(self.stack(x))                     # (B, T, V)


def token_loss(model: nn.Module, idx: torch.Tensor,
               targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats) of ``model(idx)`` ``(B, T, V)`` against
    ``targets`` ``(B, T)``; a target of -100 is left out."""
    logits = model(idx)
    _require_ids("targets", targets, logits.shape[:-1],
                 f"have shape (B, T) = {tuple(logits.shape[:-1])}",
                 "integer token ids (-100 for none)")
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten().long(),
                           ignore_index=-100)


@torch.no_grad()
def accuracy_by_position(model: nn.Module, idx: torch.Tensor,
                         targets: torch.Tensor) -> torch.Tensor:
    """The fraction of the batch whose most likely token is the target, at
    each position: shape ``(T,)``, NaN where no sequence has a target."""
    logits = model(idx)                                     # (B, T, V)
    _require_ids("targets", targets, logits.shape[:-1],
                 f"have shape (B, T) = {tuple(logits.shape[:-1])}",
                 "integer token ids (-100 for none)")
    has = targets != -100
    right = (logits.argmax(-1) == targets) & has
    return right.sum(0).double() / has.sum(0).double()      # NaN where 0/0


def reverse_batch(gen: torch.Generator, batch_size: int, vocab_size: int,
                  n: int):
    """Reverse ``n`` random tokens: the sequence ``x_0 … x_{n-1} SEP
    x_{n-1} … x_0`` (``SEP`` is token 0, the others are drawn from
    ``1 … vocab_size-1``), cut into next-token inputs ``(B, 2n)`` and
    targets ``(B, 2n)``. Only the reversed half is a target (the first
    ``n`` targets are -100): the input at position ``m >= n`` must predict
    ``x_{2n-1-m}``."""
    B = check_int("batch_size", batch_size)
    vocab_size = check_int("vocab_size", vocab_size, minimum=2)
    n = check_int("n", n)
    x = torch.randint(1, vocab_size, (B, n), generator=gen)
    sep = torch.zeros(B, 1, dtype=torch.long)
    seq = torch.cat([x, sep, x.flip(1)], dim=1)             # (B, 2n + 1)
    targets = seq[:, 1:].clone()
    targets[:, :n] = -100
    return seq[:, :-1], targets

# -----------------------------------------------------------------------------
# Figure
# -----------------------------------------------------------------------------


def draw_position_paths(ax=None):
    """Draw where positions enter a model, in two panels side by side.

    Left, an **absolute** scheme (learned, sinusoidal or binary): a table of
    position vectors ``PE[t]`` is added to the token embeddings once, at the
    input, and the blocks above see only the sum. Right, **rotary**
    positions: nothing is added at the input; inside every attention layer
    the queries and keys (never the values) are rotated by an angle
    proportional to their position before the scores are taken. Patches that
    carry positions have ``gid="position"``. Returns the ``Axes``; ``ax=None``
    makes a new 8.8 x 5.4 in figure, the size the layout is made for.
    """
    ax = schematic_axes(ax, 8.8, 5.4)
    pink = PART_COLOURS["position"]
    # ---- left: absolute positions, added once
    lx = 1.7
    ax.text(2.2, 5.25, "absolute: added once, at the input", ha="center",
            va="center", fontsize=FONT, weight="bold")
    box(ax, lx, 0.45, 2.0, 0.45, "token ids (B, T)")
    arrow(ax, (lx, 0.68), (lx, 1.0))
    box(ax, lx, 1.25, 2.0, 0.5, "token embedding")
    arrow(ax, (lx, 1.5), (lx, 1.83))
    add_node(ax, lx, 2.0)
    box(ax, 3.35, 2.0, 1.5, 0.62, "position table\nPE[t]  (T, $d_\\mathrm{model}$)",
         colour=pink, gid="position")
    arrow(ax, (2.6, 2.0), (lx + 0.17, 2.0))
    arrow(ax, (lx, 2.17), (lx, 2.6))
    box(ax, lx, 3.35, 2.6, 1.5, "", colour=PART_COLOURS["attn"], gid="blocks")
    ax.text(lx, 3.35, "blocks 1 … L\n(attention and FFN)\nsee token + position\n"
            "mixed in one vector", ha="center", va="center", fontsize=FONT)
    arrow(ax, (lx, 4.1), (lx, 4.45))
    box(ax, lx, 4.7, 2.0, 0.45, "linear head → logits")
    # ---- right: rotary positions, inside every attention layer
    rx = 6.55
    ax.text(rx, 5.25, "rotary: in every layer, on q and k", ha="center",
            va="center", fontsize=FONT, weight="bold")
    box(ax, rx, 0.45, 2.0, 0.45, "token ids (B, T)")
    arrow(ax, (rx, 0.68), (rx, 1.0))
    box(ax, rx, 1.25, 2.0, 0.5, "token embedding")
    arrow(ax, (rx, 1.5), (rx, 1.85))
    box(ax, rx, 3.1, 4.0, 2.5, "", colour=PART_COLOURS["attn"], gid="blocks")
    ax.text(4.7, 4.2, "attention, in each of blocks 1 … L", ha="left",
            va="center", fontsize=9, style="italic")
    ax.plot([5.35, 7.75], [2.0, 2.0], color="#333333", lw=1.3)
    ax.plot([rx, rx], [1.85, 2.0], color="#333333", lw=1.3)
    for cx, name in ((5.35, "$W_Q$"), (6.55, "$W_K$"), (7.75, "$W_V$")):
        arrow(ax, (cx, 2.0), (cx, 2.19))
        box(ax, cx, 2.4, 0.9, 0.42, name, colour="white")
    for cx, name in ((5.35, "rotate q\nby $t\\,\\theta_i$"),
                     (6.55, "rotate k\nby $t\\,\\theta_i$")):
        arrow(ax, (cx, 2.61), (cx, 2.74))
        box(ax, cx, 3.05, 1.05, 0.62, name, colour=pink, gid="position")
        arrow(ax, (cx, 3.36), (cx, 3.59))
    arrow(ax, (7.75, 2.61), (7.75, 3.59))
    ax.text(7.82, 3.1, "v: not\nrotated", ha="left", va="center", fontsize=9)
    box(ax, rx, 3.8, 3.6, 0.42, "scores, softmax, average of v",
         colour="white")
    arrow(ax, (rx, 4.35), (rx, 4.47))
    box(ax, rx, 4.7, 2.0, 0.45, "linear head → logits")
    return ax


__all__ = [
    "ALiBiAttention", "POSITION_SCHEMES", "PositionLM", "accuracy_by_position", "draw_position_paths", "reverse_batch",
    "token_loss",
]
