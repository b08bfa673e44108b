"""Chapter 7 (scaling laws): the exercises, their test inputs, references, known mistakes and hints.

Exercise 7.1 (``optimal_split``) splits a compute budget ``C = 6·N·D`` between parameters and
tokens under the Chinchilla form ``L = E + A/N^alpha + B/D^beta``:
``N = G·(C/6)^(beta/(alpha+beta))`` with ``G = (alpha·A/(beta·B))^(1/(alpha+beta))`` and
``D = C/(6·N)``. The fixed cases come first, so that the first failing case never depends on the
seed: Chinchilla's budget under both published fits, then budgets and constants where ``alpha`` and
``beta`` differ and ``A != B`` (so that swapping them changes the answer). Every registered slip
(the 6 forgotten, in both places, in ``D`` only or in ``N`` only; the exponent ``alpha`` where
``beta`` belongs; ``G`` upside down, without its root, with ``A`` and ``B`` or ``alpha`` and
``beta`` swapped; ``G`` left out; the rule of thumb of 20 tokens per parameter; the pair returned
as ``(D, N)``) gives a different answer on these cases. An answer within 1 % is diagnosed as
rounded (whole numbers) or as a numerical search.

Exercise 7.2 (``fit_loglog``) fits ``y = a·x^(-alpha)`` by least squares on ``log y`` against
``log x`` and returns ``(a, alpha)``. The cases are noisy (a fit on exact power laws cannot tell the
regression of ``log x`` on ``log y`` from the right one), with ``x`` spanning several decades. The
slips: the slope returned as ``alpha`` (its sign), ``log a`` returned instead of ``a``, ``a`` taken
as ``10**intercept`` after natural logarithms (or ``e**intercept`` after base-10 ones), the
regression of ``log x`` on ``log y``, a fit through the first and last points only, the pair
returned as ``(alpha, a)``, ``np.polyfit``'s coefficients unpacked as ``(intercept, slope)``, a
line fitted to ``y`` against ``x`` with no logarithms, a line forced through the origin (no
intercept), and least squares on ``y`` itself rather than on ``log y`` (told by a diagnosis of the
first failing case: on random cases its optimum is ill-conditioned). A fit in float32 is accepted
(the tolerance is 1e-5, relative).

Exercise 7.4 (``isoflop_optimum``) fits a parabola ``L = c2·u² + c1·u + c0`` in ``u = ln N`` to
one compute budget's runs and returns the size at its vertex, ``exp(-c1/(2·c2))``. The cases are
U-shaped losses with noise, the vertex between the sizes and away from every one of them (so that
the best point is not the vertex). The slips: a parabola in ``N`` itself, the vertex's sign, the
2 of the vertex forgotten, ``ln N`` returned (no exp), a fit in ``log10 N`` undone with ``exp``,
``np.polyfit``'s coefficients unpacked lowest first, and the best run returned instead of the
vertex.

Library answers: ``tinyformer.scaling.compute_optimal`` and ``loss_surface`` for 7.1;
``fit_power_law`` and ``fit_power_law_offset`` for 7.2; ``fit_isoflop`` for 7.4.
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
    """The split with the slips named by the keywords; the defaults are right. ``six`` says where
    the 6 of ``C = 6·N·D`` is kept: "both", "N only", "D only" or "none"."""
    def wrong(C, A, B, alpha, beta):
        budget = C / 6 if six in ("both", "N only") else C
        g = {"right": (alpha * A / (beta * B)) ** (1 / (alpha + beta)),
             "inverted": (beta * B / (alpha * A)) ** (1 / (alpha + beta)),
             "no root": alpha * A / (beta * B),
             "A and B swapped": (alpha * B / (beta * A)) ** (1 / (alpha + beta)),
             "alpha and beta swapped": (beta * A / (alpha * B)) ** (1 / (alpha + beta)),
             "precedence": (alpha * A / beta * B) ** (1 / (alpha + beta)),
             "A/B": (A / B) ** (1 / (alpha + beta)),
             "none": 1.0}[G]
        if exponent == "precedence":                   # (C/6)**beta/(alpha+beta)
            N = g * budget ** beta / (alpha + beta)
        else:
            N = g * budget ** ((beta if exponent == "beta" else alpha) / (alpha + beta))
        D = C / (6 * N) if six in ("both", "D only") else C / N
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
SPLIT_NO_SIX_N = ("your D follows from your N, but N has no 6: the budget is C = 6·N·D FLOPs, so N grows as "
                  "(C/6)^(beta/(alpha+beta)), not C^(beta/(alpha+beta)).")
SPLIT_ALPHA_BETA_SWAPPED = ("alpha and beta are swapped in G: each exponent multiplies its own constant, "
                            "G = (alpha·A / (beta·B))^(1/(alpha+beta)) (from alpha·A/N^(alpha+1), the derivative "
                            "of N's term, against beta·B·(6/C)^beta·N^(beta-1), that of D's).")
SPLIT_TWENTY = ("you used the rule of thumb, 20 tokens per parameter (N = sqrt(C/120)): that ratio is what "
                "Chinchilla's fits gave at its budget, not a law. The optimum of the surface you are given depends "
                "on A, B, alpha, beta and C: set the derivative of L along the budget to zero.")
SPLIT_PRECEDENCE_G = ("alpha*A/beta*B is (alpha*A/beta)*B in Python: write alpha * A / (beta * B), with the "
                      "brackets, inside G = (alpha·A / (beta·B))^(1/(alpha+beta)).")
SPLIT_PRECEDENCE_N = ("(C/6)**beta/(alpha+beta) raises C/6 to beta and then divides: the exponent needs brackets, "
                      "(C/6)**(beta/(alpha+beta)).")
SPLIT_A_OVER_B = ("your G is (A/B)^(1/(alpha+beta)): the exponents come down with the derivative, alpha·A/N^(alpha+1) "
                  "and beta·B·(6/C)^beta·N^(beta-1), so G = (alpha·A / (beta·B))^(1/(alpha+beta)).")
SPLIT_NO_G = ("you left out the constant: N_opt = G·(C/6)^(beta/(alpha+beta)) with G = (alpha·A/(beta·B))^"
              "(1/(alpha+beta)); the exponent alone gives the growth rate, not the size.")
SPLIT_ORDER = "you returned (D, N): return the parameters first, (N, D)."
SPLIT_N_RIGHT = ("your N is right but your D is not: once N is chosen the budget fixes D, C = 6·N·D, so "
                 "D = C / (6·N).")
SPLIT_ROUNDED = ("you rounded: return N and D unrounded, as floats (round(), int() and f-strings lose the "
                 "digits the check compares; round only when you print).")
SPLIT_NEAR = ("a numerical minimiser (a grid, a few optimizer steps, float32) stops near the optimum; this "
              "exercise wants the exact optimum, which setting the derivative along the budget to zero gives "
              "in closed form.")
SPLIT_GENERIC = ("along the budget D = C / (6N), so L(N) = E + A/N^alpha + B·(6N/C)^beta. Set dL/dN = 0 and "
                 "gather the powers of N on one side: N^(alpha+beta) equals a constant times (C/6)^beta. Solve "
                 "for N, then D = C / (6N). Return (N, D) as floats.")

SPLIT_MISTAKES = [
    (_split(six="none"), SPLIT_NO_SIX),
    (_split(six="N only"), SPLIT_D_NO_SIX),
    (_split(six="D only"), SPLIT_NO_SIX_N),
    (_split(exponent="alpha"), SPLIT_EXPONENT),
    (_split(G="inverted"), SPLIT_G_INVERTED),
    (_split(G="no root"), SPLIT_G_NO_ROOT),
    (_split(G="A and B swapped"), SPLIT_AB_SWAPPED),
    (_split(G="alpha and beta swapped"), SPLIT_ALPHA_BETA_SWAPPED),
    (_split(G="none"), SPLIT_NO_G),
    (_split(G="precedence"), SPLIT_PRECEDENCE_G),
    (_split(exponent="precedence"), SPLIT_PRECEDENCE_N),
    (_split(G="A/B"), SPLIT_A_OVER_B),
    (lambda C, A, B, alpha, beta: (math.sqrt(C / 120), 20 * math.sqrt(C / 120)), SPLIT_TWENTY),
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
            if math.isclose(got[0], ref[0], rel_tol=SPLIT_RTOL):
                return f"{said}. Hint: {SPLIT_N_RIGHT}"
            if off < 1e-2 and all(v.is_integer() for v in got):
                return f"{said}: close (off by {off:.1e}, relative), but whole numbers. Hint: {SPLIT_ROUNDED}"
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
    diagnose=safe_diagnosis(_diagnose_split), diagnose_hints=(SPLIT_NEAR, SPLIT_ROUNDED, SPLIT_N_RIGHT),
    generic_hint=SPLIT_GENERIC,
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


def _fit_polyfit_unpacked_backwards(x, y):
    intercept, slope = np.polyfit(np.log(x), np.log(y), 1)   # polyfit returns the slope first
    return float(math.exp(intercept)), float(-slope)


def _fit_no_logs(coef):
    def wrong(x, y):
        slope, intercept = np.polyfit(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64), 1)
        return float(math.exp(intercept) if coef == "exp" else intercept), float(-slope)
    return wrong


def _fit_mixed_bases(x_log, y_log, undo):
    def wrong(x, y):
        lx, ly = x_log(np.asarray(x, dtype=np.float64)), y_log(np.asarray(y, dtype=np.float64))
        slope, intercept = np.polyfit(lx, ly, 1)
        return float(undo(intercept)), float(-slope)
    return wrong


def _fit_semilog(x, y):
    slope, intercept = np.polyfit(np.asarray(x, dtype=np.float64), np.log(np.asarray(y, dtype=np.float64)), 1)
    return float(math.exp(intercept)), float(-slope)


def _fit_cov_over_var(x, y):
    lx, ly = np.log(np.asarray(x, dtype=np.float64)), np.log(np.asarray(y, dtype=np.float64))
    slope = np.cov(lx, ly)[0, 1] / np.var(lx)          # n - 1 over n
    return float(math.exp(ly.mean() - slope * lx.mean())), float(-slope)


def _fit_through_origin(x, y):
    lx, ly = np.log(np.asarray(x, dtype=np.float64)), np.log(np.asarray(y, dtype=np.float64))
    return 1.0, float(-(lx @ ly) / (lx @ lx))


def _fit_on_y(x, y):
    """Least squares on y itself: for each alpha the best a is linear, sum(y·x^-alpha) / sum(x^-2alpha);
    alpha by golden section around the log fit's."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)

    def best(alpha):
        f = x ** -alpha
        a = (y @ f) / (f @ f)
        return a, float(np.sum((y - a * f) ** 2))

    alpha0 = -np.polyfit(np.log(x), np.log(y), 1)[0]
    lo, hi = alpha0 - 1.0, alpha0 + 1.0
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(200):
        m1, m2 = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        if best(m1)[1] < best(m2)[1]:
            hi = m2
        else:
            lo = m1
    alpha = (lo + hi) / 2
    return float(best(alpha)[0]), float(alpha)


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
FIT_POLYFIT_ORDER = ("np.polyfit returns the coefficients highest power first: slope, intercept = "
                     "np.polyfit(np.log(x), np.log(y), 1). Yours unpacked them as (intercept, slope).")
