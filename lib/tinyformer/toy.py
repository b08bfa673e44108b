"""Scaffolding for the small experiments of the early chapters; readers need
not study it.

A one-layer attention model, the loss, a training loop and two synthetic
tasks (random tokens, and "report the token n positions back"). The chapters
use them to measure what attention does; Chapter 5 builds the real model.
Everything is built on the device of its input.

Chapter 3 adds tools to take a stack of blocks apart (remove its layer norms
or one kind of sublayer), a regression task and its training loop, and
measurements of a stack at initialisation: per-block gradient norms,
per-block Jacobians, the size of each sublayer's output, and how alike the
positions' vectors have become.

Chapter 4 adds a small causal language model that differs between variants
only in its position scheme (:class:`PositionLM`), its loss and per-position
accuracy, and a reversal task whose rule depends on absolute positions.

Chapter 5 adds a count-based word model that stands in for a trained
network while the chapter studies decoding (:class:`BigramLM`), and a
profile of one training step by kind of work (:func:`profile_step`).
"""

from __future__ import annotations

import collections
import contextlib
import math
import numbers
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from tinyformer.attention import MultiHeadAttention
from tinyformer.setup import check_int


def _require_ids(name: str, t, shape, shape_text: str,
                 dtype_text: str) -> None:
    """``t`` must be an integer tensor of ``shape`` (any 2-D shape when
    ``shape`` is None); the errors name ``name`` and what was expected."""
    if not isinstance(t, torch.Tensor) or (
            t.dim() != 2 if shape is None else t.shape != shape):
        got = (tuple(t.shape) if isinstance(t, torch.Tensor)
               else type(t).__name__)
        raise ValueError(f"{name} must {shape_text}, got {got}")
    if t.dtype.is_floating_point or t.dtype.is_complex \
            or t.dtype == torch.bool:
        raise TypeError(f"{name} must hold {dtype_text}, got dtype {t.dtype}")


def _require_vocab(idx: torch.Tensor, vocab_size: int) -> None:
    """Every id in ``idx`` must lie in ``[0, vocab_size)``: a negative id would
    read an embedding row from the end without an error. Meta tensors carry
    no values to check."""
    if idx.device.type != "meta" and idx.numel() and (
            idx.min() < 0 or idx.max() >= vocab_size):
        raise ValueError(f"token ids in idx must lie in [0, vocab_size="
                         f"{vocab_size}), got ids from "
                         f"{int(idx.min())} to {int(idx.max())}")


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


