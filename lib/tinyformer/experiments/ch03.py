"""Chapter 3 (the transformer block): taking a stack of blocks apart, and measuring it.

Surgery in place: remove every layer norm (:func:`remove_norms_`) or every attention or
feed-forward sublayer (:func:`remove_sublayer_`). A regression task that needs a non-linearity per
token (:func:`absolute_value_batch`, trained by :func:`train_regression`) and the best any affine
map can do on it (:func:`affine_floor`). Measurements of a stack at initialisation: each block's
gradient norm (:func:`block_grad_norms`), the gradient reaching each state of the stream per
position (:func:`stream_grad_norms`), each block's Jacobian (:func:`block_jacobians`), the size
of each sublayer's output (:func:`sublayer_output_rms`), what each sublayer writes to the stream
(:func:`sublayer_writes`), attention with its weights frozen (:func:`attend_with_weights`), and
how alike the positions' vectors have become (:func:`position_cosine`). :func:`draw_block` draws
a block in either norm placement.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from tinyformer.experiments.toy import train
from tinyformer.validation import check_int
from tinyformer.viz import FONT, PART_COLOURS, add_node, arrow, box, schematic_axes

# -----------------------------------------------------------------------------
# Surgery, a regression task, and measurements
# -----------------------------------------------------------------------------


SUBLAYERS = ("attn", "ffn")


class ZeroSublayer(nn.Module):
    """Stands in for a removed sublayer: returns zeros shaped like its input
    (a mask argument is accepted and ignored), so ``x + sublayer(x)`` is
    ``x``."""

    def forward(self, x: torch.Tensor, mask=None) -> torch.Tensor:
        return torch.zeros_like(x)


def _blocks(module: nn.Module) -> list[nn.Module]:
    """The transformer blocks inside ``module`` (itself included), in order."""
    from tinyformer.blocks import TransformerBlock  # chapter 3's module

    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got "
                        f"{type(module).__name__}")
    found = [m for m in module.modules() if isinstance(m, TransformerBlock)]
    if not found:
        raise ValueError("module holds no TransformerBlock")
    return found


def remove_norms_(module: nn.Module) -> nn.Module:
    """Replace every layer norm inside ``module`` (each block's ``ln_1`` and
    ``ln_2``, a stack's ``ln_f``) by ``nn.Identity``, in place; returns it."""
    from tinyformer.blocks import LayerNorm, RMSNorm

    norms = (LayerNorm, RMSNorm, nn.LayerNorm, nn.RMSNorm)
    for block in _blocks(module):
        block.ln_1, block.ln_2 = nn.Identity(), nn.Identity()
    for parent in module.modules():
        for name, child in list(parent.named_children()):
            if isinstance(child, norms):
                setattr(parent, name, nn.Identity())
    return module


def remove_sublayer_(module: nn.Module, name: str) -> nn.Module:
    """Replace every block's ``attn`` or ``ffn`` (``name``) by a
    :class:`ZeroSublayer`, in place, so that the block only ever adds zero
    there (a post-norm block still applies its layer norm); returns it."""
    if name not in SUBLAYERS:
        raise ValueError(f"name must be one of {SUBLAYERS}, got {name!r}")
    for block in _blocks(module):
        setattr(block, name, ZeroSublayer())
    return module


def absolute_value_batch(gen: torch.Generator, batch_size: int, T: int,
                         d_model: int):
    """Inputs ``x`` of shape ``(B, T, d_model)`` with standard normal
    entries, and the target ``|x|`` (each number's absolute value, a
    non-linear map of each token on its own)."""
    B, T = check_int("batch_size", batch_size), check_int("T", T)
    x = torch.randn(B, T, check_int("d_model", d_model), generator=gen)
    return x, x.abs()


def train_regression(model: nn.Module, make_batch, steps: int,
                     lr: float = 1e-2, seed: int = 1) -> list[float]:
    """Adam on the mean squared error of ``model(x)`` against ``y``, with a
    fresh batch ``make_batch(generator) -> (x, y)`` at every step (a CPU
    generator seeded with ``seed``, batches moved to the model's device).
    Returns the per-step losses."""
    return train(model, make_batch, steps, lr, seed,
                 loss_fn=lambda m, x, y: F.mse_loss(m(x), y))


def affine_floor(x: torch.Tensor, y: torch.Tensor) -> float:
    """The smallest mean squared error of any affine map ``x A + b`` as a
    prediction of ``y``: least squares, in float64. ``x``: ``(N, d_in)``,
    ``y``: ``(N, d_out)``, the same ``N``."""
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            got = (tuple(t.shape) if isinstance(t, torch.Tensor)
                   else type(t).__name__)
            raise ValueError(f"{name} must be a 2-D tensor (N, d), got {got}")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y must have the same number of rows, got "
                         f"{x.shape[0]} and {y.shape[0]}")
    x1 = torch.cat([x, torch.ones_like(x[:, :1])], dim=1).double()
    y = y.double()
    coef = torch.linalg.lstsq(x1.cpu(), y.cpu(), driver="gelsd").solution
    return float((x1.cpu() @ coef - y.cpu()).pow(2).mean())