FIT_NO_LOGS = ("you fitted a straight line to y against x: a power law is straight only after logarithms, "
               "np.polyfit(np.log(x), np.log(y), 1).")
FIT_MIXED_BASES = ("you took one kind of logarithm of x and another of y: the slope is only alpha when both are the "
                   "same, np.log for both (then a = exp(intercept)) or np.log10 for both (a = 10**intercept).")
FIT_SEMILOG = ("you took the logarithm of y but not of x: log y against x is straight for an exponential, not a power "
               "law. Take np.log of both.")
FIT_DDOF = ("np.cov divides by n - 1 and np.var by n, so your slope is n/(n-1) times too steep: use the same "
            "divisor (np.var(..., ddof=1)), or np.polyfit.")
FIT_A_WRONG = ("your alpha is right but a is not: a undoes the logarithm of the line's intercept, in the base "
               "you took of y (exp after np.log, 10** after np.log10), a = exp(mean(log y) + alpha·mean(log x)).")
FIT_ORIGIN = ("your line goes through the origin (a = 1, no intercept): log y = log a - alpha·log x has an "
              "intercept, log a; fit both, np.polyfit(np.log(x), np.log(y), 1).")
FIT_ON_Y = ("you minimised the squared errors of y itself: the large-y points (the smallest x) then dominate. "
            "The exercise asks for least squares on log y, which weighs every point by its relative error: "
            "np.polyfit(np.log(x), np.log(y), 1).")
