"""Chapter 4: positions.

Attention treats its input as a set: permute the tokens and the outputs are
permuted the same way. A model learns word order only if the vectors say
where each token sits. Two families do that:

* **absolute** schemes give each position ``t`` a vector that is added to
  the token's embedding once, at the input: :func:`sinusoidal_positions`,
  :func:`binary_positions` and :class:`LearnedPositions` (each returns a
  ``(T, d)`` table; adding it is the caller's one line);
* **rotary** embeddings (RoPE) leave the input alone and rotate every
  query and key inside attention by an angle proportional to its position,
  so a score depends only on how far apart the two tokens are
  (:func:`apply_rotary`, :class:`RotaryEmbedding`).

A third kind adds no vectors at all: **ALiBi** adds to each score a
penalty proportional to the distance between query and key, one slope
per head (:func:`alibi_slopes`, :func:`alibi_bias`).

Every function builds its tensors on the device it is given (or the
input's), so the same code runs on a CPU and a GPU.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from tinyformer.validation import check_int


def _check_even(name: str, d: int) -> int:
    d = check_int(name, d)
    if d % 2:
        raise ValueError(f"{name} must be even (the scheme uses sin/cos "
                         f"pairs), got {d}")
    return d


def _check_base(base) -> float:
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(f"base must be a number, got {base!r}")
    if not base > 1 or not math.isfinite(base):
        raise ValueError(f"base must be a finite number > 1, got {base!r}")
    return float(base)


def frequencies(d: int, base: float = 10000.0, device=None) -> torch.Tensor:
    """The ``d/2`` angular frequencies ``θ_i = base^(-2i/d)``, from 1 (pair
    0, a full turn every 2π positions) down to nearly ``1/base``; shape
    ``(d/2,)``, float64, so tables stay accurate at large positions."""
    d, base = _check_even("d", d), _check_base(base)
    i = torch.arange(d // 2, device=device, dtype=torch.float64)   # (d/2,)
    return base ** (-2 * i / d)


def _angles(T: int, d: int, base: float, offset: int,
            device) -> torch.Tensor:
    """``angle[t, i] = (offset + t) · θ_i``, shape ``(T, d/2)``, float64."""
    T = check_int("T", T)
    offset = check_int("offset", offset, minimum=0)
    t = torch.arange(offset, offset + T, device=device,
                     dtype=torch.float64)                   # (T,)
    return torch.outer(t, frequencies(d, base, device))     # (T, d/2)


def sinusoidal_positions(T: int, d: int, base: float = 10000.0, *,
                         offset: int = 0, device=None,
                         dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The sinusoidal table of Vaswani et al. (2017), shape ``(T, d)``::

        PE[t, 2i]   = sin(t / base^(2i/d))
        PE[t, 2i+1] = cos(t / base^(2i/d))

    Sines and cosines are *interleaved*: columns ``2i`` and ``2i+1`` share
    the frequency of pair ``i``. Rows start at position ``offset``.
    """
    d = _check_even("d", d)
    angle = _angles(T, d, base, offset, device)             # (T, d/2)
    PE = torch.stack((angle.sin(), angle.cos()), dim=-1)    # (T, d/2, 2)
    return PE.reshape(angle.shape[0], d).to(dtype)          # (T, d)


