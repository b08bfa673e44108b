"""Chapter 7: scaling laws.

How big a model is (:func:`count_params`, against Kaplan et al.'s ``12·n_layer·d_model²``,
:func:`kaplan_params`), what training it costs (:func:`training_flops`, ``C ≈ 6·N·D``), and
power laws fitted to the losses of a sweep of runs: ``y = a·x^(-alpha)`` (:func:`fit_power_law`,
a straight line in log-log space), the same above a floor ``E`` that no amount of ``x`` removes
(:func:`fit_power_law_offset`), and the two-variable form of Hoffmann et al. (2022),
``L(N, D) = E + A/N^alpha + B/D^beta`` (:func:`fit_loss_surface`, and the published fits in
:data:`PUBLISHED`). :func:`compute_optimal` splits a compute budget between parameters and tokens
under such a form, and :func:`fit_isoflop` finds the best size on one budget's runs the way
Hoffmann et al.'s second method did (a parabola in ``log N``).

Every fit is deterministic (no random restarts) and works in float64 NumPy.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch.nn as nn

from tinyformer.validation import check_int

#: Published parametric fits of ``L(N, D) = E + A / N**alpha + B / D**beta`` (N parameters, D
#: training tokens, L in nats per token on each paper's own data): Hoffmann et al. (2022), eq. 10,
#: and the refit of their data by Besiroglu et al. (2024), which found the original constants did
#: not fit the points they came from.
PUBLISHED = {
    "hoffmann": {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28},
    "besiroglu": {"E": 1.8172, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658},
}
#: Kaplan et al. (2020), eqs. 1.1-1.3: ``L(N) = (N_c/N)**alpha_N`` for non-embedding parameters
#: N, ``L(D) = (D_c/D)**alpha_D`` for tokens D, ``L(C_min) = (C_c/C_min)**alpha_C`` for compute in
#: PF-days.
KAPLAN = {"alpha_N": 0.076, "N_c": 8.8e13, "alpha_D": 0.095, "D_c": 5.4e13,
          "alpha_C": 0.050, "C_c": 3.1e8}


def count_params(model: nn.Module, non_embedding: bool = True) -> int:
    """The parameters of ``model``, each shared tensor once (a tied LM head
    is the embedding). ``non_embedding=True`` leaves out every
    ``nn.Embedding`` and the learned position table, as Kaplan et al. count
    ``N``: a table lookup costs no multiply-adds."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, "
                        f"got {type(model).__name__}")
    if not isinstance(non_embedding, bool):
        raise TypeError(f"non_embedding must be True or False, "
                        f"got {non_embedding!r}")
    from tinyformer.positions import LearnedPositions

    lookups = set()
    if non_embedding:
        for module in model.modules():
            if isinstance(module, (nn.Embedding, LearnedPositions)):
                lookups |= {id(p) for p in module.parameters()}
    # parameters() yields a shared (tied) tensor once
    return sum(p.numel() for p in model.parameters()
               if id(p) not in lookups)


def kaplan_params(n_layer: int, d_model: int) -> int:
    """Kaplan et al.'s ``N ≈ 12·n_layer·d_model²``: per block, ``4·d_model²`` for the attention
    projections (Q, K, V, O) and ``8·d_model²`` for a feed-forward layer of width
    ``4·d_model``; no embeddings, biases or norms."""
    return 12 * check_int("n_layer", n_layer) * check_int("d_model", d_model) ** 2


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def training_flops(n_params, n_tokens) -> float:
    """``C ≈ 6·N·D``: the FLOPs of training ``n_params`` parameters on ``n_tokens`` tokens. Per
    token and weight, the forward pass does one multiply-add (2 FLOPs) and the backward pass two
    (4 FLOPs: the gradient with respect to the input and with respect to the weight). Attention
    over the context and everything that is not a matrix multiply are left out."""
    return 6.0 * _positive("n_params", n_params) * _positive("n_tokens", n_tokens)


def _points(x, y, min_points: int = 2) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y must hold the same number of values, got {x.size} and {y.size}")
    if x.size < min_points:
        raise ValueError(f"a fit needs at least {min_points} points, got {x.size}")
    for name, v in (("x", x), ("y", y)):
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ValueError(f"every {name} must be a positive finite number, got {v.tolist()}")
    if np.unique(x).size < 2:
        raise ValueError("x must hold at least two different values")
    return x, y