def block_grad_norms(stack: nn.Module, x: torch.Tensor, seed: int = 12345,
                     names=None) -> list[float]:
    """Backpropagate the loss ``sum(out * g)`` (``g`` standard normal, drawn
    from ``seed``) through ``stack`` and return, for each block, the norm of
    the gradient of its parameters; ``names`` (suffixes such as
    ``"q_proj.weight"``) keeps only the matching parameters. The stack's
    gradients are cleared before and after.

    Draw ``x`` from another seed than ``g``: an input drawn from the same seed
    and shape as ``g`` equals it, and the loss then rewards copying the input.
    """
    blocks = _blocks(stack)
    gen = torch.Generator().manual_seed(check_int("seed", seed, minimum=None))
    stack.zero_grad(set_to_none=True)
    out = stack(x)
    g = torch.randn(out.shape, generator=gen, dtype=out.dtype).to(out.device)
    (out * g).sum().backward()
    norms = []
    for block in blocks:
        total = 0.0
        for pname, p in block.named_parameters():
            if names is not None and not any(pname.endswith(n) for n in names):
                continue
            if p.grad is not None:
                total += float(p.grad.double().pow(2).sum())
        norms.append(math.sqrt(total))
    stack.zero_grad(set_to_none=True)
    return norms


def stream_grad_norms(stack: nn.Module, x: torch.Tensor,
                      seed: int = 12345) -> list[torch.Tensor]:
    """For the loss of :func:`block_grad_norms` (``sum(out * g)``, ``g``
    drawn from ``seed``), the gradient with respect to each state of the
    residual stream, ``x_0`` (the input) to ``x_L``, as the norm per position:
    a list of ``n_layer + 1`` tensors of shape ``(T,)``, each the norm over
    the batch and the features. ``stack`` must accept ``return_stream=True``
    (a ``TransformerStack``)."""
    _blocks(stack)
    gen = torch.Generator().manual_seed(check_int("seed", seed, minimum=None))
    stack.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)  # x_0 gets a gradient too
    out, stream = stack(x, return_stream=True)
    g = torch.randn(out.shape, generator=gen, dtype=out.dtype).to(out.device)
    grads = torch.autograd.grad((out * g).sum(), stream)
    stack.zero_grad(set_to_none=True)
    return [scaled_norm(gr.detach(), dim=tuple(range(gr.dim() - 2)) + (-1,))  # over all but the position
            for gr in grads]


def scaled_norm(x: torch.Tensor, dim=None) -> torch.Tensor:
    """The 2-norm of ``x`` (over ``dim``, default all of it), computed on ``x``
    divided by its largest magnitude: an exploding stack's gradient of 1e170
    squares past float64's largest number (1.8e308), and ``x.norm()`` squares."""
    scale = x.abs().amax().clamp_min(torch.finfo(x.dtype).tiny)
    return torch.linalg.vector_norm(x / scale, dim=dim) * scale