def binary_positions(T: int, d: int, *, offset: int = 0, device=None,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Position ``t`` written in binary, one bit per column, the least
    significant bit first: ``PE[t, j] = (t >> j) & 1``, shape ``(T, d)``.

    ``d`` bits count up to ``2**d - 1``; a longer sequence is an error.
    """
    T, d = check_int("T", T), check_int("d", d)
    offset = check_int("offset", offset, minimum=0)
    if d < 63 and offset + T > 2 ** d:
        raise ValueError(f"d={d} bits number only 2**{d} = {2 ** d} "
                         f"positions, but positions up to {offset + T - 1} "
                         f"were asked for: use T + offset <= {2 ** d} or a "
                         f"larger d")
    t = torch.arange(offset, offset + T, device=device)     # (T,)
    j = torch.arange(min(d, 63), device=device)             # bit index
    bits = (t[:, None] >> j) & 1                            # (T, min(d, 63))
    PE = torch.zeros(T, d, device=device, dtype=dtype)
    PE[:, :bits.shape[1]] = bits.to(dtype)
    return PE


class LearnedPositions(nn.Module):
    """One trained vector per position, as GPT-2 has: a ``(max_len, d)``
    parameter ``weight``, initialised ``N(0, std²)``.

    Call it with ``T`` (an int) for the rows ``offset … offset+T-1``, shape
    ``(T, d)``, or with a tensor of integer positions for their rows,
    shape ``(*positions.shape, d)``. There is no vector for a position
    ``>= max_len``: asking for one is an error, not a silent wrap-around.
    """

    def __init__(self, max_len: int, d: int, std: float = 0.02):
        super().__init__()
        self.max_len = check_int("max_len", max_len)
        self.d = check_int("d", d)
        if isinstance(std, bool) or not isinstance(std, (int, float)):
            raise TypeError(f"std must be a number, got {std!r}")
        if not std >= 0 or not math.isfinite(std):
            raise ValueError(f"std must be a finite number >= 0, got {std!r}")
        self.weight = nn.Parameter(torch.randn(max_len, d) * std)

    def forward(self, T, offset: int = 0) -> torch.Tensor:
        """The rows of positions ``offset … offset+T-1``, ``(T, d)``, for an
        int ``T``; for an integer tensor of positions, their rows,
        ``(*T.shape, d)``."""
        if isinstance(T, torch.Tensor):
            if offset != 0:
                raise ValueError("offset applies to an int T only: add it "
                                 "to the positions tensor instead")
            return self._lookup(T)
        T = check_int("T", T)
        offset = check_int("offset", offset, minimum=0)
        if offset + T > self.max_len:
            raise ValueError(f"LearnedPositions has vectors for positions "
                             f"0..{self.max_len - 1} (max_len="
                             f"{self.max_len}), but positions up to "
                             f"{offset + T - 1} were asked for (T={T}, "
                             f"offset={offset})")
        return self.weight[offset:offset + T]               # (T, d)

    def _lookup(self, positions: torch.Tensor) -> torch.Tensor:
        if positions.is_floating_point() or positions.is_complex() \
                or positions.dtype == torch.bool:
            raise TypeError(f"positions must be an integer tensor, got "
                            f"{positions.dtype}")
        if positions.numel() and (positions.min() < 0
                                  or positions.max() >= self.max_len):
            raise ValueError(f"positions must lie in 0..{self.max_len - 1} "
                             f"(max_len={self.max_len}), got values from "
                             f"{int(positions.min())} to "
                             f"{int(positions.max())}")
        # int64 indices: a uint8 tensor would be read as a boolean mask,
        # and int8/int16 tensors cannot index at all
        return self.weight[positions.long()]                # (..., d)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d={self.d}"


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor,
                 sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair ``(x[..., 2i], x[..., 2i+1])`` of ``x``
    ``(..., T, d)`` by the angle whose cosine and sine are ``cos[t, i]``,
    ``sin[t, i]`` (both ``(T, d/2)``)."""
    x_even, x_odd = x[..., 0::2], x[..., 1::2]              # (..., T, d/2)
    out = torch.stack((x_even * cos - x_odd * sin,
                       x_even * sin + x_odd * cos), dim=-1)  # (..., T, d/2, 2)
    return out.flatten(-2)                                  # (..., T, d)


def _check_rotary_input(x, name: str = "x") -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got "
                        f"{type(x).__name__}")
    if x.dim() < 2:
        raise ValueError(f"{name} must have shape (..., T, d), got shape "
                         f"{tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got "
                        f"{x.dtype}")
    if x.shape[-1] % 2:
        raise ValueError(f"the last dimension of {name} must be even "
                         f"(rotary embeddings rotate pairs), got shape "
                         f"{tuple(x.shape)}")