FIT_GENERIC = ("take logarithms: log y = log a - alpha·log x is a straight line in (log x, log y). Fit that "
               "line by least squares (np.polyfit of degree 1), read alpha off its slope and a off its "
               "intercept (undo the logarithm), and return (a, alpha) as floats.")

FIT_MISTAKES = [
    (_fit(sign=1), FIT_SIGN),
    (_fit(a="log"), FIT_LOG_A),
    (_fit(a="log10 base"), FIT_BASES),
    (_fit_log10_then_exp, FIT_BASES_10),
    (_fit(regress="x on y"), FIT_X_ON_Y),
    (_fit(points="ends"), FIT_ENDS),
    (_fit(order="alpha, a"), FIT_ORDER),
    (_fit_polyfit_unpacked_backwards, FIT_POLYFIT_ORDER),
    (_fit_no_logs("exp"), FIT_NO_LOGS + " (Your a is exp(intercept) of the line in linear space.)"),
    (_fit_no_logs("intercept"), FIT_NO_LOGS),
    (_fit_through_origin, FIT_ORIGIN),
    (_fit_mixed_bases(np.log, np.log10, lambda c: 10 ** c), FIT_MIXED_BASES),
    (_fit_mixed_bases(np.log10, np.log, math.exp), FIT_MIXED_BASES + " (Yours: log10 of x, ln of y.)"),
    (_fit_semilog, FIT_SEMILOG),
    (_fit_cov_over_var, FIT_DDOF),
]


