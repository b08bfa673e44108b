"""Chapter 5 (the GPT): a count-based stand-in for a trained model, a profile of a training
step, and the figure of the whole GPT.

:class:`BigramLM` reads the next-token distribution off counts of adjacent pairs; it stands in for
a trained network while the chapter studies decoding (greedy, temperature, top-k, top-p), so the
sampling code can be judged against probabilities known exactly. :func:`profile_step` splits one
training step's CPU time by kind of work (:data:`STEP_PARTS`). :func:`draw_gpt` draws the model as
one column with the shapes between its parts.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os

import torch
import torch.nn as nn

from tinyformer.validation import _require_ids, _require_vocab, check_int
from tinyformer.viz import PART_COLOURS, arrow, box, schematic_axes

# -----------------------------------------------------------------------------
# A count-based model
# -----------------------------------------------------------------------------


class BigramLM(nn.Module):
    """The next-token distribution read off counts of adjacent pairs.

    ``log_probs[a, b] = log (count(a b) + alpha) / Σ_c (count(a c) + alpha)``
    is a ``(V, V)`` table, and ``model(idx)`` looks up one row per token:
    logits ``(B, T, V)`` that depend on the last token only. It reads a
    table as a GPT with no blocks (and no final norm or positions) does,
    except that its table has full rank (a GPT's ``E W_U`` has rank at most
    ``d_model``); ``alpha`` gives every pair never seen a small probability, the long
    tail of a real model's distribution.

    ``block_size`` is 1: the model reads only the last token, so
    :func:`tinyformer.sampling.generate` may crop the context to it.
    """

    def __init__(self, ids: torch.Tensor, vocab_size: int,
                 alpha: float = 0.01):
        super().__init__()
        V = check_int("vocab_size", vocab_size, minimum=2)
        if not isinstance(ids, torch.Tensor) or ids.dim() != 1:
            got = (tuple(ids.shape) if isinstance(ids, torch.Tensor)
                   else type(ids).__name__)
            raise ValueError(f"ids must be a 1-D tensor of token ids, "
                             f"got {got}")
        _require_ids("ids", ids[None], None, "be a 1-D tensor of token ids",
                     "integer token ids")
        if ids.numel() < 2 or ids.min() < 0 or ids.max() >= V:
            raise ValueError(f"ids must hold at least 2 token ids in "
                             f"[0, vocab_size={V})")
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
            raise TypeError(f"alpha must be a number, "
                            f"got {type(alpha).__name__}")
        if not (alpha > 0 and math.isfinite(alpha)):
            raise ValueError(f"alpha must be a finite number > 0, "
                             f"got {alpha!r}")
        self.vocab_size = V
        #: The model reads only the last token, so ``generate`` may crop
        #: the context to it (``context_length`` reads this attribute).
        self.block_size = 1
        counts = torch.zeros(V, V, device=ids.device)
        counts.index_put_((ids[:-1], ids[1:]),
                          torch.ones(ids.numel() - 1, device=ids.device),
                          accumulate=True)                  # (V, V)
        smoothed = counts + float(alpha)
        self.register_buffer("counts", counts)
        self.register_buffer("log_probs",
                             (smoothed / smoothed.sum(1, keepdim=True)).log())

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        _require_ids("idx", idx, None, "be a 2-D tensor of token ids (B, T)",
                     "integer token ids")
        _require_vocab(idx, self.vocab_size)
        return self.log_probs[idx]                           # (B, T, V)

# -----------------------------------------------------------------------------
# A training step, profiled
# -----------------------------------------------------------------------------


#: The kinds of work in a training step, matched against profiler op names
#: in this order (the first pattern that matches wins).
STEP_PARTS = (
    # before attention: "aten::_log_softmax" also contains "_softmax"
    ("cross-entropy", ("log_softmax", "nll_loss")),
    ("attention", ("scaled_dot_product", "flash_attention", "bmm",
                   "_softmax", "baddbmm")),
    ("matrix multiplies", ("aten::mm", "aten::addmm")),
    ("layer norm", ("layer_norm",)),
    ("GELU", ("gelu",)),
    ("embeddings", ("embedding",)),
    ("optimizer", ("adam", "_foreach")),
)


def step_part(op_name: str) -> str:
    """The kind of work (a name from :data:`STEP_PARTS`, else ``"other"``)
    that a profiler op such as ``aten::addmm`` belongs to."""
    name = op_name.lower()
    for part, patterns in STEP_PARTS:
        if any(p in name for p in patterns):
            return part
    return "other"


@contextlib.contextmanager
def _quiet_fd2():
    """Silence file descriptor 2 (the C++ profiler logs its start and stop
    there, into a notebook's output); Python's own ``sys.stderr`` is left
    alone where it is not fd 2, as in Jupyter, so warnings still show."""
    try:
        saved = os.dup(2)
    except OSError:          # no fd 2 to silence
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def profile_step(step, repeats: int = 5) -> dict:
    """Milliseconds of CPU time per call of ``step()`` (one training step)
    by kind of work: every op's self time, summed by :func:`step_part`.

    ``step`` runs once untimed first (allocations, lazy initialisation),
    then ``repeats`` times under ``torch.profiler``. The parts add up to the
    profiled time, which runs slower than an unprofiled step."""
    from torch.profiler import ProfilerActivity, profile

    repeats = check_int("repeats", repeats)
    step()
    with _quiet_fd2(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            step()
    parts: dict[str, float] = {part: 0.0 for part, _ in STEP_PARTS}
    parts["other"] = 0.0
    for event in prof.key_averages():
        parts[step_part(event.key)] += event.self_cpu_time_total / 1e3
    return {part: ms / repeats for part, ms in parts.items()}

# -----------------------------------------------------------------------------
# Figure
# -----------------------------------------------------------------------------


def draw_gpt(ax=None):
    """Draw the whole GPT as one column, with the shape of what flows between
    the parts, the weight shared by the embedding and the LM head (tied), and
    the decoding loop that appends each sampled token to the input.

    The tied matrix is drawn once, between the two boxes that use it
    (``gid="tied"``). Returns the ``Axes``; ``ax=None`` makes a new
    7.6 x 6.4 in figure, the size the layout is made for.
    """
    ax = schematic_axes(ax, 7.6, 6.4)
    cx, w = 2.9, 2.9
    steps = [   # (y, text, colour, shape of the output)
        (0.45, "token ids", "#eef3f8", "(B, T)"),
        (1.25, "token embedding  E[idx]", "#dcefdc", "(B, T, $d_\\mathrm{model}$)"),
        (2.05, "+ positions (learned or\nsinusoidal; rotary: in attention)", PART_COLOURS["position"],
         "(B, T, $d_\\mathrm{model}$)"),
        (3.2, "transformer blocks × L\n(Chapters 2 to 4)", PART_COLOURS["attn"], "(B, T, $d_\\mathrm{model}$)"),
        (4.25, "final layer norm", PART_COLOURS["ln"], "(B, T, $d_\\mathrm{model}$)"),
        (5.05, "LM head  h $E^{\\top}$ → logits", "#dcefdc", "(B, T, V)"),
    ]
    heights = {3.2: 0.95, 2.05: 0.62}
    for i, (y, text, colour, shape) in enumerate(steps):
        h = heights.get(y, 0.5)
        box(ax, cx, y, w, h, text, colour=colour)
        ax.text(cx + w / 2 + 0.12, y, shape, ha="left", va="center", fontsize=9, color="#555555")
        if i:
            below = steps[i - 1][0] + heights.get(steps[i - 1][0], 0.5) / 2
            arrow(ax, (cx, below), (cx, y - h / 2))
    # the tied matrix, drawn once, used at both ends
    tx = 6.7
    box(ax, tx, 3.15, 1.5, 0.95, "E\n(V, $d_\\mathrm{model}$)\none matrix", colour="#dcefdc", gid="tied")
    for y in (1.25, 5.05):
        ax.annotate("", xy=(5.65, y), xytext=(tx - 0.75, 3.15 + (0.3 if y > 3 else -0.3)),
                    arrowprops=dict(arrowstyle="-|>", color="#2a7a2a", lw=1.2, ls="--", mutation_scale=12))
    ax.text(tx, 2.6, "tied weights", ha="center", va="top", fontsize=9, color="#2a7a2a")
    # decoding: softmax over the last position, sample, append, run again
    arrow(ax, (cx, 5.3), (cx, 5.62))
    box(ax, cx, 5.85, w, 0.42, "softmax → sample one token", colour="white")
    loop = 1.1
    ax.plot([cx - w / 2, loop, loop], [5.85, 5.85, 0.45], color="#8d6cc4", lw=1.3)
    ax.annotate("", xy=(cx - w / 2, 0.45), xytext=(loop, 0.45),
                arrowprops=dict(arrowstyle="-|>", color="#8d6cc4", lw=1.3, shrinkA=0, shrinkB=0,
                                mutation_scale=14))
    ax.text(loop - 0.1, 3.2, "decoding:\nappend it,\nrun again", ha="right", va="center", fontsize=9,
            color="#8d6cc4")
    return ax


__all__ = ["BigramLM", "STEP_PARTS", "draw_gpt", "profile_step", "step_part"]