def fit_power_law(x, y) -> tuple[float, float]:
    """Fit ``y = a · x^(-alpha)`` by least squares on
    ``log y = log a - alpha · log x``: a straight line in log-log space,
    every point weighted alike. Returns ``(a, alpha)``."""
    x, y = _points(x, y)
    slope, intercept = np.polyfit(np.log(x), np.log(y), 1)
    return float(math.exp(intercept)), float(-slope)


def fit_isoflop(N, L) -> tuple[float, tuple[float, float, float]]:
    """The best size on one compute budget (an IsoFLOP profile, Hoffmann et al.'s second method):
    fit ``L = c2·u² + c1·u + c0`` with ``u = ln N`` by least squares and return the vertex,
    ``(N_opt, (c2, c1, c0))`` with ``N_opt = exp(-c1 / (2·c2))``. Needs three different sizes, and
    a parabola that opens upward (else it has no lowest point)."""
    N, L = _points(N, L, min_points=3)
    if np.unique(N).size < 3:
        raise ValueError("N must hold at least three different sizes to fit a parabola")
    c2, c1, c0 = np.polyfit(np.log(N), L, 2)
    if not c2 > 0:
        raise ValueError(f"the parabola fitted to L against ln N opens downward (c2 = {c2:.3g}): "
                         "these losses have no lowest point between the sizes")
    return float(math.exp(-c1 / (2 * c2))), (float(c2), float(c1), float(c0))


