"""Chapter 7's checks: every solution passes, every stub is 'not implemented yet', every registered
mistake is caught by its own hint whatever the seed, and wrong answers written here, the way a
learner would write them, fail with the hint that names their slip. The generic tests are written
once, in tests/exercise_suite.py.

The solutions and wrong answers below are written independently of ``tinyformer.course.ch07``: the
split with math and with NumPy, by a brute-force search along the budget; the fit with np.polyfit,
with torch.linalg.lstsq, with the normal equations by hand. The references are checked against the
library's compute_optimal and fit_power_law and against a search.
"""

from __future__ import annotations

import math
import textwrap

import exercise_suite
import numpy as np
import pytest
import torch

from tinyformer import checks
from tinyformer.course import ch07
from tinyformer.scaling import PUBLISHED, compute_optimal, fit_power_law, loss_surface

from conftest import BOOK, define

CHAPTER = ["optimal_split", "fit_loglog", "isoflop_optimum"]
DRILLS: list[str] = []
ALL = CHAPTER + DRILLS
NOTEBOOK = BOOK / "07-scaling.ipynb"

# --------------------------------------------------------------------------- solutions (exercise cells)

SOLUTIONS = {
    "optimal_split": '''\
def optimal_split(C, A, B, alpha, beta):
    """(N, D) minimising E + A/N**alpha + B/D**beta, given 6·N·D = C."""
    # BEGIN SOLUTION
    G = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
    N = G * (C / 6) ** (beta / (alpha + beta))
    return N, C / (6 * N)
    # END SOLUTION
''',
    "fit_loglog": '''\
import numpy as np


def fit_loglog(x, y):
    """Least squares on log y = log a - alpha·log x; returns (a, alpha)."""
    # BEGIN SOLUTION
    slope, intercept = np.polyfit(np.log(x), np.log(y), 1)
    return float(np.exp(intercept)), float(-slope)
    # END SOLUTION
''',
    "isoflop_optimum": '''\
import numpy as np


def isoflop_optimum(N, L):
    """The N at the vertex of the parabola in ln N fitted to (N, L)."""
    # BEGIN SOLUTION
    c2, c1, c0 = np.polyfit(np.log(N), L, 2)
    return float(np.exp(-c1 / (2 * c2)))
    # END SOLUTION
''',
}

SUITE = exercise_suite.Chapter(CHAPTER, DRILLS, SOLUTIONS, NOTEBOOK)
solution = SUITE.solution


# --------------------------------------------------------------------------- 7.1, as learners write it


def learner_split(*, six=True, six_in_D=True, six_in_N=True, exponent="beta", G="right", G_root=True,
                  order="N, D"):
    def optimal_split(C, A, B, alpha, beta):
        s = alpha + beta
        ratio = {"right": alpha * A / (beta * B), "inverted": beta * B / (alpha * A),
                 "swapped": alpha * B / (beta * A), "exponents swapped": beta * A / (alpha * B),
                 "none": 1.0}[G]
        g = ratio ** (1 / s) if G_root else ratio
        budget = C / 6 if (six and six_in_N) else C
        N = g * budget ** ((beta if exponent == "beta" else alpha) / s)
        D = C / (6 * N) if (six and six_in_D) else C / N
        return (D, N) if order == "D, N" else (N, D)
    return optimal_split


def split_with_numpy(C, A, B, alpha, beta):
    """Right, in NumPy: returns NumPy floats (accepted: they are numbers)."""
    G = np.power(alpha * A / (beta * B), 1 / (alpha + beta))
    N = G * np.power(C / 6, beta / (alpha + beta))
    return N, C / (6 * N)


def split_by_search(C, A, B, alpha, beta):
    """Wrong: a grid search along the budget, a few digits right."""
    grid = np.logspace(0, 20, 2001)
    best = grid[np.argmin(A / grid ** alpha + B / (C / (6 * grid)) ** beta)]
    return float(best), float(C / (6 * best))


