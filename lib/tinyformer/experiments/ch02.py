"""Chapter 2 (attention): the smallest model that attends, and the chapter's two schematics.

:class:`OneLayerAttention` (embeddings → one multi-head attention → a linear read-out) is what the
chapter trains on :mod:`~tinyformer.experiments.toy`'s tasks to show attention learning to look
back, and with which it measures the effect of the ``1/√d_k`` scale. :func:`draw_head_dataflow`
draws one head's dataflow with the shape of every tensor; :func:`draw_split_heads` draws how
multi-head attention splits a projection into heads and merges them.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from tinyformer.attention import MultiHeadAttention
from tinyformer.validation import _require_ids, check_int
from tinyformer.viz import FONT, HEAD_COLOURS, arrow, box, cell_grid, schematic_axes

# -----------------------------------------------------------------------------
# The model
# -----------------------------------------------------------------------------


class OneLayerAttention(nn.Module):
    """Embeddings → one ``MultiHeadAttention`` → linear read-out: the
    smallest model that attends.

    Token and learned position embeddings are added (the positions let
    attention tell "the previous token" from any other); the read-out sees
    each token's vector plus what attention brought to it. Token ids
    ``(B, T)`` give logits ``(B, T, n_outputs, vocab_size)`` and the
    attention weights ``(B, n_heads, T, T)``.
    """

    def __init__(self, vocab_size: int, block_size: int, d_model: int = 32,
                 n_heads: int = 1, n_outputs: int = 1, causal: bool = True,
                 scale=None):
        super().__init__()
        self.vocab_size = check_int("vocab_size", vocab_size)
        self.block_size = check_int("block_size", block_size)
        self.n_outputs = check_int("n_outputs", n_outputs)
        d_model = check_int("d_model", d_model)
        self.tok = nn.Embedding(self.vocab_size, d_model)
        self.pos = nn.Embedding(self.block_size, d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, causal=causal,
                                       scale=scale)
        self.readout = nn.Linear(d_model, self.n_outputs * self.vocab_size)

    def _check_idx(self, idx) -> None:
        _require_ids("idx", idx, None, "be a 2-D tensor of token ids (B, T)",
                     "integer token ids")
        if not 1 <= idx.shape[1] <= self.block_size:
            raise ValueError(f"idx has {idx.shape[1]} positions; the model "
                             f"takes 1 to block_size={self.block_size}")
        # meta tensors (used to test devices) carry no values to check
        if idx.device.type == "meta" or not idx.numel():
            return
        if idx.min() < 0 or idx.max() >= self.vocab_size:
            raise ValueError(f"token ids in idx must lie in "
                             f"[0, vocab_size={self.vocab_size}), got ids "
                             f"from {int(idx.min())} to {int(idx.max())}")

    def forward(self, idx: torch.Tensor, mask: torch.Tensor | None = None):
        self._check_idx(idx)
        B, T = idx.shape
        positions = torch.arange(T, device=idx.device)  # on idx's device
        h = self.tok(idx) + self.pos(positions)         # (B, T, d_model)
        # a: (B, T, d_model), weights: (B, n_heads, T, T)
        a, weights = self.attn(h, mask=mask, return_weights=True)
        logits = self.readout(h + a)        # (B, T, n_outputs·vocab_size)
        logits = logits.view(B, T, self.n_outputs, self.vocab_size)
        return logits, weights

# -----------------------------------------------------------------------------
# Figures
# -----------------------------------------------------------------------------


def draw_head_dataflow(ax=None, T: int = 4):
    """Draw the dataflow of ONE causal attention head, with the shape of every tensor.

    x ``(T, d_model)`` → three projections → q, k ``(T, d_k)`` and v ``(T, d_v)`` → scores
    ``q kᵀ / √d_k`` ``(T, T)`` → causal mask (−∞ above the diagonal) → softmax over each row
    (the weights) → weights · v ``(T, d_v)``. The three ``(T, T)`` stages show a small ``T x T``
    example (``T`` from 2 to 8). Returns the ``Axes``; it is laid out for a new 9 x 4.3 in figure,
    which is what ``ax=None`` makes (pass an ``ax`` of about that size).
    """
    T = check_int("T", T, minimum=2)
    if T > 8:
        raise ValueError(f"T must be at most 8 for the small matrices to stay readable, got {T}")
    ax = schematic_axes(ax, 9.0, 4.3)
    rng = np.random.default_rng(0)                            # fixed: the picture never changes
    scores = rng.normal(size=(T, T))
    lower = np.tril(np.ones((T, T), dtype=bool))              # allowed: key j <= query i
    weights = np.where(lower, np.exp(scores), 0.0)
    weights /= weights.sum(axis=1, keepdims=True)

    import matplotlib as mpl

    blues = mpl.colormaps["Blues"]
    shade = (scores - scores.min()) / (scores.max() - scores.min())
    score_cols = [[blues(0.15 + 0.6 * shade[i, j]) for j in range(T)] for i in range(T)]
    mask_cols = [[score_cols[i][j] if lower[i, j] else "#4a4a4a" for j in range(T)] for i in range(T)]
    weight_cols = [[blues(0.1 + 0.85 * weights[i, j]) if lower[i, j] else "white" for j in range(T)]
                   for i in range(T)]

    # inputs and the three projections
    box(ax, 0.7, 2.35, 1.2, 0.8, "$x$\n(T, $d_\\mathrm{model}$)", colour="#f6f1e7", gid="x")
    rows = {"q": 3.55, "k": 2.35, "v": 0.7}
    widths = {"q": "d_k", "k": "d_k", "v": "d_v"}
    for name, y in rows.items():
        box(ax, 2.75, y, 1.4, 0.78, f"${name} = x\\,W_{name.upper()}$\n(T, ${widths[name]}$)", gid=name)
        arrow(ax, (1.3, 2.35), (2.05, y))

    # the three (T, T) stages, each a box holding a small matrix
    cell = 0.17
    stages = [(4.8, "scores\n$q\\,k^\\top / \\sqrt{d_k}$", score_cols, "(T, T)"),
              (6.4, "causal mask", mask_cols, "$-\\infty$ above\nthe diagonal"),
              (8.0, "softmax\nover each row", weight_cols, "weights (T, T)")]
    for cx, title, colours, note in stages:
        box(ax, cx, 2.95, 1.4, 2.1, "", gid="stage")
        ax.text(cx, 3.92, title, ha="center", va="top", fontsize=FONT)
        cell_grid(ax, cx - T * cell / 2, 3.15, colours, cell, gid="matrix")
        ax.text(cx, 3.15 - T * cell - 0.1, note, ha="center", va="top", fontsize=9)
    arrow(ax, (3.45, 3.55), (4.1, 3.25))                     # q -> scores
    arrow(ax, (3.45, 2.35), (4.1, 2.65))                     # k -> scores
    arrow(ax, (5.5, 2.95), (5.7, 2.95))
    arrow(ax, (7.1, 2.95), (7.3, 2.95))

    # the weighted sum of the values
    box(ax, 7.85, 0.7, 1.9, 0.85, "output = weights · v\n(T, $d_v$)", colour="#e7f3ea", gid="output")
    arrow(ax, (8.0, 1.9), (8.0, 1.13))                       # weights -> output
    arrow(ax, (3.45, 0.7), (6.9, 0.7), label="values v: what each key hands over")
    ax.text(7.9, 1.52, "row i: how much\nquery i takes\nfrom each key", ha="right", va="center",
            fontsize=9, color="#444444")
    return ax


def draw_split_heads(ax=None, n_heads: int = 3, d_head: int = 2, T: int = 4):
    """Draw how multi-head attention splits a projection into heads and merges them again.

    A ``(T, d_model)`` projection (``d_model = n_heads·d_head``) with its columns coloured by head →
    reshape ``(T, n_heads, d_head)`` → transpose ``(n_heads, T, d_head)``, one panel per head →
    each head attends on its own → transpose back and reshape, i.e. concatenate, ``(T, d_model)`` →
    ``W_O`` mixes the heads. Head ``h`` owns the contiguous columns ``h·d_head : (h+1)·d_head``.
    ``T`` is the number of rows drawn. Returns the ``Axes``; ``ax=None`` makes a new figure of
    about 9 x 3 in, the size the layout is made for.
    """
    n_heads = check_int("n_heads", n_heads)
    d_head = check_int("d_head", d_head)
    T = check_int("T", T)
    if n_heads > len(HEAD_COLOURS) or n_heads * d_head > 12 or T > 6:
        raise ValueError(f"the drawing stays readable up to {len(HEAD_COLOURS)} heads, d_model = "
                         f"n_heads·d_head <= 12 and T <= 6; got n_heads={n_heads}, d_head={d_head}, T={T}")
    d_model = n_heads * d_head
    cell = min(0.18, 1.1 / d_model)                           # a (T, d_model) panel is at most 1.1 in wide
    full_w, panel_w, head_h = d_model * cell, d_head * cell, T * cell
    gap, step = 0.6 * cell, 0.4                               # between reshaped blocks; arrow length
    reshape_w = full_w + (n_heads - 1) * gap
    stack_h = n_heads * head_h + (n_heads - 1) * 0.35         # heads stacked, 0.35 in apart
    xs = [0.2]                                                # left edges of the six stages
    for width, arrow_w in ((full_w, step), (reshape_w, 0.9), (panel_w, 1.1), (panel_w, step), (full_w, 0.6)):
        xs.append(xs[-1] + width + arrow_w)
    height = max(2.6, stack_h + 1.35)
    ax = schematic_axes(ax, xs[-1] + full_w + 0.2, height)
    mid = 0.45 + stack_h / 2                                  # the centre line of the drawing
    top = mid + head_h / 2                                    # top of the (T, ...) panels
    panel_tops = [mid + stack_h / 2 - h * (head_h + 0.35) for h in range(n_heads)]
    colour_of_col = [HEAD_COLOURS[c // d_head] for c in range(d_model)]

    def caption(x0, width, title, shape, y_top, y_bottom):
        ax.text(x0 + width / 2, y_top + 0.1, title, ha="center", va="bottom", fontsize=FONT)
        ax.text(x0 + width / 2, y_bottom - 0.1, shape, ha="center", va="top", fontsize=9)

    def link(i, width, above=None):
        """The arrow from stage i (of the given width) to stage i + 1, with an optional label."""
        start, end = (xs[i] + width + 0.06, mid), (xs[i + 1] - 0.06, mid)
        arrow(ax, start, end)
        if above:
            ax.text((start[0] + end[0]) / 2, mid + 0.08, above, ha="center", va="bottom", fontsize=FONT)

    # 1. the projection, e.g. Q = x W_Q, its columns coloured by the head that owns them
    cell_grid(ax, xs[0], top, [colour_of_col] * T, cell, gid="projection")
    every = cell >= 0.15                                      # room to number every column?
    for c in range(0, d_model, 1 if every else d_head):       # else only where each head starts
        ax.text(xs[0] + (c + 0.5) * cell, top + 0.03, str(c), ha="center", va="bottom", fontsize=9)
    caption(xs[0], full_w, "$Q = x\\,W_Q$", "(T, $d_\\mathrm{model}$)", top + 0.2, top - head_h)
    link(0, full_w)

    # 2. reshape: the same numbers, each row cut into n_heads consecutive blocks of d_head
    for h in range(n_heads):
        cell_grid(ax, xs[1] + h * (panel_w + gap), top, [[HEAD_COLOURS[h]] * d_head] * T, cell, gid="reshaped")
    caption(xs[1], reshape_w, "reshape", "(T, $n_\\mathrm{heads}$, $d_\\mathrm{head}$)", top, top - head_h)
    link(1, reshape_w)

    # 3. transpose: the head axis moves in front; head h is a (T, d_head) panel of its own
    for h, y in enumerate(panel_tops):
        cell_grid(ax, xs[2], y, [[HEAD_COLOURS[h]] * d_head] * T, cell, gid="head")
        first, last = h * d_head, (h + 1) * d_head - 1        # the columns of Q this head owns
        if every:
            for c in range(d_head):
                ax.text(xs[2] + (c + 0.5) * cell, y + 0.03, str(first + c), ha="center", va="bottom", fontsize=9)
        else:
            ax.text(xs[2] + panel_w / 2, y + 0.03, f"{first}–{last}", ha="center", va="bottom", fontsize=9)
        ax.text(xs[2] - 0.06, y - cell / 2, f"head {h}", ha="right", va="center", fontsize=9)
    caption(xs[2], panel_w, "transpose", "($n_\\mathrm{heads}$,\nT, $d_\\mathrm{head}$)",
            panel_tops[0] + 0.18, panel_tops[-1] - head_h)
    link(2, panel_w, above="attend,\neach head\nalone")

    # 4. the heads' outputs, same shape
    for h, y in enumerate(panel_tops):
        cell_grid(ax, xs[3], y, [[HEAD_COLOURS[h]] * d_head] * T, cell, edge="#333333", gid="head_out")
    caption(xs[3], panel_w, "outputs", "($n_\\mathrm{heads}$,\nT, $d_\\mathrm{head}$)",
            panel_tops[0] + 0.03, panel_tops[-1] - head_h)
    link(3, panel_w)

    # 5. merge: transpose back and reshape, i.e. concatenate the heads side by side
    cell_grid(ax, xs[4], top, [colour_of_col] * T, cell, edge="#333333", gid="merged")
    caption(xs[4], full_w, "concatenate", "(T, $d_\\mathrm{model}$)", top, top - head_h)
    link(4, full_w, above="$\\cdot\\, W_O$")

    # 6. W_O mixes the heads: every output column draws on every head
    cell_grid(ax, xs[5], top, [["#9aa5b1"] * d_model] * T, cell, edge="#333333", gid="output")
    caption(xs[5], full_w, "heads mixed", "(T, $d_\\mathrm{model}$)", top, top - head_h)
    return ax


__all__ = ["OneLayerAttention", "draw_head_dataflow", "draw_split_heads"]
