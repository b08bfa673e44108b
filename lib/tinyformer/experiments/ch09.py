"""Chapter 9 (LoRA): the new domain, one fine-tuning run, and what it is measured by.

The chapter adapts chapter 6's English GPT (:func:`tinyformer.pretrained.english_gpt`) to the
book's synthetic language (:func:`tinyformer.data.synthetic_corpus`), encoded with the same BPE:
its words are English, but its sentences come from a small grammar, so the English model starts
far from it. :func:`domain_data` builds the streams, :func:`finetune` runs one adaptation (full
fine-tuning, or LoRA on the layers named) and returns what the chapter's table shows, and
:func:`update_spectrum` measures how low-rank a weight update is, and :func:`traffic` counts the
operations and bytes of a training step.
"""

from __future__ import annotations

import copy
import re
import time

import torch

from tinyformer.data import get_batch, pack_documents, synthetic_corpus
from tinyformer.lora import add_lora, count_lora_params, lora_layers
from tinyformer.training import cosine_lr, estimate_loss

# the six linear maps of a block, by the names add_lora matches
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
ALL_SIX = ATTENTION + ("up_proj", "down_proj")


def domain_data(bpe, n_train: int = 3000, n_val: int = 400, seed: int = 0, mix=(0.4, 0.3, 0.2, 0.1)):
    """The synthetic language as token streams, ``(train_ids, val_ids)``: ``n_train`` and
    ``n_val`` sentences from two different seeds, each sentence a document followed by
    ``<|endoftext|>``, encoded with ``bpe`` (chapter 6's tokenizer)."""
    eot = bpe.special_tokens["<|endoftext|>"]

    def stream(n, s):
        return pack_documents([bpe.encode(line) for line in synthetic_corpus(n, seed=s, mix=mix).text.split("\n")],
                              eot_id=eot)
    return stream(n_train, seed), stream(n_val, seed + 1)


def finetune(base, train_ids, *, targets=None, r: int = 8,
             alpha: float = 8.0, lr: float = 1e-3, steps: int = 150,
             batch_size: int = 16, block_size: int = 128, evals=None,
             eval_every: int = 25, eval_batches: int = 5, seed: int = 0,
             unfreeze: str | None = None, unfreeze_lr: float | None = None,
             progress: bool = False) -> dict:
    """Adapt a copy of ``base`` (left unchanged) with AdamW on ``train_ids``:
    every weight (``targets=None``: full fine-tuning), or LoRA adapters of
    rank ``r`` and scale ``alpha / r`` on the linear maps whose names end
    with ``targets``. No weight decay, 10 warm-up steps, cosine decay to
    ``lr / 10``, clipping at 1: chapter 6's recipe, shorter.

    ``unfreeze`` chooses which base weights train besides any adapters:
    ``"all"`` (the default without ``targets``), ``"proj"`` (only the weight
    matrices of the six linear maps), ``"rest"`` (everything else: the
    embeddings, the biases and the layer norms) or ``None`` (the default
    with ``targets``: the adapters alone). ``unfreeze_lr`` (default ``lr``)
    is the peak learning rate of those base weights when adapters train too.

    Every ``eval_every`` steps (and at step 0) it measures the loss on each
    stream of ``evals`` (name -> token stream), on ``eval_batches`` fixed
    batches. Returns ``{"model", "trainable", "optimizer_bytes",
    "seconds_per_step", "loss" (per step), "eval_step", <name>: [losses]}``;
    ``optimizer_bytes`` is what Adam's two moments hold, 8 bytes per
    trainable float32 parameter (the evaluations are not timed)."""
    if unfreeze is None and targets is None:
        unfreeze = "all"
    allowed = (None, "rest") if targets else ("all", "proj", "rest")
    if unfreeze not in allowed:
        raise ValueError(f"unfreeze must be one of {allowed} with "
                         f"targets={targets!r}, got {unfreeze!r}")
    model = copy.deepcopy(base).train()
    if targets is not None:
        torch.manual_seed(seed)                       # A's random start
        add_lora(model, targets, r, alpha)            # freezes the base
    for name, p in model.named_parameters():
        if name.endswith((".A", ".B")):
            continue                                  # adapters always train
        matrix = re.search(r"proj(\.base)?\.weight$", name) is not None
        p.requires_grad_({"all": True, "proj": matrix, "rest": not matrix,
                          None: False}[unfreeze])
    params = [p for p in model.parameters() if p.requires_grad]
    n = sum(p.numel() for p in params)
    assert unfreeze is not None or n == count_lora_params(model)
    adapter = {id(m.A) for m in lora_layers(model).values()}
    adapter |= {id(m.B) for m in lora_layers(model).values()}
    groups = [dict(params=[p for p in params if id(p) in adapter], peak=lr),
              dict(params=[p for p in params if id(p) not in adapter],
                   peak=lr if unfreeze_lr is None else unfreeze_lr)]
    opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=lr,
                            betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    out = dict(trainable=n, optimizer_bytes=8 * n, loss=[], eval_step=[])
    evals = evals or {}

    def evaluate(step):
        out["eval_step"].append(step)
        for name, ids in evals.items():
            loss = estimate_loss(model, ids, batch_size, block_size,
                                 eval_batches)
            out.setdefault(name, []).append(loss)

    evaluate(0)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=steps, desc="fine-tuning", unit="step", mininterval=2)
    busy = 0.0
    for step in range(1, steps + 1):
        start = time.perf_counter()
        for group in opt.param_groups:                # each from its own peak
            peak = group["peak"]
            group["lr"] = cosine_lr(step, peak, 10, steps, peak / 10)
        x, y = get_batch(train_ids, batch_size, block_size, gen)
        loss = model.loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        busy += time.perf_counter() - start
        out["loss"].append(loss.item())
        if bar is not None:
            bar.update()
        if step % eval_every == 0 or step == steps:
            evaluate(step)
    if bar is not None:
        bar.close()
    out.update(model=model.eval(), seconds_per_step=busy / steps)
    return out


def traffic(fn) -> tuple[int, int]:
    """``(operations, bytes)`` of one call of ``fn()``: the tensor
    operations PyTorch dispatches to kernels (as Chapter 8's ``count_ops``
    counts them) and the bytes of the tensors each one reads or writes (its
    tensor arguments and results, once per operation). The bytes are a model
    of the memory traffic, not a measurement: a kernel may read an input
    twice, or find it in cache. A view (a transpose, a reshape) counts as an
    operation but moves no bytes."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class _Traffic(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = self.bytes = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.ops += 1
            if not func.is_view:         # a view shares its input's memory
                leaves = tree_flatten((args, kwargs or {}, out))[0]
                self.bytes += sum(t.numel() * t.element_size() for t in leaves
                                  if isinstance(t, torch.Tensor))
            return out

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with _Traffic() as counter:
        fn()
    return counter.ops, counter.bytes


def update_spectrum(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """The singular values of the update ``after - before`` of one weight matrix, largest first."""
    return torch.linalg.svdvals((after - before).detach().double()).float()


def energy_in_top(s: torch.Tensor, k: int) -> float:
    """The share of an update's squared Frobenius norm in its top ``k`` directions:
    ``sum(s[:k]²) / sum(s²)`` for singular values ``s``."""
    e = s.double() ** 2
    return float(e[:k].sum() / e.sum())


__all__ = ["ALL_SIX", "ATTENTION", "domain_data", "energy_in_top", "finetune", "traffic",
           "update_spectrum"]
