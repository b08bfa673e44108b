"""Chapter 3 (the transformer block): the exercises, their test inputs, references, known mistakes and hints.

Exercises 3.1-3.4 have checks (3.5 is a proof and 3.6 an experiment, without one). The drill ``rms_norm``
keeps a public check but is no exercise of the chapter notebook, so the grader does not expect it.

Exercise 3.2 (wire a feed-forward network by hand) is judged by what the network does, for any hidden
width. Exercise 3.3 receives modules: its cases store their weights as plain tensors (``built``
data), and every call gets freshly built float64 modules, so no call can disturb the next.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tinyformer.attention import MultiHeadAttention
from tinyformer.blocks import FeedForward, LayerNorm, TransformerBlock
from tinyformer.course.engine import Exercise, _float32_round_trip, built, register, register_builder, run_cases
from tinyformer.course.engine import randint as _randint

CHAPTER = "03-transformer-block"
F64 = torch.float64


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=F64) * scale


def _rand(g: torch.Generator, *shape: int, low: float, high: float) -> torch.Tensor:
    return low + (high - low) * torch.rand(*shape, generator=g, dtype=F64)


def _tokens(g: torch.Generator, *shape: int, spread: float = 1.0) -> torch.Tensor:
    """Vectors along the last axis with their own offset and scale per token (so the mean matters)."""
    lead = shape[:-1]
    return _randn(g, *lead, 1) + _rand(g, *lead, 1, low=0.5, high=2.0) * _randn(g, *shape, scale=spread)


# --------------------------------------------------------------------------- 3.1 layer norm


def _norm_cases(g: torch.Generator, eps_values: tuple[float, ...]) -> list[tuple]:
    """(x, gain, bias, eps) with a small d (so dividing by d or d - 1 differs), T != d (so a mean
    without keepdim cannot broadcast), a 2-D input, and a last case of tiny variance with a large
    eps (so every use of eps shows)."""
    cases = []
    for shape, eps in zip(((2, 3, 5), (3, 4, 3), (2, 5, 8), (4, 6)), eps_values):
        d = shape[-1]
        cases.append((_tokens(g, *shape), _rand(g, d, low=0.5, high=2.0) * torch.sign(_randn(g, d) + 0.5),
                      _randn(g, d, scale=0.5), eps))
    x = 3.0 + _randn(g, 2, 3, 4, scale=0.03)                     # variance ~1e-3, far below eps = 0.1
    cases.append((x, _rand(g, 4, low=0.5, high=2.0), _randn(g, 4, scale=0.5), 0.1))
    return cases


def _layer_norm_cases(g):
    return _norm_cases(g, (1e-5, 1e-3, 1e-5, 0.05))


def _ln(*, dim=-1, unbiased=False, eps_inside=True, eps_fixed=None, no_eps=False, centre=True, root=True,
        affine="right", rms=False):
    """Layer norm with the mistakes named by the keywords; the defaults are right.

    dim: the axes the statistics run over (None: the whole tensor). unbiased: divide by n - 1.
    eps_inside: sqrt(var + eps), else sqrt(var) + eps. eps_fixed: a number used instead of eps.
    no_eps: no eps at all. centre: subtract the mean from x. root: divide by the standard deviation
    (False: by the variance). affine: "right", "none", "no_gain", "no_bias", "bias_first". rms: x
    divided by the root of its mean square (RMS norm), with gain and bias.
    """
    def wrong(x, gain, bias, eps=1e-5):
        e = 0.0 if no_eps else (eps_fixed if eps_fixed is not None else eps)
        keep = {} if dim is None else {"dim": dim, "keepdim": True}
        if rms:
            x_hat = x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + e)
        else:
            mean = x.mean(**keep)
            var = x.var(**keep, unbiased=unbiased)
            spread = (torch.sqrt(var + e) if eps_inside else torch.sqrt(var) + e) if root else var + e
            x_hat = ((x - mean) if centre else x) / spread
        return {"right": x_hat * gain + bias, "none": x_hat, "no_gain": x_hat + bias, "no_bias": x_hat * gain,
                "bias_first": (x_hat + bias) * gain}[affine]
    return wrong


def _ln_uncentred_var(x, gain, bias, eps=1e-5):
    return (x - x.mean(dim=-1, keepdim=True)) / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * gain + bias


def _ln_swapped_affine(x, gain, bias, eps=1e-5):
    return _ln()(x, bias, gain, eps)


def _ln_global_mean(x, gain, bias, eps=1e-5):
    c = x - x.mean()
    return c / torch.sqrt(c.pow(2).mean(dim=-1, keepdim=True) + eps) * gain + bias


def _ln_first_axis_count(x, gain, bias, eps=1e-5):
    c = x - x.sum(dim=-1, keepdim=True) / x.shape[0]
    return c / torch.sqrt(c.pow(2).sum(dim=-1, keepdim=True) / x.shape[0] + eps) * gain + bias


def _ln_second_axis_count(x, gain, bias, eps=1e-5):
    c = x - x.sum(dim=-1, keepdim=True) / x.shape[1]
    return c / torch.sqrt(c.pow(2).sum(dim=-1, keepdim=True) / x.shape[1] + eps) * gain + bias


def _ln_unbracketed(x, gain, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    return (x - mean / torch.sqrt((x - mean).pow(2).mean(dim=-1, keepdim=True) + eps)) * gain + bias


def _ln_root_of_std(x, gain, bias, eps=1e-5):
    c = x - x.mean(dim=-1, keepdim=True)
    return c / torch.sqrt(c.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps) * gain + bias


def _ln_clamped(x, gain, bias, eps=1e-5):
    c = x - x.mean(dim=-1, keepdim=True)
    return c / c.pow(2).mean(dim=-1, keepdim=True).sqrt().clamp_min(eps) * gain + bias


def _ln_root_eps(x, gain, bias, eps=1e-5):
    c = x - x.mean(dim=-1, keepdim=True)
    return c / (torch.sqrt(c.pow(2).mean(dim=-1, keepdim=True)) + eps ** 0.5) * gain + bias


def _ln_normalize(x, gain, bias, eps=1e-5):
    """F.normalize of the centred x, times √d: eps a floor on the length."""
    return F.normalize(x - x.mean(dim=-1, keepdim=True), dim=-1, eps=eps) * x.shape[-1] ** 0.5 * gain + bias


def _ln_eps_in_sum(x, gain, bias, eps=1e-5):
    """eps added to the sum of squares, then divided by d."""
    c = x - x.mean(dim=-1, keepdim=True)
    return c / torch.sqrt((c.pow(2).sum(dim=-1, keepdim=True) + eps) / x.shape[-1]) * gain + bias


def _ln_eps_squared(x, gain, bias, eps=1e-5):
    c = x - x.mean(dim=-1, keepdim=True)
    return c / torch.sqrt(c.pow(2).mean(dim=-1, keepdim=True) + eps ** 2) * gain + bias


LN_UNBIASED = ("x.var() and torch.std() divide by d - 1 by default (the unbiased estimate); layer norm uses the "
               "biased variance, the plain mean of (x - mean)² over the d features: x.var(dim=-1, keepdim=True, "
               "unbiased=False).")
LN_KEEPDIM = ("a statistic over the last axis (the mean, the variance, or both) dropped that axis, so it no longer "
              "lines up with x: pass keepdim=True to each (x.mean(dim=-1, keepdim=True), and the same for the "
              "variance), which keeps a size-1 axis that broadcasts over the features.")

LN_FLOAT32 = ("part of your computation ran in float32 (x.float(), torch.float32, or a tensor made without "
              "dtype=x.dtype): the statistics carry float32's ~1e-7 rounding into the float64 result. Keep the "
              "inputs' float64 throughout.")


LN_LENGTH = ("you divided by the length of the centred vector, sqrt(sum((x - mean)²)): that is √d times the "
             "standard deviation, so every output is √d times too small. The variance is the MEAN of (x - mean)² "
             "over the d features.")


def _ln_stats(x):
    """Mean and biased variance over the last axis (keepdim)."""
    mean = x.mean(dim=-1, keepdim=True)
    return mean, (x - mean).pow(2).mean(dim=-1, keepdim=True)


def _ln_eps_after(x, gain, bias, eps=1e-5):          # ((x - mean) / sqrt(var) + eps) * gain + bias
    mean, var = _ln_stats(x)
    return ((x - mean) / torch.sqrt(var) + eps) * gain + bias


def _ln_gain_first(x, gain, bias, eps=1e-5):         # normalise x * gain, then add bias
    y = x * gain
    mean, var = _ln_stats(y)
    return (y - mean) / torch.sqrt(var + eps) + bias


def _ln_var_clamped(x, gain, bias, eps=1e-5):        # sqrt(var.clamp_min(eps))
    mean, var = _ln_stats(x)
    return (x - mean) / torch.sqrt(var.clamp_min(eps)) * gain + bias


def _ln_var_over_sequence(x, gain, bias, eps=1e-5):   # the mean over the features, the variance over T
    mean = x.mean(dim=-1, keepdim=True)
    var = (x - mean).pow(2).mean(dim=-2, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * gain + bias


def _ln_mean_not_squared(x, gain, bias, eps=1e-5):   # var = E[x²] - E[x]
    mean = x.mean(dim=-1, keepdim=True)
    var = x.pow(2).mean(dim=-1, keepdim=True) - mean
    return (x - mean) / torch.sqrt(var.abs() + eps) * gain + bias   # .abs(): else a NaN, named as such


def _ln_eps_times(x, gain, bias, eps=1e-5):          # var * (1 + eps)
    mean, var = _ln_stats(x)
    return (x - mean) / torch.sqrt(var * (1 + eps)) * gain + bias


LN_HALF = ("your values are right to about three digits only: part of the computation ran in half precision "
           "(x.half(), torch.float16 or bfloat16), which keeps about 3 significant digits. Keep the inputs' float64 "
           "throughout.")


def _half_like(outputs, refs) -> bool:
    """Errors of half precision: relative errors between 1e-4 and 3e-2 in every case but possibly one
    (the tiny-variance case, which half precision wrecks), and no case within 1e-4."""
    def rel(o, r):   # the largest error, relative to the largest value of the case
        return ((o - r).abs().max() / r.abs().max()).item() if o.shape == r.shape else math.inf
    errors = [rel(o, r) for o, r in zip(outputs, refs)]
    close = sum(e < 3e-2 for e in errors)
    return all(e > 1e-4 for e in errors) and close >= max(2, len(errors) - 1)


def _by_length(x, gain, bias, eps, with_eps):
    c = x - x.mean(dim=-1, keepdim=True)
    return c / torch.sqrt(c.pow(2).sum(dim=-1, keepdim=True) + (eps if with_eps else 0.0)) * gain + bias


EPS_FIXED = ("the eps argument is ignored: your output is the one for eps = {eps:g} whatever eps is passed. Use the "
             "eps you are given.")
_FIXED_EPS = (0.0, 1e-12, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3,
              torch.finfo(torch.float32).eps, torch.finfo(torch.float64).eps)   # machine epsilons too


def _fixed_eps(cases, outputs, fn) -> str | None:
    """The hint for an answer that computes ``fn`` with a hard-coded eps, whatever eps is passed."""
    for eps in _FIXED_EPS:
        try:
            if all(o.shape == case[0].shape and torch.allclose(o, fn(*case[:-1], eps), rtol=1e-9, atol=1e-12)
                   for case, o in zip(cases, outputs)):
                return f"wrong output. Hint: {EPS_FIXED.format(eps=eps)}"
        except RuntimeError:
            continue
    return None


def _diagnose_ln(cases, outputs, refs):
    """Values right to float32's precision but not to float64's: a float32 step inside (x.float()
    with a float64 gain and bias brings the result back to float64, so the dtype looks right).
    A result cast back from float32 as a whole is left to the engine's own message. Divided by the
    centred vector's length, with or without eps: √d too small."""
    for with_eps in (True, False):
        if all(o.shape == r.shape and torch.allclose(o, _by_length(*case, with_eps), rtol=1e-9, atol=1e-12)
               for case, o, r in zip(cases, outputs, refs)):
            return f"wrong output. Hint: {LN_LENGTH}"
    fixed = _fixed_eps(cases, outputs, lambda x, gain, bias, eps: F.layer_norm(x, (x.shape[-1],), gain, bias, eps))
    if fixed:
        return fixed
    if _float32_round_trip(outputs, refs):
        return None
    if all(bool(torch.allclose(o, r, rtol=1e-5, atol=1e-5)) for o, r in zip(outputs, refs)):
        return f"values right to float32's precision (~1e-7) only. Hint: {LN_FLOAT32}"
    if _half_like(outputs, refs):
        return f"wrong values. Hint: {LN_HALF}"
    return None


