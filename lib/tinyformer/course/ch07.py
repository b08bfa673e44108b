"""Chapter 7 (scaling laws): the exercises, their test inputs, references, known mistakes and hints.

Exercise 7.1 (``optimal_split``) splits a compute budget ``C = 6·N·D`` between parameters and
tokens under the Chinchilla form ``L = E + A/N^alpha + B/D^beta``:
``N = G·(C/6)^(beta/(alpha+beta))`` with ``G = (alpha·A/(beta·B))^(1/(alpha+beta))`` and
``D = C/(6·N)``. The fixed cases come first, so that the first failing case never depends on the
seed: Chinchilla's budget under both published fits, then budgets and constants where ``alpha`` and
``beta`` differ and ``A != B`` (so that swapping them changes the answer). Every registered slip
(the 6 forgotten, in both places or in ``D`` only; the exponent ``alpha`` where ``beta`` belongs;
``G`` upside down, without its root, or with ``A`` and ``B`` swapped; ``G`` left out; the pair
returned as ``(D, N)``) gives a different answer on these cases.

Exercise 7.2 (``fit_loglog``) fits ``y = a·x^(-alpha)`` by least squares on ``log y`` against
``log x`` and returns ``(a, alpha)``. The cases are noisy (a fit on exact power laws cannot tell the
regression of ``log x`` on ``log y`` from the right one), with ``x`` spanning several decades. The
slips: the slope returned as ``alpha`` (its sign), ``log a`` returned instead of ``a``, ``a`` taken
as ``10**intercept`` after natural logarithms (or ``e**intercept`` after base-10 ones), the
regression of ``log x`` on ``log y``, a fit through the first and last points only, and the pair
returned as ``(alpha, a)``. A fit in float32 is accepted (the tolerance is 1e-5, relative).

Library answers: ``tinyformer.scaling.compute_optimal`` and ``loss_surface`` for 7.1;
``fit_power_law`` and ``fit_power_law_offset`` for 7.2.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from tinyformer.course.engine import Exercise, register, safe_diagnosis
from tinyformer.course.engine import randint as _randint
from tinyformer.scaling import PUBLISHED

CHAPTER = "07-scaling"


def _uniform(g: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=g, dtype=torch.float64))


# --------------------------------------------------------------------------- 7.1 the compute-optimal split


def _split_cases(g):
    """(C, A, B, alpha, beta). Fixed first: Chinchilla's budget (6 · 70e9 · 1.4e12 FLOPs) under
    Hoffmann et al.'s printed constants and under Besiroglu et al.'s refit; a small budget with
    alpha = 0.5, beta = 0.3, A = 100, B = 2000; then three random ones (C from 1e15 to 1e26, the
    exponents from 0.1 to 0.9, A and B from 10 to 5000)."""
    cases = []
    for fit in ("hoffmann", "besiroglu"):
        f = PUBLISHED[fit]
        cases.append((5.88e23, f["A"], f["B"], f["alpha"], f["beta"]))
    cases.append((1.0e18, 100.0, 2000.0, 0.5, 0.3))
    for _ in range(3):
        cases.append((10 ** _uniform(g, 15, 26), 10 ** _uniform(g, 1, 3.7), 10 ** _uniform(g, 1, 3.7),
                      _uniform(g, 0.1, 0.9), _uniform(g, 0.1, 0.9)))
    return cases


def optimal_split_reference(C, A, B, alpha, beta):
    G = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
    N = G * (C / 6) ** (beta / (alpha + beta))
    return N, C / (6 * N)


def _split(*, six="both", exponent="beta", G="right", order="N, D"):
    """The split with the slips named by the keywords; the defaults are right."""
    def wrong(C, A, B, alpha, beta):
        budget = C / 6 if six in ("both", "N only") else C
        g = {"right": (alpha * A / (beta * B)) ** (1 / (alpha + beta)),
             "inverted": (beta * B / (alpha * A)) ** (1 / (alpha + beta)),
             "no root": alpha * A / (beta * B),
             "A and B swapped": (alpha * B / (beta * A)) ** (1 / (alpha + beta)),
             "none": 1.0}[G]
        N = g * budget ** ((beta if exponent == "beta" else alpha) / (alpha + beta))
        D = C / (6 * N) if six == "both" else C / N
        return (D, N) if order == "D, N" else (N, D)
    return wrong


SPLIT_NO_SIX = ("the budget is C = 6·N·D FLOPs, not N·D: use C / 6 in N_opt = G·(C/6)^(beta/(alpha+beta)) "
                "and D = C / (6·N).")
SPLIT_D_NO_SIX = ("your N is right but D is not: C = 6·N·D, so D = C / (6·N). Yours is C / N, six times too "
                  "many tokens.")
SPLIT_EXPONENT = ("N grows as (C/6)^(beta/(alpha+beta)): the exponent of D's term, beta, goes on top. Yours uses "
                  "alpha/(alpha+beta), which is D's exponent: D_opt grows as (C/6)^(alpha/(alpha+beta)).")
SPLIT_G_INVERTED = ("G is upside down: G = (alpha·A / (beta·B))^(1/(alpha+beta)). Setting the derivative of "
                    "A/N^alpha + B·(6N/C)^beta to zero gives alpha·A/N^(alpha+1) = beta·B·(6/C)^beta·N^(beta-1), "
                    "so N^(alpha+beta) = (alpha·A/(beta·B))·(C/6)^beta.")
SPLIT_G_NO_ROOT = ("G needs its root: N^(alpha+beta) = (alpha·A/(beta·B))·(C/6)^beta, so G = (alpha·A/(beta·B)) "
                   "to the power 1/(alpha+beta), not alpha·A/(beta·B) itself.")
SPLIT_AB_SWAPPED = ("A and B are swapped in G: A belongs to N's term (A/N^alpha) and B to D's (B/D^beta), so "
                    "G = (alpha·A / (beta·B))^(1/(alpha+beta)).")
SPLIT_NO_G = ("you left out the constant: N_opt = G·(C/6)^(beta/(alpha+beta)) with G = (alpha·A/(beta·B))^"
              "(1/(alpha+beta)); the exponent alone gives the growth rate, not the size.")
SPLIT_ORDER = "you returned (D, N): return the parameters first, (N, D)."
SPLIT_NEAR = ("a numerical minimiser (a grid, a few optimizer steps, float32) stops near the optimum; this "
              "exercise wants the exact optimum, which the derivative gives in closed form: "
              "N = G·(C/6)^(beta/(alpha+beta)) with G = (alpha·A/(beta·B))^(1/(alpha+beta)).")
SPLIT_GENERIC = ("along the budget D = C / (6N): L(N) = E + A/N^alpha + B·(6N/C)^beta. Set dL/dN = 0: "
                 "N^(alpha+beta) = (alpha·A/(beta·B))·(C/6)^beta, so N = G·(C/6)^(beta/(alpha+beta)) with "
                 "G = (alpha·A/(beta·B))^(1/(alpha+beta)), and D = C / (6N). Return (N, D) as floats.")

SPLIT_MISTAKES = [
    (_split(six="none"), SPLIT_NO_SIX),
    (_split(six="N only"), SPLIT_D_NO_SIX),
    (_split(exponent="alpha"), SPLIT_EXPONENT),
    (_split(G="inverted"), SPLIT_G_INVERTED),
    (_split(G="no root"), SPLIT_G_NO_ROOT),
    (_split(G="A and B swapped"), SPLIT_AB_SWAPPED),
    (_split(G="none"), SPLIT_NO_G),
    (_split(order="D, N"), SPLIT_ORDER),
]


def _pair(out) -> tuple[float, float] | None:
    if isinstance(out, (tuple, list)) and len(out) == 2 and all(
            type(v) in (int, float) and abs(v) < 2.0 ** 1000 and math.isfinite(v) for v in out):
        return float(out[0]), float(out[1])
    return None


SPLIT_RTOL = 1e-6   # the closed form to six digits; a numerical minimiser rarely gets there


def _split_agrees(case, out, ref) -> bool:
    got = _pair(out)
    return got is not None and all(math.isclose(o, r, rel_tol=SPLIT_RTOL) for o, r in zip(got, ref))


def _diagnose_split(cases, outputs, refs):
    for case, out, ref in zip(cases, outputs, refs):
        got = _pair(out)
        if got is None:
            return ("return a pair of numbers, (N, D), as Python floats (float(...) of a NumPy or torch "
                    f"number); yours returned {type(out).__name__}. Hint: {SPLIT_GENERIC}")
        if not all(math.isclose(o, r, rel_tol=SPLIT_RTOL) for o, r in zip(got, ref)):
            C, A, B, alpha, beta = case
            off = max(abs(o / r - 1) for o, r in zip(got, ref))
            said = (f"for C = {C:.3g}, A = {A:.4g}, B = {B:.4g}, alpha = {alpha:.3g}, beta = {beta:.3g} you "
                    f"returned N = {got[0]:.9g}, D = {got[1]:.9g}; the optimum is N = {ref[0]:.9g}, "
                    f"D = {ref[1]:.9g}")
            if off < 1e-2:
                return (f"{said}: close (off by {off:.1e}, relative), but not the closed form. Hint: "
                        f"{SPLIT_NEAR}")
            return f"{said}. Hint: {SPLIT_GENERIC}"
    return None


register(Exercise(
    name="optimal_split", number="7.1", function="optimal_split", chapter=CHAPTER,
    args=("C", "A", "B", "alpha", "beta"),
    library_answers=("tinyformer.scaling.compute_optimal", "tinyformer.scaling.loss_surface"),
    make_cases=_split_cases, reference=optimal_split_reference,
    returns="the pair (N, D), two floats", item_names=("N", "D"),
    compare=_split_agrees, mistakes=SPLIT_MISTAKES,
    diagnose=safe_diagnosis(_diagnose_split), diagnose_hints=(SPLIT_NEAR,), generic_hint=SPLIT_GENERIC,
))


# --------------------------------------------------------------------------- 7.2 a power law in log-log space


def _fit_cases(g):
    """(x, y) as lists of floats. Fixed first: seven sizes from 1e3 to 1e6 with y = 5·x^-0.3 times
    noise of a few percent (fixed numbers); the chapter's kind of data (losses between 1.4 and 2.8
    over widths' parameter counts); then three random sets (4 to 9 points, alpha 0.05 to 1, noise
    up to 5 %)."""
    x0 = [1e3, 3e3, 1e4, 3e4, 1e5, 3e5, 1e6]
    noise0 = [1.02, 0.97, 1.01, 1.03, 0.98, 1.0, 0.99]
    cases = [(x0, [5.0 * x ** -0.3 * e for x, e in zip(x0, noise0)]),
             ([1760.0, 3792.0, 6592.0, 14496.0, 25472.0, 56640.0, 100096.0],
              [2.751, 2.265, 1.991, 1.759, 1.667, 1.602, 1.583])]
    for _ in range(3):
        n = _randint(g, 4, 9)
        x = sorted(10 ** _uniform(g, 1, 8) for _ in range(n))
        while len({round(v, 6) for v in x}) < 2:
            x = sorted(10 ** _uniform(g, 1, 8) for _ in range(n))
        a, alpha = 10 ** _uniform(g, -1, 2), _uniform(g, 0.05, 1.0)
        cases.append((x, [a * v ** -alpha * math.exp(0.05 * (2 * _uniform(g, 0, 1) - 1)) for v in x]))
    return cases


def fit_loglog_reference(x, y):
    lx, ly = np.log(np.asarray(x, dtype=np.float64)), np.log(np.asarray(y, dtype=np.float64))
    slope, intercept = np.polyfit(lx, ly, 1)
    return float(math.exp(intercept)), float(-slope)


def _fit(*, sign=-1, a="exp", regress="y on x", order="a, alpha", points="all"):
    """The fit with the slips named by the keywords; the defaults are right."""
    def wrong(x, y):
        lx, ly = np.log(np.asarray(x, dtype=np.float64)), np.log(np.asarray(y, dtype=np.float64))
        if points == "ends":
            slope = (ly[-1] - ly[0]) / (lx[-1] - lx[0])
            intercept = ly[0] - slope * lx[0]
        elif regress == "x on y":
            s, c = np.polyfit(ly, lx, 1)
            slope, intercept = 1 / s, -c / s
        else:
            slope, intercept = np.polyfit(lx, ly, 1)
        if a == "log10 base":                  # natural logs, then 10**intercept
            coef = 10 ** intercept
        elif a == "log":
            coef = intercept
        else:
            coef = math.exp(intercept)
        out = (float(coef), float(sign * slope))
        return out[::-1] if order == "alpha, a" else out
    return wrong


def _fit_log10_then_exp(x, y):
    lx, ly = np.log10(np.asarray(x, dtype=np.float64)), np.log10(np.asarray(y, dtype=np.float64))
    slope, intercept = np.polyfit(lx, ly, 1)
    return float(math.exp(intercept)), float(-slope)


FIT_SIGN = ("your alpha has the wrong sign: the fitted slope of log y against log x is -alpha (y = a·x^(-alpha) "
            "falls), so return alpha = -slope.")
FIT_LOG_A = "you returned the intercept, log a: return a = exp(intercept)."
FIT_BASES = ("you took natural logs (np.log) but returned 10**intercept: undo the logarithm you took, "
             "a = exp(intercept) (or take np.log10 and return 10**intercept).")
FIT_BASES_10 = ("you took base-10 logs (np.log10) but returned exp(intercept): undo the logarithm you took, "
                "a = 10**intercept (or take np.log and return exp(intercept)).")
FIT_X_ON_Y = ("you regressed log x on log y: least squares fits log y (the loss) as a function of log x (the "
              "size), np.polyfit(np.log(x), np.log(y), 1). On noisy points the two lines differ.")
FIT_ENDS = ("your line goes through the first and last points only: a least-squares fit uses every point, "
            "np.polyfit(np.log(x), np.log(y), 1).")
FIT_ORDER = "you returned (alpha, a): return the coefficient first, (a, alpha)."
FIT_GENERIC = ("take logarithms: log y = log a - alpha·log x is a straight line. Fit it by least squares, "
               "slope, intercept = np.polyfit(np.log(x), np.log(y), 1), and return (exp(intercept), -slope) "
               "as floats.")

FIT_MISTAKES = [
    (_fit(sign=1), FIT_SIGN),
    (_fit(a="log"), FIT_LOG_A),
    (_fit(a="log10 base"), FIT_BASES),
    (_fit_log10_then_exp, FIT_BASES_10),
    (_fit(regress="x on y"), FIT_X_ON_Y),
    (_fit(points="ends"), FIT_ENDS),
    (_fit(order="alpha, a"), FIT_ORDER),
]


def _fit_agrees(case, out, ref) -> bool:
    got = _pair(out)
    return got is not None and all(math.isclose(o, r, rel_tol=1e-5) for o, r in zip(got, ref))


def _diagnose_fit(cases, outputs, refs):
    for (x, _), out, ref in zip(cases, outputs, refs):
        got = _pair(out)
        if got is None:
            return ("return a pair of numbers, (a, alpha), as Python floats (float(...) of a NumPy or torch "
                    f"number); yours returned {type(out).__name__}. Hint: {FIT_GENERIC}")
        if not all(math.isclose(o, r, rel_tol=1e-5) for o, r in zip(got, ref)):
            return (f"for {len(x)} points with x from {x[0]:.3g} to {x[-1]:.3g} you returned a = {got[0]:.5g}, "
                    f"alpha = {got[1]:.5g}; the least-squares fit is a = {ref[0]:.5g}, alpha = {ref[1]:.5g}. "
                    f"Hint: {FIT_GENERIC}")
    return None


register(Exercise(
    name="fit_loglog", number="7.2", function="fit_loglog", chapter=CHAPTER,
    args=("x", "y"),
    library_answers=("tinyformer.scaling.fit_power_law", "tinyformer.scaling.fit_power_law_offset"),
    make_cases=_fit_cases, reference=fit_loglog_reference,
    returns="the pair (a, alpha), two floats", item_names=("a", "alpha"),
    compare=_fit_agrees, mistakes=FIT_MISTAKES,
    error_hints=[
        (TypeError, r"unsupported operand type\(s\) for .*: 'list' and|can't multiply sequence",
         "x and y are Python lists: turn them into arrays first, np.asarray(x, dtype=float)."),
        (TypeError, r"must be real number, not list|only length-1 arrays|only 0-dimensional",
         "math.log works on one number: use np.log on the whole array, np.log(np.asarray(x))."),
    ],
    diagnose=safe_diagnosis(_diagnose_fit), generic_hint=FIT_GENERIC,
))