def _fit_agrees(case, out, ref) -> bool:
    got = _pair(out)
    return got is not None and all(math.isclose(o, r, rel_tol=1e-5) for o, r in zip(got, ref))


def _diagnose_fit(cases, outputs, refs):
    for (x, y), out, ref in zip(cases, outputs, refs):
        got = _pair(out)
        if got is None:
            return ("return a pair of numbers, (a, alpha), as Python floats (float(...) of a NumPy or torch "
                    f"number); yours returned {type(out).__name__}. Hint: {FIT_GENERIC}")
        if not all(math.isclose(o, r, rel_tol=1e-5) for o, r in zip(got, ref)):
            # least squares on y is told by this first failing case alone: on random cases with x
            # over many decades its optimum is ill-conditioned, and searches disagree
            hint = FIT_ON_Y if all(math.isclose(o, w, rel_tol=1e-6) for o, w in zip(got, _fit_on_y(x, y))) \
                else FIT_A_WRONG if math.isclose(got[1], ref[1], rel_tol=1e-5) else FIT_GENERIC
            return (f"for {len(x)} points with x from {x[0]:.3g} to {x[-1]:.3g} you returned a = {got[0]:.5g}, "
                    f"alpha = {got[1]:.5g}; the least-squares fit is a = {ref[0]:.5g}, alpha = {ref[1]:.5g}. "
                    f"Hint: {hint}")
    return None


register(Exercise(
    name="fit_loglog", number="7.2", function="fit_loglog", chapter=CHAPTER,
    args=("x", "y"),
    library_answers=("tinyformer.scaling.fit_power_law", "tinyformer.scaling.fit_power_law_offset"),
    make_cases=_fit_cases, reference=fit_loglog_reference,
    returns="the pair (a, alpha), two floats", item_names=("a", "alpha"),
    rtol=1e-6,  # a known mistake matches to 1e-6: least squares on y is found by a search
    compare=_fit_agrees, mistakes=FIT_MISTAKES,
    error_hints=[
        (TypeError, r"unsupported operand type\(s\) for .*: 'list' and|can't multiply sequence",
         "x and y are Python lists: turn them into arrays first, np.asarray(x, dtype=float)."),
        (TypeError, r"must be real number, not list|only length-1 arrays|only 0-dimensional",
         "math.log works on one number: use np.log on the whole array, np.log(np.asarray(x))."),
    ],
    diagnose=safe_diagnosis(_diagnose_fit), diagnose_hints=(FIT_ON_Y, FIT_A_WRONG), generic_hint=FIT_GENERIC,
))


# --------------------------------------------------------------------------- 7.4 the vertex of an IsoFLOP profile