# Normalisations under any name: each computes layer norm (the statistics read along another axis of a
# reshaped x, or RMS norm of the centred x) and RMS norm (any of them applied to [x, -x], whose mean is 0),
# so each is a library answer to both exercises. PyTorch's own references (torch._refs, torch._decomp) and
# its operators (torch.ops.aten) are listed beside the public functions.
NORM_KERNELS = (
    "torch.nn.functional.layer_norm", "torch.layer_norm", "torch.native_layer_norm",
    "torch._refs.native_layer_norm",
    "torch.nn.functional.rms_norm", "torch.rms_norm", "torch._fused_rms_norm",
    "torch._decomp.decompositions._fused_rms_norm",
    "torch.nn.functional.group_norm", "torch.group_norm", "torch.native_group_norm",
    "torch._refs.native_group_norm",
    "torch.nn.functional.instance_norm", "torch.instance_norm",
    "torch.nn.functional.batch_norm", "torch.batch_norm", "torch.native_batch_norm",
    "torch._batch_norm_impl_index", "torch._native_batch_norm_legit",
    "torch._native_batch_norm_legit_no_training",
    "torch._decomp.decompositions.native_batch_norm", "torch._decomp.decompositions._native_batch_norm_legit",
    "torch._decomp.decompositions._batch_norm_with_update",
    "torch._decomp.decompositions._native_batch_norm_legit_functional",
    "torch.ops.aten._native_batch_norm_legit_functional", "torch.ops.aten._batch_norm_with_update",
    "torch.ops.aten._batch_norm_no_update",
    "torch._refs._normalize", "torch._decomp.decompositions.native_batch_norm_helper",
    "torch._decomp.decompositions._native_batch_norm_legit_no_stats",
)


register(Exercise(
    name="layer_norm", number="3.1", function="layer_norm", chapter=CHAPTER, args=("x", "gain", "bias", "eps"),
    grad_args=(0, 1, 2),
    library_answers=("tinyformer.blocks.LayerNorm", "torch.nn.LayerNorm", *NORM_KERNELS),
    make_cases=_layer_norm_cases,
    reference=lambda x, gain, bias, eps=1e-5: F.layer_norm(x, (x.shape[-1],), gain, bias, eps),
    returns="the normalised tensor, shaped like x",
    mistakes=[
        (_ln(unbiased=True), LN_UNBIASED),
        (_ln(eps_inside=False), "eps goes inside the square root: (x - mean) / sqrt(var + eps), not "
                                "(x - mean) / (sqrt(var) + eps)."),
        (_ln(unbiased=True, eps_inside=False),
         "two slips at once: torch.std (or x.var()) is the unbiased estimate, dividing by d - 1, and eps was "
         "added outside the square root. Layer norm divides by sqrt(var + eps), var the biased variance."),
        (_ln(dim=0), "you normalised over the batch axis (dim=0): that is batch norm. Layer norm takes each "
                     "token's mean and variance over its own d features, the last axis (dim=-1)."),
        (_ln(dim=-2), "you normalised over the sequence axis (dim=-2), mixing positions: each token is "
                      "normalised over its own features, dim=-1."),
        (_ln(dim=(-2, -1)), "you normalised over the last two axes, (T, d) together, as nn.LayerNorm((T, d_model)) "
                            "would: each token has its own mean and variance, over its d features alone (dim=-1, "
                            "normalized_shape=(d_model,))."),
        (_ln(dim=None), "you took one mean and one variance of the whole tensor: every token (every vector "
                        "along the last axis) gets its own, x.mean(dim=-1, keepdim=True)."),
        (_ln(affine="none"), "the normalisation is right but gain and bias are missing: return "
                             "x_hat * gain + bias."),
        (_ln(affine="no_gain"), "the gain is missing: multiply the normalised x by gain, then add bias."),
        (_ln(affine="no_bias"), "the bias is missing: add bias after multiplying by gain."),
        (_ln(affine="bias_first"), "the bias was added before the gain, (x_hat + bias) * gain: scale first, "
                                   "then shift, x_hat * gain + bias."),
        (_ln(centre=False), "you divided x itself by the standard deviation: subtract each token's mean first, "
                            "x_hat = (x - mean) / sqrt(var + eps)."),
        (_ln(rms=True), "this is RMS norm, x / sqrt(mean(x²) + eps): layer norm subtracts the mean first and "
                        "divides by the standard deviation around it."),
        (_ln(root=False), "you divided by the variance; divide by the standard deviation, its square root: "
                          "sqrt(var + eps)."),
        (_ln(eps_fixed=1e-5), "the eps argument is ignored: your output is the one for eps = 1e-5 whatever eps "
                              "is passed. Use the eps you are given."),
        (_ln(no_eps=True), "eps is missing (or too small to matter, a machine epsilon, say): divide by "
                           "sqrt(var + eps) with the eps you are given. Without it a token whose features are "
                           "(almost) equal is divided by (almost) zero."),
        (_ln_uncentred_var, "the variance is the mean of x², not of (x - mean)²: centre x before squaring, "
                            "var = ((x - mean)²).mean(dim=-1, keepdim=True)."),
        (_ln_eps_squared, "you added eps² (or the square of something) inside the root: layer norm divides by "
                          "sqrt(var + eps), eps itself."),
        (_ln_swapped_affine, "gain and bias are swapped: the gain multiplies and the bias adds, "
                             "x_hat * gain + bias."),
        (_ln_global_mean, "you subtracted one mean of the whole tensor (x.mean()): each token has its own, "
                          "x.mean(dim=-1, keepdim=True)."),
        (_ln_first_axis_count, "you divided the sums by x.shape[0], the size of the FIRST axis: the statistics "
                               "run over the last axis, d = x.shape[-1] numbers (or use .mean(dim=-1))."),
        (_ln_root_eps, "you divided by sqrt(var) + sqrt(eps): eps goes inside ONE square root, "
                       "sqrt(var + eps), which is smaller than sqrt(var) + sqrt(eps)."),
        (_ln_second_axis_count, "you divided the sums by x.shape[1], the size of the SECOND axis: the statistics "
                                "run over the last axis, d = x.shape[-1] numbers (or use .mean(dim=-1))."),
        (_ln_unbracketed, "a bracket is missing: x - mean / sqrt(var + eps) divides only the mean. Centre first, "
                          "then divide: (x - mean) / sqrt(var + eps)."),
        (_ln(dim=1), "you named the statistics' axis by its number, dim=1: for a (B, T, d) input that is the "
                     "sequence axis (it only works for 2-D inputs). Use dim=-1, the last axis, whatever the rank."),
        (_ln_clamped, "eps is a floor in yours (clamp_min or max): layer norm ADDS it, sqrt(var + eps), which "
                      "changes every token a little, not only the nearly constant ones."),
        (_ln_root_of_std, "you took the square root twice: sqrt(std + eps) with std already a root. Divide by "
                          "sqrt(var + eps), var the mean of (x - mean)²."),
        (_ln(eps_fixed=1e-6), "the eps argument is ignored: your output is the one for eps = 1e-6 whatever eps "
                              "is passed. Use the eps you are given."),
        (_ln_eps_after, "eps was added after the division, (x - mean) / sqrt(var) + eps: it belongs inside the "
                        "root, (x - mean) / sqrt(var + eps), where it keeps a nearly constant token from being "
                        "divided by (almost) zero."),
        (_ln_gain_first, "the gain was applied before normalising, so the normalisation undid it: standardise x "
                         "first, x_hat = (x - mean) / sqrt(var + eps), then x_hat * gain + bias."),
        (_ln_var_clamped, "eps is a floor on the variance in yours (var.clamp_min(eps)): layer norm ADDS it, "
                          "sqrt(var + eps), which changes every token a little, not only the nearly constant ones."),
        (_ln_var_over_sequence, "the mean is over the features but the variance over the sequence axis (dim=-2): "
                                "both statistics run over the token's own d features, dim=-1."),
        (_ln_mean_not_squared, "the variance is E[x²] - E[x]², the mean SQUARED: you subtracted the mean itself. "
                               "Or compute it as the mean of (x - mean)²."),
        (_ln_eps_times, "eps multiplied the variance, var * (1 + eps): it is ADDED, sqrt(var + eps)."),
        (_ln_normalize, "F.normalize(x - mean) * √d divides by max(||x - mean||, eps): eps becomes a floor on the "
                        "length instead of being added to the variance. Layer norm divides by sqrt(var + eps), "
                        "var the mean of (x - mean)²."),
        (_ln_eps_in_sum, "you added eps to the sum of squares before dividing by d, which adds only eps / d: add "
                         "it to the variance, the mean, sqrt(sum / d + eps)."),
        (lambda x, gain, bias, eps=1e-5: (x - x.mean(dim=-1, keepdim=True))
         / torch.sqrt(x.var(unbiased=False) + eps) * gain + bias,
         "x.var(unbiased=False) with no dim is ONE variance of the whole tensor: each token has its own, "
         "x.var(dim=-1, keepdim=True, unbiased=False)."),
        (lambda x, gain, bias, eps=1e-5: (x - x.mean(dim=-1, keepdim=True)) / torch.sqrt(x.var() + eps) * gain + bias,
         "x.var() with no dim is ONE variance of the whole tensor, and unbiased (divided by n - 1): each token "
         "has its own, x.var(dim=-1, keepdim=True, unbiased=False)."),
        (lambda x, gain, bias, eps=1e-5: (x - x.mean(dim=-1, keepdim=True))
         * (torch.rsqrt((x - x.mean(dim=-1, keepdim=True)).pow(2).mean(dim=-1, keepdim=True)) + eps) * gain + bias,
         "eps was added after rsqrt, (x - mean) * (rsqrt(var) + eps): it goes inside, (x - mean) * rsqrt(var + eps)."),
    ],
    error_hints=[(RuntimeError, r"must match the size of tensor b", LN_KEEPDIM),
                 (IndexError, r"Dimension out of range",
                  "you named an axis by its number (dim=2, say), which exists only for 3-D inputs; x may have any "
                  "number of leading axes (the check passes (T, d) too): use dim=-1, the last axis."),
                 (IndexError, r"tuple index out of range",
                  "you read a size by its axis number (x.shape[2], say), which exists only for 3-D inputs; x may "
                  "have any number of leading axes (the check passes (T, d) too): d = x.shape[-1]."),
                 (ValueError, r"only one element tensors can be converted",
                  "math.sqrt (or float(...)) takes a single number, and your statistics are a tensor, one per "
                  "token: use torch.sqrt (or torch.rsqrt), which works element by element.")],
    diagnose=_diagnose_ln, diagnose_hints=(LN_FLOAT32, LN_LENGTH, LN_HALF),
    generic_hint="for each token: mean and biased variance over the last axis (keepdim=True), "
                 "x_hat = (x - mean) / sqrt(var + eps), then x_hat * gain + bias. Compare with "
                 "torch.nn.functional.layer_norm(x, (d,), gain, bias, eps) on a small input.",
))


