"""Shared scaffolding of the toy experiments (chapters 2 and 4): synthetic token tasks, the
next-token loss and the training loop of the small models; readers need not study it.

Two tasks of random tokens: predict the next one (:func:`random_tokens`, which no model can beat
chance on) and report the token ``n`` positions back (:func:`lookback_batch`, which attention
solves). :func:`train` is plain Adam on a fresh batch per step, drawn from a seeded CPU generator
so the batches are the same on every device. Everything is built on the device of its input.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from tinyformer.validation import _require_ids, check_int


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
          loss_fn=None, betas=(0.9, 0.999)) -> list[float]:
    """Adam (with ``betas``, torch's defaults unless given) on a fresh batch
    ``make_batch(generator)`` → ``(inputs, targets)`` at every step,
    minimising ``loss_fn(model, *batch)`` (default: :func:`next_token_loss`).

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
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=tuple(betas))
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


__all__ = ["lookback_batch", "next_token_loss", "random_tokens", "train"]