def _isoflop_cases(g):
    """(N, L) as lists of floats. Fixed first: seven sizes like the chapter's (1e3 to 6e4) with a
    vertex at 8,000 and fixed noise; then three random sets (5 to 9 sizes over one to three
    decades, the vertex inside, curvature 0.02 to 0.2, noise up to 2 %)."""
    N0 = [1.0e3, 1.8e3, 3.9e3, 6.9e3, 1.5e4, 2.7e4, 6.0e4]
    noise0 = [1.004, 0.993, 1.006, 0.998, 0.991, 1.007, 1.0]
    cases = [(N0, [(0.05 * (math.log(n) - math.log(8e3)) ** 2 + 1.4) * e for n, e in zip(N0, noise0)])]
    for _ in range(3):
        k = _randint(g, 5, 9)
        lo = _uniform(g, 2, 5)
        span = _uniform(g, 1, 3)
        N = sorted({round(10 ** (lo + span * i / (k - 1) + _uniform(g, -0.05, 0.05)), 3) for i in range(k)})
        centre = 10 ** (lo + span * _uniform(g, 0.3, 0.7))
        curv, floor = _uniform(g, 0.02, 0.2), _uniform(g, 1.0, 3.0)
        cases.append((N, [(curv * (math.log(n) - math.log(centre)) ** 2 + floor)
                          * (1 + 0.02 * (2 * _uniform(g, 0, 1) - 1)) for n in N]))
    return cases


def isoflop_optimum_reference(N, L):
    c2, c1, _ = np.polyfit(np.log(np.asarray(N, dtype=np.float64)), np.asarray(L, dtype=np.float64), 2)
    return float(math.exp(-c1 / (2 * c2)))


def _iso(*, x="ln", vertex="right", order="c2, c1, c0", undo="exp"):
    """The vertex with the slips named by the keywords; the defaults are right."""
    def wrong(N, L):
        N, L = np.asarray(N, dtype=np.float64), np.asarray(L, dtype=np.float64)
        u = {"ln": np.log(N), "log10": np.log10(N), "N": N}[x]
        c = np.polyfit(u, L, 2)
        c2, c1, _ = c if order == "c2, c1, c0" else c[::-1]
        top = {"right": -c1 / (2 * c2), "sign": c1 / (2 * c2), "no 2": -c1 / c2,
               "precedence": -c1 / 2 * c2}[vertex]
        if x == "N":
            return float(top)
        return float(math.exp(top)) if undo == "exp" else float(top)
    return wrong


def _iso_polynomial_coef(N, L):
    c0, c1, c2 = np.polynomial.Polynomial.fit(np.log(np.asarray(N, dtype=np.float64)), L, 2).coef
    return float(math.exp(-c1 / (2 * c2)))


def _iso_log_loss(N, L):
    c2, c1, _ = np.polyfit(np.log(np.asarray(N, dtype=np.float64)), np.log(np.asarray(L, dtype=np.float64)), 2)
    return float(math.exp(-c1 / (2 * c2)))


def _iso_swapped(N, L):
    c2, c1, _ = np.polyfit(np.asarray(L, dtype=np.float64), np.log(np.asarray(N, dtype=np.float64)), 2)
    return float(math.exp(-c1 / (2 * c2)))


def _iso_best_point(N, L):
    return float(N[int(np.argmin(L))])


ISO_IN_N = ("your parabola is in N itself: an IsoFLOP profile is a U on a logarithmic axis, so fit L against "
            "u = ln N, np.polyfit(np.log(N), L, 2), and return exp of the vertex.")
ISO_SIGN = ("the vertex of c2·u² + c1·u + c0 is at u = -c1 / (2·c2) (where its derivative 2·c2·u + c1 is zero); "
            "yours has the wrong sign.")
ISO_NO_TWO = ("the vertex of c2·u² + c1·u + c0 is at u = -c1 / (2·c2): the derivative of c2·u² is 2·c2·u. "
              "Yours is -c1 / c2.")
ISO_NO_EXP = "you returned the vertex in u = ln N: the size is N = exp(u), not u."
ISO_BASES = ("you fitted in log10 N but undid it with exp: the vertex u is in base-10 logarithms, so "
             "N = 10**u (or fit in np.log(N) and return np.exp(u)).")
ISO_ORDER = ("np.polyfit returns the coefficients highest power first: c2, c1, c0 = np.polyfit(u, L, 2). "
             "Yours unpacked them lowest first.")
ISO_BEST_POINT = ("you returned the size of the best run: the method fits a parabola through all of them and takes "
                  "its vertex, which usually falls between the sizes tried (and is less noisy than one run).")