# --------------------------------------------------------------------------- 3.2 |a| by a feed-forward network


# far points too: a kink placed beyond the last near point (|a| only for a >= -B) cannot hide
ABS_GRID = torch.tensor([-1e5, -1e3, -6.0, -2.5, -1.0, -0.5, -0.1, 0.0, 0.1, 0.5, 1.0, 2.5, 6.0, 1e3, 1e5],
                        dtype=F64)
ABS_RTOL = ABS_ATOL = 1e-6          # hand-picked weights in float32 pass; a wrong kink or slope does not


def absolute_value_reference():
    """One answer of Exercise 3.2 (d_ff = 2): hidden units relu(a) and relu(-a), both added to feature 1."""
    W_1 = torch.tensor([[1.0, -1.0], [0.0, 0.0]], dtype=F64)        # (2, d_ff)
    W_2 = torch.tensor([[0.0, 1.0], [0.0, 1.0]], dtype=F64)         # (d_ff, 2)
    return W_1, torch.zeros(2, dtype=F64), W_2, torch.zeros(2, dtype=F64)


def ffn_stream(W_1, b_1, W_2, b_2, a: torch.Tensor = ABS_GRID) -> torch.Tensor:
    """The residual stream x + FFN(x) for the inputs x = (a, 0), one row per value of a: (len(a), 2)."""
    x = torch.stack([a, torch.zeros_like(a)], dim=-1)               # (n, 2)
    return x + torch.relu(x @ W_1 + b_1) @ W_2 + b_2


def _abs_target(a: torch.Tensor = ABS_GRID) -> torch.Tensor:
    return torch.stack([a, a.abs()], dim=-1)


def _abs_shape_problem(W_1, b_1, W_2, b_2) -> str | None:
    if W_1.dim() != 2 or W_1.shape[0] != 2:
        return f"W_1 has shape {tuple(W_1.shape)}, expected (2, d_ff)"
    d_ff = W_1.shape[1]
    for name, t, want in (("b_1", b_1, (d_ff,)), ("W_2", W_2, (d_ff, 2)), ("b_2", b_2, (2,))):
        if tuple(t.shape) != want:
            return f"{name} has shape {tuple(t.shape)}, expected {want} (W_1 has shape (2, {d_ff}), so d_ff = {d_ff})"
    return None


def _abs_works(W_1, b_1, W_2, b_2) -> bool:
    if _abs_shape_problem(W_1, b_1, W_2, b_2) is not None:
        return False
    stream = ffn_stream(W_1, b_1, W_2, b_2)
    return bool(torch.isfinite(stream).all() and torch.allclose(stream, _abs_target(), rtol=ABS_RTOL, atol=ABS_ATOL))


def _abs_ok(case, out, ref) -> bool:
    return _abs_works(*out)


ABS_NO_RESIDUAL = ("your FFN itself returns (a, |a|), but the block adds it to the stream, which carries x already: "
                   "x + FFN(x) = (2a, |a|). The FFN must return the CHANGE, (0, |a|).")
ABS_RELU_ONLY = ("feature 1 is relu(a): right for a >= 0, but 0 for negative a. |a| = relu(a) + relu(-a): "
                 "use a second hidden unit for the negative half.")
ABS_SIGN = "feature 1 is -|a|: flip the sign of what the FFN writes there (W_2 or the hidden units)."
ABS_TRANSPOSED = ("your matrices work in the column-vector convention (W @ x): here vectors are rows, "
                  "FFN(x) = relu(x W_1 + b_1) W_2 + b_2, so return their transposes, W_1 of shape (2, d_ff) and "
                  "W_2 of shape (d_ff, 2).")
ABS_FEATURE0 = ("|a| went into feature 0 and feature 1 stays 0: the FFN must leave feature 0 alone (the residual "
                "already carries a there) and write |a| into feature 1, the second column of W_2.")
ABS_NONFINITE = "your matrices contain NaN or inf: every weight must be a finite number."
ABS_W1_ROWS = ("W_1 is transposed: x W_1 multiplies x by each COLUMN of W_1, so column j is what hidden unit j "
               "reads (W_1[:, j]); yours holds each unit's weights in a row. Transpose W_1.")
ABS_W2_COLUMNS = ("W_2 is transposed: row j of W_2 is what hidden unit j writes into the two features "
                  "(W_2[j, :]); yours holds each unit's write in a column. Transpose W_2.")


