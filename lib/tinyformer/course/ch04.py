"""Chapter 4 (positions): the exercises, their test inputs, references, known mistakes and hints.

Exercises 4.1-4.3, 4.6 and 4.7 have checks (4.4 is an experiment, 4.5 a proof and 4.8 an account,
without one). 4.6 is judged by what its matrix does (the scores peak where they should), not by its
entries: any positive multiple of the shift, for instance, passes. The drill
``binary_table`` keeps a public check but is no exercise of the chapter notebook, so the grader does
not expect it.

Tables (4.1 and the drill) may be float32 or float64: their values are compared to 1e-4, well
outside float32's rounding on these sizes and far inside every mistake. The shift matrix (4.2) is
judged by what it does to [sin ωt, cos ωt] for a grid of t, and must be float64. RoPE (4.3) gets
float64 inputs and must keep their dtype, as every chapter's tensor exercises do.

Each known mistake is written in float64; a reader's version of it computed in float32 (the
default dtype of ``torch.arange`` on floats and ``torch.tensor``) is still named, by the
``diagnose`` hooks, which compare with a looser tolerance once the exact comparisons have failed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from tinyformer.course.engine import Exercise, register, safe_diagnosis
from tinyformer.course.engine import randint as _randint
from tinyformer.positions import alibi_bias, alibi_slopes, apply_rotary, binary_positions, sinusoidal_positions

CHAPTER = "04-positions"
F64 = torch.float64
BASE = 10000.0


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=F64)


def _finite(outputs) -> bool:
    return all(isinstance(o, torch.Tensor) and bool(torch.isfinite(o).all()) for o in outputs)


def _close_all(outputs, others, atol: float) -> bool:
    return all(o.shape == r.shape and bool(torch.allclose(o, r, rtol=0.0, atol=atol)) for o, r in zip(outputs, others))


def _loose_mistake(mistakes, cases, outputs, atol: float) -> str | None:
    """The hint of the first known mistake that the outputs equal to within ``atol`` (a reader's
    version of the mistake computed in float32), or None."""
    for wrong, hint in mistakes:
        try:
            theirs = [wrong(*case) for case in cases]
        except Exception:  # noqa: BLE001 - a mistake that raises on these cases is not this one
            continue
        if _close_all(outputs, [t.to(F64) for t in theirs], atol):
            return hint
    return None


# --------------------------------------------------------------------------- 4.1 the sinusoidal table


TABLE_ATOL = 1e-4      # float32 tables are off by ~1e-5 at t ~ 40; every mistake by O(1)


def _table_cases(g):
    """(T, d), fixed sizes first (so the first failing case never depends on the seed): d >= 4 so
    pairs 0 and 1 exist, T >= 3 so rows 1 and 2 tell the frequencies apart, T != d but for one
    square case; then a random size."""
    T, d = _randint(g, 3, 40), 2 * _randint(g, 2, 16)
    return [(5, 4), (9, 6), (3, 8), (6, 6), (24, 16), (T, d)]


def sinusoidal_table_reference(T: int, d: int) -> torch.Tensor:
    return sinusoidal_positions(T, d, dtype=F64)


def _table(*, first="sin", layout="interleaved", exponent="pair", start=0, divide=True, form="T,d", odd="cos",
           unit="rad", last="kept", sign=1):
    """The sinusoidal table with the mistakes named by the keywords; the defaults are right.

    first: "sin" (even columns sin) or "cos". layout: "interleaved" or "blocks" (all sines, then all
    cosines). exponent: "pair" (2i/d, i = j // 2, right), "column" (2j/d), "odd" (j/d: the odd
    column's own exponent), "half" (i/d), "t2t" (i/(d/2 - 1), tensor2tensor's spacing), "zero"
    (2*i//d, integer division: 0 for every pair), "from-one" (2(i+1)/d: pairs counted from 1) or
    "pair-odd" ((2i+1)/d for both columns of pair i). sign: -1 turns the angles the other way. start: the
    first position. divide: t / base^(...)
    (else t * base^(...)). form: "T,d", "d,T" (transposed) or "1,T,d" (a batch axis in front). odd:
    "cos", or "sin" (a copy-paste slip: sines in both columns of each pair). unit: "rad", or "deg"
    (the angles converted to degrees, math.degrees, before sin and cos). last: "kept", or "zero" (the
    last pair's columns d-2 and d-1 never written: a loop over range(0, d - 2, 2)).
    """
    def wrong(T, d):
        t = torch.arange(start, start + T, dtype=F64)[:, None]            # (T, 1)
        j = torch.arange(d, dtype=F64)                                     # (d,) column index
        if layout == "interleaved":
            i, is_sin = torch.div(j, 2, rounding_mode="floor"), j % 2 == 0
        else:
            i, is_sin = j % (d // 2), j < d // 2
        power = {"pair": 2 * i / d, "column": 2 * j / d, "odd": j / d, "half": i / d, "t2t": i / (d // 2 - 1),
                 "zero": 0 * i, "from-one": 2 * (i + 1) / d, "pair-odd": (2 * i + 1) / d}[exponent]
        angle = sign * (t / BASE ** power if divide else t * BASE ** power)  # (T, d)
        if unit == "deg":
            angle = angle * (180 / math.pi)
        s, c = (angle.sin(), angle.cos()) if first == "sin" else (angle.cos(), angle.sin())
        if odd == "sin":
            c = angle.sin()
        PE = torch.where(is_sin, s, c)                                     # (T, d)
        if last == "zero":
            PE[:, d - 2:] = 0.0
        return {"T,d": PE, "d,T": PE.T.contiguous(), "1,T,d": PE[None]}[form]
    return wrong


TABLE_BLOCKS = ("you put all the sines first and all the cosines after them (columns 0..d/2-1, then d/2..d-1), a "
                "layout some code bases use (tensor2tensor's, for one). This book interleaves them: column 2i holds "
                "sin(t·θ_i), column 2i+1 cos(t·θ_i).")
TABLE_BASE = ("the frequencies are θ_i = 1/10000^(2i/d): the base is 10000, as in Vaswani et al. (2017) and the "
              "library's sinusoidal_positions.")
TABLE_FREQ = ("the first pair (columns 0 and 1, frequency 1) is right but the later pairs are not: pair i turns by "
              "θ_i = 1/10000^(2i/d) radians per position. The exponent counts pairs (2i/d, the same for columns 2i "
              "and 2i+1), and t is divided by 10000^(2i/d), not multiplied.")
TABLE_COLUMN_PAIRS = ("your exponent counts columns (2j/d with j = 2i, the column of pair i's sine): use the "
                      "pair index i, θ_i = 1/10000^(2i/d), so pair i's exponent is 2i/d.")
TABLE_INT = ("your table holds whole numbers only: it has an integer dtype (a tensor made from torch.arange(T), or "
             "zeros_like of one), which cut every sine and cosine to 0 or ±1. Create it with a float dtype, "
             "torch.zeros(T, d) or dtype=torch.float64.")
TABLE_HALF = ("your table is right to about 1e-3 only, the precision of float16 or bfloat16: build it in float32 "
              "or float64.")
TABLE_T2T = ("tensor2tensor's get_timing_signal_1d spaces the frequencies by log(10000)/(d/2 - 1), "
             "θ_i = 10000^(-i/(d/2 - 1)), so that its last pair turns at exactly 1/10000: the book's exponent is "
             "2i/d, θ_i = 10000^(-2i/d).")
TABLE_DEGREES = ("sin and cos take radians: pair i's angle is t·θ_i radians as it is. Converted to degrees "
                 "(math.degrees, or × 180/π) it turns every pair about 57 times too fast.")
TABLE_ZERO_EXPONENT = ("// made the exponent 0: 2*i//d is integer division, 0 for every pair i < d/2, so every pair "
                       "turns at frequency 1 and equals pair 0. Divide with /, 2 * i / d.")
TABLE_LAST_ZERO = ("columns d-2 and d-1 are zero: your loop stopped one pair early (range(0, d - 2, 2)). The d/2 "
                   "pairs start at columns 0, 2, …, d-2: range(0, d, 2), or the slices PE[:, 0::2] and PE[:, 1::2].")
TABLE_NORMALISED = ("your positions are scaled into [0, 1] (t/T, or torch.linspace(0, 1, T)): row t is position t "
                    "itself, torch.arange(T), so that a position gets the same vector whatever the length T.")
TABLE_LINSPACE = ("torch.linspace(0, T, T) puts T points on [0, T], both ends included, so it steps by T/(T - 1), "
                  "not 1: the positions are 0, 1, …, T - 1, torch.arange(T) (or torch.linspace(0, T - 1, T)).")

TABLE_FROM_ONE = ("your pairs are counted from 1, θ_i = 1/10000^(2(i+1)/d): count them from 0, so that pair 0 "
                  "(columns 0 and 1) turns 1 radian per position, sin t and cos t, and the last pair "
                  "1/10000^((d-2)/d).")
TABLE_PAIR_ODD = ("both columns of pair i use the exponent (2i+1)/d: it is 2i/d, θ_i = 1/10000^(2i/d), so pair 0 "
                  "(columns 0 and 1) turns 1 radian per position.")
TABLE_NEGATIVE = ("your sines have the wrong sign (the cosines are right): the angle is +t·θ_i, not -t·θ_i. Column "
                  "2i is sin(t·θ_i), positive for a small t > 0.")

def _table_precedence(kind: str):
    """Two operator-precedence slips: "over d" computes t / 10000 ** (2 * i) / d (the exponent 2i, then a
    division by d), "power first" t * (10000 ** -2 * i / d) (10000^-2, times i, over d)."""
    def wrong(T, d):
        t = torch.arange(T, dtype=F64)[:, None]                             # (T, 1)
        j = torch.arange(d, dtype=F64)
        i = torch.div(j, 2, rounding_mode="floor")
        angle = t / BASE ** (2 * i) / d if kind == "over d" else t * (BASE ** -2 * i / d)
        return torch.where(j % 2 == 0, angle.sin(), angle.cos())           # (T, d)
    return wrong


TABLE_PRECEDENCE = ("operator precedence: ** binds tighter than * and /, so write the exponent in parentheses, "
                    "10000 ** (2 * i / d). Yours computed {}, another number.")

TABLE_MISTAKES = [
    (_table_precedence("over d"), TABLE_PRECEDENCE.format("10000 ** (2 * i) / d")),
    (_table_precedence("power first"), TABLE_PRECEDENCE.format("10000 ** -2 * i / d")),
    (_table(exponent="from-one"), TABLE_FROM_ONE),
    (_table(exponent="pair-odd"), TABLE_PAIR_ODD),
    (_table(sign=-1), TABLE_NEGATIVE),
    (_table(first="cos"), "sines and cosines are swapped: the even columns 2i hold sin(t·θ_i) and the odd "
                          "columns 2i+1 cos(t·θ_i), so row 0 reads 0, 1, 0, 1, …"),
    (_table(layout="blocks"), TABLE_BLOCKS),
    (_table(exponent="column"), "yours uses the column index j = 0..d-1 in the exponent, 10000^(2j/d), as "
                                "some notes write it; it should use the pair index i = j // 2, so columns 2i "
                                "and 2i+1 share the frequency θ_i = 1/10000^(2i/d)."),
    (_table(exponent="odd"), "the odd column 2i+1 got its own exponent, (2i+1)/d: both columns of pair i share "
                             "one frequency, so the cosine uses the exponent 2i/d of the sine beside it."),
    (_table(exponent="half"), "the exponent is 2i/d, not i/d: θ_i = 1/10000^(2i/d). With i/d the slowest "
                              "frequency is only about 1/100 (your table is the one with base 100)."),
    (_table(exponent="t2t"), TABLE_T2T),
    (_table(exponent="zero"), TABLE_ZERO_EXPONENT),
    (_table(unit="deg"), TABLE_DEGREES),
    (_table(last="zero"), TABLE_LAST_ZERO),
    (_table(odd="sin"), "your odd columns hold sines too: column 2i is sin(t·θ_i) and column 2i+1 is "
                        "cos(t·θ_i), so row 0 reads 0, 1, 0, 1, …"),
    (_table(start=1), "your rows start at position 1: row t is position t, so row 0 is sin 0 = 0 and "
                      "cos 0 = 1 in every pair (torch.arange(T) starts at 0)."),
    (_table(divide=False), "you multiplied t by 10000^(2i/d): divide by it, θ_i = 1/10000^(2i/d), so that each "
                           "pair turns more slowly than the one before (the last about 1/10000 radian per "
                           "position)."),
    (_table(form="d,T"), "your table is transposed, (d, T): it has one row per position, shape (T, d)."),
    (_table(form="1,T,d"), "you returned shape (1, T, d), with a batch axis in front (what a module adds with "
                           "unsqueeze(0) to broadcast over a batch): return the table itself, (T, d)."),
]
TABLE_LOOSE_ATOL = 1e-3   # a known mistake computed in float32, angles up to ~2,300 rad (degrees): ~1.4e-4 off


def _scaled_positions(T: int, d: int, PE: torch.Tensor) -> float | None:
    """c if PE is the book's table with row t at position c·t, c read off the angle of row 1's pair 0
    (in (0, π)); else None."""
    if PE.shape != (T, d) or T < 2:
        return None
    c = math.atan2(PE[1, 0].item(), PE[1, 1].item())
    if not 0 < c < math.pi:
        return None
    angle = torch.outer(c * torch.arange(T, dtype=F64), BASE ** (-2 * torch.arange(d // 2, dtype=F64) / d))
    want = torch.stack((angle.sin(), angle.cos()), dim=-1).reshape(T, d)
    return c if bool(torch.allclose(PE.to(F64), want, rtol=0.0, atol=TABLE_ATOL)) else None


def _fitted_base(T: int, d: int, PE: torch.Tensor) -> float | None:
    """The base of the interleaved table PE if it is one, read off pair 1 at t = 1; else None."""
    omega = math.atan2(PE[1, 2].item(), PE[1, 3].item())                  # θ_1 = base^(-2/d), in (0, 1]
    if not 0 < omega < 1:
        return None
    return omega ** (-d / 2)


def _sines_then_cosines(cases, outputs) -> bool:
    """Is every table [sin(t·ω_i) | cos(t·ω_i)] for some frequencies ω_i, the blocks layout?"""
    for (T, d), PE in zip(cases, outputs):
        h = d // 2
        if PE.shape != (T, d) or not torch.allclose(PE[0], torch.cat([torch.zeros(h), torch.ones(h)]).to(F64),
                                                    rtol=0.0, atol=TABLE_ATOL):
            return False
        if not torch.allclose(PE[:, :h] ** 2 + PE[:, h:] ** 2, torch.ones(T, h, dtype=F64), rtol=0.0, atol=1e-3):
            return False
    return True


def _diagnose_table(cases, outputs, refs):
    if not _finite(outputs):
        return None
    if all(bool((o == o.round()).all()) for o in outputs) and any(bool(o.any()) for o in outputs):
        return f"wrong values. Hint: {TABLE_INT}"
    if _close_all(outputs, refs, 1e-2):
        return f"wrong values. Hint: {TABLE_HALF}"
    hint = _loose_mistake(TABLE_MISTAKES, cases, [o.to(F64) for o in outputs], TABLE_LOOSE_ATOL)
    if hint is not None:                    # a known mistake computed in float32: a float32 table may pass, so
        return f"wrong output. Hint: {hint}"     # the verdict is the exact match's, whatever the seed
    scales = [_scaled_positions(T_, d_, o) for (T_, d_), o in zip(cases, outputs)]
    if all(c is not None for c in scales):
        (T, _), c = cases[0], scales[0]
        said = (f"row 1 of your table is at position {c:.4g} for T = {T} (pair 0, which turns 1 rad per position, "
                f"turned by {c:.4g} rad)")
        if all(min(abs(c_ - 1 / T_), abs(c_ - 1 / (T_ - 1))) < 1e-4 for c_, (T_, _) in zip(scales, cases)):
            return f"{said}. Hint: {TABLE_NORMALISED}"
        if all(abs(c_ - T_ / (T_ - 1)) < 1e-4 for c_, (T_, _) in zip(scales, cases)):
            return f"{said}. Hint: {TABLE_LINSPACE}"
    (T, d), PE = cases[0], outputs[0]
    if PE.shape == (T, d):
        base = _fitted_base(T, d, PE)
        if base is not None and abs(base / BASE - 1) > 1e-3 and _close_all(
                outputs, [sinusoidal_positions(T_, d_, base, dtype=F64) for T_, d_ in cases], TABLE_ATOL):
            rounded = float(f"{base:.3g}")                                    # 3 digits: float32 tables too
            said = f"{rounded:.0f}" if rounded >= 100 else f"{rounded:g}"
            if abs(base / BASE ** 2 - 1) < 1e-2:                              # 10000^(2j/d) with j = 2i
                return (f"your table is the interleaved sinusoidal table with base ≈ {said} = 10000². Hint: "
                        f"{TABLE_COLUMN_PAIRS}")
            return f"your table is the interleaved sinusoidal table with base ≈ {said}. Hint: {TABLE_BASE}"
    if _sines_then_cosines(cases, outputs):
        return (f"your table has the sines in its first d/2 columns and the cosines in the last, with other "
                f"frequencies than θ_i = 1/10000^(2i/d) as well. Hint: {TABLE_BLOCKS}")
    if all(o.shape == r.shape and bool(torch.allclose(o[:, :2], r[:, :2], rtol=0.0, atol=TABLE_ATOL))
           for o, r in zip(outputs, refs)):
        return f"wrong values. Hint: {TABLE_FREQ}"
    return None


register(Exercise(
    name="sinusoidal_table", number="4.1", function="sinusoidal_table", chapter=CHAPTER, args=("T", "d"),
    library_answers=("tinyformer.positions.sinusoidal_positions", "tinyformer.positions._angles",
                     "tinyformer.positions.frequencies", "tinyformer.positions.rotate_pairs"),
    make_cases=_table_cases, reference=sinusoidal_table_reference,
    returns="the (T, d) table, a float32 or float64 tensor",
    exact_dtype=False, rtol=0.0, atol=TABLE_ATOL,
    mistakes=TABLE_MISTAKES,
    error_hints=[
        (RuntimeError, r"must match the size of tensor",
         "the T positions and the d/2 frequencies must broadcast into a (T, d/2) table of angles: make the "
         "positions a column, torch.arange(T)[:, None] of shape (T, 1), against a row of d/2 frequencies."),
        (ValueError, r"only one element tensors can be converted to Python scalars",
         "math.sin and math.cos take one number: for a tensor of angles use torch.sin and torch.cos."),
    ],
    diagnose=safe_diagnosis(_diagnose_table),
    diagnose_hints=(TABLE_BASE, TABLE_FREQ, TABLE_INT, TABLE_HALF, TABLE_NORMALISED, TABLE_LINSPACE),
    generic_hint="build the (T, d/2) angles t·θ_i with t = 0..T-1 and θ_i = 1/10000^(2i/d), then put their sines "
                 "in the even columns and their cosines in the odd ones; compare row 1 with a hand computation "
                 "for d = 4.",
))


# --------------------------------------------------------------------------- 4.2 the shift matrix


SHIFT_T = torch.tensor([-7.0, -2.0, -0.5, 0.0, 0.5, 1.0, 3.0, 10.0, 250.0], dtype=F64)   # t, any real number
SHIFT_ATOL = 1e-9


def _shift_cases(g):
    """(omega, k): frequencies of the table (1, 10000^(-2i/d) for d = 8: 0.1, 0.01, 0.001) and one
    drawn at random; shifts 0, positive and negative. Fixed cases first."""
    omega = 0.05 + 1.45 * torch.rand(1, generator=g, dtype=F64).item()
    k = _randint(g, 1, 9) * (1 if _randint(g, 0, 1) else -1)
    return [(1.0, 3), (0.1, -2), (0.01, 5), (1.0, 0), (BASE ** -0.75, 7), (1.0, -1), (omega, k)]


def shift_matrix_reference(omega: float, k: int) -> torch.Tensor:
    """M for row vectors: [sin ωt, cos ωt] @ M = [sin ω(t+k), cos ω(t+k)]."""
    c, s = math.cos(omega * k), math.sin(omega * k)
    return torch.tensor([[c, -s], [s, c]], dtype=F64)


def sin_cos_rows(omega: float, t: torch.Tensor) -> torch.Tensor:
    """The row vectors [sin ωt, cos ωt], one per t: (len(t), 2)."""
    return torch.stack([torch.sin(omega * t), torch.cos(omega * t)], dim=-1)


def _shift_ok(case, M, ref) -> bool:
    omega, k = case
    moved = sin_cos_rows(omega, SHIFT_T) @ M                              # (n, 2)
    return bool(torch.isfinite(M).all() and torch.allclose(moved, sin_cos_rows(omega, SHIFT_T + k), rtol=0.0,
                                                            atol=SHIFT_ATOL))


def _shift(angle: Callable[[float, int], float], signs=(-1, 1)):
    """A shift matrix [[cos a, s0·sin a], [s1·sin a, cos a]] with a = angle(omega, k)."""
    def wrong(omega, k):
        a = angle(omega, k)
        c, s = math.cos(a), math.sin(a)
        return torch.tensor([[c, signs[0] * s], [signs[1] * s, c]], dtype=F64)
    return wrong


SHIFT_TRANSPOSED = ("your M is the transpose of the right one, which turns the other way (it shifts by -k): you "
                    "wrote M for column vectors, M @ v; the book multiplies row vectors, v @ M, with "
                    "v = [sin ωt, cos ωt] (sine first); or you used R(ωk) of the rotary section: with sine "
                    "first the shift is R(−ωk).")
SHIFT_NONFINITE = "your matrix contains NaN or inf: its entries are the cosine and the sine of one angle."
SHIFT_PRECISION = ("your M is right to float32's precision only: build it with dtype=torch.float64 (torch.tensor(...) "
                   "without a dtype makes float32, whose ~1e-7 rounding is far outside the check's tolerance).")
SHIFT_SCALED = ("a shift keeps every pair (sin ωt, cos ωt) on the unit circle (sin² + cos² = 1), so M is a rotation, "
                "with no extra factor.")
SHIFT_ANGLE = ("in k positions the angle ωt grows by ωk, so M turns by ωk: expand sin(ωt + ωk) and cos(ωt + ωk) with "
               "the angle-addition formulas and read off the coefficients of sin ωt and cos ωt.")
SHIFT_REFLECTION = ("your M is a reflection (determinant -1), not a rotation: check the signs against "
                    "sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b - sin a sin b.")
SHIFT_NOT_ROTATION = ("your M is not a rotation (MᵀM ≠ I), so it changes the length of [sin ωt, cos ωt], which is "
                      "always 1: every entry is ±cos ωk or ±sin ωk.")

SHIFT_MISTAKES = [
    (_shift(lambda omega, k: omega * k, signs=(1, -1)), SHIFT_TRANSPOSED),
    (_shift(lambda omega, k: k), "the angle is ωk, not k: k positions advance the angle ωt by ω·k."),
    (_shift(lambda omega, k: omega), "the angle is ωk, not ω: k is the number of positions the matrix shifts "
                                     "by (your M shifts by one position whatever k is)."),
    (_shift(lambda omega, k: omega * k, signs=(1, 1)),
     "both sin ωk entries are positive: one of them has a minus sign, from "
     "cos(ωt + ωk) = cos ωt cos ωk - sin ωt sin ωk."),
    (lambda omega, k: torch.tensor([math.sin(omega * k), math.cos(omega * k)], dtype=F64),
     "you returned the vector [sin ωk, cos ωk], the encoding of position k: return the (2, 2) matrix M that "
     "takes [sin ωt, cos ωt] to [sin ω(t+k), cos ω(t+k)] for every t."),
]


def _wrap(angle: float) -> float:
    """The angle in (-π, π]."""
    return math.atan2(math.sin(angle), math.cos(angle))


def _diagnose_shift(cases, outputs, refs):
    if not _finite(outputs):
        return f"wrong output. Hint: {SHIFT_NONFINITE}"
    in_float32 = all(bool(torch.equal(M, M.float().to(M.dtype))) for M in outputs)      # every entry a float32
    if _close_all(outputs, refs, 1e-5) or (in_float32 and _close_all(outputs, refs, 1e-3)):
        return f"wrong values. Hint: {SHIFT_PRECISION}"
    hint = _loose_mistake(SHIFT_MISTAKES, cases, outputs, 1e-5)
    if hint is not None:
        return f"wrong matrix (and float32: pass dtype=torch.float64). Hint: {hint}"
    eye = torch.eye(2, dtype=F64)
    for (omega, k), M, ref in zip(cases, outputs, refs):
        if _shift_ok((omega, k), M, ref):
            continue
        at = f"for omega = {omega:g}, k = {k}"
        G, det = M.T @ M, torch.linalg.det(M).item()
        scale = math.sqrt(abs(det))
        rotation = det > 0 and bool(torch.allclose(G, scale ** 2 * eye, rtol=1e-6, atol=1e-9))  # times a factor
        if rotation and abs(scale - 1) > 1e-6 and torch.allclose(M / scale, ref, rtol=1e-6, atol=1e-9):
            return f"{at} your M is {scale:.4g} times the right rotation. Hint: {SHIFT_SCALED}"
        if rotation and abs(scale - 1) <= 1e-6:
            got, want = _wrap(math.atan2(M[1, 0].item(), M[0, 0].item())), _wrap(omega * k)
            return (f"{at} your M advances the angle ωt by {got:.4g} rad; k positions advance it by "
                    f"ωk = {want:.4g} rad (mod 2π). Hint: {SHIFT_ANGLE}")
        if det < 0 and torch.allclose(G, eye, rtol=1e-6, atol=1e-9):
            return f"{at}: wrong matrix. Hint: {SHIFT_REFLECTION}"
        return f"{at}: wrong matrix. Hint: {SHIFT_NOT_ROTATION}"
    return None


register(Exercise(
    name="shift_matrix", number="4.2", function="shift_matrix", chapter=CHAPTER, args=("omega", "k"),
    library_answers=("tinyformer.positions.rotate_pairs",),
    make_cases=_shift_cases, reference=shift_matrix_reference,
    returns="the (2, 2) float64 matrix M with [sin ωt, cos ωt] @ M = [sin ω(t+k), cos ω(t+k)]",
    exact_dtype=False, rtol=1e-9, atol=1e-10, compare=_shift_ok, mistakes=SHIFT_MISTAKES,
    error_hints=[
        (TypeError, r"must be Tensor, not (float|int)",
         "omega and k are plain Python numbers: math.cos and math.sin take them (torch.cos and torch.sin need "
         "tensors); then build M with torch.tensor(..., dtype=torch.float64)."),
        (TypeError, r"missing 1 required positional argument",
         "M depends on omega and k only: the check calls shift_matrix(omega, k). If your M needs t, expand "
         "sin(ω(t+k)) and cos(ω(t+k)) with the angle-addition formulas: t stays in the vector, not in M."),
    ],
    diagnose=safe_diagnosis(_diagnose_shift),
    diagnose_hints=(SHIFT_NONFINITE, SHIFT_PRECISION, SHIFT_SCALED, SHIFT_ANGLE, SHIFT_REFLECTION,
                    SHIFT_NOT_ROTATION),
    generic_hint="write [sin ωt, cos ωt] @ M out entry by entry and match it with the angle-addition formulas for "
                 "sin(ωt + ωk) and cos(ωt + ωk).",
))


# --------------------------------------------------------------------------- 4.3 rotary embeddings


ROPE_ATOL = 1e-10      # float64 angles up to 4096 rad, computed in any order, agree to ~1e-12


def _rope_cases(g):
    """(x, offset) with x (..., T, d): no leading axis, a batch axis, batch and head axes (B, H and T
    all different, so positions along the wrong axis raise), d >= 4 (two pairs at least, d/2 odd
    once), offsets 0, small and large; one case leaves offset to its default."""
    shapes_offsets = (((5, 8), 0), ((2, 6, 4), 3), ((2, 3, 5, 8), 1000), ((3, 4, 6), 0),
                      ((1, 2, 4, 16), 4096), ((3, 2, 12), 17))
    cases = [(_randn(g, *shape), offset) for shape, offset in shapes_offsets]
    cases.append((_randn(g, 2, 7, 6),))                                   # rope(x): offset 0 by default
    return cases


def rope_reference(x: torch.Tensor, offset: int = 0) -> torch.Tensor:
    return apply_rotary(x, offset)


def _rope(*, layout="interleaved", direction=1, use_offset=True, start=0, exponent="pair", pairs="all",
          update="both"):
    """RoPE with the mistakes named by the keywords; the defaults are right.

    layout: "interleaved" (x[2i] with x[2i+1]) or "half" (x[i] with x[i + d/2], GPT-NeoX/Llama), and
    the mixtures named below. direction: 1, or -1 (the sign of sin flipped). use_offset: add offset to
    the positions. start: added to the positions. exponent: "pair" (2i/d), "half" (i/d), "column"
    (2·2i/d) or "same" (0: every pair at frequency 1). pairs: "all", "first" (only pair 0 turns) or
    "none". update: "both" (both coordinates from the original pair), or "sequential" (the second
    computed from the first already turned: out[..., 0::2] = ...; out[..., 1::2] = out[..., 0::2]·sin + ...).
    """
    def wrong(x, offset=0):
        T, d = x.shape[-2], x.shape[-1]
        p = torch.arange(T, dtype=F64) + (offset if use_offset else 0) + start          # (T,)
        i = torch.arange(d // 2, dtype=F64)                                               # (d/2,)
        power = {"pair": 2 * i / d, "half": i / d, "column": 4 * i / d, "same": 0 * i}[exponent]
        angle = direction * p[:, None] * BASE ** -power                                  # (T, d/2)
        if pairs == "first":
            angle[:, 1:] = 0.0
        elif pairs == "none":
            angle = torch.zeros_like(angle)
        cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        if layout == "halves, cos per pair":     # rotate_half, but cos/sin repeated per pair (repeat_interleave)
            c, s_ = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
            halves = torch.cat((-x[..., d // 2:], x[..., :d // 2]), dim=-1)
            return x * c + halves * s_
        if layout == "pairs, cos in halves":     # neighbours turned, but cos/sin laid out torch.cat((cos, cos))
            c, s_ = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
            a, b = x[..., 0::2], x[..., 1::2]
            turned = torch.stack((-b, a), dim=-1).flatten(-2)
            return x * c + turned * s_
        if layout == "halves read, written interleaved":    # view_as_complex of x.reshape(..., 2, d/2).mT
            a, b = x[..., :d // 2], x[..., d // 2:]
            return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
        if layout in ("interleaved", "written back in halves"):
            a, b = x[..., 0::2], x[..., 1::2]                                             # (..., T, d/2)
            if layout == "written back in halves":          # turned right, put back with torch.cat
                return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
            first = a * cos - b * sin
            second = first * sin + b * cos if update == "sequential" else a * sin + b * cos
            return torch.stack((first, second), dim=-1).flatten(-2)
        a, b = x[..., :d // 2], x[..., d // 2:]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return wrong


ROPE_FLOAT32 = ("your values are right to float32's precision only: part of the computation ran in float32 (the "
                "positions or the frequencies made without dtype=x.dtype; torch.arange(T) * 1.0 is float32). At "
                "position 4096 float32 rounds the angle by ~1e-4 rad. Build them with dtype=x.dtype.")
ROPE_NORM = ("a rotation keeps the length of every pair (x[2i], x[2i+1]); yours changes it: turn the pair (a, b) by "
             "the angle φ as (a cos φ - b sin φ, a sin φ + b cos φ).")
ROPE_ANGLE = ("the pair i of the token at position p = offset + t turns by the angle p·θ_i, with "
              "θ_i = 10000^(-2i/d).")

ROPE_MISTAKES = [
    (_rope(layout="half"), "you paired x[i] with x[i + d/2], the 'rotate_half' layout of GPT-NeoX and Hugging "
                           "Face's Llama. It is a real convention, just not this book's, which pairs neighbours "
                           "(x[2i], x[2i+1]) as RoFormer and Meta's reference Llama code do; weights trained with "
                           "one layout do not work with the other."),
    (_rope(layout="written back in halves"),
     "each pair (x[2i], x[2i+1]) turned right, but you wrote the results back as all the first coordinates, then "
     "all the second (torch.cat): put them back interleaved, at 2i and 2i+1, torch.stack((a2, b2), "
     "dim=-1).flatten(-2)."),
    (_rope(layout="halves, cos per pair"),
     "you rotated halves (x[i] with x[i + d/2], rotate_half) but laid out cos and sin per neighbouring pair "
     "(repeat_interleave): the two conventions mixed. This book pairs neighbours, (x[2i], x[2i+1]), each turned by "
     "its own angle."),
    (_rope(layout="pairs, cos in halves"),
     "you turned neighbouring pairs (x[2i], x[2i+1]) but laid out cos and sin in halves (torch.cat((cos, cos))), "
     "the rotate_half layout: the two conventions mixed. Pair i needs cos and sin of its own angle p·θ_i, at "
     "columns 2i and 2i+1."),
    (_rope(layout="halves read, written interleaved"),
     "you paired x[i] with x[i + d/2] (a reshape to (..., 2, d/2) before view_as_complex, or x[..., :d//2] with "
     "x[..., d//2:]) but wrote the results back interleaved, at 2i and 2i+1: the book pairs neighbours on both "
     "sides, (x[2i], x[2i+1]), a reshape to (..., d/2, 2)."),
    (_rope(update="sequential"),
     "you computed the second coordinate from the first one already turned (out[..., 0::2] was overwritten "
     "before out[..., 1::2] read it): compute both coordinates from the original a and b, "
     "(a cos φ - b sin φ, a sin φ + b cos φ), before writing either."),
    (_rope(direction=-1), "your pairs turn the wrong way (the sign of sin): the pair (a, b) becomes "
                          "(a cos φ - b sin φ, a sin φ + b cos φ) with φ = p·θ_i."),
    (_rope(use_offset=False), "the offset is ignored: row t is at position offset + t (a cache passes the number "
                              "of tokens it already holds), so it turns by (offset + t)·θ_i."),
    (_rope(start=1), "your positions start at 1: row t is at position offset + t, so with offset = 0 the first "
                     "row is position 0 and is not turned at all."),
    (_rope(exponent="half"), "the exponent is 2i/d, not i/d: θ_i = 10000^(-2i/d)."),
    (_rope(exponent="column"), "the frequency came from the column index 2i, 10000^(-2·2i/d); it comes from the "
                               "pair index i, θ_i = 10000^(-2i/d)."),
    (_rope(exponent="same"), "every pair turned by the same angle p: pair i turns by p·θ_i, each pair at its own "
                             "frequency θ_i = 10000^(-2i/d)."),
    (_rope(pairs="none"), "your function returned x unchanged: every pair (x[2i], x[2i+1]) must turn by its "
                          "angle p·θ_i."),
    (_rope(pairs="first"), "only the first pair (x[0], x[1]) turned: all d/2 pairs turn, pair i by its own "
                           "angle p·θ_i."),
]


def _pairs(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(*t.shape[:-1], t.shape[-1] // 2, 2)                  # (..., T, d/2, 2)


def _diagnose_rope(cases, outputs, refs):
    if not _finite(outputs):
        return None
    if _close_all(outputs, refs, 1e-2):
        return f"wrong values. Hint: {ROPE_FLOAT32}"
    hint = _loose_mistake(ROPE_MISTAKES, cases, outputs, 1e-2)
    if hint is not None:
        return (f"wrong output (and float32 rounding: build the positions and frequencies with dtype=x.dtype). "
                f"Hint: {hint}")
    for case, out, ref in zip(cases, outputs, refs):
        if out.shape == ref.shape and bool(torch.allclose(out, ref, rtol=1e-9, atol=ROPE_ATOL)):
            continue
        x, offset = case[0], (case[1] if len(case) > 1 else 0)
        a, b = _pairs(x), _pairs(out)                                      # (..., T, d/2, 2)
        if not torch.allclose(b.norm(dim=-1), a.norm(dim=-1), rtol=1e-6, atol=1e-9):
            return f"wrong values for x of shape {tuple(x.shape)}, offset = {offset}. Hint: {ROPE_NORM}"
        turned = torch.atan2(a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0],
                             (a * b).sum(-1))                              # (..., T, d/2)
        want = _pairs(ref)
        wanted = torch.atan2(a[..., 0] * want[..., 1] - a[..., 1] * want[..., 0], (a * want).sum(-1))
        off = (torch.remainder(turned - wanted + math.pi, 2 * math.pi) - math.pi).abs()
        index = tuple(int(n) for n in torch.nonzero(off > 1e-6)[0])
        *_, t, i = index
        return (f"for x of shape {tuple(x.shape)} and offset = {offset}, the pair i = {i} of row t = {t} (position "
                f"{offset + t}) turned by {turned[index].item():.4g} rad; it should turn by "
                f"{wanted[index].item():.4g} rad (mod 2π). Hint: {ROPE_ANGLE}")
    return None


register(Exercise(
    name="rope", number="4.3", function="rope", chapter=CHAPTER, args=("x", "offset"),
    library_answers=("tinyformer.positions.apply_rotary", "tinyformer.positions.rotate_pairs",
                     "tinyformer.positions.RotaryEmbedding", "tinyformer.positions._angles",
                     "tinyformer.positions.sinusoidal_positions", "tinyformer.positions.frequencies"),
    make_cases=_rope_cases, reference=rope_reference, returns="the rotated tensor, shaped like x",
    rtol=1e-9, atol=ROPE_ATOL, mistakes=ROPE_MISTAKES,
    error_hints=[
        (RuntimeError, r"must match the size of tensor",
         "the (T, d/2) table of angles does not line up with x: it needs one row per position of x, offset to "
         "offset + T - 1, so build it from torch.arange(offset, offset + T) (a table built for positions 0 to "
         "T - 1 and then sliced at [offset:offset + T] comes out short). T is x.shape[-2] (x may have batch and "
         "head axes in front, (..., T, d)), the pairs run along the last axis, and the table broadcasts over the "
         "leading axes."),
        (TypeError, r"takes 1 positional argument but 2 were given",
         "rope takes the offset as its second argument, rope(x, offset=0): row t is at position offset + t."),
        (TypeError, r"missing 1 required positional argument",
         "offset has a default: rope(x) means offset = 0, so write def rope(x, offset=0)."),
    ],
    diagnose=safe_diagnosis(_diagnose_rope), diagnose_hints=(ROPE_FLOAT32, ROPE_NORM, ROPE_ANGLE),
    generic_hint="for p = offset + t and θ_i = 10000^(-2i/d), turn each pair (a, b) = (x[..., 2i], x[..., 2i+1]) "
                 "into (a cos pθ_i - b sin pθ_i, a sin pθ_i + b cos pθ_i); compare with a loop over t and i on a "
                 "small x.",
))


# --------------------------------------------------------------------------- 4.6 attending 3 back, by hand


LOOK_T = 64            # queries 0..63 (four times the chapter's training length), and some far ones
LOOK_FAR = (100, 257, 1000, 2047, 4095)
LOOK_KEYS = 4096       # keys 0..4095: a matrix fitted to a short table peaks wrongly far out


def _look_cases(g):
    """(d, k): the chapter's width 16 and k = 3 first, then narrow and wide tables (d/2 odd once), k = 0
    (the query itself), a large k (a wrong base shows there) and a random case. d >= 4, so that two pairs
    make the peak unique."""
    return [(16, 3), (8, 3), (4, 1), (6, 2), (32, 7), (16, 0), (16, 12),
            (2 * _randint(g, 2, 16), _randint(g, 1, 12))]


def look_back_matrix_reference(d: int, k: int) -> torch.Tensor:
    """A = M_{-k}: the shift matrices of Exercise 4.2 with angle -k·θ_i on the diagonal, so that
    PE[m] @ A = PE[m - k] and the score PE[m] A PE[n]ᵀ = Σ_i cos((m - k - n) θ_i) peaks at n = m - k."""
    A = torch.zeros(d, d, dtype=F64)
    for i in range(d // 2):
        A[2 * i:2 * i + 2, 2 * i:2 * i + 2] = shift_matrix_reference(BASE ** (-2 * i / d), -k)
    return A


def _look_queries(k: int) -> torch.Tensor:
    return torch.tensor(list(range(k, LOOK_T)) + list(LOOK_FAR))


def _look_scores(d: int, A: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    PE = sinusoidal_positions(LOOK_KEYS, d, dtype=F64)                   # (keys, d)
    return PE[queries] @ A.to(F64) @ PE.T                                # (queries, keys): query m, key n


def _look_peaks(d: int, k: int, A: torch.Tensor) -> bool:
    """Every query m >= k (0..63 and a few far ones) gives its highest score, over all 4,096 keys n
    (later ones too: a statement about the scores, not the mask), to n = m - k."""
    queries = _look_queries(k)
    S = _look_scores(d, A, queries)                                      # (queries, keys)
    rows = torch.arange(len(queries))
    best = S[rows, queries - k]                                          # n = m - k
    others = S.clone()
    others[rows, queries - k] = -math.inf
    margin = 1e-6 * S.abs().max().clamp_min(1e-300)
    return bool((best > others.max(-1).values + margin).all())


def _look_shifts(d: int, k: int, A: torch.Tensor) -> bool:
    """PE[m] @ A = c·PE[m - k] for every query m (c > 0, the same for all): A moves the table k back."""
    queries = _look_queries(k)
    PE = sinusoidal_positions(LOOK_KEYS, d, dtype=F64)
    moved, want = PE[queries] @ A.to(F64), PE[queries - k]               # (queries, d)
    c = (moved * want).sum() / (want * want).sum()
    return bool(c > 0) and bool(torch.allclose(moved, c * want, rtol=0.0, atol=1e-5 * float(c)))


def _look_ok(case, A, ref) -> bool:
    """A is a (d, d) matrix that moves every row of the table k positions back, PE[m] @ A = c·PE[m - k]
    (checked at queries 0..63 and a few far ones), and every query's highest score, over all 4,096 keys,
    is at n = m - k."""
    d, k = case
    if not (isinstance(A, torch.Tensor) and A.is_floating_point() and A.shape == (d, d)
            and bool(torch.isfinite(A).all())):
        return False
    return _look_shifts(d, k, A) and _look_peaks(d, k, A)


def _pair_angles(d: int, A: torch.Tensor) -> list[float] | None:
    """The angle each 2 x 2 diagonal block turns by, if A is block diagonal with rotation blocks (of any
    positive size); else None."""
    A = A.to(F64)
    blocks = torch.zeros_like(A)
    angles = []
    for i in range(d // 2):
        block = A[2 * i:2 * i + 2, 2 * i:2 * i + 2]
        blocks[2 * i:2 * i + 2, 2 * i:2 * i + 2] = block
        (c, minus_s), (s, c2) = block.tolist()
        if abs(c - c2) > 1e-5 * (abs(c) + abs(s)) or abs(s + minus_s) > 1e-5 * (abs(c) + abs(s)) or c == s == 0:
            return None
        angles.append(math.atan2(s, c))
    if not torch.allclose(A, blocks, rtol=0.0, atol=1e-6 * float(A.abs().max())):
        return None
    return angles


def _turn_gap(a: float, b: float) -> float:
    """|a - b| on the circle."""
    return abs(math.remainder(a - b, 2 * math.pi))


def _look(*, angle="-k", exponent="pair", at="2i"):
    """A block-diagonal A with the mistakes named by the keywords; the defaults are right. at: "2i" (right:
    block i at rows and columns 2i, 2i+1) or "i" (A[i:i+2, i:i+2], the blocks overlapping)."""
    def wrong(d, k):
        A = torch.zeros(d, d, dtype=F64)
        for i in range(d // 2):
            theta = BASE ** (-{"pair": 2 * i / d, "column": 4 * i / d}[exponent])
            shift = {"-k": -k * theta, "+k": k * theta, "k": -float(k), "0": 0.0}[angle]
            r = 2 * i if at == "2i" else i
            A[r:r + 2, r:r + 2] = _rotation(shift)
        return A
    return wrong


def _rotation(angle: float) -> torch.Tensor:
    """The row-vector shift by `angle` of Exercise 4.2: [sin a, cos a] @ M = [sin(a + angle), cos(a + angle)]."""
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([[c, -s], [s, c]], dtype=F64)


LOOK_AHEAD = ("your scores peak k positions ahead, at n = m + k: PE[m] @ M_k is PE[m + k]. "
              "Turn the other way, M_{-k} (the transpose of M_k): then PE[m] @ A = PE[m - k], and the score is "
              "largest where n = m - k.")
LOOK_SELF = ("your A does not turn the pairs, so every score peaks at the query itself (n = m): PE[m] is most "
             "like PE[m]. Put the shift M_{-k} of Exercise 4.2 (angle -k·θ_i in pair i) on the diagonal.")
LOOK_OFF_BY_ONE = ("your k is off by one: A must shift back by exactly k positions, angle -k·θ_i in pair i, so "
                   "that PE[m] @ A = PE[m - k]; a shift by k - 1 or k + 1 peaks one key off, at n = m - k + 1 or "
                   "n = m - k - 1.")
LOOK_WHERE = ("with A = M_{-k}, PE[m] @ A = PE[m - k] and the score PE[m - k]·PE[n] = Σ_i cos((m - k - n) θ_i) is "
              "largest, d/2, where n = m - k. Build A from d/2 blocks of 2 x 2: pair i holds the shift of Exercise "
              "4.2 with ω = θ_i = 10000^(-2i/d) and -k positions. Compare your angles with -k * frequencies(d): "
              "a wrong exponent or a missing minus sign shows there.")

LOOK_NEGATIVE = ("your A is a negative multiple of the shift: PE[m] @ A = -c·PE[m - k], so every score is turned "
                 "upside down and is LOWEST at n = m - k. Each block is -R(-k·θ_i) = R(π - k·θ_i): drop the minus "
                 "sign (the blocks are [[cos a, -sin a], [sin a, cos a]] with a = -k·θ_i, times a positive "
                 "number if any).")
LOOK_PAIR = ("each pair i must turn by -k·θ_i with the table's own frequency θ_i = 10000^(-2i/d) (base 10000, "
             "exponent 2i/d, i counted from 0), and every pair must turn: a pair at another rate, or left as it "
             "is, no longer moves its part of the row k positions back.")

LOOK_MISTAKES = [
    (_look(angle="+k"), LOOK_AHEAD),
    (_look(angle="0"), LOOK_SELF),
    (_look(angle="k"), "every pair turned by the same angle k: pair i must turn by k·θ_i, its own frequency "
                       "θ_i = 10000^(-2i/d), as in the table; with one angle for all, the pairs disagree about "
                       "where m - k is."),
    (_look(exponent="column"), "your frequencies came from the column index, 10000^(-2·2i/d): pair i of the table "
                               "turns at θ_i = 10000^(-2i/d), and its block must turn at the same rate."),
    (_look(at="i"), "block i starts at row and column 2i, A[2*i:2*i + 2, 2*i:2*i + 2]: yours starts at i, so the "
                    "blocks overlap and each overwrites half of the one before."),
]


def _diagnose_look(cases, outputs, refs):
    for (d, k), A in zip(cases, outputs):
        if not (isinstance(A, torch.Tensor) and A.is_floating_point() and A.shape == (d, d)
                and bool(torch.isfinite(A).all())):
            return None
        if _look_ok((d, k), A, None):
            continue
        hint = _loose_mistake(LOOK_MISTAKES, cases, [a.to(F64) for a in outputs], 1e-5)
        if hint is not None:                    # a known mistake, its blocks rounded to float32
            return f"wrong output. Hint: {hint}"
        if _look_shifts(d, k, -A):              # -c·M_{-k}: right angles, the sign of the whole matrix wrong
            return f"for d = {d}, k = {k}: PE[m] @ A = -c·PE[m - k] with c > 0. Hint: {LOOK_NEGATIVE}"
        angles = _pair_angles(d, A)
        if angles is not None:                  # rotation blocks: compare each pair's angle with -k·θ_i
            thetas = [BASE ** (-2 * i / d) for i in range(d // 2)]
            named_below = any(all(_turn_gap(a, sign * (k + step) * t) < 1e-5 for a, t in zip(angles, thetas))
                              for sign in (1, -1) for step in (1, -1, 0)) or all(
                abs(math.remainder(a, 2 * math.pi)) < 1e-5 for a in angles)  # ahead, off by one, none: by the peaks
            i = next((i for i, (a, t) in enumerate(zip(angles, thetas)) if _turn_gap(a, -k * t) > 1e-5), None)
            if i is not None and not named_below:
                return (f"for d = {d}, k = {k}: pair {i} of your A turns by {angles[i]:.4g} rad, where -k·θ_{i} = "
                        f"{math.remainder(-k * thetas[i], 2 * math.pi):.4g} rad. Hint: {LOOK_PAIR}")
        if _look_peaks(d, k, A):
            return (f"for d = {d}, k = {k}: your scores do peak at n = m - k, but PE[m] @ A is not PE[m - k] (nor a "
                    f"multiple of it). Hint: {LOOK_WHERE}")
        queries = _look_queries(k)
        S = _look_scores(d, A, queries)                                  # (queries, keys)
        rows = torch.arange(len(queries))
        others = S.clone()
        others[rows, queries - k] = -math.inf
        rival = others.argmax(-1)                                        # the best key other than m - k
        margin = 1e-6 * S.abs().max().clamp_min(1e-300)
        bad = int(torch.nonzero(S[rows, queries - k] <= others.max(-1).values + margin)[0])
        m_bad = int(queries[bad])
        at = (f"for d = {d}, k = {k}: the query at m = {m_bad} scores the key at n = {int(rival[bad])} as high "
              f"as the key at n = {m_bad - k}, or higher")
        peaks = S.argmax(-1)
        offsets = [int(peaks[r]) - m for r, m in enumerate(queries.tolist()) if m < LOOK_T]
        for step in (1, -1):                    # A shifts by k - 1 or k + 1: the peak one key off, n = m - k + step
            if all(int(peaks[r]) == m - k + step for r, m in enumerate(queries.tolist()) if m - k + step >= 0):
                return f"{at}; your scores peak at n = m - k {'+' if step > 0 else '-'} 1. Hint: {LOOK_OFF_BY_ONE}"
        if k > 0 and all(o == k for o in offsets):
            return f"{at}. Hint: {LOOK_AHEAD}"
        identity = torch.allclose(A.to(F64), A[0, 0].to(F64) * torch.eye(d, dtype=F64))
        if k > 0 and all(o == 0 for o in offsets) and identity:
            return f"{at}. Hint: {LOOK_SELF}"
        return f"{at}. Hint: {LOOK_WHERE}"
    return None


register(Exercise(
    name="look_back_matrix", number="4.6", function="look_back_matrix", chapter=CHAPTER, args=("d", "k"),
    library_answers=("tinyformer.course.ch04.look_back_matrix_reference", "tinyformer.positions.rotate_pairs"),
    make_cases=_look_cases, reference=look_back_matrix_reference,
    returns="the (d, d) matrix A with PE[m] A = PE[m - k], whose scores PE[m] A PE[n]ᵀ peak at n = m - k",
    exact_dtype=False, integers_for_floats=False, compare=_look_ok, mistakes=LOOK_MISTAKES,
    error_hints=[
        (TypeError, r"must be Tensor, not (float|int)",
         "θ_i and k are plain Python numbers here: math.cos and math.sin take them (torch.cos and torch.sin need "
         "tensors)."),
    ],
    diagnose=safe_diagnosis(_diagnose_look), diagnose_hints=(LOOK_OFF_BY_ONE, LOOK_WHERE, LOOK_PAIR, LOOK_NEGATIVE),
    generic_hint="PE[m] @ A should be PE[m - k]: reuse shift_matrix of Exercise 4.2 for each pair i, with "
                 "ω = θ_i and -k positions, and place the d/2 blocks on the diagonal of a (d, d) float64 matrix.",
))


# --------------------------------------------------------------------------- 4.7 ALiBi's bias


def _alibi_cases(g):
    """(T, slopes), slopes a float64 tensor: the chapter's two heads, one head, the paper's 4 and 8 heads,
    slopes out of order, T = 1; T differs from the number of heads but once (so heads on the wrong axis
    raise or show in the shape); then a random case."""
    n = _randint(g, 1, 6)
    fixed = [(6, [0.5, 0.25]), (5, [1.0]), (9, alibi_slopes(4).tolist()), (4, alibi_slopes(8).tolist()),
             (7, [0.1, 2.0, 0.3]), (1, [0.5, 0.25]), (3, [0.5, 0.25, 0.125])]
    cases = [(T, torch.tensor(s, dtype=F64)) for T, s in fixed]
    cases.append((_randint(g, 2, 12), 0.05 + 2 * torch.rand(n, generator=g, dtype=F64)))
    return cases


def alibi_reference(T: int, slopes: torch.Tensor) -> torch.Tensor:
    return alibi_bias(T, slopes)


def _alibi(*, sign=-1, future="-inf", diagonal="visible", slope=True, layout="h,T,T", distance="m-n"):
    """The ALiBi bias with the mistakes named by the keywords; the defaults are right."""
    def wrong(T, slopes):
        m, n = torch.arange(T)[:, None], torch.arange(T)[None, :]
        dist = (m - n).to(F64)                                           # (T, T)
        if distance == "abs":
            dist = dist.abs()
        elif distance == "plus one":
            dist = dist + 1
        s = slopes if slope else torch.ones_like(slopes)
        bias = sign * s[:, None, None] * dist                            # (h, T, T)
        hidden = {"visible": n > m, "hidden": n >= m, "past": n < m}[diagonal]
        fill = {"-inf": -math.inf, "+inf": math.inf, "0": 0.0, "-1e9": -1e9}.get(future)
        if fill is not None:
            bias = bias.masked_fill(hidden, fill)
        if layout == "T,T,h":
            bias = bias.permute(1, 2, 0)
        elif layout == "keys in rows":
            bias = bias.transpose(-1, -2)
        return bias
    return wrong


ALIBI_MISTAKES = [
    (_alibi(sign=1), "your bias rewards distance: a key m - n positions back must lose slope·(m - n), so the bias "
                     "is -slope·(m - n) (0 on the diagonal, more negative further back)."),
    (_alibi(future="none"), "the keys after the query (n > m) have a bias too: fold the causal mask in, -inf "
                            "wherever n > m, so that they get no weight after the softmax."),
    (_alibi(future="none", distance="abs"), "you penalised |m - n| on both sides, the bidirectional form: this "
                                            "bias is causal, -inf wherever n > m."),
    (_alibi(future="+inf"), "the future must be -inf, not +inf: float('inf') above the diagonal hides nothing, "
                            "it makes the softmax of those rows NaN (inf / inf). Fill the keys after the query with "
                            "float('-inf')."),
    (_alibi(future="0"), "the keys after the query got 0, which hides nothing: they must get -inf, so that the "
                         "softmax gives them weight exactly 0."),
    (_alibi(diagonal="hidden"), "you hid the query's own key too (n >= m): a query sees itself, at distance 0 "
                                "and with no penalty; hide only n > m."),
    (_alibi(diagonal="past"), "you hid the keys before the query (n < m): a query sees the keys at or before it, "
                              "n <= m, and -inf goes to the keys after it, n > m."),
    (_alibi(distance="plus one"),
     "your distances are one too large: the query's own key (n = m) is at distance 0 and gets no penalty, so the "
     "bias is -slopes[h]·(m - n), not -slopes[h]·(m - n + 1)."),
    (_alibi(slope=False), "every head got slope 1: head h multiplies the distance by its own slopes[h]."),
    (_alibi(layout="T,T,h"), "the heads come last, (T, T, n_heads): put them first, (n_heads, T, T), with "
                             "slopes[:, None, None] * distance."),
    (_alibi(layout="keys in rows"), "your rows are the keys and your columns the queries: entry [h, m, n] is the "
                                    "query at m and the key at n, so -inf goes above the diagonal (n > m)."),
]


ALIBI_BIG = ("the keys after the query got a large negative number (such as -1e9 or torch.finfo(...).min): the "
             "statement asks for -inf, float('-inf'), which gives them weight exactly 0 whatever the other scores.")
ALIBI_NAN = ("your bias is NaN where the key is allowed: 0 · (-inf) is NaN, not 0, so a 0/1 mask multiplied by -inf "
             "poisons every entry it should leave alone. Fill instead: bias.masked_fill(n > m, float('-inf')).")
ALIBI_SLOPES_F32 = ("your slopes were rounded to float32 (torch.as_tensor(slopes, dtype=torch.float32), or .float()) "
                    "before they scaled the distances: use them as given, in slopes.dtype, float64 here.")
ALIBI_SLOPES = ("each head must grow its penalty at its own given rate: entry [h, m, n] is -slopes[h]·(m - n), with "
                "the slopes argument as it is, in its order (not slopes you compute, reorder or scale).")


def _diagnose_alibi(cases, outputs, refs):
    for (T, slopes), out, ref in zip(cases, outputs, refs):
        if out.shape != ref.shape or bool(torch.allclose(out, ref, rtol=1e-12, atol=1e-12)):
            continue
        m, n = torch.arange(T)[:, None], torch.arange(T)[None, :]
        seen, after = (n <= m).expand_as(out), (n > m).expand_as(out)
        at = f"for T = {T} and slopes {[round(v, 4) for v in slopes.tolist()]}"
        if bool(torch.isnan(out[seen]).any()) and bool((out[after] == -math.inf).all()):
            return f"{at}: wrong values. Hint: {ALIBI_NAN}"
        if bool(torch.allclose(out[seen], ref[seen])) and bool(torch.isfinite(out[after]).all()) and bool(
                (out[after] <= -1e4).all()):
            return f"{at}: wrong values. Hint: {ALIBI_BIG}"
        if T > 1 and bool((out[after] == -math.inf).all()) and bool(torch.isfinite(out[seen]).all()):
            got = -out[:, 1, 0]                                              # each head's slope, read at distance 1
            linear = -got[:, None, None] * (m - n).to(out.dtype)
            if (bool(torch.allclose(out[seen], linear.expand_as(out)[seen]))
                    and bool(torch.equal(got, slopes.float().to(got.dtype)))
                    and not bool(torch.equal(got, slopes))
                    and not all(bool(torch.equal(o, o.float().to(o.dtype))) for o in outputs)):
                return f"{at}: wrong values. Hint: {ALIBI_SLOPES_F32}"
            if (bool(torch.allclose(out[seen], linear.expand_as(out)[seen]))
                    and not bool(torch.allclose(got, slopes, rtol=1e-5, atol=0.0))):  # not float32 rounding
                return (f"{at}, your heads' slopes are {[round(v, 4) for v in got.tolist()]}. "
                        f"Hint: {ALIBI_SLOPES}")
        return None
    return None


register(Exercise(
    name="alibi", number="4.7", function="alibi", chapter=CHAPTER, args=("T", "slopes"),
    library_answers=("tinyformer.positions.alibi_bias",),
    make_cases=_alibi_cases, reference=alibi_reference, returns="the (n_heads, T, T) bias",
    rtol=1e-12, atol=1e-12, mistakes=ALIBI_MISTAKES, dtype_from="slopes",
    error_hints=[
        (RuntimeError, r"must match the size of tensor",
         "slopes has one entry per head and the distances are (T, T): give slopes two new axes, "
         "slopes[:, None, None], so that the product is (n_heads, T, T)."),
    ],
    diagnose=safe_diagnosis(_diagnose_alibi), diagnose_hints=(ALIBI_BIG, ALIBI_NAN, ALIBI_SLOPES, ALIBI_SLOPES_F32),
    generic_hint="entry [h, m, n] is -slopes[h]·(m - n) for n <= m and -inf for n > m; for T = 3 and one head "
                 "of slope 0.5 the rows read [0, -inf, -inf], [-0.5, 0, -inf], [-1, -0.5, 0].",
))


# --------------------------------------------------------------------------- drill: the binary table


def _binary_cases(g):
    """(T, d) with T <= 2**d: every position of 3 bits, and sizes that leave the top bits unused;
    fixed first, then a random one."""
    d = _randint(g, 3, 8)
    return [(8, 3), (5, 4), (16, 6), (12, 5), (_randint(g, 3, 2 ** d), d)]


def binary_table_reference(T: int, d: int) -> torch.Tensor:
    return binary_positions(T, d, dtype=F64)


def _bits(*, order="lsb", values="01", start=0, mask=True, form="T,d"):
    """The binary table with the mistakes named by the keywords; the defaults are right."""
    def wrong(T, d):
        t = torch.arange(start, start + T)[:, None]                        # (T, 1)
        j = torch.arange(d) if order == "lsb" else torch.arange(d - 1, -1, -1)
        bits = (t >> j) & 1 if mask else t >> j                            # (T, d)
        if values == "2^j":                                                # t & (1 << j): 0 or 2^j
            bits = t & (1 << j)
        PE = bits.to(F64) if values in ("01", "2^j") else 2 * bits.to(F64) - 1
        return PE.T.contiguous() if form == "d,T" else PE
    return wrong


register(Exercise(
    name="binary_table", number="", function="binary_table", chapter=CHAPTER, args=("T", "d"), drill=True,
    library_answers=("tinyformer.positions.binary_positions",),
    make_cases=_binary_cases, reference=binary_table_reference, returns="the (T, d) table of 0s and 1s",
    exact_dtype=False, rtol=0.0, atol=1e-6,
    mistakes=[
        (_bits(order="msb"), "your columns start at the most significant bit: column 0 holds the least "
                             "significant bit, (t >> 0) & 1, which flips at every position, like the fastest "
                             "sinusoid."),
        (_bits(values="pm1"), "your table holds -1 and +1: the book's binary table holds the bits themselves, "
                              "0 and 1, PE[t, j] = (t >> j) & 1."),
        (_bits(start=1), "your rows start at position 1: row t is position t, so row 0 is all zeros."),
        (_bits(mask=False), "column j holds t >> j = t // 2^j, all the higher bits with it: keep bit j alone, "
                            "(t >> j) & 1, or (t // 2**j) % 2."),
        (_bits(values="2^j"), "column j holds t & (1 << j), which is 2^j, not 1, where bit j is set: shift it back, "
                              "(t >> j) & 1, or compare, (t & (1 << j)) != 0."),
        (_bits(form="d,T"), "your table is transposed, (d, T): one row per position t, one column per bit j."),
    ],
    generic_hint="PE[t, j] is bit j of t, counting from the least significant: (t >> j) & 1; row 5 with d = 4 "
                 "reads 1, 0, 1, 0.",
))
