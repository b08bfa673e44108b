"""Argument checks shared by the model library: one place, imported by every model module.

Each check returns the value it accepts (converted where that helps, ``np.int64`` to ``int``) or
raises a ``TypeError`` (wrong kind of thing) or ``ValueError`` (right kind, bad value) whose message
names the argument and says what was expected, so a reader's mistake surfaces at the call they
wrote rather than as a shape error deep inside torch.

A check used by two modules or more lives here; a check of one function's own semantics (a
temperature, an attention mask, a tokenizer's text) stays beside that function. ``check_int`` is
public (``tinyformer.check_int``); the underscored checks are the library's own, called by the
model code the chapters display, and readers never call them.
"""

from __future__ import annotations

import math
import numbers

import torch


def check_int(name: str, value, minimum: int | None = 1) -> int:
    """Return ``value`` as a Python ``int``, or raise an error that names the argument.

    Any integer is accepted (NumPy's ``np.int64`` included), but not ``bool``, which Python counts
    as an integer although ``n_heads=True`` is surely a mistake. ``minimum=None`` allows any value.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def _check_features(name: str, x, d: int) -> None:
    """x must be a floating tensor whose last dimension is d."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got "
                        f"{type(x).__name__}")
    if x.dim() < 1 or x.shape[-1] != d:
        raise ValueError(f"{name} must have last dimension {d}, got shape "
                         f"{tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got "
                        f"{x.dtype}")


def _check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps must be a number, got {eps!r}")
    if not eps > 0 or not math.isfinite(eps):
        raise ValueError(f"eps must be a positive number, got {eps!r}")
    return float(eps)


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def _require_tensor(name: str, t, min_rank: int) -> None:
    """A floating-point tensor with at least ``min_rank`` dimensions, or an
    error naming ``name``."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, "
                        f"got {type(t).__name__}")
    if t.dim() < min_rank:
        raise ValueError(f"{name} must have at least {min_rank} dimensions, "
                         f"got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, "
                        f"got dtype {t.dtype}")


def _check_kv_heads(n_heads: int, n_kv_heads) -> int:
    """``n_kv_heads`` (None: ``n_heads``) must divide ``n_heads``."""
    if n_kv_heads is None:
        return n_heads
    n_kv_heads = check_int("n_kv_heads", n_kv_heads)
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads ({n_kv_heads}) must divide n_heads "
                         f"({n_heads}): each key/value head serves a group "
                         f"of query heads")
    return n_kv_heads


def _check_std(std) -> float:
    if isinstance(std, bool) or not isinstance(std, (int, float)):
        raise TypeError(f"init_std must be a number, got {std!r}")
    if not math.isfinite(std) or std < 0:
        raise ValueError(f"init_std must be a finite number >= 0, "
                         f"got {std!r}")
    return float(std)


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