def split_precedence_in_G(C, A, B, alpha, beta):
    G = (alpha*A/beta*B) ** (1 / (alpha + beta))   # noqa: E226 - as written, without brackets
    N = G * (C / 6) ** (beta / (alpha + beta))
    return N, C / (6 * N)


def split_precedence_in_N(C, A, B, alpha, beta):
    G = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
    N = G * (C/6)**beta/(alpha+beta)               # noqa: E226 - as written
    return N, C / (6 * N)


def split_D_from_its_own_power(C, A, B, alpha, beta):
    """Wrong: D from its own power of the budget, forgetting 1/G."""
    s = alpha + beta
    G = (alpha * A / (beta * B)) ** (1 / s)
    return G * (C / 6) ** (beta / s), G * (C / 6) ** (alpha / s)


def split_A_over_B(C, A, B, alpha, beta):
    s = alpha + beta
    N = math.pow(A / B, 1 / s) * math.pow(C / 6, beta / s)
    return N, C / 6 / N


SPLIT_WRONG = [
    (learner_split(six=False), "the budget is C = 6·N·D FLOPs, not N·D"),
    (learner_split(six_in_D=False), "your N is right but D is not"),
    (learner_split(exponent="alpha"), "the exponent of D's term, beta, goes on top"),
    (learner_split(G="inverted"), "G is upside down"),
    (learner_split(G_root=False), "G needs its root"),
    (learner_split(G="swapped"), "A and B are swapped in G"),
    (learner_split(G="none"), "you left out the constant"),
    (learner_split(order="D, N"), "you returned (D, N)"),
    (learner_split(six_in_N=False), "your D follows from your N, but N has no 6"),
    (learner_split(G="exponents swapped"), "alpha and beta are swapped in G"),
    (lambda C, A, B, alpha, beta: (math.sqrt(C / 120), 20 * math.sqrt(C / 120)), "the rule of thumb, 20 tokens"),
    (lambda *a: tuple(float(round(v)) for v in learner_split()(*a)), "but whole numbers. Hint: you rounded"),
    (split_precedence_in_G, "alpha*A/beta*B is (alpha*A/beta)*B in Python"),
    (split_precedence_in_N, "raises C/6 to beta and then divides"),
    (split_A_over_B, "your G is (A/B)^(1/(alpha+beta))"),
    (split_D_from_its_own_power, "your N is right but your D is not"),
    (split_by_search, "you returned N = "),
    (lambda *a: tuple(v * (1 + 1e-4) for v in learner_split()(*a)), "close (off by 1.0e-04, relative), but not"),
    (lambda *a: torch.tensor(learner_split()(*a)), "returned a tensor of shape (2,); return the pair (N, D)"),
    (lambda *a: learner_split()(*a)[0], "returned a float; return the pair (N, D), two floats"),
    (lambda *a: [math.nan, math.nan], "return a pair of numbers, (N, D), as Python floats"),
]


# --------------------------------------------------------------------------- 7.2, as learners write it


def learner_fit(*, sign=-1, a="exp", logs="ln", regress="y on x", order="a, alpha", ends=False):
    def fit_loglog(x, y):
        log = np.log if logs == "ln" else np.log10
        lx, ly = log(np.asarray(x)), log(np.asarray(y))
        if ends:
            slope = (ly[-1] - ly[0]) / (lx[-1] - lx[0])
            intercept = ly[0] - slope * lx[0]
        elif regress == "x on y":
            s, c = np.polyfit(ly, lx, 1)
            slope, intercept = 1 / s, -c / s
        else:
            slope, intercept = np.polyfit(lx, ly, 1)
        coef = {"exp": math.exp(intercept), "10": 10 ** intercept, "log": intercept}[a]
        out = (float(coef), float(sign * slope))
        return out[::-1] if order == "alpha, a" else out
    return fit_loglog