def block_jacobians(stack: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The Jacobian of each block at the input it receives in a forward pass
    of ``x`` (one sequence, ``(T, d_model)``): matrix ``l`` is
    ``d x_{l+1} / d x_l`` flattened to ``(T·d_model, T·d_model)``, row
    ``t·d_model + c`` for output position ``t`` and feature ``c``."""
    from torch.func import jacrev

    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        got = (tuple(x.shape) if isinstance(x, torch.Tensor)
               else type(x).__name__)
        raise ValueError(f"x must be one sequence (T, d_model), got {got}")
    n = x.numel()
    jacobians = []
    with torch.no_grad():
        for block in _blocks(stack):
            jacobians.append(jacrev(block)(x).reshape(n, n))
            x = block(x)
    return jacobians


def sublayer_output_rms(stack: nn.Module, x: torch.Tensor) -> dict:
    """Run ``stack(x)`` and return ``{"attn": [...], "ffn": [...]}``: the
    root-mean-square size of what each block's attention and feed-forward
    sublayer output, block by block."""
    sizes = {name: [] for name in SUBLAYERS}
    hooks = []
    for block in _blocks(stack):
        for name in SUBLAYERS:
            def record(module, args, out, name=name):
                sizes[name].append(float(out.detach().pow(2).mean().sqrt()))
            hooks.append(getattr(block, name).register_forward_hook(record))
    try:
        with torch.no_grad():
            stack(x)
    finally:
        for h in hooks:
            h.remove()
    return sizes


def sublayer_writes(stack: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Run ``stack(x)`` and return what every sublayer wrote into the
    stream, in the order they ran (block 0's attention, block 0's FFN,
    block 1's attention, ...): a tensor of shape ``(2 * n_blocks, *x.shape)``
    (for ``x`` of shape ``(B, T, d_model)``)."""
    outputs = []
    hooks = []
    for block in _blocks(stack):
        for name in SUBLAYERS:
            def record(module, args, out):
                outputs.append(out.detach())
            hooks.append(getattr(block, name).register_forward_hook(record))
    try:
        with torch.no_grad():
            stack(x)
    finally:
        for h in hooks:
            h.remove()
    return torch.stack(outputs)


def attend_with_weights(attn: nn.Module, x: torch.Tensor,
                        weights: torch.Tensor) -> torch.Tensor:
    """What multi-head attention ``attn`` writes for input ``x``
    ``(B, T, d_model)`` when its attention weights are ``weights``
    ``(B, n_heads, T, T)`` instead of its own: the values and output
    projection are ``attn``'s (a control that freezes the softmax)."""
    from tinyformer.attention import merge_heads, split_heads

    if weights.shape != (*x.shape[:-2], attn.n_heads, x.shape[-2],
                         x.shape[-2]):
        raise ValueError(f"weights must have shape (B, n_heads, T, T) = "
                         f"{(*x.shape[:-2], attn.n_heads, x.shape[-2], x.shape[-2])}"
                         f", got {tuple(weights.shape)}")
    v = split_heads(attn.v_proj(x), attn.n_heads)  # (B, H, T, d_head)
    return attn.o_proj(merge_heads(weights @ v))  # (B, T, d_model)


def position_cosine(x: torch.Tensor) -> float:
    """How alike the positions' vectors are: the mean cosine similarity
    between the vectors of two different positions of the same sequence.
    ``x``: ``(..., T, d)`` with ``T >= 2``; 1 means every position holds the
    same direction."""
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[-2] < 2:
        got = (tuple(x.shape) if isinstance(x, torch.Tensor)
               else type(x).__name__)
        raise ValueError(f"x must have shape (..., T, d) with T >= 2, "
                         f"got {got}")
    u = F.normalize(x.detach().double(), dim=-1)          # (..., T, d)
    cos = u @ u.transpose(-2, -1)                         # (..., T, T)
    T = x.shape[-2]
    diagonal = cos.diagonal(dim1=-2, dim2=-1).sum(-1)
    off_diagonal = cos.sum(dim=(-2, -1)) - diagonal
    return float((off_diagonal / (T * (T - 1))).mean())

# -----------------------------------------------------------------------------
# Figure
# -----------------------------------------------------------------------------


def draw_block(norm: str = "pre", ax=None):
    """Draw one transformer block on its residual stream, bottom to top.

    ``norm="pre"``: each sublayer reads the stream through its own layer
    norm and its output is added to the stream, which is never normalised
    inside the block. ``norm="post"``: each sublayer reads the stream
    directly, and the stream is layer-normalised right after each
    addition. The stream is the vertical line; ⊕ marks an addition.
    Returns the ``Axes``; ``ax=None`` makes a new 4.4 x 6 in figure, the size
    the layout is made for.
    """
    if norm not in ("pre", "post"):
        raise ValueError(f"norm must be 'pre' or 'post', got {norm!r}")
    ax = schematic_axes(ax, 4.4, 6.0)
    sx, bx, w = 1.1, 3.0, 2.1                   # stream x, branch x, box width
    # the residual stream: a thick line from x_l to x_(l+1)
    ax.plot([sx, sx], [0.55, 5.45], color=PART_COLOURS["stream"], lw=4,
            solid_capstyle="butt", zorder=1, gid="stream")
    arrow(ax, (sx, 5.3), (sx, 5.62))
    ax.text(sx, 0.45, "$x_{\\ell-1}$  (B, T, $d_\\mathrm{model}$)", ha="center",
            va="top", fontsize=FONT)
    ax.text(sx, 5.68, "$x_\\ell$", ha="center", va="bottom",
            fontsize=FONT)
    ax.text(sx - 0.3, 1.3, "residual stream", rotation=90, ha="center",
            va="center", fontsize=9, color=PART_COLOURS["stream"])

    def branch(y0, y_add, boxes):
        """Leave the stream at y0, go through boxes (y, text, kind) on the
        right, and come back to a ⊕ on the stream at y_add."""
        ax.plot([sx, bx], [y0, y0], color="#333333", lw=1.3, zorder=1)
        prev = y0
        for y, text, kind in boxes:
            arrow(ax, (bx, prev), (bx, y - 0.26))
            box(ax, bx, y, w, 0.52, text, colour=PART_COLOURS[kind], gid=kind)
            prev = y + 0.26
        ax.plot([bx, bx], [prev, y_add], color="#333333", lw=1.3, zorder=1)
        arrow(ax, (bx, y_add), (sx + 0.17, y_add))
        add_node(ax, sx, y_add)

    def stream_norm(y, name):
        box(ax, sx, y, 1.2, 0.5, f"LayerNorm\n{name}",
             colour=PART_COLOURS["ln"], gid="ln")

    attn = "multi-head attention\n(mixes positions)"
    ffn = "feed-forward\n(each position alone)"
    if norm == "pre":
        branch(0.8, 2.6, [(1.35, "LayerNorm ln_1", "ln"),
                          (2.1, attn, "attn")])
        branch(3.0, 4.8, [(3.55, "LayerNorm ln_2", "ln"),
                          (4.3, ffn, "ffn")])
        ax.text(bx, 5.5, "pre-norm: $x + f(\\mathrm{LN}(x))$", ha="center",
                va="center", fontsize=FONT)
    else:
        branch(0.8, 1.75, [(1.3, attn, "attn")])
        stream_norm(2.35, "ln_1")
        branch(2.95, 3.95, [(3.5, ffn, "ffn")])
        stream_norm(4.6, "ln_2")
        ax.text(bx, 5.5, "post-norm: $\\mathrm{LN}(x + f(x))$", ha="center",
                va="center", fontsize=FONT)
    return ax


__all__ = [
    "SUBLAYERS", "ZeroSublayer", "absolute_value_batch", "affine_floor", "block_grad_norms",
    "block_jacobians", "draw_block", "position_cosine", "remove_norms_", "remove_sublayer_",
    "sublayer_output_rms", "sublayer_writes", "train_regression",
]