def _diagnose_abs(cases, outputs, refs):
    W_1, b_1, W_2, b_2 = outputs[0]
    if not all(bool(torch.isfinite(t).all()) for t in outputs[0]):
        return f"wrong output. Hint: {ABS_NONFINITE}"
    if W_1.dim() == 2 and W_2.dim() == 2 and _abs_works(W_1.T, b_1, W_2.T, b_2):
        return f"wrong output. Hint: {ABS_TRANSPOSED}"
    problem = _abs_shape_problem(W_1, b_1, W_2, b_2)
    if problem is not None:
        return f"{problem}: vectors are rows here, FFN(x) = relu(x W_1 + b_1) W_2 + b_2 with x of shape (1, 2)."
    if W_1.shape[1] == 2 and _abs_works(W_1.T, b_1, W_2, b_2):      # square: a transposed W_1 still fits
        return f"wrong output. Hint: {ABS_W1_ROWS}"
    if W_1.shape[1] == 2 and _abs_works(W_1, b_1, W_2.T, b_2):
        return f"wrong output. Hint: {ABS_W2_COLUMNS}"
    stream, a = ffn_stream(W_1, b_1, W_2, b_2), ABS_GRID

    def equals(first, second):
        return torch.allclose(stream, torch.stack([first, second], dim=-1), rtol=ABS_RTOL, atol=ABS_ATOL)

    for first, second, hint in ((2 * a, a.abs(), ABS_NO_RESIDUAL), (a, a.relu(), ABS_RELU_ONLY),
                                (a, -a.abs(), ABS_SIGN), (a + a.abs(), torch.zeros_like(a), ABS_FEATURE0)):
        if equals(first, second):
            return f"wrong output. Hint: {hint}"
    target = _abs_target()
    bad = int((~torch.isclose(stream, target, rtol=ABS_RTOL, atol=ABS_ATOL)).any(-1).nonzero()[0])
    (s0, s1), (t0, t1) = stream[bad].tolist(), target[bad].tolist()
    return (f"at x = ({a[bad].item():g}, 0) the stream x + FFN(x) is ({s0:.4g}, {s1:.4g}); it must be "
            f"({t0:g}, {t1:g}).")


register(Exercise(
    name="absolute_value_ffn", number="3.2", function="absolute_value_ffn", chapter=CHAPTER, args=(),
    make_cases=lambda g: [()], reference=absolute_value_reference,
    returns="a tuple (W_1, b_1, W_2, b_2) with W_1 (2, d_ff), b_1 (d_ff,), W_2 (d_ff, 2), b_2 (2,)",
    item_names=("W_1", "b_1", "W_2", "b_2"), exact_dtype=False, accept_lists=True, check_shapes=False,
    integers_for_floats=False,     # x @ W_1 with float x raises for an integer W_1
    compare=_abs_ok, diagnose=_diagnose_abs,
    diagnose_hints=(ABS_NO_RESIDUAL, ABS_RELU_ONLY, ABS_SIGN, ABS_TRANSPOSED, ABS_FEATURE0, ABS_NONFINITE,
                    ABS_W1_ROWS, ABS_W2_COLUMNS),
    generic_hint="write the hidden units relu(a) and relu(-a) (columns of W_1), then add both into feature 1 "
                 "(rows of W_2); feature 0 of FFN(x) must be 0, since the residual keeps a.",
))


# --------------------------------------------------------------------------- 3.3 a block from its parts


_MODULES = {"MultiHeadAttention": MultiHeadAttention, "FeedForward": FeedForward, "LayerNorm": LayerNorm}


def _quietly(cls, **config):
    """``cls(**config)`` on the CPU, leaving the global random generator as it was (the reader's
    notebook draws from it; its random initial weights are replaced anyway)."""
    with torch.random.fork_rng(devices=[]):
        return cls(**config)


def _module_builder(cls):
    def build(config: dict, state: dict):
        module = _quietly(cls, **config)
        module.load_state_dict(state, assign=True)   # the given float64 tensors become the parameters
        return module
    return build


for _kind, _cls in _MODULES.items():
    register_builder(_kind, _module_builder(_cls))


def _random_module(g: torch.Generator, kind: str, **config) -> dict:
    """A module of ``kind`` with random float64 weights, stored as plain data (a case item)."""
    shapes = {k: tuple(v.shape) for k, v in _quietly(_MODULES[kind], **config).state_dict().items()}
    state = {}
    for name, shape in shapes.items():
        if kind == "LayerNorm":                      # a gain around 1 and a bias, both non-trivial
            state[name] = _rand(g, *shape, low=0.5, high=1.5) if name == "weight" else _randn(g, *shape, scale=0.5)
        elif name.endswith("weight"):                # (out, in): a scale that keeps the outputs O(1)
            state[name] = _randn(g, *shape, scale=shape[1] ** -0.5)
        else:
            state[name] = _randn(g, *shape, scale=0.3)
    return built(kind, config=config, state=state)


NORMS = ("pre", "post", "parallel")


def _block_cases(g):
    """Every placement twice, B = 3 or 1 (so `out, _ = attn(x)` raises instead of unpacking the batch);
    pre-norm first, so a slip in one placement only shows on that placement's cases."""
    cases = []
    for (B, T, d_model, n_heads, d_ff), norm in (((3, 4, 8, 2, 12), "pre"), ((1, 5, 6, 3, 10), "post"),
                                                 ((3, 4, 8, 4, 16), "parallel"), ((1, 3, 8, 4, 20), "pre"),
                                                 ((3, 4, 6, 2, 9), "post"), ((1, 5, 6, 3, 10), "parallel")):
        cases.append((_tokens(g, B, T, d_model),
                      _random_module(g, "MultiHeadAttention", d_model=d_model, n_heads=n_heads),
                      _random_module(g, "FeedForward", d_model=d_model, d_ff=d_ff),
                      _random_module(g, "LayerNorm", d=d_model), _random_module(g, "LayerNorm", d=d_model), norm))
    return cases


def block_forward_reference(x, attn, ffn, ln_1, ln_2, norm):
    """The library's TransformerBlock with these four modules put in, for "pre" and "post"; the
    parallel block (GPT-J, GPT-NeoX), which the library does not build, from its formula."""
    if norm == "parallel":
        return x + attn(ln_1(x)) + ffn(ln_2(x))
    block = _quietly(TransformerBlock, d_model=attn.d_model, n_heads=attn.n_heads, d_ff=ffn.d_ff, norm=norm)
    block.ln_1, block.attn, block.ln_2, block.ffn = ln_1, attn, ln_2, ffn
    return block(x)   # with autograd: Exercise 3.3's gradients are compared with these


# The sequential slips: (first sublayer, second sublayer, first norm, second norm), by the parts' names.
_ORDERS = {"right": ("attn", "ffn", "ln_1", "ln_2"), "ln_1_twice": ("attn", "ffn", "ln_1", "ln_1"),
           "lns_swapped": ("attn", "ffn", "ln_2", "ln_1"), "ffn_first": ("ffn", "attn", "ln_2", "ln_1"),
           "ffn_first_ln_1": ("ffn", "attn", "ln_1", "ln_2")}


def _compute(form: str, x, attn, ffn, ln_1, ln_2):
    """The block computed as ``form``: "pre", "post", "parallel", "identity" (x returned unchanged),
    or "<placement>/<slip>"."""
    parts = {"attn": attn, "ffn": ffn, "ln_1": ln_1, "ln_2": ln_2}
    placement, _, slip = form.partition("/")
    if placement == "identity":
        return x
    if slip in ("", *_ORDERS) and placement in ("pre", "post"):
        first, second, norm_1, norm_2 = (parts[p] for p in _ORDERS[slip or "right"])
        if placement == "pre":
            h = x + first(norm_1(x))
            return h + second(norm_2(h))
        h = norm_1(x + first(x))
        return norm_2(h + second(h))
    if form == "parallel/post_sum":                      # ln_1(x + attn(x) + ffn(x))
        return ln_1(x + attn(x) + ffn(x))
    if form == "parallel/norm_sum":                      # ln_2 of the whole sum
        return ln_2(x + attn(ln_1(x)) + ffn(ln_2(x)))
    if form == "parallel/index_0":
        return x + attn(ln_1(x))[0] + ffn(ln_2(x))
    if placement == "parallel":
        norm_1, norm_2 = {"": (ln_1, ln_2), "ln_1_twice": (ln_1, ln_1), "lns_swapped": (ln_2, ln_1),
                          "no_residual": (ln_1, ln_2), "residual_twice": (ln_1, ln_2), "averaged": (ln_1, ln_2)}[slip]
        update = attn(norm_1(x)) + ffn(norm_2(x))
        return {"no_residual": update, "residual_twice": 2 * x + update,
                "averaged": x + update / 2}.get(slip, x + update)
    if form == "pre/normed_stream":                      # x = ln_1(x); x = x + attn(x); ...
        h = ln_1(x)
        h = h + attn(h)
        h = ln_2(h)
        return h + ffn(h)
    if form == "pre/normed_stream_attn":                 # h = ln_1(x); h = h + attn(h); FFN half right
        h = ln_1(x)
        h = h + attn(h)
        return h + ffn(ln_2(h))
    if form == "pre/no_residual":
        return ffn(ln_2(attn(ln_1(x))))
    if form == "post/no_residual":
        return ln_2(ffn(ln_1(attn(x))))
    if form == "post/norm_inside":                       # x + ln(attn(x)): the sublayer's output normalised
        h = x + ln_1(attn(x))
        return h + ln_2(ffn(h))
    if form == "post/ffn_reads_x":                       # h = ln_1(x + attn(x)); ln_2(h + ffn(x))
        return ln_2(ln_1(x + attn(x)) + ffn(x))
    if form == "post/no_ln_2":                           # h = ln_1(x + attn(x)); h + ffn(h)
        h = ln_1(x + attn(x))
        return h + ffn(h)
    if form == "pre/ffn_no_norm":                        # the FFN reads the stream without ln_2
        h = x + attn(ln_1(x))
        return h + ffn(h)
    if form == "pre/ffn_no_residual":                    # the second residual dropped
        return ffn(ln_2(x + attn(ln_1(x))))
    if form == "pre/final_norm":                         # an extra norm on the block's output
        h = x + attn(ln_1(x))
        return ln_2(h + ffn(ln_2(h)))
    if form == "post/normed_input":                      # ln_2(h) + ffn(ln_2(h))
        h = ln_1(x + attn(x))
        return ln_2(h) + ffn(ln_2(h))
    if form == "post/sandwich":                          # norms before AND after: ln(x + attn(ln(x)))
        h = ln_1(x + attn(ln_1(x)))
        return ln_2(h + ffn(ln_2(h)))
    if form == "pre/index_0":                            # attn(...)[0]: the tuple habit
        h = x + attn(ln_1(x))[0]
        return h + ffn(ln_2(h))
    if form == "post/index_0":
        h = ln_1(x + attn(x)[0])
        return ln_2(h + ffn(h))
    if form == "post/pre_ffn":                           # h = ln_1(x + attn(x)); h + ffn(ln_2(h))
        h = ln_1(x + attn(x))
        return h + ffn(ln_2(h))
    if form == "pre/attn_dropped":                       # h = x + attn(ln_1(x)); x + ffn(ln_2(h))
        h = x + attn(ln_1(x))
        return x + ffn(ln_2(h))
    if form == "pre/normed_stream_ffn":                  # g = ln_2(h); g + ffn(g): the FFN half's skip normed
        h = x + attn(ln_1(x))
        g = ln_2(h)
        return g + ffn(g)
    if form == "post/ffn_adds_x":                        # h = ln_1(x + attn(x)); ln_2(x + ffn(h))
        return ln_2(x + ffn(ln_1(x + attn(x))))
    if form == "post/no_ln_1":                           # h = x + attn(x); ln_2(h + ffn(h))
        h = x + attn(x)
        return ln_2(h + ffn(h))
    if form == "post/norm_inside_ffn":                   # h = ln_1(x + attn(x)); h + ln_2(ffn(h))
        h = ln_1(x + attn(x))
        return h + ln_2(ffn(h))
    raise ValueError(f"form must be a known block or slip, got {form!r}")