def fit_lstsq(x, y, dtype=torch.float64):
    """Right, with torch's least squares (in float32 too: within the check's tolerance)."""
    lx = torch.log(torch.tensor(x, dtype=dtype))
    ly = torch.log(torch.tensor(y, dtype=dtype))
    X = torch.stack([lx, torch.ones_like(lx)], dim=1)
    slope, intercept = torch.linalg.lstsq(X, ly[:, None]).solution[:, 0].tolist()
    return math.exp(intercept), -slope


def fit_normal_equations(x, y):
    """Right, by hand: the slope is cov(log x, log y) / var(log x)."""
    lx, ly = [math.log(v) for v in x], [math.log(v) for v in y]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    slope = sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)
    return math.exp(my - slope * mx), -slope


def fit_linear_space(x, y):
    """Wrong: a straight line fitted to y against x, no logarithms."""
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(-slope)


def fit_linear_space_exp(x, y):
    """Wrong: the recipe's return line, on a line fitted to y against x (no logarithms)."""
    X = torch.stack([torch.tensor(x, dtype=torch.float64), torch.ones(len(x), dtype=torch.float64)], dim=1)
    slope, intercept = torch.linalg.lstsq(X, torch.tensor(y, dtype=torch.float64)[:, None]).solution[:, 0].tolist()
    return math.exp(intercept), -slope


def fit_polyfit_backwards(x, y):
    """Wrong: np.polyfit's coefficients unpacked in the wrong order."""
    intercept, slope = np.polyfit(np.log(x), np.log(y), 1)
    return math.exp(intercept), -slope


def fit_without_intercept(x, y):
    """Wrong: the line in log-log space forced through the origin, with torch's least squares."""
    lx = torch.log(torch.tensor(x, dtype=torch.float64))
    ly = torch.log(torch.tensor(y, dtype=torch.float64))
    slope = torch.linalg.lstsq(lx[:, None], ly[:, None]).solution.item()
    return 1.0, -slope