def next_token_loss(model: nn.Module, inputs: torch.Tensor,
                    targets: torch.Tensor,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy in nats of ``model(inputs, mask)`` against
    ``targets`` (B, T, n_outputs); a target of -100 means "no target" and
    is left out of the mean."""
    logits, _ = model(inputs, mask)       # (B, T, n_outputs, vocab_size)
    _require_ids("targets", targets, logits.shape[:-1],
                 f"have shape (B, T, n_outputs) = "
                 f"{tuple(logits.shape[:-1])}",
                 "integer token ids (-100 for none)")
    return F.cross_entropy(logits.flatten(0, 2), targets.flatten().long(),
                           ignore_index=-100)


def train(model: nn.Module, make_batch, steps: int, lr: float = 1e-2,
          seed: int = 1, progress: bool = False,
          loss_fn=None) -> list[float]:
    """Adam on a fresh batch ``make_batch(generator)`` →
    ``(inputs, targets)`` at every step, minimising
    ``loss_fn(model, *batch)`` (default: :func:`next_token_loss`).

    The generator is a CPU ``torch.Generator`` seeded with ``seed``, so the
    batches are the same on every device; they are moved to the model's
    device. Returns the per-step losses (nats for the default loss).
    """
    loss_fn = next_token_loss if loss_fn is None else loss_fn
    steps = check_int("steps", steps, minimum=0)
    gen = torch.Generator().manual_seed(check_int("seed", seed, minimum=None))
    if not (isinstance(lr, (int, float)) and not isinstance(lr, bool)
            and lr > 0):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    device = next(model.parameters()).device
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    if progress:
        # imported only when asked: without ipywidgets, tqdm.auto warns as
        # it is imported
        from tqdm.auto import trange
    else:
        trange = range
    for _ in trange(steps):
        batch = [t.to(device) if isinstance(t, torch.Tensor) else t
                 for t in make_batch(gen)]
        loss = loss_fn(model, *batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def random_tokens(gen: torch.Generator, batch_size: int, vocab_size: int,
                  block_size: int):
    """Uniformly random sequences of ``block_size + 1`` tokens: inputs
    ``(B, T)`` are the first ``T = block_size``, targets ``(B, T, 1)`` the
    same shifted by one (the next token)."""
    B = check_int("batch_size", batch_size)
    vocab_size = check_int("vocab_size", vocab_size)
    T = check_int("block_size", block_size)
    seq = torch.randint(0, vocab_size, (B, T + 1), generator=gen)
    return seq[:, :-1], seq[:, 1:].unsqueeze(-1)


def lookback_batch(gen: torch.Generator, batch_size: int, vocab_size: int,
                   block_size: int, offsets=(1, 3)):
    """Random tokens ``idx`` ``(B, T)``; target ``n`` at position ``i`` is
    the token ``offsets[n]`` positions back, ``idx[:, i - offsets[n]]``, or
    -100 where there is none. Returns ``(idx, targets (B, T, len(offsets)))``.
    """
    B = check_int("batch_size", batch_size)
    vocab_size = check_int("vocab_size", vocab_size)
    T = check_int("block_size", block_size)
    offsets = [check_int("each offset", back) for back in offsets]
    if not offsets:
        raise ValueError("offsets must name at least one offset, got none")
    idx = torch.randint(0, vocab_size, (B, T), generator=gen)
    targets = torch.full((B, T, len(offsets)), -100, dtype=torch.long)
    for n, back in enumerate(offsets):
        if back < T:                    # else: no position has one
            targets[:, back:, n] = idx[:, :-back]
    return idx, targets


# -----------------------------------------------------------------------------
# Chapter 3: taking a stack of blocks apart, and measuring it
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
# Chapter 4: the same small model with each way of giving positions
# -----------------------------------------------------------------------------

POSITION_SCHEMES = ("none", "learned", "sinusoidal", "binary", "rotary")


class PositionLM(nn.Module):
    """A small causal language model that differs between variants only in
    how it learns where a token sits: token embedding, plus an absolute
    position table at the input (``"learned"``, ``"sinusoidal"``,
    ``"binary"``), then a :class:`~tinyformer.blocks.TransformerStack`
    whose attention rotates queries and keys (``"rotary"``) or not, then a
    linear head. ``"none"`` gives no positions at all.

    ``max_len`` bounds the learned table only (the other schemes have no
    maximum; the binary one counts up to ``2**d_model``). Token ids
    ``(B, T)`` give logits ``(B, T, vocab_size)``.
    """

    def __init__(self, vocab_size: int, d_model: int = 64, n_layer: int = 2,
                 n_heads: int = 4, positions: str = "learned",
                 max_len: int = 64, causal: bool = True):
        super().__init__()
        from tinyformer.blocks import TransformerStack
        from tinyformer.positions import LearnedPositions

        if positions not in POSITION_SCHEMES:
            raise ValueError(f"positions must be one of {POSITION_SCHEMES}, "
                             f"got {positions!r}")
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


class BigramLM(nn.Module):
    """The next-token distribution read off counts of adjacent pairs.

    ``log_probs[a, b] = log (count(a b) + alpha) / Σ_c (count(a c) + alpha)``
    is a ``(V, V)`` table, and ``model(idx)`` looks up one row per token:
    logits ``(B, T, V)`` that depend on the last token only. It is a GPT
    with no blocks, whose embedding and head multiply to this table;
    ``alpha`` gives every pair never seen a small probability, the long
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


def count_ops(fn) -> collections.Counter:
    """The tensor operations one call of ``fn()`` runs, counted by name
    (``aten.mm``, ``aten.add``, …) at the level where PyTorch dispatches
    them to kernels: each costs a fixed overhead whatever its size. Views
    and in-place writes count too; Python code between them does not."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Counter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[str(func.overloadpacket)] += 1
            return func(*args, **(kwargs or {}))

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with _Counter() as counter:
        fn()
    return counter.ops


__all__ = [
    "BigramLM", "STEP_PARTS", "count_ops", "profile_step", "step_part",
    "OneLayerAttention", "SUBLAYERS", "ZeroSublayer", "absolute_value_batch",
    "POSITION_SCHEMES", "PositionLM", "accuracy_by_position",
    "affine_floor", "block_grad_norms", "block_jacobians", "lookback_batch",
    "next_token_loss", "position_cosine", "random_tokens", "remove_norms_",
    "remove_sublayer_", "reverse_batch", "sublayer_output_rms", "token_loss",
    "train", "train_regression",
]