ISO_PRECEDENCE = ("-c1/2*c2 is (-c1/2)·c2 in Python: write -c1 / (2 * c2).")
ISO_POLYNOMIAL = ("Polynomial.fit's .coef belong to a rescaled variable (its window): call .convert().coef to get the "
                  "coefficients of u itself (lowest power first), or use np.polyfit.")
ISO_LOG_LOSS = ("you fitted the parabola to log L: the method fits the losses themselves, L = c2·u² + c1·u + c0 "
                "with u = ln N.")
ISO_SWAPPED = ("np.polyfit(x, y, deg) fits y as a function of x: the loss is y here, "
               "np.polyfit(np.log(N), L, 2).")
ISO_LOSS = "you returned a loss: return the size N at the vertex, not the loss there."
ISO_GENERIC = ("fit L as a polynomial of degree 2 in u = ln N by least squares (np.polyfit returns the "
               "coefficients highest power first); its vertex is where its derivative is zero; return the N "
               "there (not u) as a float.")
ISO_NEAR = ("a search over sizes (or float32) stops near the vertex; this exercise wants the vertex of the "
            "least-squares parabola itself, which its coefficients give in closed form.")

ISO_MISTAKES = [
    (_iso(x="N"), ISO_IN_N),
    (_iso(vertex="sign"), ISO_SIGN),
    (_iso(vertex="no 2"), ISO_NO_TWO),
    (_iso(undo="none"), ISO_NO_EXP),
    (_iso(x="log10"), ISO_BASES),
    (_iso(order="c0, c1, c2"), ISO_ORDER),
    (_iso_best_point, ISO_BEST_POINT),
    (_iso(vertex="precedence"), ISO_PRECEDENCE),
    (_iso_polynomial_coef, ISO_POLYNOMIAL),
    (_iso_log_loss, ISO_LOG_LOSS),
    (_iso_swapped, ISO_SWAPPED),
]


def _one_number(out) -> float | None:
    if type(out) in (int, float) and math.isfinite(out) and abs(out) < 2.0 ** 1000:
        return float(out)
    return None


def _iso_agrees(case, out, ref) -> bool:
    got = _one_number(out)
    return got is not None and math.isclose(got, ref, rel_tol=1e-6)


def _diagnose_iso(cases, outputs, refs):
    for (N, L), out, ref in zip(cases, outputs, refs):
        got = _one_number(out)
        if type(out) is float and got is None:
            return (f"you returned {out} (a parabola that opens downward, or a log of a non-positive number?). "
                    f"Hint: {ISO_GENERIC}")
        if got is None:
            return (f"return the size as one Python float (float(...) of a NumPy number); yours returned "
                    f"{type(out).__name__}. Hint: {ISO_GENERIC}")
        if not math.isclose(got, ref, rel_tol=1e-6) and min(L) / 2 <= got <= 2 * max(L) < min(N):
            return (f"for {len(N)} sizes from {N[0]:.4g} to {N[-1]:.4g} you returned {got:.6g}; the vertex is at "
                    f"N = {ref:.6g}. Hint: {ISO_LOSS}")
        if not math.isclose(got, ref, rel_tol=1e-6) and abs(got / ref - 1) < 1e-2:
            return (f"for {len(N)} sizes from {N[0]:.4g} to {N[-1]:.4g} you returned N = {got:.6g}; the vertex "
                    f"is at N = {ref:.6g}: close (off by {abs(got / ref - 1):.1e}, relative). Hint: {ISO_NEAR}")
        if not math.isclose(got, ref, rel_tol=1e-6):
            return (f"for {len(N)} sizes from {N[0]:.4g} to {N[-1]:.4g} you returned N = {got:.6g}; the vertex "
                    f"is at N = {ref:.6g}. Hint: {ISO_GENERIC}")
    return None


register(Exercise(
    name="isoflop_optimum", number="7.4", function="isoflop_optimum", chapter=CHAPTER,
    args=("N", "L"),
    library_answers=("tinyformer.scaling.fit_isoflop",),
    make_cases=_isoflop_cases, reference=isoflop_optimum_reference,
    returns="the size at the vertex, a float",
    rtol=1e-6, compare=_iso_agrees, mistakes=ISO_MISTAKES,
    diagnose=safe_diagnosis(_diagnose_iso), diagnose_hints=(ISO_NEAR, ISO_LOSS), generic_hint=ISO_GENERIC,
))