def _golden(f, lo: float, hi: float, iters: int = 80) -> float:
    """The minimiser of a unimodal ``f`` on ``[lo, hi]`` by golden-section search."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def _linear_given_exponents(columns: list[np.ndarray], y: np.ndarray):
    """Non-negative least squares, relative to ``y``, of ``y ≈ Σ c_k · columns[k]``: the
    coefficients and the sum of squared relative residuals. Each weight is ``1/y`` so the fit
    minimises relative errors, as a fit in log space does for small residuals. Coefficients that
    come out negative are dropped (set to 0) and the rest refitted: few columns, so every subset
    is tried."""
    X = np.stack(columns, axis=1) / y[:, None]
    t = np.ones_like(y)
    best = (np.zeros(len(columns)), float(np.sum(t ** 2)))
    k = len(columns)
    for mask in range(1, 2 ** k):
        keep = [j for j in range(k) if mask >> j & 1]
        coef, *_ = np.linalg.lstsq(X[:, keep], t, rcond=None)
        if np.any(coef < 0):
            continue
        full = np.zeros(k)
        full[keep] = coef
        err = float(np.sum((X @ full - t) ** 2))
        if err < best[1] - 1e-15:
            best = (full, err)
    return best


def fit_power_law_offset(x, y, max_alpha: float = 4.0) -> tuple[float, float, float]:
    """Fit ``y = E + a · x^(-alpha)`` with ``E >= 0``, ``a >= 0``: a power law that levels off at
    a floor ``E`` (the loss no model size or data removes). Returns ``(E, a, alpha)``.

    Method (variable projection): for a fixed ``alpha`` the form is linear in ``(E, a)``, solved
    exactly by least squares on relative residuals; ``alpha`` is then chosen on a grid of 400
    values in ``(0, max_alpha]`` and refined by golden-section search between the grid's
    neighbours of the best point. Needs at least three points."""
    x, y = _points(x, y, min_points=3)
    max_alpha = _positive("max_alpha", max_alpha)
    scale = float(np.exp(np.mean(np.log(x))))       # x/scale near 1 keeps the columns comparable
    u = x / scale

    def err(alpha):
        return _linear_given_exponents([np.ones_like(u), u ** -alpha], y)[1]

    grid = np.linspace(max_alpha / 400, max_alpha, 400)
    i = int(np.argmin([err(a) for a in grid]))
    alpha = _golden(err, grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)])
    (E, a), _ = _linear_given_exponents([np.ones_like(u), u ** -alpha], y)
    return float(E), float(a * scale ** alpha), float(alpha)


def fit_loss_surface(N, D, L, max_exponent: float = 2.0) -> dict:
    """Fit Hoffmann et al.'s ``L = E + A/N^alpha + B/D^beta`` to runs of ``N`` parameters trained
    on ``D`` tokens; returns ``{"E", "A", "B", "alpha", "beta"}`` (all >= 0).

    Method (variable projection, as :func:`fit_power_law_offset`): for fixed ``(alpha, beta)``
    the form is linear in ``(E, A, B)``; the exponents are chosen on a 60 x 60 grid over
    ``(0, max_exponent]`` and refined by coordinate-wise golden-section search. Needs at least
    five runs."""
    N, L1 = _points(N, L, min_points=5)
    D, L2 = _points(D, L, min_points=5)
    max_exponent = _positive("max_exponent", max_exponent)
    sN, sD = float(np.exp(np.mean(np.log(N)))), float(np.exp(np.mean(np.log(D))))
    n, d = N / sN, D / sD

    def err(alpha, beta):
        return _linear_given_exponents([np.ones_like(n), n ** -alpha, d ** -beta], L1)[1]

    grid = np.linspace(max_exponent / 60, max_exponent, 60)
    errs = np.array([[err(a, b) for b in grid] for a in grid])
    i, j = np.unravel_index(int(np.argmin(errs)), errs.shape)
    alpha, beta = float(grid[i]), float(grid[j])
    step = grid[1] - grid[0]
    for _ in range(6):                                  # coordinate descent, each a 1-D search
        alpha = _golden(lambda a, b=beta: err(a, b), max(alpha - step, 1e-6), alpha + step)
        beta = _golden(lambda b, a=alpha: err(a, b), max(beta - step, 1e-6), beta + step)
    (E, A, B), _ = _linear_given_exponents([np.ones_like(n), n ** -alpha, d ** -beta], L1)
    return {"E": float(E), "A": float(A * sN ** alpha), "B": float(B * sD ** beta),
            "alpha": float(alpha), "beta": float(beta)}


def _surface(fit) -> dict:
    if isinstance(fit, str):
        if fit not in PUBLISHED:
            raise ValueError(f"fit must be one of {sorted(PUBLISHED)} or a dict, got {fit!r}")
        return PUBLISHED[fit]
    if not isinstance(fit, dict) or not {"E", "A", "B", "alpha", "beta"} <= set(fit):
        raise ValueError("fit must name a published fit or be a dict with E, A, B, alpha, beta")
    return fit


def loss_surface(N, D, fit="hoffmann"):
    """``E + A/N^alpha + B/D^beta`` for ``N`` parameters and ``D`` tokens (numbers or arrays)
    under ``fit``: a name in :data:`PUBLISHED` or a dict from :func:`fit_loss_surface`."""
    f = _surface(fit)
    N, D = np.asarray(N, dtype=np.float64), np.asarray(D, dtype=np.float64)
    if np.any(N <= 0) or np.any(D <= 0):
        raise ValueError("N and D must be positive")
    out = f["E"] + f["A"] / N ** f["alpha"] + f["B"] / D ** f["beta"]
    return float(out) if out.ndim == 0 else out


def compute_optimal(C, fit="hoffmann") -> tuple[float, float]:
    """The ``(N, D)`` that minimise ``L(N, D)`` under ``fit`` for a compute budget ``C = 6·N·D``
    FLOPs. Setting the derivative along ``D = C/(6N)`` to zero gives
    ``N_opt = G·(C/6)^(beta/(alpha+beta))`` with ``G = (alpha·A/(beta·B))^(1/(alpha+beta))``, and
    ``D_opt = C/(6·N_opt)``."""
    C = _positive("C", C)
    f = _surface(fit)
    a, b = f["alpha"], f["beta"]
    G = (a * f["A"] / (b * f["B"])) ** (1 / (a + b))
    N = G * (C / 6) ** (b / (a + b))
    return float(N), float(C / (6 * N))


__all__ = ["KAPLAN", "PUBLISHED", "compute_optimal", "count_params", "fit_isoflop", "fit_loss_surface",
           "fit_power_law", "fit_power_law_offset", "kaplan_params", "loss_surface", "training_flops"]