def _block(pre="pre", post="post", parallel="parallel"):
    """A block_forward that computes, for each value of ``norm``, the form given for it (a slip of
    that placement, or another placement: "post" under pre= is the post-norm block where pre-norm
    was asked)."""
    forms = {"pre": pre, "post": post, "parallel": parallel}
    forms = {k: v if "/" in v or v in (*NORMS, "identity") else f"{k}/{v}" for k, v in forms.items()}

    def wrong(x, attn, ffn, ln_1, ln_2, norm):
        return _compute(forms[norm], x, attn, ffn, ln_1, ln_2)
    return wrong


BLOCK_INDEX_0 = ("you indexed attention's output, attn(...)[0], as for nn.MultiheadAttention or Hugging Face "
                 "layers, which return a tuple: these modules return the output tensor itself, and [0] takes the "
                 "batch's first sequence (which then broadcasts over the batch). Use attn(ln_1(x)) as it is.")

# The slips of one placement: {placement: [(slip, hint)]}. Each is registered alone (the other
# placements right), and _diagnose_block names them when several placements are wrong at once.
BLOCK_SLIPS = {
    "pre": [
        ("post", "for norm='pre' you computed the post-norm block: the `norm` argument is not used (or the pre "
                 "branch is never taken). Test norm == 'pre'."),
        ("parallel", "for norm='pre' you computed the parallel block: in the pre-norm block the FFN reads the "
                     "stream AFTER attention, x = x + attn(ln_1(x)), then x = x + ffn(ln_2(x)) with that new x."),
        ("normed_stream", "pre-norm: you replaced the stream by its normalised version (x = ln_1(x), then "
                          "x + attn(x)). Normalise only the sublayer's input and add to the un-normalised stream: "
                          "x = x + attn(ln_1(x))."),
        ("normed_stream_attn", "pre-norm: in the attention half you replaced the stream by its normalised "
                               "version (h = ln_1(x), then h + attn(h)), so the skip carries ln_1(x), not x. "
                               "Normalise only attention's input: x = x + attn(ln_1(x))."),
        ("no_residual", "for norm='pre' the residual additions are missing: each sublayer's output is ADDED to "
                        "the stream, x = x + attn(ln_1(x)); x = x + ffn(ln_2(x))."),
        ("ln_1_twice", "for norm='pre', ln_1 was used twice: the FFN has its own layer norm, x + ffn(ln_2(x))."),
        ("lns_swapped", "for norm='pre', ln_1 and ln_2 are swapped: x + attn(ln_1(x)) first, then x + ffn(ln_2(x))."),
        ("ffn_first", "for norm='pre', the FFN came before attention: x = x + attn(ln_1(x)) first, then "
                      "x = x + ffn(ln_2(x))."),
        ("ffn_first_ln_1", "for norm='pre', the FFN came first and took ln_1: attention reads the stream first, "
                           "through ln_1; the FFN second, through ln_2."),
        ("ffn_no_norm", "for norm='pre', the FFN read the stream itself: it reads a normalised copy too, "
                        "x = x + ffn(ln_2(x)), as attention reads ln_1(x)."),
        ("ffn_no_residual", "for norm='pre', the FFN's output replaced the stream: it is ADDED, "
                            "x = x + ffn(ln_2(x)), like attention's."),
        ("index_0", "for norm='pre', " + BLOCK_INDEX_0),
        ("final_norm", "for norm='pre', your block normalised its output with ln_2: a pre-norm block returns the "
                       "raw stream, x + ffn(ln_2(x)); only the stack's final ln_f normalises the top."),
        ("attn_dropped", "for norm='pre', attention's write was lost: the FFN's output was added to the block's "
                         "input x, not to h = x + attn(ln_1(x)). Return h + ffn(ln_2(h))."),
        ("normed_stream_ffn", "pre-norm: in the FFN half you replaced the stream by its normalised version "
                              "(g = ln_2(h), then g + ffn(g)), so the skip carries ln_2(h), not h. Normalise only "
                              "the FFN's input: h + ffn(ln_2(h))."),
    ],
    "post": [
        ("pre", "for norm='post' you computed the pre-norm block: the `norm` argument is not used (or the post "
                "branch is never taken). Test norm == 'post'."),
        ("no_residual", "for norm='post' the residual additions are missing: add the sublayer's output to its "
                        "input, then normalise the sum, x = ln_1(x + attn(x)); x = ln_2(x + ffn(x))."),
        ("ln_1_twice", "for norm='post', ln_1 was used twice: the second sum is normalised by ln_2, "
                       "ln_2(x + ffn(x))."),
        ("lns_swapped", "for norm='post', ln_1 and ln_2 are swapped: ln_1(x + attn(x)) first, then "
                        "ln_2(x + ffn(x))."),
        ("ffn_first", "for norm='post', the FFN came before attention: x = ln_1(x + attn(x)) first, then "
                      "x = ln_2(x + ffn(x))."),
        ("ffn_first_ln_1", "for norm='post', the FFN came first and took ln_1: attention's sum comes first, "
                           "normalised by ln_1; the FFN's second, by ln_2."),
        ("norm_inside", "post-norm: you normalised the sublayer's output before adding it, x + ln_1(attn(x)); "
                        "post-norm normalises the SUM, ln_1(x + attn(x))."),
        ("ffn_reads_x", "for norm='post', the FFN read the block's input x instead of the first sum: "
                        "h = ln_1(x + attn(x)), then ln_2(h + ffn(h)), the FFN reading h."),
        ("no_ln_2", "for norm='post', ln_2 is missing at the end: post-norm normalises the second sum too, "
                    "ln_2(h + ffn(h)) with h = ln_1(x + attn(x))."),
        ("normed_input", "for norm='post', ln_2 went on the FFN's input, ln_2(h) + ffn(ln_2(h)): post-norm adds "
                         "first and normalises the sum, ln_2(h + ffn(h))."),
        ("sandwich", "for norm='post', you normalised each sublayer's input as well as the sum: post-norm "
                     "sublayers read the raw stream, ln_1(x + attn(x)), not attn(ln_1(x))."),
        ("index_0", "for norm='post', " + BLOCK_INDEX_0),
        ("pre_ffn", "for norm='post', the first half is post-norm but the FFN's half is pre-norm, h + ffn(ln_2(h)): "
                    "post-norm adds first and normalises the sum, ln_2(h + ffn(h))."),
        ("norm_inside_ffn", "for norm='post', the FFN's output was normalised before adding it, h + ln_2(ffn(h)): "
                            "post-norm normalises the SUM, ln_2(h + ffn(h))."),
        ("no_ln_1", "for norm='post', ln_1 is missing: the first sum is normalised too, h = ln_1(x + attn(x)), "
                    "before the FFN reads it and before it is added to."),
        ("ffn_adds_x", "for norm='post', the second sum added the FFN's output to the block's input x: it adds it "
                       "to h = ln_1(x + attn(x)), the input the FFN read, ln_2(h + ffn(h))."),
    ],
    "parallel": [
        ("pre", "for norm='parallel' you computed the sequential pre-norm block: in the parallel block (GPT-NeoX's) "
                "the FFN reads the block's input x, not x after attention: "
                "x + attn(ln_1(x)) + ffn(ln_2(x))."),
        ("post", "for norm='parallel' you computed the post-norm block: an `else` treats every norm other than "
                 "'pre' as 'post'. Give 'parallel' its own branch (and raise a ValueError for an unknown norm)."),
        ("identity", "for norm='parallel' your function returned x unchanged: no branch handles "
                     "norm == 'parallel'. Add one: x + attn(ln_1(x)) + ffn(ln_2(x))."),
        ("ln_1_twice", "for norm='parallel', ln_1 was used for both sublayers. That is GPT-J's parallel block, "
                       "whose two sublayers share one norm; the exercise asks for GPT-NeoX's, with a norm each: "
                       "x + attn(ln_1(x)) + ffn(ln_2(x))."),
        ("lns_swapped", "for norm='parallel', ln_1 and ln_2 are swapped: attention reads ln_1(x), the FFN "
                        "ln_2(x)."),
        ("residual_twice", "for norm='parallel', x was added twice, (x + attn(...)) + (x + ffn(...)) = 2x + ...: "
                           "the block adds its input once, x + attn(ln_1(x)) + ffn(ln_2(x))."),
        ("no_residual", "for norm='parallel' the residual is missing: add the block's input x to both sublayers' "
                        "outputs, x + attn(ln_1(x)) + ffn(ln_2(x))."),
        ("averaged", "for norm='parallel', the two writes were averaged: both are ADDED in full, "
                     "x + attn(ln_1(x)) + ffn(ln_2(x)), as in every block."),
        ("index_0", "for norm='parallel', " + BLOCK_INDEX_0),
        ("post_sum", "for norm='parallel' you normalised the sum, ln_1(x + attn(x) + ffn(x)), as a post-norm block "
                 "would: the parallel block normalises each sublayer's input and adds to the raw x, "
                 "x + attn(ln_1(x)) + ffn(ln_2(x))."),
        ("norm_sum", "for norm='parallel', your block normalised its output with ln_2: the parallel block "
                     "returns the raw sum, x + attn(ln_1(x)) + ffn(ln_2(x)), its norms on the sublayers' inputs."),
    ],
}