def fit_on_y(x, y):
    """Wrong: least squares on y itself, by torch's L-BFGS from the log fit."""
    x, y = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)
    slope, intercept = np.polyfit(np.log(x.numpy()), np.log(y.numpy()), 1)
    params = torch.tensor([intercept, -slope], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([params], max_iter=500, tolerance_grad=1e-15, tolerance_change=1e-18,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = ((y - torch.exp(params[0]) * x ** -params[1]) ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return math.exp(params[0].item()), params[1].item()


def fit_mixed(x, y):
    """Wrong: natural log of x, base-10 log of y, undone with 10**."""
    slope, intercept = np.polyfit(np.log(x), np.log10(y), 1)
    return 10 ** intercept, -slope


def fit_mixed_other_way(x, y):
    lx = [math.log10(v) for v in x]
    ly = [math.log(v) for v in y]
    slope, intercept = np.polyfit(lx, ly, 1)
    return math.exp(intercept), -slope


def fit_semilog(x, y):
    slope, intercept = np.polyfit(x, np.log(y), 1)
    return float(np.exp(intercept)), float(-slope)


def fit_a_as_mean(x, y):
    """Wrong: the slope right, then a as the mean of y·x^alpha."""
    lx, ly = np.log(x), np.log(y)
    alpha = -np.polyfit(lx, ly, 1)[0]
    return float(np.mean(np.asarray(y) * np.asarray(x) ** alpha)), float(alpha)


def fit_cov_var(x, y):
    lx, ly = np.log(x), np.log(y)
    slope = np.cov(lx, ly)[0][1] / np.var(lx)
    return float(np.exp(np.mean(ly) - slope * np.mean(lx))), float(-slope)


FIT_WRONG = [
    (learner_fit(sign=1), "your alpha has the wrong sign"),
    (learner_fit(a="log"), "you returned the intercept, log a"),
    (learner_fit(a="10"), "you took natural logs (np.log) but returned 10**intercept"),
    (learner_fit(logs="log10", a="exp"), "you took base-10 logs (np.log10) but returned exp(intercept)"),
    (learner_fit(regress="x on y"), "you regressed log x on log y"),
    (learner_fit(ends=True), "your line goes through the first and last points only"),
    (learner_fit(order="alpha, a"), "you returned (alpha, a)"),
    (fit_linear_space, "you fitted a straight line to y against x"),
    (fit_linear_space_exp, "(Your a is exp(intercept) of the line in linear space.)"),
    (fit_polyfit_backwards, "np.polyfit returns the coefficients highest power first"),
    (fit_without_intercept, "your line goes through the origin"),
    (fit_on_y, "you minimised the squared errors of y itself"),
    (fit_mixed, "you took one kind of logarithm of x and another of y"),
    (fit_mixed_other_way, "(Yours: log10 of x, ln of y.)"),
    (fit_semilog, "you took the logarithm of y but not of x"),
    (fit_cov_var, "np.cov divides by n - 1 and np.var by n"),
    (fit_a_as_mean, "your alpha is right but a is not"),
    (lambda x, y: np.polyfit(np.log(x), np.log(y), 1), "returned a numpy.ndarray of shape (2,); return the pair"),
    (lambda x, y: [math.log(v) for v in x], "return the pair (a, alpha), two floats"),
    (lambda x, y: (np.float32(1.0), "2"), "alpha is a str, not a number"),
    (lambda x, y: math.log(x), "math.log works on one number"),
    (lambda x, y: x * 2.0, "x and y are Python lists"),
]

# --------------------------------------------------------------------------- 7.4, as learners write it


def vertex_by_hand(N, L, *, u_of=math.log, back=math.exp, two=2, sign=-1):
    """The parabola by the normal equations in torch, then its vertex."""
    u = torch.tensor([u_of(n) for n in N], dtype=torch.float64)
    X = torch.stack([u ** 2, u, torch.ones_like(u)], dim=1)
    c2, c1, _ = torch.linalg.solve(X.T @ X, X.T @ torch.tensor(L, dtype=torch.float64)).tolist()
    return back(sign * c1 / (two * c2))


def vertex_in_N(N, L):
    c = np.polyfit(N, L, 2)
    return float(-c[1] / (2 * c[0]))


def vertex_low_first(N, L):
    c0, c1, c2 = np.polyfit(np.log(N), L, 2)
    return float(np.exp(-c1 / (2 * c2)))


def vertex_by_search(N, L):
    """Wrong (close): the least-squares parabola's lowest point on a grid of sizes."""
    grid = np.logspace(2, 9, 40001)
    return float(grid[np.argmin(np.polyval(np.polyfit(np.log(N), L, 2), np.log(grid)))])


def vertex_precedence(N, L):
    c2, c1, c0 = np.polyfit(np.log(N), L, 2)
    return float(np.exp(-c1/2*c2))                 # noqa: E226 - as written


def vertex_polynomial(N, L):
    from numpy.polynomial import Polynomial
    c0, c1, c2 = Polynomial.fit(np.log(N), L, deg=2).coef
    return float(np.exp(-c1 / (2 * c2)))


def vertex_of_log_loss(N, L):
    u = torch.log(torch.tensor(N, dtype=torch.float64))
    X = torch.stack([u ** 2, u, torch.ones_like(u)], dim=1)
    c2, c1, _ = torch.linalg.lstsq(X, torch.log(torch.tensor(L, dtype=torch.float64))[:, None]).solution[:, 0].tolist()
    return math.exp(-c1 / (2 * c2))


ISO_WRONG = [
    (vertex_in_N, "your parabola is in N itself"),
    (lambda N, L: vertex_by_hand(N, L, sign=1), "yours has the wrong sign"),
    (lambda N, L: vertex_by_hand(N, L, two=1), "Yours is -c1 / c2"),
    (lambda N, L: vertex_by_hand(N, L, back=float), "you returned the vertex in u = ln N"),
    (lambda N, L: vertex_by_hand(N, L, u_of=math.log10), "you fitted in log10 N but undid it with exp"),
    (vertex_low_first, "np.polyfit returns the coefficients highest power first"),
    (lambda N, L: N[L.index(min(L))], "you returned the size of the best run"),
    (lambda N, L: vertex_by_hand(N, L) * 1.01, "the vertex is at N = "),
    (vertex_by_search, "close (off by"),
    (vertex_precedence, "-c1/2*c2 is (-c1/2)·c2 in Python"),
    (vertex_polynomial, "Polynomial.fit's .coef belong to a rescaled variable"),
    (vertex_of_log_loss, "you fitted the parabola to log L"),
    (lambda N, L: float(np.polyval(np.polyfit(np.log(N), L, 2), np.log(vertex_by_hand(N, L)))), "you returned a loss"),
    (lambda N, L: float(np.exp(-np.polyfit(L, np.log(N), 2)[1] / (2 * np.polyfit(L, np.log(N), 2)[0]))),
     "np.polyfit(x, y, deg) fits y as a function of x"),
    (lambda N, L: np.float64(vertex_by_hand(N, L)) * np.ones(1), "returned a numpy.ndarray of shape (1,)"),
    (lambda N, L: math.nan, "you returned nan (a parabola that opens downward"),
]

WRONG = [("optimal_split", fn, phrase) for fn, phrase in SPLIT_WRONG] + \
        [("fit_loglog", fn, phrase) for fn, phrase in FIT_WRONG] + \
        [("isoflop_optimum", fn, phrase) for fn, phrase in ISO_WRONG]

BAD = {
    **exercise_suite.odd_answers((2,)),
    "pair-of-tensors": lambda *a: (torch.zeros(()), torch.zeros(())),
    "pair-nan": lambda *a: (math.nan, math.nan),
    "pair-inf": lambda *a: (math.inf, 1.0),
    "pair-huge": lambda *a: (10 ** 400, 1),
    "pair-str": lambda *a: ("1", "2"),
    "triple": lambda *a: (1.0, 2.0, 3.0),
}


# --------------------------------------------------------------------------- the generic tests

globals().update(
    SUITE.solution_tests(page_width=79)
    | SUITE.notebook_tests()
    | SUITE.registered_mistake_tests(apart_by=1e-3)
    | SUITE.wrong_answer_tests(WRONG)
    | SUITE.odd_answer_tests(BAD) | SUITE.diagnosis_tests()
    | SUITE.case_tests(dtypes=(torch.float64,))
    | SUITE.travel_tests([learner_split(six=False), learner_fit(sign=1), BAD["pair-nan"], BAD["ndarray"]])
    | SUITE.hint_tests()
)


def test_chapter_seven_registry():
    SUITE.assert_registry(numbers=["7.1", "7.2", "7.4"])
    assert checks.EXERCISES["optimal_split"].args == ("C", "A", "B", "alpha", "beta")
    assert checks.EXERCISES["fit_loglog"].item_names == ("a", "alpha")


@pytest.mark.parametrize("right", [split_with_numpy])
def test_other_right_splits_pass(right, capsys):
    assert checks.check_optimal_split(right).status == checks.PASS
    capsys.readouterr()


@pytest.mark.parametrize("right", [fit_lstsq, fit_normal_equations,
                                   lambda x, y: fit_lstsq(x, y, torch.float32)])
def test_other_right_fits_pass(right, capsys):
    assert checks.check_fit_loglog(right).status == checks.PASS
    capsys.readouterr()


# --------------------------------------------------------------------------- the references


def test_split_reference_is_the_minimum_along_the_budget():
    g = torch.Generator().manual_seed(0)
    for C, A, B, alpha, beta in ch07._split_cases(g):
        N, D = ch07.optimal_split_reference(C, A, B, alpha, beta)
        assert 6 * N * D == pytest.approx(C, rel=1e-12)
        fit = {"E": 0.0, "A": A, "B": B, "alpha": alpha, "beta": beta}
        assert (N, D) == pytest.approx(compute_optimal(C, fit), rel=1e-12)
        for factor in (0.99, 1.01):                         # a small step either way costs loss
            assert loss_surface(N * factor, D / factor, fit) > loss_surface(N, D, fit)


def test_split_cases_start_with_the_published_fits():
    cases = ch07._split_cases(torch.Generator().manual_seed(5))
    for case, name in zip(cases, ("hoffmann", "besiroglu")):
        f = PUBLISHED[name]
        assert case[1:] == (f["A"], f["B"], f["alpha"], f["beta"])
    assert all(c[3] != c[4] and c[1] != c[2] for c in cases)   # swaps change the answer


def test_fit_reference_is_the_library_fit_and_the_normal_equations():
    for x, y in ch07._fit_cases(torch.Generator().manual_seed(2)):
        ref = ch07.fit_loglog_reference(x, y)
        assert ref == pytest.approx(fit_power_law(x, y), rel=1e-12)
        assert ref == pytest.approx(fit_normal_equations(x, y), rel=1e-9)


def test_fit_cases_are_noisy():
    """On an exact power law every line fit agrees; the cases must tell the regressions apart."""
    for x, y in ch07._fit_cases(torch.Generator().manual_seed(4)):
        assert learner_fit(regress="x on y")(x, y) != pytest.approx(ch07.fit_loglog_reference(x, y), rel=1e-5)


# --------------------------------------------------------------------------- the grader's honesty flags


@pytest.mark.parametrize("name", ALL)
def test_honest_solutions_are_not_flagged(name):
    rec, verdict = exercise_suite.harvest(name, solution(name))
    assert rec["flags"] == [] and rec["tampering"] == [], rec["flags"]
    assert verdict.status == checks.PASS, verdict.message


LIBRARY_ANSWERS = [
    ("optimal_split", """
        from tinyformer.scaling import compute_optimal

        def optimal_split(C, A, B, alpha, beta):
            return compute_optimal(C, {"E": 0.0, "A": A, "B": B, "alpha": alpha, "beta": beta})
        """, "tinyformer.scaling.compute_optimal"),
    ("fit_loglog", """
        from tinyformer.scaling import fit_power_law

        def fit_loglog(x, y):
            return fit_power_law(x, y)
        """, "tinyformer.scaling.fit_power_law"),
]


@pytest.mark.parametrize("k", range(len(LIBRARY_ANSWERS)), ids=[c for _, _, c in LIBRARY_ANSWERS])
def test_the_library_answer_is_flagged(k):
    name, source, caught = LIBRARY_ANSWERS[k]
    fn = define(textwrap.dedent(source), checks.EXERCISES[name].function)
    rec, verdict = exercise_suite.harvest(name, fn)
    assert caught in rec["flags"], rec["flags"]
    if verdict.passed:          # the in-book check names the call too
        exercise_suite.in_book_refuses(name, fn, rec["flags"])
    assert verdict.status == checks.PASS, verdict.message


def test_the_grader_judges_chapter_seven_in_its_sandbox(tmp_path):
    swapped = SOLUTIONS["optimal_split"].replace("return N, C / (6 * N)", "return C / (6 * N), N")
    assert swapped != SOLUTIONS["optimal_split"]
    rows = SUITE.graded(tmp_path, {"optimal_split": swapped, "fit_loglog": SOLUTIONS["fit_loglog"]})
    assert list(rows) == CHAPTER
    assert rows["optimal_split"][0] == checks.FAIL and ch07.SPLIT_ORDER in rows["optimal_split"][1], rows
    assert rows["fit_loglog"][0] == checks.PASS, rows
