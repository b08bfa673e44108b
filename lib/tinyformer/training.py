"""Chapter 6: training a language model, and never losing the run.

* :func:`noam_lr` is the original transformer's learning-rate schedule
  (Vaswani et al., 2017): a linear warm-up, then decay as ``step^-0.5``.
* :func:`cosine_lr` is the common modern choice: a linear warm-up to
  ``max_lr``, then half a cosine down to ``min_lr``.
* :func:`train` runs AdamW (or Adam) on random batches of a token stream,
  with gradient clipping, a progress bar, periodic validation loss, and
  checkpoints. Stopped and started again with the same checkpoint path, it
  resumes where it stopped, with the weights, the optimizer's moments, the
  schedule's step, the batch generator and the random state restored: on
  the CPU the final weights are bitwise those of an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from pathlib import Path

import torch
import torch.nn as nn

from tinyformer.data import _as_stream, get_batch
from tinyformer.validation import check_int

#: The learning-rate schedules :func:`train` knows.
SCHEDULES = ("cosine", "noam", "constant")


def noam_lr(step: int, d_model: int, warmup: int) -> float:
    """``d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)``, steps counted
    from 1: it rises linearly for ``warmup`` steps, peaks at ``step =
    warmup``, then decays like ``1/√step``."""
    step = check_int("step", step)
    d_model = check_int("d_model", d_model)
    warmup = check_int("warmup", warmup)
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def cosine_lr(step: int, max_lr: float, warmup: int, total: int,
              min_lr: float = 0.0) -> float:
    """Linear warm-up from ``max_lr / warmup`` at step 1 to ``max_lr`` at
    ``step = warmup``, then half a cosine down to ``min_lr`` at ``step =
    total`` (and ``min_lr`` after). Steps counted from 1."""
    step = check_int("step", step)
    warmup = check_int("warmup", warmup, minimum=0)
    total = check_int("total", total)
    if step <= warmup:
        return max_lr * step / warmup
    if step >= total:
        return min_lr
    progress = (step - warmup) / max(1, total - warmup)        # 0 … 1
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def estimate_loss(model: nn.Module, data, batch_size: int, block_size: int,
                  n_batches: int = 10, seed: int = 1234, loss_fn=None) -> float:
    """Mean loss over ``n_batches`` batches of ``data`` drawn with their own
    generator (seeded ``seed``): the same batches every time, and the
    training batches' generator untouched. The model is evaluated in eval
    mode and gets its own mode back."""
    loss_fn = _loss_fn(loss_fn)
    n_batches = check_int("n_batches", n_batches)
    gen = torch.Generator().manual_seed(seed)
    device = _device_of(model)
    was_training = model.training
    model.eval()
    try:
        total = 0.0
        for _ in range(n_batches):
            x, y = get_batch(data, batch_size, block_size, gen, device)
            total += loss_fn(model, x, y).item()
    finally:
        model.train(was_training)
    return total / n_batches


def _loss_fn(loss_fn):
    return (lambda m, x, y: m.loss(x, y)) if loss_fn is None else loss_fn


def _device_of(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def _describe(model: nn.Module) -> dict:
    """What a checkpoint must match: the configuration if the model has one,
    and every parameter's name and shape."""
    config = getattr(model, "config", None)
    return {"config": (dataclasses.asdict(config)
                       if dataclasses.is_dataclass(config) else None),
            "params": {n: list(p.shape) for n, p in model.named_parameters()}}


def _mismatch(saved: dict, now: dict) -> str:
    if saved["config"] != now["config"] and saved["config"] and now["config"]:
        diff = [f"{k}={saved['config'].get(k)!r} (now {now['config'].get(k)!r})"
                for k in sorted(set(saved["config"]) | set(now["config"]))
                if saved["config"].get(k) != now["config"].get(k)]
        return "its model configuration differs: " + ", ".join(diff)
    if saved["params"] != now["params"]:
        return "its parameters have other names or shapes"
    return ""


def _save(path: Path, state: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)          # atomic: a crash never leaves half a file