BLOCK_WRONG = {
    "pre": "pre-norm normalises each sublayer's INPUT and adds its output to the un-normalised stream: "
           "x = x + attn(ln_1(x)); x = x + ffn(ln_2(x)).",
    "post": "post-norm adds first and normalises the sum: x = ln_1(x + attn(x)); x = ln_2(x + ffn(x)).",
    "parallel": "the parallel block feeds the block's input x to both sublayers, each through its own norm, "
                "and adds both outputs to x: x + attn(ln_1(x)) + ffn(ln_2(x)).",
}


def _names(norms) -> str:
    return " and ".join(f"norm='{n}'" for n in norms)


BLOCK_FLOAT32 = ("part of that branch ran in float32 (a .float(), or a tensor made without dtype=x.dtype): the modules "
                 "are float64 here, and float32's ~1e-7 rounding is far outside the tolerance. Keep x's dtype.")


def _diagnose_block(cases, outputs, refs):
    """Which placements are wrong (the others right), and for each, the slip it matches, if any."""
    def agree(outs, refs_):
        return all(o.shape == r.shape and bool(torch.allclose(o, r, rtol=1e-9, atol=1e-12))
                   for o, r in zip(outs, refs_))

    at = {n: [i for i, c in enumerate(cases) if c[-1] == n] for n in NORMS}
    wrong = [n for n in NORMS if not agree([outputs[i] for i in at[n]], [refs[i] for i in at[n]])]
    if wrong and all(bool(torch.allclose(outputs[i], refs[i], rtol=1e-5, atol=1e-5)) for n in wrong for i in at[n]):
        return f"values right to float32's precision (~1e-7) only for {_names(wrong)}. Hint: {BLOCK_FLOAT32}"
    hints, named = [], 0
    for n in wrong:
        mine, theirs = [cases[i] for i in at[n]], [outputs[i] for i in at[n]]
        hint = BLOCK_WRONG[n]
        for slip, slip_hint in BLOCK_SLIPS[n]:
            run = run_cases(_block(**{n: slip}), mine)
            if run.error is None and agree(theirs, run.outputs):
                hint, named = slip_hint, named + 1
                break
        hints.append(hint)
    if not wrong or (len(wrong) == len(NORMS) and not named):
        return None
    right = [n for n in NORMS if n not in wrong]
    also = f" ({_names(right)} {'is' if len(right) == 1 else 'are'} right)" if right else ""
    text = " ".join(h if i == 0 else h[0].upper() + h[1:] for i, h in enumerate(hints))
    return f"wrong output for {_names(wrong)}{also}. Hint: {text}"


register(Exercise(
    name="block_forward", number="3.3", function="block_forward", chapter=CHAPTER, grad_args=(0,),
    library_answers=("tinyformer.blocks.TransformerBlock", "torch.nn.TransformerEncoderLayer",
                     "torch.nn.TransformerDecoderLayer"),
    args=("x", "attn", "ffn", "ln_1", "ln_2", "norm"), make_cases=_block_cases, reference=block_forward_reference,
    returns="the block's output of shape (B, T, d_model)",
    mistakes=[(_block(**{n: slip}), hint) for n, slips in BLOCK_SLIPS.items() for slip, hint in slips] + [
        (_block(pre="post", post="pre"), "the two placements are swapped: 'pre' normalises each sublayer's input, "
                                         "x + attn(ln_1(x)); 'post' normalises the sum, ln_1(x + attn(x))."),
        (_block(pre="parallel", parallel="pre"),
         "'pre' and 'parallel' are swapped: pre-norm is sequential, the FFN reading x after attention; the "
         "parallel block feeds the same x to both sublayers, x + attn(ln_1(x)) + ffn(ln_2(x))."),
        (_block(post="pre", parallel="pre"), "every case got the pre-norm block: the `norm` argument is ignored. "
                                             "Give 'pre', 'post' and 'parallel' a branch each."),
        (_block(pre="post", parallel="post"), "every case got the post-norm block: the `norm` argument is ignored. "
                                              "Give 'pre', 'post' and 'parallel' a branch each."),
        (_block(pre="parallel", post="parallel"), "every case got the parallel block: the `norm` argument is "
                                                  "ignored. Give 'pre', 'post' and 'parallel' a branch each."),
        (_block(pre="no_residual", post="no_residual", parallel="no_residual"),
         "there are no residual additions: each sublayer's output is ADDED to the stream, x + attn(...), "
         "x + ffn(...)."),
        (_block(pre="ln_1_twice", post="ln_1_twice", parallel="ln_1_twice"),
         "ln_1 was used twice: the second sublayer, the FFN, has its own layer norm, ln_2."),
        (_block(pre="lns_swapped", post="lns_swapped", parallel="lns_swapped"),
         "ln_1 and ln_2 are swapped: ln_1 goes with attention, ln_2 with the feed-forward network."),
        (_block(pre="ffn_first", post="ffn_first"), "the feed-forward network came before attention: attention "
                                                    "(with ln_1) comes first, then the FFN (with ln_2)."),
        (_block(pre="ffn_first_ln_1", post="ffn_first_ln_1", parallel="lns_swapped"),
         "the feed-forward network came before attention (ln_1 went to the FFN): attention reads the stream "
         "first, with ln_1; the FFN second, with ln_2."),
        (_block(pre="parallel", post="ffn_reads_x"), "the FFN read the block's input x, not the stream after "
                                                     "attention: compute x = x + attn(...) first (pre) or "
                                                     "x = ln_1(x + attn(x)) (post), then let the FFN read that "
                                                     "new x."),
    ],
    error_hints=[(ValueError, r"values to unpack",
                  "attn(x) returns one tensor of shape (B, T, d_model), not a tuple (torch.nn.MultiheadAttention "
                  "returns (output, weights); this attention does not)."),
                 (TypeError, r"mask must be a boolean tensor",
                  "attn takes the stream alone, attn(t): its queries, keys and values all come from t. The "
                  "attn(q, k, v) form is torch.nn.MultiheadAttention's; here the second argument is a mask."),
                 (KeyError, r"^'parallel'$",
                  "norm='parallel' is not among the keys you look up: give the parallel block its own entry, "
                  "x + attn(ln_1(x)) + ffn(ln_2(x))."),
                 (ValueError, r"parallel",
                  "your function refused norm='parallel': it is the third placement (GPT-NeoX's), "
                  "x + attn(ln_1(x)) + ffn(ln_2(x)); raise only for other strings.")],
    diagnose=_diagnose_block, diagnose_hints=(*BLOCK_WRONG.values(), BLOCK_FLOAT32),
    generic_hint="pre: x = x + attn(ln_1(x)); x = x + ffn(ln_2(x)). post: x = ln_1(x + attn(x)); "
                 "x = ln_2(x + ffn(x)). parallel: x + attn(ln_1(x)) + ffn(ln_2(x)). Call the modules as "
                 "functions, attn(t), and return the final x.",
))


# --------------------------------------------------------------------------- 3.4 the parameters of a block


def block_params_reference(d_model: int, n_heads: int, d_ff: int) -> int:
    """The parameter count of the library's TransformerBlock(d_model, n_heads, d_ff), built on the
    meta device (shapes only, no memory)."""
    with torch.device("meta"):
        block = TransformerBlock(d_model, n_heads, d_ff)
    return sum(p.numel() for p in block.parameters())


def _params_cases(g):
    """Fixed sizes first (so the first failing case, and the hint, never depend on the seed):
    small ones with d_ff != 4·d_model, then GPT-2 small; then a random size."""
    cases = [(8, 2, 20), (12, 3, 40), (768, 12, 3072)]
    d_model = 16 * _randint(g, 2, 64)
    n_heads = (2, 4, 8, 16)[_randint(g, 0, 3)]
    d_ff = _randint(g, d_model + 1, 6 * d_model)
    d_ff += d_ff == 4 * d_model
    return cases + [(d_model, n_heads, d_ff)]


def _count(d, H, f, *, per_head=False, n_proj=4, proj_bias=True, ffn_mats=2, ffn_bias=True, norms=2, norm_size=2):
    attention = n_proj * (H if per_head else 1) * d * d + (n_proj * d if proj_bias else 0)
    ffn = ffn_mats * d * f + ((f + d) if ffn_bias else 0)
    return attention + ffn + norms * norm_size * d


BP_FLOAT = ("the count is right but it is a float: return an int (a count is a whole number; use // instead of /, "
            "or int(...)).")


BP_CONSTANT = ("your count is off by the same few parameters at every size: a whole tensor of the block would "
               "change with d_model or d_ff, so this is an off-by-one slip (a loop over range(n + 1), a count "
               "started at 1, a bias counted as one number). Add the sizes of the tensors, nothing else.")