def apply_rotary(x: torch.Tensor, offset: int = 0,
                 base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding (Su et al., 2021) of queries or keys
    ``x`` ``(..., T, d)``: the pair ``(x[2i], x[2i+1])`` of the token at
    position ``p = offset + t`` is turned by the angle ``p · θ_i`` with
    ``θ_i = base^(-2i/d)``. Lengths are kept, and the score between a
    query at ``m`` and a key at ``n`` depends on ``m - n`` only.
    ``offset`` is the position of the first row (a cache passes the
    number of tokens it already holds)."""
    _check_rotary_input(x)
    if x.shape[-2] < 1:
        raise ValueError(f"x must hold at least one position (T >= 1), "
                         f"got shape {tuple(x.shape)}")
    angle = _angles(x.shape[-2], x.shape[-1], base, offset,
                    x.device)                               # (T, d/2)
    return rotate_pairs(x, angle.cos().to(x.dtype),
                        angle.sin().to(x.dtype))


class RotaryEmbedding(nn.Module):
    """:func:`apply_rotary` with its cosines and sines kept in a table, so
    a model does not recompute them at every call. The table grows when a
    longer sequence arrives (rotary embeddings have no maximum length) and
    follows the input's device and dtype. It holds no parameters."""

    def __init__(self, d_head: int, base: float = 10000.0):
        super().__init__()
        self.d_head = _check_even("d_head", d_head)
        self.base = _check_base(base)
        self.register_buffer("cos", torch.empty(0, d_head // 2),
                             persistent=False)
        self.register_buffer("sin", torch.empty(0, d_head // 2),
                             persistent=False)

    def _table(self, n: int, x: torch.Tensor):
        if (self.cos.shape[0] < n or self.cos.device != x.device
                or self.cos.dtype != x.dtype):
            size = max(n, 2 * self.cos.shape[0])
            # an ordinary tensor even under torch.inference_mode(), so a
            # table grown while generating can still be used in training
            with torch.inference_mode(False):
                angle = _angles(size, self.d_head, self.base, 0, x.device)
                self.cos = angle.cos().to(x.dtype)          # (size, d/2)
                self.sin = angle.sin().to(x.dtype)
        return self.cos, self.sin

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x: ``(..., T, d_head)`` → the same shape, rotated."""
        _check_rotary_input(x)
        if x.shape[-1] != self.d_head:
            raise ValueError(f"x must have last dimension d_head="
                             f"{self.d_head}, got shape {tuple(x.shape)}")
        offset = check_int("offset", offset, minimum=0)
        T = x.shape[-2]
        cos, sin = self._table(offset + T, x)
        return rotate_pairs(x, cos[offset:offset + T], sin[offset:offset + T])

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, base={self.base:g}"


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes (Press et al., 2022), float64 ``(n_heads,)``:
    for a power of two, the geometric sequence ``2^(-8/n)``,
    ``2^(-16/n)``, … ``2^(-8)``, so that with 8 heads they are 1/2, 1/4, …
    1/256. Other head counts take the sequence of the power of two below
    and fill up with every other slope of the one above, as the paper's
    code does."""
    n_heads = check_int("n_heads", n_heads)

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8 * (h + 1) / n) for h in range(n)]

    below = 2 ** int(math.log2(n_heads))
    slopes = power_of_two(below)
    slopes += power_of_two(2 * below)[0::2][:n_heads - below]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi_bias(T: int, slopes, device=None) -> torch.Tensor:
    """The ``(n_heads, T, T)`` ALiBi bias added to causal attention scores:
    entry ``[h, m, n]`` is ``-slopes[h] · (m - n)`` for a key at or before
    the query (``n <= m``), and ``-inf`` after it (the causal mask folded
    in). The penalty grows with distance and does not depend on where the
    pair sits, so there is no maximum length. ``slopes``: a 1-D tensor or a
    sequence of positive numbers, one per head; the bias has the slopes'
    floating dtype (float32 for a list)."""
    T = check_int("T", T)
    slopes = torch.as_tensor(slopes, device=device)
    if not slopes.is_floating_point():
        slopes = slopes.float()
    if slopes.dim() != 1 or len(slopes) == 0:
        raise ValueError(f"slopes must hold one number per head, got shape "
                         f"{tuple(slopes.shape)}")
    if not bool(torch.all(slopes > 0)) or not bool(torch.all(slopes.isfinite())):
        raise ValueError(f"slopes must be positive and finite, got "
                         f"{slopes.tolist()}")
    t = torch.arange(T, device=slopes.device)
    offset = (t[None, :] - t[:, None]).float()                # (T, T): n - m
    bias = slopes[:, None, None] * offset                     # (n_heads, T, T)
    return bias.masked_fill(offset > 0, float("-inf"))        # keys after m


__all__ = [
    "alibi_bias", "alibi_slopes", "apply_rotary", "binary_positions", "frequencies", "LearnedPositions",
    "RotaryEmbedding", "rotate_pairs", "sinusoidal_positions",
]