def train(model: nn.Module, train_data, *, steps: int, batch_size: int,
          block_size: int | None = None, lr: float = 1e-3,
          schedule: str = "cosine", warmup: int = 100,
          min_lr: float | None = None, optimizer: str = "adamw",
          betas=(0.9, 0.95), eps: float = 1e-8, weight_decay: float = 0.1,
          clip: float | None = 1.0, val_data=None, eval_every: int = 100,
          eval_batches: int = 10, checkpoint=None,
          checkpoint_every: int | None = None, seed: int = 0,
          loss_fn=None, progress: bool = True, amp: bool | None = None,
          compile: bool = False) -> dict:
    """Train ``model`` for ``steps`` optimizer steps on random batches of
    the token stream ``train_data`` (see :func:`~tinyformer.data.get_batch`)
    and return the history: ``{"step": [...], "loss": [...], "lr": [...],
    "grad_norm": [...], "val_step": [...], "val_loss": [...]}`` (the
    gradient's norm before clipping).

    ``schedule``: ``"cosine"`` (:func:`cosine_lr` from ``lr`` down to
    ``min_lr``, default ``lr/10``), ``"noam"`` (:func:`noam_lr` with the
    model's ``d_model``, ``lr`` multiplying it) or ``"constant"``.
    ``optimizer``: ``"adamw"`` or ``"adam"``; ``weight_decay`` acts on the
    matrices only, decoupled from the gradient with AdamW, added to it as an
    L2 term (``weight_decay · w``) with Adam. ``clip`` caps the gradient norm. With ``checkpoint`` (a
    path), the state is saved every ``checkpoint_every`` steps (default
    ``eval_every``), at the end, and when the run is interrupted; if the
    file exists, training resumes from it (it must come from the same model
    configuration and the same settings: steps, batch and block size,
    schedule, optimizer, clip and seed). On the CPU a resumed run ends with
    bitwise the weights of an uninterrupted one (the CUDA random state is not
    saved; the model has no dropout). ``seed`` seeds the batch order and
    torch's global generator. A non-finite gradient stops the run with an
    error. ``amp`` runs the forward pass in bfloat16 autocast (the default on
    a GPU with native bfloat16; off on the CPU, where the stored runs are
    made).
    ``compile`` runs the training forward pass through ``torch.compile``
    (faster on a GPU after a compilation of a minute or so; the weights,
    checkpoints and validation use the model itself)."""
    steps = check_int("steps", steps)
    batch_size = check_int("batch_size", batch_size)
    config = getattr(model, "config", None)
    if block_size is None:
        block_size = getattr(config, "block_size", None)
        if block_size is None:
            raise ValueError("block_size is required for a model without "
                             "config.block_size")
    block_size = check_int("block_size", block_size)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got "
                         f"{schedule!r}")
    if optimizer not in ("adamw", "adam"):
        raise ValueError(f"optimizer must be 'adamw' or 'adam', got "
                         f"{optimizer!r}")
    train_data = _as_stream("train_data", train_data)
    if len(train_data) < block_size + 1:
        raise ValueError(f"train_data holds {len(train_data)} tokens, fewer "
                         f"than block_size + 1 = {block_size + 1}")
    if val_data is not None:
        val_data = _as_stream("val_data", val_data)
    eval_every = check_int("eval_every", eval_every)
    checkpoint_every = check_int("checkpoint_every",
                                 checkpoint_every or eval_every)
    loss_fn = _loss_fn(loss_fn)
    min_lr = lr / 10 if min_lr is None else min_lr
    # what decides the run's trajectory: a resumed run must use the same
    settings = {"steps": steps, "batch_size": batch_size,
                "block_size": block_size, "lr": lr, "schedule": schedule,
                "warmup": warmup, "min_lr": min_lr, "optimizer": optimizer,
                "betas": list(betas), "eps": eps, "weight_decay": weight_decay,
                "clip": clip, "seed": seed}
    device = _device_of(model)
    if amp is not None and not isinstance(amp, bool):
        raise TypeError(f"amp must be True, False or None (bfloat16 on a GPU "
                        f"only), got {amp!r}")
    if not isinstance(compile, bool):
        raise TypeError(f"compile must be True or False, got {compile!r}")
    if amp is None:   # bfloat16 where the GPU has it (not on a T4, say)
        amp = (device.type == "cuda"
               and torch.cuda.is_bf16_supported(including_emulation=False))
    use_amp = amp
    # compiled as a function of the batch: the model keeps its own weights
    # and names (checkpoints, validation); only the training forward changes
    def batch_loss(x, y):
        return loss_fn(model, x, y)

    if compile:
        batch_loss = torch.compile(batch_loss)

    def autocast():
        return (torch.autocast(device.type, dtype=torch.bfloat16) if use_amp
                else contextlib.nullcontext())

    def lr_at(step: int) -> float:                    # step counted from 1
        if schedule == "cosine":
            return cosine_lr(step, lr, warmup, steps, min_lr)
        if schedule == "noam":
            return lr * noam_lr(step, config.d_model, max(1, warmup))
        return lr

    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    if optimizer == "adamw":
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                 {"params": rest, "weight_decay": 0.0}],
                                lr=lr_at(1), betas=betas, eps=eps)
    else:
        opt = torch.optim.Adam([{"params": decay, "weight_decay": weight_decay},
                                {"params": rest, "weight_decay": 0.0}],
                               lr=lr_at(1), betas=betas, eps=eps)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    history = {"step": [], "loss": [], "lr": [], "grad_norm": [],
               "val_step": [], "val_loss": []}
    done = 0
    path = None if checkpoint is None else Path(checkpoint)
    if path is not None and path.exists():
        state = torch.load(path, map_location=device, weights_only=True)
        problem = _mismatch(state["model_info"], _describe(model))
        if problem:
            raise ValueError(f"the checkpoint {path} does not fit this "
                             f"model: {problem}")
        changed = [f"{k}={v!r} (now {settings.get(k)!r})"
                   for k, v in state.get("settings", settings).items()
                   if settings.get(k) != v]
        if changed:
            raise ValueError(
                f"the checkpoint {path} comes from a run with other settings: "
                f"{', '.join(changed)}. Resume with the same settings, or "
                f"give a new checkpoint path to start a new run")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        gen.set_state(state["generator"])
        torch.set_rng_state(state["rng"])
        history, done = state["history"], state["step"]
        if (val_data is not None and done and (done % eval_every == 0 or done == steps)
                and history["val_step"][-1:] != [done]):
            # interrupted while validating the last finished step: validate it
            # now (its own batches: the training batches are left as they were)
            history["val_step"].append(done)
            history["val_loss"].append(estimate_loss(
                model, val_data, batch_size, block_size, eval_batches,
                loss_fn=loss_fn))

    # the random states as they were when the last finished step ended: an
    # interrupted step has drawn its batch already, and must draw it again
    randomness = {"generator": gen.get_state(), "rng": torch.get_rng_state()}

    def save(step: int) -> None:
        if path is not None:
            _save(path, {"model": model.state_dict(),
                         "optimizer": opt.state_dict(), **randomness,
                         "history": history, "step": step,
                         "model_info": _describe(model),
                         "settings": settings})

    bar = None
    if progress:
        from tqdm import tqdm
        # redrawn at most every 2 s: a notebook keeps every redraw it is sent
        bar = tqdm(total=steps, initial=done, desc="training", unit="step",
                   mininterval=2.0)
    model.train()
    updating = False              # between opt.step() and the step's record
    try:
        for step in range(done + 1, steps + 1):
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            x, y = get_batch(train_data, batch_size, block_size, gen, device)
            with autocast():
                loss = batch_loss(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            # the norm before clipping is recorded (an infinite cap leaves
            # the gradient as it is)
            grad_norm = torch.nn.utils.clip_grad_norm_(
                model.parameters(), float("inf") if clip is None else clip)
            if not torch.isfinite(grad_norm):
                raise FloatingPointError(
                    f"the gradient is not finite at step {step} (loss "
                    f"{loss.item():.4g}): training has diverged. Lower lr, "
                    f"lengthen the warm-up or clip the gradient; the last "
                    f"checkpoint, if any, holds the last good step")
            updating = True
            opt.step()
            history["step"].append(step)
            history["loss"].append(loss.item())
            history["lr"].append(lr_at(step))
            history["grad_norm"].append(grad_norm.item())
            randomness = {"generator": gen.get_state(),
                          "rng": torch.get_rng_state()}
            updating = False
            if val_data is not None and (step % eval_every == 0 or step == steps):
                val_loss = estimate_loss(model, val_data, batch_size,
                                         block_size, eval_batches,
                                         loss_fn=loss_fn)
                history["val_step"].append(step)     # both, or neither
                history["val_loss"].append(val_loss)
                model.train()
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{history['loss'][-1]:.3f}", refresh=False)
            if step % checkpoint_every == 0 or step == steps:
                save(step)
    except KeyboardInterrupt:
        # keep what was done, the last finished step, unless the weights
        # were caught half updated (then the last checkpoint stands)
        if not updating:
            save(history["step"][-1] if history["step"] else done)
        raise
    finally:
        if bar is not None:
            bar.close()
    return history


__all__ = ["SCHEDULES", "cosine_lr", "estimate_loss", "noam_lr", "train"]
