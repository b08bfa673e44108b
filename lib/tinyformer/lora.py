"""Chapter 9: LoRA, low-rank adaptation (Hu et al., 2021).

Fine-tuning every weight of a model costs a gradient and optimizer state for each of them, and a
full copy of the model for each task. LoRA freezes the pretrained weight ``W`` ``(d_in, d_out)``
(row vectors, ``y = x W``, as everywhere in the book) and learns only a low-rank update, the
product of two thin matrices::

    y = x W + b + (x A B) · alpha / r        A: (d_in, r),  B: (r, d_out),  r << d_in, d_out

so an adapted layer trains ``r·(d_in + d_out)`` numbers instead of ``d_in·d_out``. ``B`` starts at
zero, so at step 0 the adapted model *is* the pretrained one. The factor ``alpha / r``
(``scale``) is Hu et al.'s: dividing by ``r`` is meant to spare re-tuning the learning rate when
``r`` changes, and ``alpha`` is then a constant that is rarely tuned.

After training, ``W + scale · A B`` is an ordinary matrix: :func:`merge_lora` folds each update
into its base weight and removes the adapters, so the fine-tuned model costs nothing extra at
inference. Or keep the base model once and save only the adapters (:func:`lora_state_dict`), a
small file per task.

PyTorch's ``nn.Linear`` stores ``W`` transposed, as ``weight`` ``(d_out, d_in)``; the update is
therefore added to ``weight`` as ``scale · (A B)ᵀ``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import torch
import torch.nn as nn

from tinyformer.validation import check_int


def _check_alpha(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a number, got {type(alpha).__name__}")
    if not (alpha > 0 and math.isfinite(alpha)):
        raise ValueError(f"alpha must be a positive finite number, got {alpha!r}")
    return float(alpha)


def _check_model(model) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return model


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank update:
    ``base(x) + (x A B) · alpha / r``.

    ``A`` ``(d_in, r)`` starts small and random, ``B`` ``(r, d_out)`` at zero, so the layer computes
    exactly what ``base`` does until ``B`` has been trained. The base weight and bias are frozen
    (``requires_grad=False``); ``A`` and ``B`` live on the base's device and dtype.

    :meth:`merge` folds the update into ``base.weight`` (the forward then skips the adapter);
    :meth:`unmerge` takes it out again.
    """

    def __init__(self, base: nn.Linear, r: int, alpha: float):
        super().__init__()
        if not isinstance(base, nn.Linear):   # a LoRALinear is not one: no adapter on an adapter
            raise TypeError(f"base must be a torch.nn.Linear, got {type(base).__name__}")
        self.r = check_int("r", r)
        self.alpha = _check_alpha(alpha)
        self.scale = self.alpha / self.r
        self.base = base.requires_grad_(False)        # the pretrained W, b: frozen
        self.in_features, self.out_features = base.in_features, base.out_features
        like = dict(device=base.weight.device, dtype=base.weight.dtype)
        self.A = nn.Parameter(torch.empty(self.in_features, self.r, **like))   # (d_in, r)
        self.B = nn.Parameter(torch.zeros(self.r, self.out_features, **like))  # (r, d_out)
        self.merged = False
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """``A`` ~ U(-1/√d_in, 1/√d_in), ``B`` = 0: the update starts at zero.

        The LoRA paper draws ``A`` from a Gaussian; PEFT (the reference implementation) uses
        ``kaiming_uniform_(a=√5)`` on its ``(r, d_in)`` weight, which is this uniform bound. Either
        way ``A`` must not be zero too: with ``A = B = 0`` both gradients vanish and nothing
        trains."""
        if self.merged:
            raise RuntimeError("reset_parameters() on a merged layer would leave the old update in "
                               "base.weight: unmerge() first")
        bound = 1 / math.sqrt(self.in_features)
        self.A.uniform_(-bound, bound)
        self.B.zero_()

    def delta_weight(self) -> torch.Tensor:
        """The update in ``nn.Linear``'s layout, ``scale · (A B)ᵀ`` ``(d_out, d_in)``."""
        return (self.A @ self.B).T * self.scale      # (d_in, r) @ (r, d_out) -> transposed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``(..., d_in)`` -> ``(..., d_out)``."""
        y = self.base(x)                # x W + b, frozen
        if self.merged:                 # the update is in base.weight already
            return y
        # (..., d_in) -> (..., r) -> (..., d_out), scaled by alpha / r
        return y + (x @ self.A @ self.B) * self.scale

    @torch.no_grad()
    def merge(self) -> LoRALinear:
        """Fold the update into ``base.weight`` (``W ← W + scale · A B``); the forward then costs
        what the base layer's does. Merging a merged layer is refused: the update must go in once."""
        if self.merged:
            raise ValueError("this LoRALinear is merged already (its update is in base.weight): merging "
                             "again would add it twice; unmerge() it first")
        self.base.weight += self.delta_weight()
        self.merged = True
        return self

    @torch.no_grad()
    def unmerge(self) -> LoRALinear:
        """The inverse of :meth:`merge`: subtract the update from ``base.weight`` again (equal to
        the original up to float rounding). Refused on a layer that is not merged."""
        if not self.merged:
            raise ValueError("this LoRALinear is not merged: there is no update in base.weight to take out")
        self.base.weight -= self.delta_weight()
        self.merged = False
        return self

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, r={self.r}, "
                f"alpha={self.alpha:g}, merged={self.merged}")


