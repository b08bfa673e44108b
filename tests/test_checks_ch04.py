"""Chapter 4's checks: every solution passes, every stub is 'not implemented yet', every registered
mistake is caught by its own hint whatever the seed, and wrong answers written here, the way a
learner would write them, fail with the hint that names their slip. These generic tests are written
once, in tests/exercise_suite.py; the ``globals().update(SUITE...)`` lines below take in (and name)
those this chapter runs.

The solutions and wrong answers below are written independently of ``tinyformer.course.ch04``: with
loops over positions and columns, Python's math module, NumPy, complex numbers, and in float32 where
a learner's code would be. The references are checked against closed forms (math.sin in a double
loop, Python's own binary digits), the shift property read off the table itself, a complex-number
RoPE, its relative-position property, and the library's RotaryEmbedding. The chapter notebook
(book/04-positions.ipynb) is optional here: the tests that read it are skipped while it does not exist.
"""

from __future__ import annotations

import contextlib
import io
import math

import exercise_suite
import numpy as np
import pytest
import torch
from exercise_suite import SEEDS, verdict_for

from tinyformer import checks, positions
from tinyformer.course import ch04

from conftest import BOOK

CHAPTER = ["sinusoidal_table", "shift_matrix", "rope", "look_back_matrix", "alibi"]
DRILLS = ["binary_table"]
ALL = CHAPTER + DRILLS
NOTEBOOK = BOOK / "04-positions.ipynb"
F64 = torch.float64

# --------------------------------------------------------------------------- solutions (exercise cells)

SOLUTIONS = {
    "sinusoidal_table": '''\
import torch


def sinusoidal_table(T, d):
    """The (T, d) sinusoidal table: PE[t, 2i] = sin(t θ_i) and
    PE[t, 2i+1] = cos(t θ_i), with θ_i = 1 / 10000^(2i/d)."""
    # BEGIN SOLUTION
    t = torch.arange(T, dtype=torch.float64)[:, None]     # (T, 1)
    i = torch.arange(d // 2, dtype=torch.float64)         # (d/2,)
    angle = t / 10000 ** (2 * i / d)                      # (T, d/2)
    PE = torch.zeros(T, d, dtype=torch.float64)
    PE[:, 0::2] = torch.sin(angle)                        # even columns
    PE[:, 1::2] = torch.cos(angle)                        # odd columns
    return PE
    # END SOLUTION
''',
    "shift_matrix": '''\
import math

import torch


def shift_matrix(omega, k):
    """M (2, 2) such that [sin ωt, cos ωt] @ M = [sin ω(t+k), cos ω(t+k)]
    for every t."""
    # BEGIN SOLUTION
    c, s = math.cos(omega * k), math.sin(omega * k)
    return torch.tensor([[c, -s],
                         [s, c]], dtype=torch.float64)
    # END SOLUTION
''',
    "rope": '''\
import torch


def rope(x, offset=0):
    """Rotary embedding of x (..., T, d): the pair (x[2i], x[2i+1]) of
    row t turns by the angle p θ_i, p = offset + t, θ_i = 10000^(-2i/d)."""
    # BEGIN SOLUTION
    T, d = x.shape[-2], x.shape[-1]
    p = torch.arange(offset, offset + T, dtype=x.dtype,
                     device=x.device)                     # (T,)
    i = torch.arange(d // 2, dtype=x.dtype, device=x.device)
    angle = p[:, None] * 10000 ** (-2 * i / d)            # (T, d/2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    a, b = x[..., 0::2], x[..., 1::2]                     # (..., T, d/2)
    out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return out.flatten(-2)                                # (..., T, d)
    # END SOLUTION
''',
    "look_back_matrix": '''\
import math

import torch


def look_back_matrix(d, k):
    """(d, d) matrix A: the score PE[m] A PE[n]ᵀ is largest at n = m - k."""
    # BEGIN SOLUTION
    A = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        angle = -k * 10000.0 ** (-2 * i / d)  # k positions back, pair i
        c, s = math.cos(angle), math.sin(angle)
        A[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor(
            [[c, -s], [s, c]], dtype=torch.float64)  # M_{-k} of pair i
    return A
    # END SOLUTION
''',
    "alibi": '''\
import torch


def alibi(T, slopes):
    """(n_heads, T, T) ALiBi bias: -slopes[h] * (m - n) where n <= m,
    -inf where the key n comes after the query m."""
    # BEGIN SOLUTION
    m = torch.arange(T)[:, None]  # (T, 1): queries
    n = torch.arange(T)[None, :]  # (1, T): keys
    bias = -slopes[:, None, None] * (m - n)  # (n_heads, T, T)
    return bias.masked_fill(n > m, float("-inf"))
    # END SOLUTION
''',
    "binary_table": '''\
import torch


def binary_table(T, d):
    """(T, d) table of bits: PE[t, j] is bit j of t (0 or 1)."""
    # BEGIN SOLUTION
    t = torch.arange(T)[:, None]                          # (T, 1)
    j = torch.arange(d)                                   # (d,)
    return ((t >> j) & 1).to(torch.float32)               # (T, d)
    # END SOLUTION
''',
}

SUITE = exercise_suite.Chapter(CHAPTER, DRILLS, SOLUTIONS, NOTEBOOK)
solution = SUITE.solution


# --------------------------------------------------------------------------- wrong answers, as learners write them


