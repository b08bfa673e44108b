"""Scaffolding for the small experiments of the early chapters; readers need not study it.

A one-layer attention model, the loss, a training loop and two synthetic tasks (random tokens,
and "report the token n positions back"). The chapters use them to measure what attention does;
Chapter 5 builds the real model. Everything is built on the device of its input.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from tinyformer.attention import MultiHeadAttention
from tinyformer.setup import check_int


class OneLayerAttention(nn.Module):
    """Embeddings → one ``MultiHeadAttention`` → linear read-out: the smallest model that attends.

    Token and learned position embeddings are added (the positions let attention tell "the
    previous token" from any other); the read-out sees each token's vector plus what attention
    brought to it. Token ids ``(B, T)`` give logits ``(B, T, n_outputs, vocab_size)`` and the
    attention weights ``(B, n_heads, T, T)``.
    """

    def __init__(self, vocab_size: int, block_size: int, d_model: int = 32, n_heads: int = 1,
                 n_outputs: int = 1, causal: bool = True, scale=None):
        super().__init__()
        self.vocab_size = check_int("vocab_size", vocab_size)
        self.block_size = check_int("block_size", block_size)
        self.n_outputs = check_int("n_outputs", n_outputs)
        d_model = check_int("d_model", d_model)
        self.tok = nn.Embedding(self.vocab_size, d_model)
        self.pos = nn.Embedding(self.block_size, d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, causal=causal, scale=scale)
        self.readout = nn.Linear(d_model, self.n_outputs * self.vocab_size)

    def _check_idx(self, idx) -> None:
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
            got = tuple(idx.shape) if isinstance(idx, torch.Tensor) else type(idx).__name__
            raise ValueError(f"idx must be a 2-D tensor of token ids (B, T), got {got}")
        if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
            raise TypeError(f"idx must hold integer token ids, got dtype {idx.dtype}")
        if not 1 <= idx.shape[1] <= self.block_size:
            raise ValueError(f"idx has {idx.shape[1]} positions; the model takes 1 to block_size="
                             f"{self.block_size}")
        # meta tensors (used to test devices) carry no values to check
        if idx.device.type != "meta" and idx.numel() and (idx.min() < 0 or idx.max() >= self.vocab_size):
            raise ValueError(f"token ids in idx must lie in [0, vocab_size={self.vocab_size}), "
                             f"got ids from {int(idx.min())} to {int(idx.max())}")

    def forward(self, idx: torch.Tensor, mask: torch.Tensor | None = None):
        self._check_idx(idx)
        B, T = idx.shape
        positions = torch.arange(T, device=idx.device)                 # on the input's device
        h = self.tok(idx) + self.pos(positions)                        # (B, T, d_model)
        a, weights = self.attn(h, mask=mask, return_weights=True)      # weights (B, n_heads, T, T)
        logits = self.readout(h + a)                                   # (B, T, n_outputs·vocab_size)
        return logits.view(B, T, self.n_outputs, self.vocab_size), weights


def next_token_loss(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy in nats of ``model(inputs, mask)`` against ``targets`` (B, T, n_outputs);
    a target of -100 means "no target" and is left out of the mean."""
    logits, _ = model(inputs, mask)                                    # (B, T, n_outputs, vocab_size)
    if not isinstance(targets, torch.Tensor) or targets.shape != logits.shape[:-1]:
        got = tuple(targets.shape) if isinstance(targets, torch.Tensor) else type(targets).__name__
        raise ValueError(f"targets must have shape (B, T, n_outputs) = {tuple(logits.shape[:-1])}, got {got}")
    if targets.dtype.is_floating_point or targets.dtype.is_complex or targets.dtype == torch.bool:
        raise TypeError(f"targets must hold integer token ids (-100 for none), got dtype {targets.dtype}")
    return F.cross_entropy(logits.flatten(0, 2), targets.flatten().long(), ignore_index=-100)


def train(model: nn.Module, make_batch, steps: int, lr: float = 1e-2, seed: int = 1,
          progress: bool = False) -> list[float]:
    """Adam on a fresh batch ``make_batch(generator)`` → ``(inputs, targets)`` at every step.

    The generator is a CPU ``torch.Generator`` seeded with ``seed``, so the batches are the same
    on every device; they are moved to the model's device. Returns the per-step losses (nats).
    """
    steps = check_int("steps", steps, minimum=0)
    gen = torch.Generator().manual_seed(check_int("seed", seed, minimum=None))
    if not (isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr > 0):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    device = next(model.parameters()).device
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    if progress:  # imported only when asked: without ipywidgets, tqdm.auto warns as it is imported
        from tqdm.auto import trange
    else:
        trange = range
    for _ in trange(steps):
        batch = [t.to(device) if isinstance(t, torch.Tensor) else t for t in make_batch(gen)]
        loss = next_token_loss(model, *batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def random_tokens(gen: torch.Generator, batch_size: int, vocab_size: int, block_size: int):
    """Uniformly random sequences of ``block_size + 1`` tokens: inputs ``(B, T)`` are the first
    ``T = block_size``, targets ``(B, T, 1)`` the same shifted by one (the next token)."""
    B, vocab_size = check_int("batch_size", batch_size), check_int("vocab_size", vocab_size)
    seq = torch.randint(0, vocab_size, (B, check_int("block_size", block_size) + 1), generator=gen)
    return seq[:, :-1], seq[:, 1:].unsqueeze(-1)


def lookback_batch(gen: torch.Generator, batch_size: int, vocab_size: int, block_size: int,
                   offsets=(1, 3)):
    """Random tokens ``idx`` ``(B, T)``; target ``n`` at position ``i`` is the token
    ``offsets[n]`` positions back, ``idx[:, i - offsets[n]]``, or -100 where there is none.
    Returns ``(idx, targets (B, T, len(offsets)))``."""
    B, vocab_size = check_int("batch_size", batch_size), check_int("vocab_size", vocab_size)
    T = check_int("block_size", block_size)
    offsets = [check_int("each offset", back) for back in offsets]
    if not offsets:
        raise ValueError("offsets must name at least one offset, got none")
    idx = torch.randint(0, vocab_size, (B, T), generator=gen)
    targets = torch.full((B, T, len(offsets)), -100, dtype=torch.long)
    for n, back in enumerate(offsets):
        if back < T:                                                   # else: no position has one
            targets[:, back:, n] = idx[:, :-back]
    return idx, targets


__all__ = ["OneLayerAttention", "lookback_batch", "next_token_loss", "random_tokens", "train"]