def _check_targets(targets) -> tuple[str, ...]:
    """One name or a sequence of names, each non-empty."""
    names = (targets,) if isinstance(targets, str) else targets
    if not isinstance(names, Sequence) or not all(isinstance(t, str) for t in names):
        raise TypeError(f"targets must be a string or a sequence of strings, got {targets!r}")
    if not names or not all(names):
        raise ValueError(f"targets must name at least one module, with no empty names, got {targets!r}")
    return tuple(names)


def _matches(name: str, targets: tuple[str, ...]) -> bool:
    """Does the dotted module ``name`` end with one of ``targets``, on a dot? As in PEFT:
    ``"q_proj"`` and ``"attn.q_proj"`` match ``"blocks.blocks.0.attn.q_proj"``, ``"proj"`` does not."""
    return any(name == t or name.endswith("." + t) for t in targets)


def _key(layer: str, p: str) -> str:
    return f"{layer}.{p}" if layer else p            # as model.state_dict() names it


def lora_layers(model: nn.Module) -> dict[str, LoRALinear]:
    """Every :class:`LoRALinear` in ``model``, by its qualified module name."""
    return {name: m for name, m in _check_model(model).named_modules() if isinstance(m, LoRALinear)}


def add_lora(model: nn.Module, targets: str | Sequence[str], r: int, alpha: float) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` whose qualified name ends with one of ``targets``
    (``"q_proj"``, ``["q_proj", "v_proj"]``, ``"ffn.up_proj"``) by a :class:`LoRALinear` of rank
    ``r``, and freeze every other parameter. Changes ``model`` in place and returns it.

    Afterwards the only trainable parameters are the adapters' ``A`` and ``B``:
    ``r·(d_in + d_out)`` per adapted layer (:func:`count_lora_params`)."""
    _check_model(model)
    targets = _check_targets(targets)
    r, alpha = check_int("r", r), _check_alpha(alpha)
    adapted = lora_layers(model)
    bases = {id(m.base) for m in adapted.values()}
    found = [(name, m) for name, m in model.named_modules(remove_duplicate=False)
             if isinstance(m, nn.Linear) and id(m) not in bases and name and _matches(name, targets)]
    if not found:
        again = sorted(name for name in adapted if _matches(name, targets))
        if again:
            raise ValueError(f"targets {list(targets)} match layers that already have adapters: "
                             f"{again}; merge_lora(model) first, or adapt other layers")
        ends = sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                       if isinstance(m, nn.Linear) and id(m) not in bases and name})
        raise ValueError(f"targets {list(targets)} match no nn.Linear in the model; its linear layers' "
                         f"names end with: {', '.join(ends) or '(none)'}")
    model.requires_grad_(False)                       # everything frozen, the adapters excepted:
    for layer in adapted.values():                    # an earlier call's stay trainable, as if
        layer.A.requires_grad_(True)                  # both calls' targets had come in one
        layer.B.requires_grad_(True)
    wrappers: dict[int, LoRALinear] = {}              # a Linear reached by two names: one adapter
    for name, linear in found:
        parent, _, child = name.rpartition(".")
        if id(linear) not in wrappers:
            wrappers[id(linear)] = LoRALinear(linear, r, alpha)
        setattr(model.get_submodule(parent), child, wrappers[id(linear)])
    return model


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every adapter's update into its base weight and put the base ``nn.Linear`` back in the
    adapter's place: ``model`` is a plain model again, with the same ``state_dict`` keys as before
    :func:`add_lora`, and computes what the adapted model did (up to float rounding). Changes
    ``model`` in place and returns it (a lone :class:`LoRALinear`: its merged base). Parameters
    stay frozen as :func:`add_lora` left them (``model.requires_grad_(True)`` makes them trainable
    again)."""
    layers = lora_layers(model)
    if not layers:
        raise ValueError("model has no LoRA adapters to merge (was it merged already? merge_lora replaces "
                         "each adapter by its merged nn.Linear, so a second call finds none)")
    # a base weight that another module shares (an LM head tied to the embedding) would change
    # there too, and the merged model would differ from the adapted one: refuse before any change
    owners: dict[int, set[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        owners.setdefault(id(p), set()).add(name)
    paths = [(name, m) for name, m in model.named_modules(remove_duplicate=False) if isinstance(m, LoRALinear)]
    for name, layer in layers.items():
        own = {_key(n, "base.weight") for n, m in paths if m is layer}   # the layer's own names for it
        shared = owners[id(layer.base.weight)] - own
        if shared and not layer.merged:
            raise ValueError(f"cannot merge the adapter at {name!r}: its base weight is shared with "
                             f"{sorted(shared)}, which the merge would change too (untie the weights, or "
                             f"keep the adapter unmerged)")
    for name, layer in paths:
        if not layer.merged:                          # (a layer may have been merged by hand)
            layer.merge()
        if not name:                                  # model is itself a LoRALinear: its base is the model
            return layer.base
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, layer.base)
    return model


def count_lora_params(model: nn.Module) -> int:
    """The adapters' parameters: ``r·(d_in + d_out)`` per adapted layer."""
    return sum(m.A.numel() + m.B.numel() for m in lora_layers(model).values())


def lora_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapters alone: ``{"<layer>.A": A, "<layer>.B": B}`` for every adapted layer, keyed as in
    ``model.state_dict()``. The tensors are copies (a later training step does not change them);
    ``torch.save`` of this dict is the adapter file."""
    layers = lora_layers(model)
    if not layers:
        raise ValueError("model has no LoRA adapters: call add_lora(model, targets, r, alpha) first")
    return {_key(name, p): getattr(m, p).detach().clone() for name, m in layers.items() for p in "AB"}


def load_lora_state_dict(model: nn.Module, state: Mapping[str, torch.Tensor]) -> nn.Module:
    """Load adapters saved by :func:`lora_state_dict` into ``model``, which must have had
    :func:`add_lora` applied with the same targets and rank (``alpha`` is not in the file: use the
    same). Checks every key and shape before changing anything; returns ``model``."""
    layers = lora_layers(model)
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a dict of tensors (from lora_state_dict), got {type(state).__name__}")
    if not layers:
        raise ValueError("model has no LoRA adapters: call add_lora(model, targets, r, alpha) with the "
                         "targets and r the adapters were trained with, then load them")
    want = {_key(name, p): getattr(m, p) for name, m in layers.items() for p in "AB"}
    missing, unexpected = sorted(want.keys() - state.keys()), sorted(state.keys() - want.keys())
    if missing or unexpected:
        raise ValueError(f"state does not fit the model's adapters (were they added with other targets?): "
                         f"missing from state: {missing or 'none'}; in state but not adapted in the model: "
                         f"{unexpected or 'none'}")
    for key, p in want.items():
        t = state[key]
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"state[{key!r}] must be a torch.Tensor, got {type(t).__name__}")
        if t.shape != p.shape:
            raise ValueError(f"state[{key!r}] has shape {tuple(t.shape)}, the model's adapter "
                             f"{tuple(p.shape)} (A is (d_in, r), B is (r, d_out): another rank r?)")
    merged = sorted(name for name, m in layers.items() if m.merged)
    if merged:
        raise ValueError(f"the adapters at {merged} are merged into their base weights: unmerge() them "
                         f"before loading others")
    with torch.no_grad():
        for key, p in want.items():
            p.copy_(state[key])                       # onto the adapter's device and dtype
    return model


__all__ = ["LoRALinear", "add_lora", "count_lora_params", "load_lora_state_dict", "lora_layers",
           "lora_state_dict", "merge_lora"]