def learner_table(swap=False, blocks=False, exponent="2i/d", first_position=0, multiply=False, base=10000,
                  layout="T,d", dtype=torch.float32, position="t", degrees=False, negative=False):
    """A learner's table, one entry at a time with math.sin, with the slip chosen by the keywords.

    exponent: "2i/d" (right), "i/d", "2j/d" (j the column), "j/d" (each column its own exponent), "2*i//d"
    (integer division), "2(i+1)/d" (pairs counted from 1), "(2i+1)/d" (both columns). position: "t" (right) or
    "t/T" (normalised). degrees: math.degrees on the angle. negative: the angle -t·θ_i.
    """
    def sinusoidal_table(T, d):
        PE = torch.zeros(T, d, dtype=dtype)
        for row in range(T):
            t = row + first_position
            if position == "t/T":
                t = t / T
            for j in range(d):
                i = j % (d // 2) if blocks else j // 2
                e = {"2i/d": 2 * i / d, "i/d": i / d, "2j/d": 2 * j / d, "j/d": j / d, "2*i//d": 2 * i // d,
                     "2(i+1)/d": 2 * (i + 1) / d, "(2i+1)/d": (2 * i + 1) / d}[exponent]
                angle = t * base ** e if multiply else t / base ** e
                if negative:
                    angle = -angle
                if degrees:
                    angle = math.degrees(angle)
                use_sin = (j < d // 2) if blocks else (j % 2 == 0)
                if swap:
                    use_sin = not use_sin
                PE[row, j] = math.sin(angle) if use_sin else math.cos(angle)
        return {"T,d": PE, "d,T": PE.T, "1,T,d": PE.unsqueeze(0), "T,1,d": PE.unsqueeze(1)}[layout]
    return sinusoidal_table


def table_torch_tutorial(T, d):
    """The PyTorch tutorial's way, float32 throughout (right)."""
    position = torch.arange(T).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
    pe = torch.zeros(T, d)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def table_numpy(T, d):
    """The NumPy way many tutorials show, returned as a tensor (right, float64)."""
    angle = np.arange(T)[:, None] / np.power(10000, 2 * (np.arange(d)[None, :] // 2) / d)
    angle[:, 0::2] = np.sin(angle[:, 0::2])
    angle[:, 1::2] = np.cos(angle[:, 1::2])
    return torch.from_numpy(angle)


def table_blocks_tensor2tensor(T, d):
    """tensor2tensor's get_timing_signal_1d: concatenated sines and cosines, float32."""
    position = torch.arange(T, dtype=torch.float32)
    inv_timescales = torch.exp(torch.arange(d // 2, dtype=torch.float32) * -(math.log(10000.0) / (d // 2 - 1)))
    scaled_time = position[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


def table_row_positions(T, d):
    """The positions as a row, not a column: the broadcast fails."""
    position = torch.arange(T)
    div = 10000 ** (torch.arange(0, d, 2) / d)
    pe = torch.zeros(T, d)
    pe[:, 0::2] = torch.sin(position / div)
    pe[:, 1::2] = torch.cos(position / div)
    return pe


def table_math_sin_on_tensor(T, d):
    position = torch.arange(T)[:, None]
    div = 10000 ** (torch.arange(0, d, 2) / d)
    pe = torch.zeros(T, d)
    pe[:, 0::2] = math.sin(position / div)
    return pe


def table_integer(T, d):
    """The table made like the positions: an integer tensor, so every value is truncated."""
    position = torch.arange(T)[:, None]
    pe = torch.zeros_like(position.expand(T, d))
    div = 10000 ** (torch.arange(0, d, 2) / d)
    pe[:, 0::2] = torch.sin(position / div)
    pe[:, 1::2] = torch.cos(position / div)
    return pe


def table_multiplied_float32(T, d):
    """Multiplied by 10000^(2i/d), in float32: huge angles, so not the float64 mistake to 1e-4."""
    position = torch.arange(T)[:, None]
    factor = 10000 ** (torch.arange(0, d, 2) / d)
    pe = torch.zeros(T, d)
    pe[:, 0::2] = torch.sin(position * factor)
    pe[:, 1::2] = torch.cos(position * factor)
    return pe


def table_normalised_positions(T, d):
    """Positions scaled into [0, 1): torch.arange(T) / T."""
    position = (torch.arange(T) / T)[:, None]
    div = 10000 ** (torch.arange(0, d, 2) / d)
    pe = torch.zeros(T, d)
    pe[:, 0::2] = torch.sin(position / div)
    pe[:, 1::2] = torch.cos(position / div)
    return pe


def table_linspace_unit(T, d):
    """Positions from torch.linspace(0, 1, T): normalised too, t / (T - 1)."""
    position = torch.linspace(0, 1, T)[:, None]
    angle = position * torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
    return torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(1)


def table_linspace(T, d):
    """Positions from torch.linspace(0, T, T): T points on [0, T], a step of T/(T - 1)."""
    position = torch.linspace(0, T, T).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
    pe = torch.zeros(T, d)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def table_linspace_right(T, d):
    """Positions from torch.linspace(0, T - 1, T): 0, 1, ..., T - 1 (right)."""
    position = torch.linspace(0, T - 1, T, dtype=torch.float64).unsqueeze(1)
    angle = position / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.empty(T, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


def table_degrees_float32(T, d):
    """The angles turned into degrees, × 180/π, in float32 (angles up to ~2,200: ~1e-4 of float32 rounding)."""
    position = torch.arange(T, dtype=torch.float32)[:, None]
    angle = position / 10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d) * 180 / math.pi
    pe = torch.zeros(T, d)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def table_tensor2tensor_interleaved(T, d):
    """tensor2tensor's frequencies, log(10000)/(d/2 - 1) apart, laid out interleaved as the book asks."""
    position = torch.arange(T, dtype=torch.float32)[:, None]
    inv_timescales = torch.exp(torch.arange(d // 2, dtype=torch.float32) * -(math.log(10000.0) / (d // 2 - 1)))
    angle = position * inv_timescales[None, :]
    pe = torch.zeros(T, d)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def table_last_pair_missed(T, d):
    """A loop over the sine columns that stops one pair early: range(0, d - 2, 2)."""
    pe = torch.zeros(T, d, dtype=torch.float64)
    for t in range(T):
        for j in range(0, d - 2, 2):
            pe[t, j] = math.sin(t / 10000 ** (j / d))
            pe[t, j + 1] = math.cos(t / 10000 ** (j / d))
    return pe


def table_one_frequency(T, d):
    """Integer division in the exponent: 2i // d is 0, so every pair turns at frequency 1."""
    position = torch.arange(T)[:, None].double()
    exponent = (2 * torch.arange(d // 2)) // d
    pe = torch.zeros(T, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position / 10000 ** exponent)
    pe[:, 1::2] = torch.cos(position / 10000 ** exponent)
    return pe


def learner_shift(angle="omega*k", signs=(-1, 1), dtype=torch.float64, scale=1.0):
    """A learner's [[cos a, ±sin a], [±sin a, cos a]] with the slip chosen by the keywords."""
    def shift_matrix(omega, k):
        a = {"omega*k": omega * k, "k": k, "omega": omega, "-omega*k": -omega * k, "2*omega*k": 2 * omega * k}[angle]
        return scale * torch.tensor([[math.cos(a), signs[0] * math.sin(a)],
                                     [signs[1] * math.sin(a), math.cos(a)]], dtype=dtype)
    return shift_matrix


def shift_column_vectors(omega, k):
    """Derived for column vectors: [s', c']ᵀ = A [s, c]ᵀ, A returned as is."""
    c, s = np.cos(omega * k), np.sin(omega * k)
    return torch.tensor(np.array([[c, s], [-s, c]]))


def shift_cos_first(omega, k):
    """Derived for [cos ωt, sin ωt] @ N, the cosine first."""
    c, s = math.cos(omega * k), math.sin(omega * k)
    return torch.tensor([[c, s], [-s, c]], dtype=torch.float64)


def shift_vector(omega, k):
    return torch.tensor([math.sin(omega * k), math.cos(omega * k)], dtype=torch.float64)


def shift_with_t(omega, k, t):
    return torch.eye(2, dtype=torch.float64)


def shift_torch_cos(omega, k):
    return torch.tensor([[torch.cos(omega * k), -torch.sin(omega * k)],
                         [torch.sin(omega * k), torch.cos(omega * k)]], dtype=torch.float64)


def shift_diagonal(omega, k):
    c = math.cos(omega * k)
    return torch.tensor([[c, 0.0], [0.0, c]], dtype=torch.float64)


def shift_reflection(omega, k):
    c, s = math.cos(omega * k), math.sin(omega * k)
    return torch.tensor([[s, c], [c, -s]], dtype=torch.float64)


def shift_nan(omega, k):
    return torch.tensor([[math.nan, 0.0], [0.0, 1.0]], dtype=torch.float64)


def learner_rope(layout="pairs", sign=1, use_offset=True, first_position=0, exponent="2i/d", turn="all",
                 angle_dtype=None):
    """A learner's RoPE, a loop over the pairs, with the slip chosen by the keywords.

    exponent: "2i/d" (right), "i/d", "2j/d" (j = 2i the column), "none" (every pair at frequency 1).
    turn: "all", "first" (only pair 0), "none". angle_dtype: the angles' dtype (None: x's).
    """
    def rope(x, offset=0):
        T, d = x.shape[-2], x.shape[-1]
        dt = x.dtype if angle_dtype is None else angle_dtype
        p = torch.arange(T).to(dt) + (offset if use_offset else 0) + first_position       # (T,)
        out = x.clone()
        for i in range(d // 2):
            if turn == "none" or (turn == "first" and i > 0):
                continue
            e = {"2i/d": 2 * i / d, "i/d": i / d, "2j/d": 2 * (2 * i) / d, "none": 0.0}[exponent]
            phi = (sign * p / 10000 ** e)[:, None]                                          # (T, 1)
            ia, ib = (2 * i, 2 * i + 1) if layout == "pairs" else (i, i + d // 2)
            a, b = x[..., ia:ia + 1], x[..., ib:ib + 1]
            out[..., ia:ia + 1] = a * torch.cos(phi) - b * torch.sin(phi)
            out[..., ib:ib + 1] = a * torch.sin(phi) + b * torch.cos(phi)
        return out
    return rope


def rope_table_sliced_at_the_offset(x, offset=0):
    """The cache slip: a table of angles for positions 0 … T - 1, sliced at [offset:offset + T]."""
    T, d = x.shape[-2], x.shape[-1]
    freqs = 10000 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)             # (d/2,)
    angles = (torch.arange(T, dtype=x.dtype)[:, None] * freqs)[offset:offset + T]
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * angles.cos() - b * angles.sin()
    out[..., 1::2] = a * angles.sin() + b * angles.cos()
    return out


def rope_rotate_half(x, offset=0):
    """Hugging Face's Llama code: cos/sin of (T, d) built from cat(freqs, freqs), and rotate_half (float32 freqs)."""
    T, d = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    t = torch.arange(offset, offset + T).float()
    emb = torch.cat([torch.outer(t, inv_freq)] * 2, dim=-1)
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return x * emb.cos() + torch.cat((-x2, x1), dim=-1) * emb.sin()


def rope_complex(x, offset=0):
    """RoFormer / Llama-reference style: pairs as complex numbers times e^{i p θ} (right)."""
    T, d = x.shape[-2], x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    p = torch.arange(offset, offset + T, dtype=torch.float64)
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones(T, d // 2, dtype=torch.float64), torch.outer(p, theta)))\
        .flatten(-2)


def rope_by_matrix(x, offset=0):
    """One 2x2 rotation matrix per pair and position, applied to row vectors (right)."""
    T, d = x.shape[-2], x.shape[-1]
    out = torch.empty_like(x)
    for t in range(T):
        for i in range(d // 2):
            phi = (offset + t) * 10000.0 ** (-2 * i / d)
            R = torch.tensor([[math.cos(phi), math.sin(phi)], [-math.sin(phi), math.cos(phi)]], dtype=x.dtype)
            out[..., t, 2 * i:2 * i + 2] = x[..., t, 2 * i:2 * i + 2] @ R
    return out


def rope_heads_axis(x, offset=0):
    """Positions along x.shape[1]: right for (B, T, d), the heads axis for (B, H, T, d)."""
    T, d = x.shape[1], x.shape[-1]
    p = torch.arange(offset, offset + T, dtype=x.dtype)
    angle = p[:, None] * 10000 ** (-2 * torch.arange(d // 2, dtype=x.dtype) / d)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()), -1).flatten(-2)


def rope_turned_one_after_the_other(x, offset=0):
    """The second coordinate computed from the first, already overwritten in out."""
    T, d = x.shape[-2], x.shape[-1]
    p = torch.arange(offset, offset + T, dtype=x.dtype)
    angle = p[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    c, s = angle.cos(), angle.sin()
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = out[..., 0::2] * s + b * c
    return out


def rope_views_of_the_output(x, offset=0):
    """a and b are views of out = x.clone(): the first assignment changes a before the second reads it."""
    T, d = x.shape[-2], x.shape[-1]
    p = torch.arange(offset, offset + T, dtype=x.dtype)
    angle = p[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    out = x.clone()
    a, b = out[..., 0::2], out[..., 1::2]
    out[..., 0::2] = a * angle.cos() - b * angle.sin()
    out[..., 1::2] = a * angle.sin() + b * angle.cos()
    return out


def rope_views_cloned(x, offset=0):
    """As above, but a and b are copies taken before out is written (right)."""
    T, d = x.shape[-2], x.shape[-1]
    p = torch.arange(offset, offset + T, dtype=x.dtype)
    angle = p[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    out = x.clone()
    a, b = out[..., 0::2].clone(), out[..., 1::2].clone()
    out[..., 0::2] = a * angle.cos() - b * angle.sin()
    out[..., 1::2] = a * angle.sin() + b * angle.cos()
    return out


def rope_complex_from_halves(x, offset=0):
    """view_as_complex after a reshape to (..., 2, d/2) (halves paired), written back interleaved."""
    T, d = x.shape[-2], x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    p = torch.arange(offset, offset + T, dtype=torch.float64)
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], 2, d // 2).transpose(-1, -2).contiguous())
    turn = torch.polar(torch.ones(T, d // 2, dtype=torch.float64), torch.outer(p, theta))
    return torch.view_as_real(z * turn).flatten(-2)


def rope_in_place(x, offset=0):
    y = learner_rope()(x, offset)
    x[...] = y
    return x


def rope_no_offset_argument(x):
    return learner_rope()(x)


def rope_offset_required(x, offset):
    return learner_rope()(x, offset)


def rope_scaled(x, offset=0):
    return 2 * learner_rope()(x, offset)


def rope_twice_the_angle(x, offset=0):
    return learner_rope()(learner_rope()(x, offset), offset)


def learner_bits(msb_first=False, signed=False, first_position=0, keep_bit=True, transposed=False,
                 dtype=torch.float32):
    def binary_table(T, d):
        rows = []
        for t in range(first_position, first_position + T):
            digits = [(t // 2 ** j) % 2 if keep_bit else t // 2 ** j for j in range(d)]
            if msb_first:
                digits = digits[::-1]
            rows.append([2 * b - 1 if signed else b for b in digits])
        table = torch.tensor(rows, dtype=dtype)
        return table.T if transposed else table
    return binary_table


def bits_from_format(T, d):
    """Python's binary digits, written as they read: the most significant first."""
    return torch.tensor([[float(c) for c in format(t, f"0{d}b")] for t in range(T)])


TRANSPOSED = "which turns the other way (it shifts by -k): you wrote M for column vectors, M @ v"


def shift_rotary_R(omega, k):
    """R(ωk) of the book's rotary section, (a, b) R(α) with (a, b) = (cos, sin): reused for [sin, cos] rows."""
    c, s = math.cos(omega * k), math.sin(omega * k)
    return torch.tensor([[c, s], [-s, c]], dtype=torch.float64)


def table_even_columns_in_exponent(T, d):
    """A loop over the even columns j = 0, 2, 4, ... with 10000 ** (2 * j / d): base 10000² in effect."""
    pe = torch.zeros(T, d, dtype=torch.float64)
    for t in range(T):
        for j in range(0, d, 2):
            pe[t, j] = math.sin(t / 10000 ** (2 * j / d))
            pe[t, j + 1] = math.cos(t / 10000 ** (2 * j / d))
    return pe

def learner_look(sign=-1, angle="k*theta", scale=1.0, dtype=torch.float64, steps=0):
    """A learner's look_back_matrix: d/2 blocks [[c, -s], [s, c]] of the angle sign·(what `angle` names);
    steps: added to k (an off-by-one k)."""
    def look_back_matrix(d, k):
        A = torch.zeros(d, d, dtype=dtype)
        for i in range(d // 2):
            theta = {"k*theta": 10000 ** (-2 * i / d), "k": 1.0, "column": 10000 ** (-4 * i / d)}[angle]
            a = sign * (k + steps) * theta
            A[2 * i:2 * i + 2, 2 * i:2 * i + 2] = scale * torch.tensor([[math.cos(a), -math.sin(a)],
                                                                        [math.sin(a), math.cos(a)]])
        return A
    return look_back_matrix


def look_blocks_at_i(d, k):
    """Block i written at A[i:i+2, i:i+2] (the 2·i forgotten)."""
    A = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        a = -k * 10000 ** (-2 * i / d)
        A[i:i + 2, i:i + 2] = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    return A


def look_from_numpy_rotations(d, k):
    """Right, with the blocks made in NumPy as R(-kθ) in column-vector form, transposed: the same matrix."""
    blocks = []
    for i in range(d // 2):
        a = k * 10000 ** (-2 * i / d)
        blocks.append(np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]).T)
    A = np.zeros((d, d))
    for i, b in enumerate(blocks):
        A[2 * i:2 * i + 2, 2 * i:2 * i + 2] = b
    return torch.from_numpy(A)


def look_base(d, k, base):
    """The shift blocks with a typo in the base."""
    A = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        a = -k * base ** (-2 * i / d)
        A[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]],
                                                           dtype=torch.float64)
    return A


def look_torch_cos(d, k):
    """torch.cos on a Python float: a TypeError."""
    A = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        a = -k * 10000 ** (-2 * i / d)
        c, s = torch.cos(a), torch.sin(a)
        A[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[c, -s], [s, c]])
    return A


def look_least_squares(d, k, rows=24):
    """A fitted to 24 rows of the table, PE[k:24] A = PE[:24 - k]: right near the start, not far out. The normal
    equations with a little ridge, solved by LU: torch.linalg.lstsq on this ill-conditioned fit gives results
    that differ from call to call (with the memory's alignment), and so verdicts that depend on the run."""
    PE = torch.tensor([[(math.sin if j % 2 == 0 else math.cos)(t / 10000 ** ((j - j % 2) / d)) for j in range(d)]
                       for t in range(rows)], dtype=torch.float64)
    X, Y = PE[k:], PE[:rows - k]
    return torch.linalg.solve(X.T @ X + 1e-8 * torch.eye(d, dtype=torch.float64), X.T @ Y)


def look_pair_zero_alone(d, k):
    """Only pair 0 holds the shift, the rest zero: pair 0 alone repeats every 2π positions (710 ≈ 113·2π)."""
    A = torch.zeros(d, d, dtype=torch.float64)
    A[:2, :2] = learner_look()(2, k)
    return A


def alibi_past_hidden(T, slopes):
    """-inf on the keys before the query instead of after it."""
    m, n = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (-slopes[:, None, None] * (m - n)).masked_fill(n < m, float("-inf"))


def alibi_nan_mask(T, slopes):
    """A 0/1 mask times -inf: 0 · (-inf) is NaN."""
    m, n = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return -slopes[:, None, None] * (m - n) + torch.triu(torch.ones(T, T, dtype=slopes.dtype), 1) * float("-inf")


def alibi_finfo_min(T, slopes):
    """The future filled with the dtype's most negative number, as some libraries do."""
    m, n = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (-slopes[:, None, None] * (m - n)).masked_fill(n > m, torch.finfo(slopes.dtype).min)


def alibi_papers_slopes(T, slopes):
    """The slopes argument ignored: the paper's recipe recomputed for len(slopes) heads."""
    n_heads = len(slopes)
    own = torch.tensor([2 ** (-8 * (h + 1) / n_heads) for h in range(n_heads)], dtype=slopes.dtype)
    return learner_alibi()(T, own)


def rope_halves_with_pairwise_cos(x, offset=0):
    """Hugging Face's x·cos + rotate_half(x)·sin, with cos/sin repeated per pair (repeat_interleave)."""
    T, d = x.shape[-2], x.shape[-1]
    p = torch.arange(offset, offset + T, dtype=x.dtype)
    angle = p[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)     # (T, d/2)
    cos, sin = angle.cos().repeat_interleave(2, -1), angle.sin().repeat_interleave(2, -1)
    half = torch.cat((-x[..., d // 2:], x[..., :d // 2]), dim=-1)
    return x * cos + half * sin


def rope_pairs_with_halved_cos(x, offset=0):
    """Neighbouring pairs turned, with cos/sin laid out torch.cat((cos, cos)) as for rotate_half."""
    T, d = x.shape[-2], x.shape[-1]
    p = torch.arange(offset, offset + T, dtype=x.dtype)
    angle = p[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    cos, sin = torch.cat((angle.cos(), angle.cos()), -1), torch.cat((angle.sin(), angle.sin()), -1)
    turned = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * cos + turned * sin


def shift_solved_in_float32(omega, k):
    """M solved from two rows in float32: a rotation only to float32's precision."""
    t = torch.tensor([0.0, 1.0])
    rows = torch.stack([torch.sin(omega * t), torch.cos(omega * t)], -1)
    moved = torch.stack([torch.sin(omega * (t + k)), torch.cos(omega * (t + k))], -1)
    return torch.linalg.solve(rows, moved).double()


def table_sines_in_both_columns(T, d):
    PE = table_torch_tutorial(T, d)
    PE[:, 1::2] = PE[:, 0::2]
    return PE


def look_only_the_fast_pair(d, k):
    """Only pair 0 turned (the others left as the identity): pair 0 alone repeats every 2π positions."""
    A = torch.eye(d, dtype=torch.float64)
    A[:2, :2] = learner_look()(2, k)
    return A


def learner_alibi(sign=-1, future="-inf", own="visible", slopes_used=True, heads="first", dist="m-n",
                  dtype=None):
    """A learner's alibi, with the slips named by the keywords."""
    def alibi(T, slopes):
        m, n = torch.arange(T)[:, None], torch.arange(T)[None, :]
        distance = (m - n) if dist == "m-n" else (m - n).abs()
        s = slopes if slopes_used else torch.ones_like(slopes)
        bias = sign * s[:, None, None] * distance
        hide = n > m if own == "visible" else n >= m
        if future != "none":
            bias = bias.masked_fill(hide, {"-inf": float("-inf"), "+inf": float("inf"), "0": 0.0, "big": -1e9}[future])
        if heads == "last":
            bias = bias.permute(1, 2, 0)
        elif heads == "keys in rows":
            bias = bias.transpose(1, 2)
        return bias if dtype is None else bias.to(dtype)
    return alibi


def alibi_loops(T, slopes):
    """Right, with two loops and Python floats."""
    out = torch.empty(len(slopes), T, T, dtype=torch.float64)
    for h in range(len(slopes)):
        for m in range(T):
            for n in range(T):
                out[h, m, n] = -slopes[h].item() * (m - n) if n <= m else -math.inf
    return out


def alibi_triu_mask(T, slopes):
    """Right: the causal mask from triu, the distance from a broadcast subtraction."""
    pos = torch.arange(T, dtype=slopes.dtype)
    bias = (pos[None, :] - pos[:, None]) * slopes.view(-1, 1, 1)
    return bias.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))


def alibi_future_added(T, slopes):
    """Right: -inf added above the diagonal, from the upper triangle of a matrix of -inf."""
    m, n = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return -slopes[:, None, None] * (m - n) + torch.full((T, T), float("-inf"), dtype=slopes.dtype).triu(1)


def _look_blocks(d, k, theta):
    A = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        a = -k * theta(i)
        A[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]],
                                                           dtype=torch.float64)
    return A


def look_t2t_spacing(d, k):
    """tensor2tensor's frequencies, 10000^(-i/(d/2 - 1)): the peaks survive, the shift does not."""
    return _look_blocks(d, k, lambda i: 10000 ** (-i / (d // 2 - 1)))


def look_odd_exponent(d, k):
    """Frequencies with the exponent (2i+1)/d."""
    return _look_blocks(d, k, lambda i: 10000 ** (-(2 * i + 1) / d))


def look_first_two_pairs(d, k):
    """Pairs 0 and 1 turned, the others left alone: the runner-up key scores within 0.1 % of n = m - k."""
    A = torch.eye(d, dtype=torch.float64)
    A[:4, :4] = learner_look()(d, k)[:4, :4]
    return A


def look_weighted_pairs(d, k):
    """M_{-k} with pair 0's block made larger: the scores still peak at m - k, but PE[m] A is not PE[m - k]."""
    A = learner_look()(d, k).clone()
    A[:2, :2] *= 1.5
    return A


def look_one_step_k_times(d, k):
    """Right: the one-position shift back, M_{-1}, multiplied k times (the identity for k = 0)."""
    return torch.linalg.matrix_power(learner_look()(d, 1), k)


def alibi_slopes_2d(T, slopes):
    """slopes[:, None] against a (T, T) distance: a broadcasting error."""
    m, n = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (-slopes[:, None] * (m - n)).masked_fill(n > m, float("-inf"))


# (exercise, wrong function, a phrase its verdict must contain)
def rope_written_back_with_cat(x, offset=0):
    """The rotation right, the write-back wrong: torch.cat of the turned halves, not interleaved."""
    T, d = x.shape[-2], x.shape[-1]
    p = torch.arange(T, dtype=x.dtype) + offset
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    angle = p[:, None] * theta                                          # (T, d/2)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.cat((a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()), dim=-1)


def table_without_parentheses(T, d):
    """10000 ** 2 * i / d written without parentheses around the exponent: 10000 ** (2 * i) / d."""
    PE = torch.zeros(T, d, dtype=torch.float64)
    for t in range(T):
        for i in range(d // 2):
            angle = t / 10000 ** (2 * i) / d
            PE[t, 2 * i], PE[t, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return PE



def table_negative_power_unparenthesised(T, d):
    """θ_i as 10000 ** -2 * i / d, the exponent without parentheses: (10000 ** -2) * i / d."""
    t = torch.arange(T, dtype=torch.float64)[:, None]
    i = torch.arange(d // 2, dtype=torch.float64)
    angles = t * (10000 ** -2 * i / d)                                        # (T, d/2)
    PE = torch.empty(T, d, dtype=torch.float64)
    PE[:, 0::2], PE[:, 1::2] = angles.sin(), angles.cos()
    return PE


WRONG = [
    ("sinusoidal_table", table_without_parentheses, "operator precedence"),
    ("sinusoidal_table", table_negative_power_unparenthesised, "Yours computed 10000 ** -2 * i / d"),
    ("sinusoidal_table", learner_table(swap=True), "sines and cosines are swapped"),
    ("sinusoidal_table", learner_table(blocks=True), "This book interleaves them"),
    ("sinusoidal_table", table_blocks_tensor2tensor, "with other frequencies than θ_i = 1/10000^(2i/d) as well. "
                                                     "Hint: you put all the sines first"),
    ("sinusoidal_table", learner_table(exponent="2j/d"), "yours uses the column index j = 0..d-1"),
    ("sinusoidal_table", table_even_columns_in_exponent, "= 10000². Hint: your exponent counts columns"),
    ("sinusoidal_table", learner_table(exponent="j/d"), "the odd column 2i+1 got its own exponent"),
    ("sinusoidal_table", learner_table(exponent="i/d"), "the exponent is 2i/d, not i/d"),
    ("sinusoidal_table", learner_table(base=100), "the exponent is 2i/d, not i/d"),          # the same table
    ("sinusoidal_table", learner_table(first_position=1), "your rows start at position 1"),
    ("sinusoidal_table", learner_table(exponent="2(i+1)/d"), "your pairs are counted from 1"),
    ("sinusoidal_table", learner_table(exponent="(2i+1)/d"), "both columns of pair i use the exponent (2i+1)/d"),
    ("sinusoidal_table", learner_table(negative=True), "your sines have the wrong sign"),
    ("sinusoidal_table", learner_table(multiply=True, dtype=torch.float64), "you multiplied t by 10000^(2i/d)"),
    ("sinusoidal_table", table_multiplied_float32, "the first pair (columns 0 and 1, frequency 1) is right"),
    ("sinusoidal_table", table_one_frequency, "// made the exponent 0"),
    ("sinusoidal_table", learner_table(exponent="2*i//d"), "// made the exponent 0"),
    ("sinusoidal_table", table_normalised_positions, "row 1 of your table is at position 0.2 for T = 5 (pair 0, which "
                                                     "turns 1 rad per position, turned by 0.2 rad). Hint: your "
                                                     "positions are scaled into [0, 1]"),
    ("sinusoidal_table", learner_table(position="t/T"), "row 1 of your table is at position 0.2 for T = 5 (pair 0, "
                                                        "which turns 1 rad per position, turned by 0.2 rad). Hint: "
                                                        "your positions are scaled into [0, 1]"),
    ("sinusoidal_table", table_linspace_unit, "row 1 of your table is at position 0.25 for T = 5 (pair 0, which turns "
                                              "1 rad per position, turned by 0.25 rad). Hint: your positions are "
                                              "scaled into [0, 1]"),
    ("sinusoidal_table", table_linspace, "row 1 of your table is at position 1.25 for T = 5 (pair 0, which turns 1 rad "
                                         "per position, turned by 1.25 rad). Hint: torch.linspace(0, T, T) puts T "
                                         "points on [0, T]"),
    ("sinusoidal_table", learner_table(degrees=True), "wrong output. Hint: sin and cos take radians"),
    ("sinusoidal_table", table_degrees_float32, "wrong output. Hint: sin and cos take radians"),
    ("sinusoidal_table", table_tensor2tensor_interleaved, "tensor2tensor's get_timing_signal_1d spaces the "
                                                          "frequencies by log(10000)/(d/2 - 1)"),
    ("sinusoidal_table", table_last_pair_missed, "columns d-2 and d-1 are zero"),
    ("sinusoidal_table", learner_table(layout="d,T"), "your table is transposed, (d, T)"),
    ("sinusoidal_table", learner_table(layout="1,T,d"), "with a batch axis in front"),
    ("sinusoidal_table", learner_table(layout="T,1,d"), "output shape (5, 1, 4), expected (5, 4) for T = 5, d = 4."),
    ("sinusoidal_table", learner_table(base=1000), "the interleaved sinusoidal table with base ≈ 1000. Hint: the"),
    ("sinusoidal_table", learner_table(base=20000, dtype=torch.float64), "the interleaved sinusoidal table with "
                                                                         "base ≈ 20000. Hint"),
    ("sinusoidal_table", table_integer, "it has an integer dtype"),
    ("sinusoidal_table", lambda T, d: table_torch_tutorial(T, d).half(), "the precision of float16 or bfloat16"),
    ("sinusoidal_table", lambda T, d: table_torch_tutorial(T, d).bfloat16(), "the precision of float16 or bfloat16"),
    ("sinusoidal_table", table_row_positions, "make the positions a column"),
    ("sinusoidal_table", table_math_sin_on_tensor, "use torch.sin and torch.cos"),
    ("sinusoidal_table", lambda T, d: table_torch_tutorial(T, d).numpy(),
     "returned a numpy.ndarray of shape (5, 4); return a torch.Tensor"),
    ("sinusoidal_table", lambda T, d: table_torch_tutorial(T, d).tolist(), "return a torch.Tensor"),
    ("sinusoidal_table", lambda T, d: table_torch_tutorial(T, d) > 0, "return real numbers"),
    ("sinusoidal_table", lambda T, d: None, "did you forget the `return` line?"),
    ("shift_matrix", shift_column_vectors, TRANSPOSED),
    ("shift_matrix", shift_rotary_R, TRANSPOSED),                     # R(ωk) reused: the transpose too
    ("shift_matrix", shift_cos_first, TRANSPOSED),                    # [cos, sin] @ N: the same matrix
    ("shift_matrix", learner_shift(angle="-omega*k"), TRANSPOSED),    # M(-k) = M(k)ᵀ: one output, one hint
    ("shift_matrix", learner_shift(signs=(1, -1), dtype=torch.float32),
     "wrong matrix (and float32: pass dtype=torch.float64). Hint: your M is the transpose"),
    ("shift_matrix", learner_shift(angle="k"), "the angle is ωk, not k"),
    ("shift_matrix", learner_shift(angle="omega"), "the angle is ωk, not ω"),
    ("shift_matrix", learner_shift(signs=(1, 1)), "both sin ωk entries are positive"),
    ("shift_matrix", shift_vector, "you returned the vector [sin ωk, cos ωk]"),
    ("shift_matrix", learner_shift(dtype=torch.float32), "your M is right to float32's precision only"),
    ("shift_matrix", learner_shift(scale=2.0), "for omega = 1, k = 3 your M is 2 times the right rotation"),
    ("shift_matrix", learner_shift(angle="2*omega*k"), "your M advances the angle ωt by -0.2832 rad; k positions "
                                                       "advance it by ωk = 3 rad"),
    ("shift_matrix", shift_reflection, "your M is a reflection (determinant -1)"),
    ("shift_matrix", shift_diagonal, "your M is not a rotation (MᵀM ≠ I)"),
    ("shift_matrix", shift_nan, "your matrix contains NaN or inf"),
    ("shift_matrix", shift_with_t, "M depends on omega and k only"),
    ("shift_matrix", shift_torch_cos, "math.cos and math.sin take them"),
    ("shift_matrix", lambda omega, k: [[1.0, 0.0], [0.0, 1.0]], "returned a list of 2 items; return a torch.Tensor"),
    ("shift_matrix", lambda omega, k: torch.eye(3, dtype=F64), "output shape (3, 3), expected (2, 2) for omega = "
                                                               "1.0, k = 3."),
    ("rope", learner_rope(layout="half"), "the 'rotate_half' layout of GPT-NeoX and Hugging Face's Llama"),
    ("rope", rope_rotate_half, "wrong output (and float32 rounding: build the positions and frequencies with "
                               "dtype=x.dtype). Hint: you paired x[i] with x[i + d/2]"),
    ("rope", learner_rope(sign=-1), "your pairs turn the wrong way"),
    ("rope", rope_table_sliced_at_the_offset, "build it from torch.arange(offset, offset + T)"),
    ("rope", rope_written_back_with_cat, "you wrote the results back as all the first coordinates"),
    ("rope", rope_turned_one_after_the_other, "compute both coordinates from the original a and b"),
    ("rope", rope_views_of_the_output, "compute both coordinates from the original a and b"),
    ("rope", rope_complex_from_halves, "you paired x[i] with x[i + d/2] (a reshape to (..., 2, d/2) before "
                                       "view_as_complex"),
    ("rope", lambda x, offset=0: rope_complex_from_halves(x.float(), offset).double(),
     "wrong output (and float32 rounding: build the positions and frequencies with dtype=x.dtype). Hint: you paired "
     "x[i] with x[i + d/2] (a reshape to (..., 2, d/2)"),
    ("binary_table", lambda T, d: (torch.arange(T)[:, None] & (1 << torch.arange(d))).double(),
     "column j holds t & (1 << j), which is 2^j"),
    ("rope", learner_rope(use_offset=False), "the offset is ignored"),
    ("rope", learner_rope(first_position=1), "your positions start at 1"),
    ("rope", learner_rope(exponent="i/d"), "the exponent is 2i/d, not i/d"),
    ("rope", learner_rope(exponent="2j/d"), "the frequency came from the column index 2i"),
    ("rope", learner_rope(exponent="none"), "every pair turned by the same angle p"),
    ("rope", learner_rope(turn="none"), "your function returned x unchanged"),
    ("rope", lambda x, offset=0: x, "your function returned x unchanged"),
    ("rope", learner_rope(turn="first"), "only the first pair (x[0], x[1]) turned"),
    ("rope", learner_rope(angle_dtype=torch.float32), "your values are right to float32's precision only"),
    ("rope", rope_scaled, "wrong values for x of shape (5, 8), offset = 0. Hint: a rotation keeps the length"),
    ("rope", rope_twice_the_angle, "for x of shape (5, 8) and offset = 0, the pair i = 0 of row t = 1 (position 1) "
                                   "turned by 2 rad; it should turn by 1 rad (mod 2π). Hint: the pair i"),
    ("rope", lambda x, offset=0: learner_rope()(x, 2 * offset),
     "for x of shape (2, 6, 4) and offset = 3, the pair i = 0 of row t = 0 (position 3) turned by -0.2832 rad; it "
     "should turn by 3 rad (mod 2π)."),
    ("rope", rope_heads_axis, "T is x.shape[-2]"),
    ("rope", rope_in_place, "changed its input `x` in place (its output is right)"),
    ("rope", rope_no_offset_argument, "rope takes the offset as its second argument"),
    ("rope", rope_offset_required, "offset has a default"),
    ("rope", lambda x, offset=0: learner_rope()(x.float(), offset), "returned torch.float32 for torch.float64"),
    ("rope", lambda x, offset=0: learner_rope()(x, offset)[..., :-1], "output shape (5, 7), expected (5, 8)"),
    ("rope", lambda x, offset=0: (learner_rope()(x, offset), offset), "return only the rotated tensor"),
    ("look_back_matrix", learner_look(sign=1), "your scores peak k positions ahead"),
    ("look_back_matrix", lambda d, k: 2 * learner_look(sign=1)(d, k), "the query at m = 3 scores the key at n = 6 as "
                                                                    "high as the key at n = 0, or higher. Hint: your"),
    ("look_back_matrix", lambda d, k: torch.eye(d, dtype=torch.float64), "your A does not turn the pairs"),
    ("look_back_matrix", lambda d, k: 3 * torch.eye(d, dtype=torch.float64),
     "the query at m = 3 scores the key at n = 3 as high as the key at n = 0, or higher. Hint: your A does not"),
    ("look_back_matrix", learner_look(angle="k"), "every pair turned by the same angle k"),
    ("look_back_matrix", learner_look(angle="column"), "your frequencies came from the column index"),
    ("look_back_matrix", learner_look(steps=-1), "the query at m = 3 scores the key at n = 1 as high as the key at "
                                                 "n = 0, or higher; your scores peak at n = m - k + 1. Hint: your k "
                                                 "is off by one"),
    ("look_back_matrix", learner_look(steps=1, dtype=torch.float32, scale=2.0),
     "the query at m = 4 scores the key at n = 0 as high as the key at n = 1, or higher; your scores peak at "
     "n = m - k - 1. Hint: your k is off by one"),
    ("look_back_matrix", look_only_the_fast_pair, "pair 1 of your A turns by 0 rad, where -k·θ_1 = -0.9487 rad. "
                                                  "Hint: each pair i must turn by -k·θ_i"),
    ("look_back_matrix", look_first_two_pairs, "pair 2 of your A turns by 0 rad"),
    ("look_back_matrix", lambda d, k: look_base(d, k, 1000.0), "pair 1 of your A turns by -1.265 rad"),
    ("look_back_matrix", look_t2t_spacing, "pair 1 of your A turns by -0.8048 rad"),
    ("look_back_matrix", look_odd_exponent, "pair 0 of your A turns by -1.687 rad, where -k·θ_0 = -3 rad"),
    ("look_back_matrix", look_weighted_pairs, "your scores do peak at n = m - k, but PE[m] @ A is not PE[m - k]"),
    ("look_back_matrix", look_torch_cos, "math.cos and math.sin take them"),
    ("look_back_matrix", lambda d, k: -learner_look()(d, k), "your A is a negative multiple of the shift"),
    ("look_back_matrix", look_blocks_at_i, "block i starts at row and column 2i"),
    ("look_back_matrix", lambda d, k: learner_look(scale=-0.5)(d, k), "your A is a negative multiple of the shift"),
    ("look_back_matrix", lambda d, k: look_base(d, k, 100000.0), "pair 1 of your A turns by"),
    ("look_back_matrix", look_least_squares, "as high as the key at n = 4092, or higher. Hint: with A = M_{-k}"),
    ("look_back_matrix", look_pair_zero_alone, "the query at m = 3 scores the key at n = 710 as high as the key at "
                                               "n = 0"),
    ("alibi", alibi_nan_mask, "0 · (-inf) is NaN, not 0"),
    ("alibi", alibi_past_hidden, "you hid the keys before the query (n < m)"),
    ("alibi", lambda T, slopes: learner_alibi()(T, slopes) - slopes[:, None, None],
     "your distances are one too large"),
    ("alibi", lambda T, slopes: learner_alibi()(T, torch.as_tensor(slopes, dtype=torch.float32).double()),
     "your slopes were rounded to float32"),
    ("alibi", lambda T, slopes: learner_alibi()(T, slopes.float()).double(),
     "every value is a float32 number, so your function computed in float32 and cast back. Hint: keep the "
     "inputs' float64 dtype throughout — avoid .float() and torch.float32, and create new tensors with "
     "dtype=slopes.dtype"),
    ("alibi", alibi_finfo_min, "the keys after the query got a large negative number"),
    ("alibi", alibi_papers_slopes, "your heads' slopes are [0.0625, 0.0039]. Hint: each head must grow"),
    ("alibi", lambda T, slopes: learner_alibi()(T, slopes.flip(0)), "your heads' slopes are [0.25, 0.5]"),
    ("rope", rope_halves_with_pairwise_cos, "you rotated halves (x[i] with x[i + d/2], rotate_half) but laid out"),
    ("rope", rope_pairs_with_halved_cos, "you turned neighbouring pairs (x[2i], x[2i+1]) but laid out cos and sin in"),
    ("shift_matrix", shift_solved_in_float32, "your M is right to float32's precision only"),
    ("sinusoidal_table", table_sines_in_both_columns, "your odd columns hold sines too"),
    ("look_back_matrix", lambda d, k: learner_look()(d, k)[:-1], "output shape (15, 16), expected (16, 16)"),
    ("look_back_matrix", lambda d, k: learner_look()(d, k).numpy(), "return a torch.Tensor"),
    ("alibi", learner_alibi(sign=1), "your bias rewards distance"),
    ("alibi", learner_alibi(future="none"), "the keys after the query (n > m) have a bias too"),
    ("alibi", learner_alibi(future="none", dist="abs"), "the bidirectional form"),
    ("alibi", learner_alibi(future="0"), "the keys after the query got 0, which hides nothing"),
    ("alibi", learner_alibi(future="+inf"), "the future must be -inf, not +inf"),
    ("alibi", learner_alibi(future="big"), "the keys after the query got a large negative number"),
    ("alibi", learner_alibi(own="hidden"), "you hid the query's own key too"),
    ("alibi", learner_alibi(slopes_used=False), "every head got slope 1"),
    ("alibi", learner_alibi(heads="last"), "the heads come last, (T, T, n_heads)"),
    ("alibi", learner_alibi(heads="keys in rows"), "your rows are the keys and your columns the queries"),
    ("alibi", alibi_slopes_2d, "give slopes two new axes"),
    ("alibi", learner_alibi(dtype=torch.float32),
     "returned torch.float32 for torch.float64 inputs: keep the inputs' dtype — avoid .float(), and create new "
     "tensors with dtype=slopes.dtype"),
    ("binary_table", bits_from_format, "your columns start at the most significant bit"),
    ("binary_table", learner_bits(msb_first=True), "your columns start at the most significant bit"),
    ("binary_table", learner_bits(signed=True), "your table holds -1 and +1"),
    ("binary_table", learner_bits(first_position=1), "your rows start at position 1"),
    ("binary_table", learner_bits(keep_bit=False), "keep bit j alone"),
    ("binary_table", learner_bits(transposed=True), "your table is transposed, (d, T): one row per position t"),
    ("binary_table", learner_bits(dtype=torch.bool), "return real numbers"),
    ("binary_table", lambda T, d: learner_bits()(T, d)[:, :-1], "output shape (8, 2), expected (8, 3)"),
]


# What a check must refuse without raising: the odd answers of every chapter, and this chapter's own.
BAD = {
    **exercise_suite.odd_answers((2, 2)),
    "nested-list": lambda *a: [[1.0, 0.0], [0.0, 1.0]],
    "wrong-shape": lambda *a: torch.zeros(1),
    "inf-table": lambda *a: torch.full((5, 4), math.inf),
    "zeros-table": lambda *a: torch.zeros(5, 4),
    "meta": lambda *a: torch.empty(3, 3, device="meta"),
    "meta-2x2": lambda *a: torch.empty(2, 2, dtype=torch.float64, device="meta"),
    "int-2x2": lambda *a: torch.zeros(2, 2, dtype=torch.int64),
    "huge": lambda *a: torch.full((2, 2), 1e308, dtype=torch.float64),
}


# --------------------------------------------------------------------------- the generic tests

# Written once, in tests/exercise_suite.py (its docstring says what each checks); chapter 4 runs these.
globals().update(
    # test_solution_passes, test_solution_passes_for_every_seed, test_solution_code_fits_the_page (79 columns),
    # test_stub_is_not_implemented
    SUITE.solution_tests(page_width=79)
    # test_nearly_right_fails
    | SUITE.nearly_right_tests(["shift_matrix", "rope", "alibi"])
    # test_the_chapter_has_a_cell_for_every_checked_exercise, test_chapter_solution_passes_for_every_seed
    | SUITE.notebook_tests()
    # test_every_registered_mistake_is_caught_by_its_own_hint,
    # test_the_cases_tell_every_mistake_from_the_reference_and_the_others (apart by more than 1e-3 somewhere)
    | SUITE.registered_mistake_tests(apart_by=1e-3)
    # the fixture wrong_verdicts; test_wrong_answer_gets_its_hint_whatever_the_seed (each answer of WRONG),
    # test_every_registered_hint_is_earned_by_a_wrong_answer, test_wrong_answers_get_different_verdicts
    | SUITE.wrong_answer_tests(WRONG)
    # test_any_wrong_answer_fails_without_raising (each answer of BAD), test_another_device_is_named
    | SUITE.odd_answer_tests(BAD) | SUITE.meta_device_tests()
    # test_seed_changes_the_inputs, test_cases_travel_to_the_sandbox_and_back (these answers too)
    | SUITE.case_tests()
    | SUITE.travel_tests([BAD["tuple"], BAD["meta"], BAD["ndarray"], learner_rope(sign=-1), learner_table(swap=True)])
    # test_every_hint_is_written_once
    | SUITE.hint_tests()
)


# --------------------------------------------------------------------------- the registry


def test_chapter_four_registry():
    SUITE.assert_registry(numbers=["4.1", "4.2", "4.3", "4.6", "4.7"])


# --------------------------------------------------------------------------- solutions and stubs


def test_a_rope_that_calls_an_unfinished_table_is_told_so(capsys):
    def rope(x, offset=0):
        raise NotImplementedError("sinusoidal_table is not implemented yet")

    exercise_suite.assert_it_calls_an_unfinished(checks.check_rope(rope), "sinusoidal_table", "4.1")
    capsys.readouterr()


# --------------------------------------------------------------------------- learners' wrong answers


def test_the_transposed_shift_names_the_rotary_sections_R(wrong_verdicts):
    """The student who reuses R(ωk) of the rotary section is told that with sine first it is R(−ωk)."""
    k = next(i for i, (_, fn, _) in enumerate(WRONG) if fn is shift_rotary_R)
    assert "R(ωk) of the rotary section: with sine first the shift is R(−ωk)" in wrong_verdicts[k][0].message


def test_the_known_layouts_of_other_code_bases_are_named(wrong_verdicts):
    """tensor2tensor's table (blocks, and its own frequencies) is named as the blocks layout; Llama's rotate_half
    is named as the half-split layout, with its float32 frequencies."""
    verdicts = {WRONG[k][1]: wrong_verdicts[k][0].message for k in range(len(WRONG))}
    assert "This book interleaves them" in verdicts[table_blocks_tensor2tensor]
    assert "GPT-NeoX and Hugging Face's Llama" in verdicts[rope_rotate_half]


@pytest.mark.parametrize("name", ["sinusoidal_table", "binary_table"])
def test_tables_are_judged_to_float32_precision(name, capsys):
    """A table may be float32 (a few 1e-6 off at t ~ 40); a table off by 1e-3 fails."""
    right = solution(name)
    assert checks.check(name, lambda T, d: right(T, d).float())
    assert checks.check(name, lambda T, d: right(T, d).double())
    assert not checks.check(name, lambda T, d: right(T, d) + 1e-3)
    capsys.readouterr()


# --------------------------------------------------------------------------- other right answers pass


@pytest.mark.parametrize("right", [learner_table(), learner_table(dtype=torch.float64), table_torch_tutorial,
                                   table_numpy, lambda T, d: positions.sinusoidal_positions(T, d),
                                   table_linspace_right])
def test_other_right_tables_pass(right):
    for seed in SEEDS:
        assert verdict_for("sinusoidal_table", right, seed).passed


@pytest.mark.parametrize("right", [
    learner_shift(),
    lambda omega, k: torch.from_numpy(np.array([[np.cos(omega * k), -np.sin(omega * k)],
                                                [np.sin(omega * k), np.cos(omega * k)]])),
    lambda omega, k: torch.linalg.matrix_power(learner_shift()(omega, 1), k) if k >= 0
    else torch.linalg.matrix_power(learner_shift()(omega, 1).T, -k),          # one step, k times
])
def test_other_right_shift_matrices_pass(right):
    for seed in SEEDS:
        assert verdict_for("shift_matrix", right, seed).passed


@pytest.mark.parametrize("right", [learner_rope(), rope_complex, rope_by_matrix, rope_views_cloned,
                                   lambda x, offset=0: positions.RotaryEmbedding(x.shape[-1])(x, offset)])
def test_other_right_ropes_pass(right):
    for seed in SEEDS:
        assert verdict_for("rope", right, seed).passed


@pytest.mark.parametrize("right", [learner_bits(), learner_bits(dtype=torch.float64), learner_bits(dtype=torch.int64),
                                   lambda T, d: torch.tensor([[float(c) for c in format(t, f"0{d}b")[::-1]]
                                                              for t in range(T)])])
def test_other_right_binary_tables_pass(right):
    """Any real dtype holds 0 and 1 exactly: integer tables pass too (bool does not)."""
    for seed in SEEDS:
        assert verdict_for("binary_table", right, seed).passed


# --------------------------------------------------------------------------- the library's own answers


def rope_from_private_angles(x, offset=0):
    """The angles from the library's private helper, the rotation written out."""
    T, d = x.shape[-2], x.shape[-1]
    angle = positions._angles(T, d, 10000, offset, None).to(x.dtype)          # (T, d/2)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()), -1).flatten(-2)


def rope_from_the_table(x, offset=0):
    """cos and sin read off the library's sinusoidal table, started at the offset."""
    T, d = x.shape[-2], x.shape[-1]
    PE = positions.sinusoidal_positions(T, d, offset=offset, dtype=x.dtype)  # (T, d)
    sin, cos = PE[:, 0::2], PE[:, 1::2]
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)


def rope_from_frequencies(x, offset=0):
    """θ from the library's frequencies(d), the rest written out."""
    T, d = x.shape[-2], x.shape[-1]
    p = torch.arange(offset, offset + T, dtype=x.dtype)
    angle = p[:, None] * positions.frequencies(d).to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()), -1).flatten(-2)


ROPE_FROM_THE_LIBRARY = [
    (rope_from_private_angles, "tinyformer.positions._angles"),
    (rope_from_the_table, "tinyformer.positions.sinusoidal_positions"),
    (rope_from_frequencies, "tinyformer.positions.frequencies"),
]


@pytest.mark.parametrize(("fn", "caught"), ROPE_FROM_THE_LIBRARY, ids=[c for _, c in ROPE_FROM_THE_LIBRARY])
def test_a_rope_whose_angles_come_from_the_library_is_refused(fn, caught):
    """Exercise 4.3 asks to compute the angles: taken from the library (a private helper included), the right
    outputs get no credit, in the book's check (the library-answer verdict) as in the grader (its flag)."""
    rec, verdict = exercise_suite.harvest("rope", fn)
    assert caught in rec["flags"], rec["flags"]
    assert verdict.status == checks.PASS, verdict.message       # its outputs are right: the flag takes the credit
    with contextlib.redirect_stdout(io.StringIO()):
        said = checks.check("rope", fn)
    assert said.status == checks.FAIL and "the library's own answer" in said.message, said.message
    exercise_suite.in_book_refuses("rope", fn, [caught])


@pytest.mark.parametrize("name", ["sinusoidal_table", "rope"])
def test_honest_answers_are_not_flagged(name):
    rec, verdict = exercise_suite.harvest(name, solution(name))
    assert rec["flags"] == [] and verdict.passed, rec["flags"]


# --------------------------------------------------------------------------- the cases


def test_the_cases_are_built_to_expose_the_mistakes():
    for seed in SEEDS:
        tables = checks.cases_for(checks.EXERCISES["sinusoidal_table"], seed)
        assert all(T >= 3 and d >= 4 and d % 2 == 0 and T <= 40 for T, d in tables)
        assert tables[0][0] != tables[0][1] and any(T == d for T, d in tables) and any(d % 4 == 2 for _, d in tables)
        shifts = checks.cases_for(checks.EXERCISES["shift_matrix"], seed)
        omegas, ks = [o for o, _ in shifts], [k for _, k in shifts]
        assert 1.0 in omegas and 0.1 in omegas and any(o < 0.01 for o in omegas)
        assert 0 in ks and any(k > 1 for k in ks) and any(k < 0 for k in ks)
        assert all(isinstance(o, float) and isinstance(k, int) for o, k in shifts)
        ropes = checks.cases_for(checks.EXERCISES["rope"], seed)
        assert {c[0].dim() for c in ropes} == {2, 3, 4} and any(len(c) == 1 for c in ropes)
        offsets = [c[1] for c in ropes if len(c) == 2]
        assert 0 in offsets and max(offsets) >= 1000 and any(0 < o < 10 for o in offsets)
        for c in ropes:
            *lead, T, d = c[0].shape
            assert d >= 4 and d % 2 == 0 and len(set(lead + [T])) == len(lead) + 1     # B, H, T all differ
        assert any(c[0].shape[-1] % 4 == 2 for c in ropes)                               # d/2 odd
        bits = checks.cases_for(checks.EXERCISES["binary_table"], seed)
        assert all(3 <= T <= 2 ** d for T, d in bits) and (2 ** 3, 3) in bits
        assert any(T < 2 ** (d - 1) for T, d in bits)                                    # unused top bits


# --------------------------------------------------------------------------- the grader, end to end


def test_the_grader_judges_chapter_four_in_its_sandbox(tmp_path):
    half_split = SOLUTIONS["rope"].replace("a, b = x[..., 0::2], x[..., 1::2]",
                                           "a, b = x[..., :d // 2], x[..., d // 2:]").replace(
        "out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)\n    return out.flatten(-2)",
        "return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)")
    assert half_split != SOLUTIONS["rope"]
    rows = SUITE.graded(tmp_path, {**SOLUTIONS, "rope": half_split, "shift_matrix": SUITE.stub("shift_matrix")})
    assert list(rows) == CHAPTER + DRILLS
    assert rows["sinusoidal_table"][0] == rows["binary_table"][0] == checks.PASS, rows
    assert rows["shift_matrix"][0] == checks.NOT_IMPLEMENTED
    assert rows["rope"][0] == checks.FAIL and "'rotate_half' layout" in rows["rope"][1]


# --------------------------------------------------------------------------- the references


def test_sinusoidal_reference_is_the_closed_form():
    for T, d in checks.cases_for(checks.EXERCISES["sinusoidal_table"], 2):
        expected = torch.tensor([[math.sin(t / 10000 ** (j / d)) if j % 2 == 0 else math.cos(t / 10000 ** ((j - 1) / d))
                                  for j in range(d)] for t in range(T)], dtype=F64)
        got = ch04.sinusoidal_table_reference(T, d)
        assert got.dtype == F64
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_shift_reference_moves_every_pair_of_the_table():
    """The shift property read off the library's table: [PE[t, 2i], PE[t, 2i+1]] @ M(θ_i, k) is
    [PE[t+k, 2i], PE[t+k, 2i+1]], for every pair i, and M is a rotation."""
    T, d = 40, 16
    PE = positions.sinusoidal_positions(T, d, dtype=F64)
    for i in range(d // 2):
        theta = 10000 ** (-2 * i / d)
        for k in (-5, 0, 1, 7):
            M = ch04.shift_matrix_reference(theta, k)
            rows = range(max(0, -k), min(T, T - k))
            moved = PE[list(rows)][:, 2 * i:2 * i + 2] @ M
            torch.testing.assert_close(moved, PE[[t + k for t in rows]][:, 2 * i:2 * i + 2], rtol=0, atol=1e-12)
            torch.testing.assert_close(M.T @ M, torch.eye(2, dtype=F64), rtol=0, atol=1e-12)
            assert torch.linalg.det(M).item() == pytest.approx(1.0)


def test_shift_reference_passes_its_own_behaviour_test_and_rejects_the_transpose():
    for omega, k in checks.cases_for(checks.EXERCISES["shift_matrix"], 1):
        M = ch04.shift_matrix_reference(omega, k)
        assert ch04._shift_ok((omega, k), M, M)
        assert ch04._shift_ok((omega, k), M.T, M) == (math.sin(omega * k) == 0)


def rope_by_complex(x, offset):
    d = x.shape[-1]
    z = torch.complex(x[..., 0::2], x[..., 1::2])                                 # (..., T, d/2)
    p = torch.arange(offset, offset + x.shape[-2], dtype=F64)[:, None]
    w = z * torch.exp(1j * p * 10000.0 ** (-torch.arange(d // 2, dtype=F64) * 2 / d))
    return torch.stack((w.real, w.imag), dim=-1).flatten(-2)


def test_rope_reference_is_complex_multiplication_and_the_module():
    for case in checks.cases_for(checks.EXERCISES["rope"], 2):
        x, offset = case[0], (case[1] if len(case) > 1 else 0)
        ref = ch04.rope_reference(*case)
        torch.testing.assert_close(ref, rope_by_complex(x, offset), rtol=1e-12, atol=1e-10)
        torch.testing.assert_close(ref, positions.RotaryEmbedding(x.shape[-1])(x, offset), rtol=1e-12, atol=1e-10)
        torch.testing.assert_close(ref.norm(dim=-1), x.norm(dim=-1))                      # a rotation


def test_rope_reference_scores_depend_on_the_distance_only():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 16, generator=g, dtype=F64), torch.randn(1, 16, generator=g, dtype=F64)
    for gap in (0, 1, 5, 30):
        scores = [(ch04.rope_reference(q, m + gap) @ ch04.rope_reference(k, m).T).item() for m in (0, 3, 100, 2000)]
        assert max(scores) - min(scores) < 1e-9, (gap, scores)


def test_binary_reference_is_pythons_binary_digits():
    for T, d in checks.cases_for(checks.EXERCISES["binary_table"], 2) + [(1, 1), (64, 6)]:
        expected = torch.tensor([[int(c) for c in reversed(format(t, f"0{d}b"))] for t in range(T)], dtype=F64)
        assert torch.equal(ch04.binary_table_reference(T, d), expected)




@pytest.mark.parametrize("right", [learner_look(), look_from_numpy_rotations, learner_look(scale=5.0),
                                   learner_look(dtype=torch.float32), look_one_step_k_times])
def test_other_right_look_back_matrices_pass(right):
    """Judged by behaviour: a positive multiple, NumPy's blocks and a float32 matrix all attend k back."""
    for seed in SEEDS:
        assert verdict_for("look_back_matrix", right, seed).passed


@pytest.mark.parametrize("right", [alibi_loops, alibi_triu_mask, alibi_future_added])
def test_other_right_alibis_pass(right):
    for seed in SEEDS:
        assert verdict_for("alibi", right, seed).passed


def test_look_back_reference_moves_the_table_back_and_peaks_k_back():
    """PE[m] @ A = PE[m - k] on the library's table, and the scores are Σ_i cos((m - k - n) θ_i), written out."""
    for d, k in checks.cases_for(checks.EXERCISES["look_back_matrix"], 3):
        A = ch04.look_back_matrix_reference(d, k)
        PE = positions.sinusoidal_positions(40, d, dtype=F64)
        torch.testing.assert_close(PE[k:] @ A, PE[:40 - k], rtol=0, atol=1e-12)
        m, n = 17, 5
        closed = sum(math.cos((m - k - n) * 10000 ** (-2 * i / d)) for i in range(d // 2))
        assert (PE[m] @ A @ PE[n]).item() == pytest.approx(closed, abs=1e-12)
        assert ch04._look_ok((d, k), A, A)
        assert ch04._look_ok((d, k), A.T, A) == (k == 0)      # the transpose looks ahead


def test_alibi_reference_is_the_closed_form():
    for T, slopes in checks.cases_for(checks.EXERCISES["alibi"], 3):
        expected = torch.tensor([[[-s * (m - n) if n <= m else -math.inf for n in range(T)] for m in range(T)]
                                 for s in slopes.tolist()], dtype=F64)
        assert torch.equal(ch04.alibi_reference(T, slopes), expected)