def _off_by(cases, outputs, refs) -> str | None:
    """A slip that is the same multiple of d_model, or of d_ff, at every size, or a constant."""
    if not all(type(o) is int for o in outputs):
        return None
    diffs = [o - r for o, r in zip(outputs, refs)]
    if len(set(diffs)) == 1 and 0 < abs(diffs[0]) <= 8:
        return f"wrong output. Hint: {BP_CONSTANT}"
    for size, name in ((0, "d_model"), (2, "d_ff")):
        if any(diff % case[size] for case, diff in zip(cases, diffs)):
            continue
        ks = {diff // case[size] for case, diff in zip(cases, diffs)}
        if len(ks) == 1 and 0 < abs(k := ks.pop()) <= 16:
            many, short = abs(int(k)), "over" if k > 0 else "short"
            return (f"you are {many}·{name} {short} at every size ({'one' if many == 1 else many} width-{name} "
                    f"vector{'s' if many > 1 else ''} too {'many' if k > 0 else 'few'}). Hint: count the biases "
                    f"and the layer norms' gains and biases again: four attention biases and b_2 of d_model, b_1 "
                    f"of d_ff, and a gain and a bias of d_model in each of the two layer norms.")
    return None


def _diagnose_params(cases, outputs, refs):
    if all(type(o) is float and o == r for o, r in zip(outputs, refs)):
        return f"wrong output. Hint: {BP_FLOAT}"
    off = _off_by(cases, outputs, refs)
    if off:
        return off
    for (d, H, f), out, ref in zip(cases, outputs, refs):
        if out != ref:
            return (f"for d_model = {d}, n_heads = {H}, d_ff = {f} you counted {out:,}; the block has {ref:,}. "
                    f"Hint: list every parameter tensor with its shape: four (d_model, d_model) projections and "
                    f"their biases, W_1, b_1, W_2, b_2, and a gain and a bias in each of the two layer norms.")
    return None


register(Exercise(
    name="block_params", number="3.4", function="block_params", chapter=CHAPTER, args=("d_model", "n_heads", "d_ff"),
    library_answers=("tinyformer.blocks.block_param_count", "tinyformer.blocks.TransformerBlock",
                     "torch.nn.TransformerEncoderLayer",
                     # building the parts and counting their parameters is building the module
                     "tinyformer.attention.MultiHeadAttention", "tinyformer.blocks.FeedForward",
                     "tinyformer.blocks.LayerNorm", "torch.nn.MultiheadAttention", "torch.nn.Linear",
                     "torch.nn.LayerNorm", "torch.nn.Module.parameters", "torch.nn.Conv1d", "torch.nn.GroupNorm",
                     "tinyformer.model.matmul_params", "tinyformer.scaling.kaplan_params"),
    make_cases=_params_cases, reference=block_params_reference, returns="the parameter count, an int",
    rtol=0.0, atol=0.0, compare=lambda case, out, ref: type(out) is int and out == ref,
    mistakes=[
        (lambda d, H, f: _count(d, H, f, proj_bias=False, ffn_bias=False),
         "the biases are missing: each of the four projections has a bias of d_model numbers, the FFN has "
         "b_1 (d_ff) and b_2 (d_model)."),
        (lambda d, H, f: _count(d, H, f, ffn_bias=False),
         "the feed-forward network's biases are missing: b_1 has d_ff numbers and b_2 has d_model."),
        (lambda d, H, f: _count(d, H, f, norms=3),
         "you counted three layer norms: a block has two, ln_1 and ln_2. The final ln_f belongs to the stack "
         "(TransformerStack), once after the last block, not to each block."),
        (lambda d, H, f: _count(d, H, f, norms=0),
         "4·d_model parameters are missing: either the two layer norms (a gain and a bias of d_model numbers "
         "each) or the biases of the four attention projections (d_model each), which TransformerBlock has by "
         "default (bias=True). Both come to 4·d_model: which did you leave out?"),
        (lambda d, H, f: _count(d, H, f, norm_size=1),
         "you are 2·d_model short: either the layer norms (two, each with a gain AND a bias of d_model numbers) "
         "or two of the attention biases (four of d_model; a fused q/k/v projection has one of 3·d_model, and "
         "W_O its own)."),
        (lambda d, H, f: _count(d, H, f, proj_bias=False, ffn_bias=False, norms=0),
         "you counted the weight matrices only: add the biases (4·d_model + d_ff + d_model) and the two layer "
         "norms (4·d_model)."),
        (lambda d, H, f: _count(d, H, f, per_head=True),
         "you counted each projection once per head: the heads SPLIT the d_model columns of W_Q, W_K, W_V (n_heads "
         "blocks of d_head = d_model / n_heads), so each projection has d_model² weights whatever n_heads is."),
        (lambda d, H, f: _count(d, H, 4 * d), "you assumed d_ff = 4·d_model: use the d_ff you are given."),
        (lambda d, H, f: 12 * d * d,
         "12·d_model² is the usual approximation: it assumes d_ff = 4·d_model and leaves out the biases and the "
         "layer norms. The exercise asks for the exact count, from the shapes."),
        (lambda d, H, f: _count(d, H, f, ffn_mats=1), "the feed-forward network has two weight matrices, W_1 "
                                                      "(d_model, d_ff) and W_2 (d_ff, d_model): you counted one."),
        (lambda d, H, f: _count(d, H, f, n_proj=3), "attention has four projections: W_O (and its bias) is "
                                                    "missing."),
        (lambda d, H, f: _count(d, H, f) - d,
         "you are d_model short: one bias of width d_model is missing. Attention's W_O has one (as W_Q, W_K, W_V "
         "do), and so has the FFN's W_2 (b_2): count 4·d_model + d_ff + d_model biases in all."),
        (lambda d, H, f: _count(d, H, f) - 3 * d,
         "you are 3·d_model short: attention has a bias per projection, four of d_model numbers each, not one "
         "for the layer."),
        (lambda d, H, f: _count(d, H, f) - f,
         "b_1 is missing: the FFN's first layer has a bias of d_ff numbers, one per hidden unit."),
        (lambda d, H, f: _count(d, H, f) - d + f,
         "b_2 has d_model numbers, not d_ff: it is added to the FFN's OUTPUT, of width d_model."),
        (lambda d, H, f: _count(d, H, f) - d * d,
         "you are d_model² short: one of the four (d_model, d_model) projection matrices is missing (W_O, "
         "the output projection, is the one usually forgotten)."),
        (lambda d, H, f: _count(d, H, f) - f + 4 * d,
         "b_1 has d_ff numbers, one per hidden unit: you counted 4·d_model, which is d_ff only when "
         "d_ff = 4·d_model."),
        (lambda d, H, f: _count(d, H, f) - f + d,
         "b_1 has d_ff numbers, not d_model: it is added to the FFN's hidden layer, one per hidden unit."),
        (lambda d, H, f: _count(d, H, f) - 3 * d * d + 3 * d * (d // H),
         "you counted W_Q, W_K and W_V as (d_model, d_head): each holds all n_heads heads' columns, (d_model, "
         "d_model), like W_O."),
        (lambda d, H, f: _count(d, H, f) - 4 * d * d + 4 * d * (d // H),
         "you counted each projection as (d_model, d_head): W_Q, W_K, W_V and W_O are (d_model, d_model), "
         "holding all n_heads heads' columns."),
        (lambda d, H, f: _count(d, H, f) - 4 * d + 4 * H * d,
         "you counted the attention biases once per head (n_heads · d_model each): a projection's bias has "
         "d_model numbers, one per output column, shared out among the heads."),
        (lambda d, H, f: _count(d, H, f) - d * d + d * (d // H),
         "you counted W_O as (d_model, d_head): it maps the concatenated heads, d_model numbers, back to "
         "d_model, so it is (d_model, d_model) like W_Q, W_K and W_V."),
        (lambda d, H, f: _count(d, H, f, proj_bias=False, ffn_bias=False, norm_size=0) + 4 + 2 + 4,
         "you counted each bias (and each layer norm's gain and bias) as one number: each is a vector, d_model "
         "numbers for the projections' biases, b_2, the gains and the biases, d_ff for b_1."),
    ],
    diagnose=_diagnose_params, diagnose_hints=(BP_FLOAT, BP_CONSTANT),
    generic_hint="list every parameter tensor of the block with its shape and add their sizes.",
))


# --------------------------------------------------------------------------- drill: RMS norm


def _rms_norm_cases(g):
    """(x, gain, eps): the layer-norm inputs without the bias, tiny-variance case included, and a
    case of tiny tokens whose root mean square (~1e-4) is below eps (so eps as a floor shows)."""
    cases = [(x, gain, eps) for x, gain, _, eps in _norm_cases(g, (1e-6, 1e-3, 1e-6, 0.05))]
    return cases + [(_randn(g, 2, 3, 4, scale=1e-4), _rand(g, 4, low=0.5, high=2.0), 1e-3)]


def _rms(*, centre=False, eps_inside=True, eps_fixed=None, gain=True, total=False, root=True):
    """RMS norm with the mistakes named by the keywords; the defaults are right."""
    def wrong(x, g, eps=1e-6):
        e = eps_fixed if eps_fixed is not None else eps
        z = x - x.mean(dim=-1, keepdim=True) if centre else x
        ms = z.pow(2).sum(dim=-1, keepdim=True) if total else z.pow(2).mean(dim=-1, keepdim=True)
        scale = (torch.sqrt(ms + e) if eps_inside else torch.sqrt(ms) + e) if root else ms + e
        return z / scale * (g if gain else 1.0)
    return wrong


RMS_ABS = ("you divided by the mean of |x|; RMS norm divides by the ROOT of the MEAN of the SQUARES, "
           "sqrt(mean(x²) + eps).")


RMS_FLOAT32 = ("part of your computation ran in float32 (LLaMA's x.float() ... .type_as(x), say): the statistics "
               "carry float32's ~1e-7 rounding into the float64 result. That up-cast protects float16 inputs; here "
               "keep the inputs' dtype throughout.")


RMS_STD = ("you divided by the standard deviation, the spread around the mean: RMS norm divides by the root of "
           "the mean square of x itself, sqrt(mean(x²) + eps), with no mean removed anywhere.")


def _by_std(x, g, eps, unbiased, where):
    var = x.var(dim=-1, keepdim=True, unbiased=unbiased)
    return x / {"inside": torch.sqrt(var + eps), "outside": torch.sqrt(var) + eps, "none": torch.sqrt(var)}[where] * g


def _diagnose_rms(cases, outputs, refs):
    fixed = _fixed_eps(cases, outputs, lambda x, gain, eps: F.rms_norm(x, (x.shape[-1],), gain, eps))
    if fixed:
        return fixed
    for unbiased in (False, True):
        for where in ("inside", "outside", "none"):
            if all(o.shape == x.shape and torch.allclose(o, _by_std(x, g, eps, unbiased, where), rtol=1e-9,
                                                         atol=1e-12)
                   for (x, g, eps), o in zip(cases, outputs)):
                return f"wrong output. Hint: {RMS_STD}"
    if not _float32_round_trip(outputs, refs) and all(
            bool(torch.allclose(o, r, rtol=1e-5, atol=1e-5)) for o, r in zip(outputs, refs)):
        return f"values right to float32's precision (~1e-7) only. Hint: {RMS_FLOAT32}"
    if not _float32_round_trip(outputs, refs) and _half_like(outputs, refs):
        return f"wrong values. Hint: {LN_HALF}"

    def by_abs(x, g, eps, shift):
        return x / (x.abs().mean(dim=-1, keepdim=True) + shift) * g

    for shift in ("eps", "none"):
        if all(torch.allclose(out, by_abs(x, g, eps, eps if shift == "eps" else 0.0), rtol=1e-9, atol=1e-12)
               for (x, g, eps), out in zip(cases, outputs)):
            return f"wrong output. Hint: {RMS_ABS}"
    return None


register(Exercise(
    name="rms_norm", number="", function="rms_norm", chapter=CHAPTER, args=("x", "gain", "eps"), drill=True,
    grad_args=(0, 1),
    library_answers=("tinyformer.blocks.RMSNorm", "torch.nn.RMSNorm", *NORM_KERNELS),
    make_cases=_rms_norm_cases,
    reference=lambda x, gain, eps=1e-6: F.rms_norm(x, (x.shape[-1],), gain, eps),
    returns="the normalised tensor, shaped like x",
    mistakes=[
        (_rms(centre=True), "you subtracted the mean first: that is layer norm (without its bias). RMS norm "
                            "does not centre: x / sqrt(mean(x²) + eps) * gain."),
        (_rms(eps_inside=False), "eps goes inside the square root: x / sqrt(mean(x²) + eps), not "
                                 "x / (sqrt(mean(x²)) + eps)."),
        (_rms(gain=False), "the gain is missing: multiply the normalised x by gain."),
        (_rms(eps_fixed=1e-6), "the eps argument is ignored: your output is the one for eps = 1e-6 whatever eps "
                               "is passed. Use the eps you are given."),
        (_rms(total=True), "you divided by the vector's length, sqrt(sum(x²)); RMS norm takes the MEAN of the "
                           "squares, so your output is √d times too small: divide by sqrt(mean(x²) + eps)."),
        (_rms(root=False), "you divided by the mean square; divide by its square root, sqrt(mean(x²) + eps)."),
        (lambda x, g, eps=1e-6: x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True)) * g,
         "eps is missing: divide by sqrt(mean(x²) + eps). Without it a token near zero is divided by (almost) "
         "zero."),
        (lambda x, g, eps=1e-6: x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True).clamp_min(eps)) * g,
         "eps is a floor in yours (clamp_min or max): RMS norm ADDS it, sqrt(mean(x²) + eps), which changes "
         "every token a little, not only the tiny ones."),
        (lambda x, g, eps=1e-6: x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True)).clamp_min(eps) * g,
         "eps is a floor in yours (clamp_min or max) on the root: RMS norm ADDS it inside the root, "
         "sqrt(mean(x²) + eps), which changes every token a little, not only the tiny ones."),
        (lambda x, g, eps=1e-6: x / torch.sqrt(x.pow(2).mean(dim=0, keepdim=True) + eps) * g,
         "you took the mean square over the first axis (dim=0), across the batch: each token has its own, over "
         "its d features, the last axis (dim=-1)."),
        (lambda x, g, eps=1e-6: x / torch.sqrt(x.pow(2).mean(dim=-2, keepdim=True) + eps) * g,
         "you took the mean square over the sequence axis (dim=-2), mixing positions: each token has its own, "
         "over its d features (dim=-1)."),
        (lambda x, g, eps=1e-6: x / torch.sqrt(x.mean(dim=-1, keepdim=True) ** 2 + eps) * g,
         "you squared the mean, (mean x)², instead of averaging the squares, mean(x²): square first, "
         "x.pow(2).mean(dim=-1, keepdim=True)."),
        (lambda x, g, eps=1e-6: x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps ** 2) * g,
         "you added eps² inside the root: RMS norm divides by sqrt(mean(x²) + eps), eps itself."),
        (lambda x, g, eps=1e-6: x / torch.sqrt(x.pow(2).mean() + eps) * g,
         "you took one mean square of the whole tensor: each token has its own, x.pow(2).mean(dim=-1, "
         "keepdim=True)."),
        (lambda x, g, eps=1e-6: x / torch.sqrt(x.pow(2).sum(dim=-1, keepdim=True) / (x.shape[-1] - 1) + eps) * g,
         "you divided the sum of squares by d - 1: the mean square divides by d, x.pow(2).mean(dim=-1)."),
        (lambda x, g, eps=1e-6: x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True)) * g + eps,
         "eps was added to the output (x / sqrt(...) * gain + eps, a misplaced bracket): it goes inside the "
         "root, x / sqrt(mean(x²) + eps) * gain."),
        (_rms(total=True, eps_inside=False),
         "you divided by the vector's length plus eps, ||x|| + eps: RMS norm takes the MEAN of the squares (the "
         "length is √d times larger) with eps inside the root: x / sqrt(mean(x²) + eps)."),
        (_rms(eps_fixed=1e-5), "the eps argument is ignored: your output is the one for eps = 1e-5 whatever eps "
                               "is passed. Use the eps you are given."),
        (lambda x, g, eps=1e-6: x / torch.sqrt(x.pow(2).mean(dim=1, keepdim=True) + eps) * g,
         "you named the axis by its number, dim=1: for a (B, T, d) input that is the sequence axis (it only works "
         "for 2-D inputs). Use dim=-1, the last axis, whatever the rank."),
        (lambda x, g, eps=1e-6: _rms()(x * g, torch.ones_like(g), eps),
         "the gain was applied before normalising, so the normalisation undid part of it: normalise x first, "
         "then multiply by gain."),
        (lambda x, g, eps=1e-6: x * (torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True)) + eps) * g,
         "eps was added after rsqrt, x * (rsqrt(mean(x²)) + eps): it goes inside, x * rsqrt(mean(x²) + eps)."),
        (lambda x, g, eps=1e-6: x / torch.sqrt((x.pow(2).sum(dim=-1, keepdim=True) + eps) / x.shape[-1]) * g,
         "you added eps to the sum of squares before dividing by d, which adds only eps / d: add it to the mean "
         "square, sqrt(mean(x²) + eps)."),
        (lambda x, g, eps=1e-6: F.normalize(x, dim=-1, eps=eps) * x.shape[-1] ** 0.5 * g,
         "F.normalize(x) * √d is RMS norm with eps as a floor on the length, max(||x||, eps): RMS norm ADDS eps "
         "to the mean square, x / sqrt(mean(x²) + eps) * gain."),
        (lambda x, g, eps=1e-6: x / x.norm(dim=-1, keepdim=True) * g,
         "you divided by the vector's length (F.normalize does): RMS norm divides by the root of the MEAN square, "
         "so yours is √d times too small, and eps is missing: x / sqrt(mean(x²) + eps) * gain."),
        (lambda x, g, eps=1e-6: _rms()(x, g, eps) * (1 + g) / g,
         "you multiplied by (1 + gain), Gemma's convention, where the stored weight starts at 0: here the gain "
         "is the weight itself, x / sqrt(mean(x²) + eps) * gain."),
    ],
    error_hints=[(RuntimeError, r"must match the size of tensor b",
                  "the mean of the squares over the last axis dropped that axis, so it no longer lines up with "
                  "x: pass keepdim=True (x.pow(2).mean(dim=-1, keepdim=True))."),
                 (IndexError, r"Dimension out of range",
                  "you named an axis by its number (dim=2, say), which exists only for 3-D inputs; x may have "
                  "any number of leading axes: use dim=-1, the last axis."),
                 (IndexError, r"tuple index out of range",
                  "you read a size by its axis number (x.shape[2], say), which exists only for 3-D inputs; x may "
                  "have any number of leading axes: d = x.shape[-1]."),
                 (ValueError, r"only one element tensors can be converted",
                  "math.sqrt (or float(...)) takes a single number, and your statistics are a tensor, one per "
                  "token: use torch.sqrt (or torch.rsqrt), which works element by element.")],
    diagnose=_diagnose_rms, diagnose_hints=(RMS_ABS, RMS_FLOAT32, RMS_STD, LN_HALF),
    generic_hint="x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * gain; compare with "
                 "torch.nn.functional.rms_norm(x, (d,), gain, eps) on a small input.",
))
