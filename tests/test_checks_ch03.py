"""Chapter 3's checks: every solution passes, every stub is 'not implemented yet', every registered
mistake is caught by its own hint whatever the seed, and wrong answers written here, the way a
learner would write them, fail with the hint that names their slip. These generic tests are written
once, in tests/exercise_suite.py; the ``globals().update(SUITE...)`` lines below take in (and name)
those this chapter runs.

The solutions and wrong answers below are written independently of ``tinyformer.course.ch03``. The
references are checked against torch.nn.LayerNorm / RMSNorm, a block written from torch primitives
(F.scaled_dot_product_attention), torch.nn.TransformerEncoderLayer's parameter count, and the
library's FeedForward. The chapter notebook (book/03-transformer-block.ipynb) is optional here:
the tests that read it are skipped while it does not exist.
"""

from __future__ import annotations

import math
import textwrap

import exercise_suite
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from exercise_suite import SEEDS, verdict_for

from tinyformer import blocks, checks
from tinyformer.attention import MultiHeadAttention
from tinyformer.course import ch03, engine

from conftest import BOOK, define

CHAPTER = ["layer_norm", "absolute_value_ffn", "block_forward", "block_params"]
DRILLS = ["rms_norm"]
ALL = CHAPTER + DRILLS
NOTEBOOK = BOOK / "03-transformer-block.ipynb"

# --------------------------------------------------------------------------- solutions (exercise cells)

SOLUTIONS = {
    "layer_norm": '''\
import torch


def layer_norm(x, gain, bias, eps=1e-5):
    """Layer norm over the last axis of x (..., d); gain and bias: (d,)."""
    # BEGIN SOLUTION
    mean = x.mean(dim=-1, keepdim=True)                   # (..., 1)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)    # (..., 1), biased
    x_hat = (x - mean) / torch.sqrt(var + eps)            # (..., d)
    return x_hat * gain + bias
    # END SOLUTION
''',
    "absolute_value_ffn": '''\
import torch


def absolute_value_ffn():
    """W_1 (2, d_ff), b_1 (d_ff,), W_2 (d_ff, 2), b_2 (2,) such that
    x + FFN(x) = (a, |a|) for every x = (a, 0)."""
    # BEGIN SOLUTION
    W_1 = torch.tensor([[1.0, -1.0],      # hidden units: relu(a), relu(-a)
                        [0.0, 0.0]])
    b_1 = torch.zeros(2)
    W_2 = torch.tensor([[0.0, 1.0],       # both added into feature 1
                        [0.0, 1.0]])
    b_2 = torch.zeros(2)
    return W_1, b_1, W_2, b_2
    # END SOLUTION
''',
    "block_forward": '''\
def block_forward(x, attn, ffn, ln_1, ln_2, norm):
    """One transformer block from its parts; norm is "pre", "post" or
    "parallel"."""
    # BEGIN SOLUTION
    if norm == "pre":
        x = x + attn(ln_1(x))             # (B, T, d_model)
        x = x + ffn(ln_2(x))
    elif norm == "post":
        x = ln_1(x + attn(x))
        x = ln_2(x + ffn(x))
    elif norm == "parallel":              # both sublayers read the same x
        x = x + attn(ln_1(x)) + ffn(ln_2(x))
    else:
        raise ValueError("norm must be 'pre', 'post' or 'parallel', "
                         f"got {norm!r}")
    return x
    # END SOLUTION
''',
    "block_params": '''\
def block_params(d_model, n_heads, d_ff):
    """The parameters of TransformerBlock(d_model, n_heads, d_ff)."""
    # BEGIN SOLUTION
    attention = 4 * (d_model * d_model + d_model)   # W_Q, W_K, W_V, W_O, biases
    ffn = d_model * d_ff + d_ff + d_ff * d_model + d_model   # W_1, b_1, W_2, b_2
    norms = 2 * (d_model + d_model)                 # ln_1, ln_2: gain, bias
    return attention + ffn + norms
    # END SOLUTION
''',
    "rms_norm": '''\
import torch


def rms_norm(x, gain, eps=1e-6):
    """RMS norm over the last axis of x (..., d); gain: (d,)."""
    # BEGIN SOLUTION
    rms = torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)   # (..., 1)
    return x / rms * gain
    # END SOLUTION
''',
}

SUITE = exercise_suite.Chapter(CHAPTER, DRILLS, SOLUTIONS, NOTEBOOK)
solution = SUITE.solution


# --------------------------------------------------------------------------- wrong answers, as learners write them


def learner_ln(stats_dim=-1, var="biased", eps_at="inside", eps_value=None, centre=True, affine="right"):
    """A learner's layer norm with the slip chosen by the keywords."""
    def layer_norm(x, gain, bias, eps=1e-5):
        e = eps if eps_value is None else eps_value
        kw = {} if stats_dim is None else {"dim": stats_dim, "keepdim": True}
        mean = x.mean(**kw)
        if var == "biased":
            v = ((x - mean) ** 2).mean(**kw)
        elif var == "unbiased":
            v = x.var(**kw)
        else:                                              # an unbiased torch.std, squared back
            v = x.std(**kw) ** 2
        top = x - mean if centre else x
        bottom = {"inside": torch.sqrt(v + e), "outside": torch.sqrt(v) + e, "none": torch.sqrt(v),
                  "variance": v + e}[eps_at]
        x_hat = top / bottom
        return {"right": gain * x_hat + bias, "none": x_hat, "no_gain": x_hat + bias, "no_bias": gain * x_hat,
                "bias_first": gain * (x_hat + bias)}[affine]
    return layer_norm


def ln_annotated(x, gain, bias, eps=1e-5):
    """The Annotated Transformer's formula: an unbiased std and eps outside the root."""
    mean = x.mean(-1, keepdim=True)
    std = x.std(-1, keepdim=True)
    return gain * (x - mean) / (std + eps) + bias


def ln_rms(x, gain, bias, eps=1e-5):
    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps) * gain + bias


def ln_no_keepdim(x, gain, bias, eps=1e-5):
    mean = x.mean(-1)
    return (x - mean) / torch.sqrt(((x - mean) ** 2).mean(-1) + eps) * gain + bias


def ln_var_no_keepdim(x, gain, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1)                          # keepdim forgotten here only
    return (x - mean) / torch.sqrt(var + eps) * gain + bias


def ln_f_normalize(x, gain, bias, eps=1e-5):
    d = x.shape[-1]
    return F.normalize(x - x.mean(-1, keepdim=True), dim=-1, eps=eps) * math.sqrt(d) * gain + bias


def ln_eps_in_sum_of_squares(x, gain, bias, eps=1e-5):
    centred = x - x.mean(-1, keepdim=True)
    return centred / torch.sqrt((centred.pow(2).sum(-1, keepdim=True) + eps) / x.shape[-1]) * gain + bias


def ln_in_place(x, gain, bias, eps=1e-5):
    x -= x.mean(-1, keepdim=True)
    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps) * gain + bias


def ln_float32(x, gain, bias, eps=1e-5):
    return F.layer_norm(x.float(), (x.shape[-1],), gain.float(), bias.float(), eps)


def ln_float32_inside(x, gain, bias, eps=1e-5):
    """x.float() for the statistics; the float64 gain and bias bring the result back to float64."""
    x = x.float()
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * gain + bias


def ln_over_T_and_d(x, gain, bias, eps=1e-5):
    """What nn.LayerNorm((T, d)) computes (without its own affine): statistics over the last two axes."""
    return F.layer_norm(x, x.shape[-2:], eps=eps) * gain + bias


def ln_float32_cast_back(x, gain, bias, eps=1e-5):
    return ln_float32(x, gain, bias, eps).double()


def ffn_returning(W_1, b_1, W_2, b_2):
    def absolute_value_ffn():
        return W_1, b_1, W_2, b_2
    return absolute_value_ffn


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


RIGHT_W_1, RIGHT_W_2 = t([[1, -1], [0, 0]]), t([[0, 1], [0, 1]])
ZERO_2 = torch.zeros(2)


def learner_pre(x, attn, ffn, ln_1, ln_2, slip):
    """A learner's pre-norm branch with the slip ``slip``."""
    if slip == "right":
        x = x + attn(ln_1(x))
        x = x + ffn(ln_2(x))
    elif slip == "index_0":                                     # the tuple habit of nn.MultiheadAttention
        out = attn(ln_1(x))
        x = x + out[0]
        x = x + ffn(ln_2(x))
    elif slip == "post_formula":
        x = learner_post(x, attn, ffn, ln_1, ln_2, "right")
    elif slip == "parallel_formula":
        x = learner_parallel(x, attn, ffn, ln_1, ln_2, "right")
    elif slip == "normed_stream":
        x = ln_1(x)
        x = x + attn(x)
        x = ln_2(x)
        x = x + ffn(x)
    elif slip == "no_residual":
        x = attn(ln_1(x))
        x = ffn(ln_2(x))
    elif slip == "ln_1_twice":
        x = x + attn(ln_1(x))
        x = x + ffn(ln_1(x))
    elif slip == "lns_swapped":
        x = x + attn(ln_2(x))
        x = x + ffn(ln_1(x))
    elif slip == "ffn_first":                                   # the two lines swapped
        x = x + ffn(ln_2(x))
        x = x + attn(ln_1(x))
    elif slip == "ffn_first_ln_1":                              # the sublayers swapped, not the norms
        x = x + ffn(ln_1(x))
        x = x + attn(ln_2(x))
    elif slip == "ffn_reads_x":                                 # the FFN reads the old name
        h = x + attn(ln_1(x))
        x = h + ffn(ln_2(x))
    elif slip == "ffn_no_residual":                             # a registered slip since the second edition
        x = x + attn(ln_1(x))
        x = ffn(ln_2(x))
    elif slip == "no_norms":                                    # an unregistered slip
        x = x + attn(x)
        x = x + ffn(x)
    return x


def learner_post(x, attn, ffn, ln_1, ln_2, slip):
    """A learner's post-norm branch with the slip ``slip``."""
    if slip == "right":
        x = ln_1(x + attn(x))
        x = ln_2(x + ffn(x))
    elif slip == "index_0":
        x = ln_1(x + attn(x)[0])
        x = ln_2(x + ffn(x))
    elif slip == "pre_formula":
        x = learner_pre(x, attn, ffn, ln_1, ln_2, "right")
    elif slip == "no_residual":
        x = ln_1(attn(x))
        x = ln_2(ffn(x))
    elif slip == "ln_1_twice":
        x = ln_1(x + attn(x))
        x = ln_1(x + ffn(x))
    elif slip == "lns_swapped":
        x = ln_2(x + attn(x))
        x = ln_1(x + ffn(x))
    elif slip == "ffn_first":
        x = ln_2(x + ffn(x))
        x = ln_1(x + attn(x))
    elif slip == "ffn_first_ln_1":
        x = ln_1(x + ffn(x))
        x = ln_2(x + attn(x))
    elif slip == "norm_inside":
        x = x + ln_1(attn(x))
        x = x + ln_2(ffn(x))
    elif slip == "ffn_reads_x":
        h = ln_1(x + attn(x))
        x = ln_2(h + ffn(x))
    elif slip == "no_ln_2":
        x = ln_1(x + attn(x))
        x = x + ffn(x)
    elif slip == "pre_ffn":                                     # the FFN's half written pre-norm
        x = ln_1(x + attn(x))
        x = x + ffn(ln_2(x))
    elif slip == "norm_inside_ffn":
        x = ln_1(x + attn(x))
        x = x + ln_2(ffn(x))
    elif slip == "no_norms":                                    # an unregistered slip
        x = x + attn(x)
        x = x + ffn(x)
    return x


def learner_parallel(x, attn, ffn, ln_1, ln_2, slip):
    """A learner's parallel branch with the slip ``slip``."""
    if slip == "right":
        return x + attn(ln_1(x)) + ffn(ln_2(x))
    if slip == "index_0":
        return x + attn(ln_1(x))[0] + ffn(ln_2(x))
    if slip == "pre_formula":                                   # done sequentially
        return learner_pre(x, attn, ffn, ln_1, ln_2, "right")
    if slip == "post_formula":
        return learner_post(x, attn, ffn, ln_1, ln_2, "right")
    if slip == "unhandled":
        return x
    if slip == "ln_1_twice":
        h = ln_1(x)
        return x + attn(h) + ffn(h)
    if slip == "lns_swapped":
        return x + attn(ln_2(x)) + ffn(ln_1(x))
    if slip == "sublayers_swapped":
        return x + ffn(ln_1(x)) + attn(ln_2(x))
    if slip == "residual_twice":
        a = x + attn(ln_1(x))
        f = x + ffn(ln_2(x))
        return a + f
    if slip == "no_residual":
        return attn(ln_1(x)) + ffn(ln_2(x))
    if slip == "post_sum":                                      # the sum normalised, post-norm style
        return ln_1(x + attn(x) + ffn(x))
    if slip == "norm_sum":
        return ln_2(x + attn(ln_1(x)) + ffn(ln_2(x)))
    if slip == "no_norms":                                      # an unregistered slip
        return x + attn(x) + ffn(x)
    raise AssertionError(slip)


def block_with(**forms):
    """A learner's block_forward, right but for the placements given as functions of (x, attn, ffn, ln_1, ln_2)."""
    def block_forward(x, attn, ffn, ln_1, ln_2, norm):
        if norm in forms:
            return forms[norm](x, attn, ffn, ln_1, ln_2)
        return learner_block()(x, attn, ffn, ln_1, ln_2, norm)
    return block_forward


def ln_global_mean(x, gain, bias, eps=1e-5):
    centred = x - x.mean()                                   # one mean for the whole tensor
    return centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * gain + bias


def ln_by_first_axis(x, gain, bias, eps=1e-5):
    n = x.shape[0]                                           # meant: the number of features
    mean = x.sum(-1, keepdim=True) / n
    var = ((x - mean) ** 2).sum(-1, keepdim=True) / n
    return (x - mean) / torch.sqrt(var + eps) * gain + bias


def ln_root_eps(x, gain, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    std = ((x - mean) ** 2).mean(-1, keepdim=True).sqrt()
    return (x - mean) / (std + math.sqrt(eps)) * gain + bias


def block_gpt_j(x, attn, ffn, ln_1, ln_2, norm):
    """GPT-J's parallel block, as Hugging Face's GPTJBlock writes it: one norm read by both sublayers."""
    if norm == "parallel":
        h = ln_1(x)
        return x + attn(h) + ffn(h)
    return learner_block()(x, attn, ffn, ln_1, ln_2, norm)


def ln_by_length(with_eps):
    """Divides by the centred vector's length (the 1/d of the variance forgotten)."""
    def layer_norm(x, gain, bias, eps=1e-5):
        c = x - x.mean(dim=-1, keepdim=True)
        length = c.norm(dim=-1, keepdim=True)
        return c / (torch.sqrt(length ** 2 + eps) if with_eps else length) * gain + bias
    return layer_norm


def ln_uncentred_variance(x, gain, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = (x ** 2).mean(dim=-1, keepdim=True)              # E[x²], the mean not removed
    return (x - mean) / torch.sqrt(var + eps) * gain + bias


def ln_eps_squared(x, gain, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    std = torch.sqrt(((x - mean) ** 2).mean(dim=-1, keepdim=True) + eps ** 2)
    return (x - mean) / std * gain + bias


def ln_dim_2(x, gain, bias, eps=1e-5):
    """Written for (B, T, d) inputs: dim=2."""
    mean = x.mean(dim=2, keepdim=True)
    var = x.var(dim=2, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * gain + bias


def rms_length_plus_eps(x, gain, eps=1e-6):
    return x / (x.norm(dim=-1, keepdim=True) + eps) * gain


def rms_gemma(x, gain, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + gain)


def rms_by_std(unbiased, eps_inside):
    def rms_norm(x, gain, eps=1e-6):
        std = x.std(dim=-1, keepdim=True, unbiased=unbiased) if not eps_inside else \
            torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=unbiased) + eps)
        return x / (std if eps_inside else std + eps) * gain
    return rms_norm


def rms_llama(x, gain, eps=1e-6):
    """LLaMA's RMSNorm: statistics in float32, cast back to the input's dtype."""
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * gain


def learner_block(pre="right", post="right", parallel="right"):
    """A learner's block_forward, written with if/elif, with the slips chosen by the keywords."""
    def block_forward(x, attn, ffn, ln_1, ln_2, norm):
        if norm == "pre":
            return learner_pre(x, attn, ffn, ln_1, ln_2, pre)
        if norm == "post":
            return learner_post(x, attn, ffn, ln_1, ln_2, post)
        return learner_parallel(x, attn, ffn, ln_1, ln_2, parallel)
    return block_forward


def block_else_post(x, attn, ffn, ln_1, ln_2, norm):
    """Written for two placements: everything that is not "pre" goes to post-norm."""
    if norm == "pre":
        x = x + attn(ln_1(x))
        return x + ffn(ln_2(x))
    x = ln_1(x + attn(x))
    return ln_2(x + ffn(x))


def block_else_pre(x, attn, ffn, ln_1, ln_2, norm):
    """Everything that is not "post" goes to pre-norm: the parallel block done sequentially."""
    if norm == "post":
        x = ln_1(x + attn(x))
        return ln_2(x + ffn(x))
    x = x + attn(ln_1(x))
    return x + ffn(ln_2(x))


def block_no_else(x, attn, ffn, ln_1, ln_2, norm):
    if norm == "pre":
        x = x + attn(ln_1(x))
        x = x + ffn(ln_2(x))
    elif norm == "post":
        x = ln_1(x + attn(x))
        x = ln_2(x + ffn(x))
    return x


def block_refuses(x, attn, ffn, ln_1, ln_2, norm):
    if norm not in ("pre", "post"):
        raise ValueError(f"norm must be 'pre' or 'post', got {norm!r}")
    return block_no_else(x, attn, ffn, ln_1, ln_2, norm)


def block_by_key(x, attn, ffn, ln_1, ln_2, norm):
    forms = {"pre": lambda t: learner_pre(t, attn, ffn, ln_1, ln_2, "right"),
             "post": lambda t: learner_post(t, attn, ffn, ln_1, ln_2, "right")}
    return forms[norm](x)


def block_unpacks(x, attn, ffn, ln_1, ln_2, norm):
    out, _ = attn(ln_1(x))
    x = x + out
    return x + ffn(ln_2(x))


def block_qkv(x, attn, ffn, ln_1, ln_2, norm):
    h = ln_1(x)
    x = x + attn(h, h, h)
    return x + ffn(ln_2(x))


def block_in_place(x, attn, ffn, ln_1, ln_2, norm):
    if norm == "pre":
        x += attn(ln_1(x))
        x += ffn(ln_2(x))
        return x
    if norm == "parallel":
        return x + attn(ln_1(x)) + ffn(ln_2(x))
    x = ln_1(x + attn(x))
    return ln_2(x + ffn(x))


def block_no_return(x, attn, ffn, ln_1, ln_2, norm):
    x = x + attn(ln_1(x))
    x = x + ffn(ln_2(x))


def counting(attn_mats=4, attn_bias=True, per_head=False, ffn_mats=2, ffn_bias=True, norms=2, per_norm=2,
             four_d=False):
    """A learner's parameter count with the slip chosen by the keywords."""
    def block_params(d_model, n_heads, d_ff):
        if four_d:
            d_ff = 4 * d_model
        heads = n_heads if per_head else 1
        total = attn_mats * heads * d_model * d_model + (attn_mats * d_model if attn_bias else 0)
        total += ffn_mats * d_model * d_ff + ((d_ff + d_model) if ffn_bias else 0)
        return total + norms * per_norm * d_model
    return block_params


def params_with_ln_f(d_model, n_heads, d_ff):
    """The block, and the final layer norm of the stack counted in it."""
    attention = 4 * d_model * d_model + 4 * d_model
    ffn = 2 * d_model * d_ff + d_ff + d_model
    ln_1 = ln_2 = ln_f = 2 * d_model
    return attention + ffn + ln_1 + ln_2 + ln_f


def params_by_head_floats(d_model, n_heads, d_ff):
    d_head = d_model / n_heads                               # a float
    attention = 4 * n_heads * (d_model * d_head + d_head)
    return attention + 2 * d_model * d_ff + d_ff + d_model + 4 * d_model


def learner_rms(centre=False, eps_at="inside", eps_value=None, gain=True, reduce="mean", root=True):
    def rms_norm(x, g, eps=1e-6):
        e = eps if eps_value is None else eps_value
        z = x - x.mean(-1, keepdim=True) if centre else x
        sq = (z ** 2).sum(-1, keepdim=True) if reduce == "sum" else (z ** 2).mean(-1, keepdim=True)
        if not root:
            d = sq + e
        else:
            d = torch.sqrt(sq + e) if eps_at == "inside" else torch.sqrt(sq) + e
        return z / d * g if gain else z / d
    return rms_norm


def rms_abs(with_eps):
    def rms_norm(x, g, eps=1e-6):
        return g * x / (x.abs().mean(-1, keepdim=True) + (eps if with_eps else 0.0))
    return rms_norm


def rms_no_keepdim(x, g, eps=1e-6):
    return x / torch.sqrt((x ** 2).mean(-1) + eps) * g


def ln_detached(x, gain, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True).detach()                  # statistics cut from autograd
    var = ((x - mean) ** 2).mean(-1, keepdim=True).detach()
    return (x - mean) / torch.sqrt(var + eps) * gain + bias


def ln_stats_without_grad(x, gain, bias, eps=1e-5):
    with torch.no_grad():                                      # "the statistics are constants"
        mean = x.mean(-1, keepdim=True)
        std = torch.sqrt(((x - mean) ** 2).mean(-1, keepdim=True) + eps)
    return (x - mean) / std * gain + bias


def ln_all_without_grad(x, gain, bias, eps=1e-5):
    with torch.no_grad():
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), eps=eps) * gain + bias


def ln_var_over_sequence(x, gain, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-2, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * gain + bias


def ln_mean_not_squared(x, gain, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(((x ** 2).mean(-1, keepdim=True) - mean).abs() + eps) * gain + bias


def ln_half_statistics(x, gain, bias, eps=1e-5):
    h = x.half()
    mean = h.mean(-1, keepdim=True)
    x_hat = (h - mean) / torch.sqrt(((h - mean) ** 2).mean(-1, keepdim=True) + eps)
    return x_hat.double() * gain + bias


def ln_shape_2(x, gain, bias, eps=1e-5):
    d = x.shape[2]
    mean = x.sum(-1, keepdim=True) / d
    return (x - mean) / torch.sqrt(((x - mean) ** 2).sum(-1, keepdim=True) / d + eps) * gain + bias


def rms_detached(x, gain, eps=1e-6):
    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps).detach() * gain


def rms_half_statistics(x, gain, eps=1e-6):
    h = x.half()
    return (h * torch.rsqrt((h ** 2).mean(-1, keepdim=True) + eps)).double() * gain


def block_pre_float32(x, attn, ffn, ln_1, ln_2, norm):
    if norm == "pre":
        h = x + attn(ln_1(x)).float().double()                    # a float32 round trip in one branch
        return h + ffn(ln_2(h))
    return learner_block()(x, attn, ffn, ln_1, ln_2, norm)


def block_attention_detached(x, attn, ffn, ln_1, ln_2, norm):
    if norm == "pre":
        h = x + attn(ln_1(x)).detach()
        return h + ffn(ln_2(h))
    return learner_block()(x, attn, ffn, ln_1, ln_2, norm)


# (exercise, wrong function, a phrase its verdict must contain)
WRONG = [
    ("layer_norm", learner_ln(var="unbiased"), "divide by d - 1 by default"),
    ("layer_norm", learner_ln(var="std"), "divide by d - 1 by default"),
    ("layer_norm", learner_ln(eps_at="outside"), "eps goes inside the square root"),
    ("layer_norm", ln_annotated, "two slips at once"),
    ("layer_norm", learner_ln(stats_dim=0), "batch norm"),
    ("layer_norm", learner_ln(stats_dim=-2), "the sequence axis (dim=-2)"),
    ("layer_norm", learner_ln(stats_dim=None), "of the whole tensor"),
    ("layer_norm", learner_ln(stats_dim=(-2, -1)), "as nn.LayerNorm((T, d_model)) would"),
    ("layer_norm", ln_over_T_and_d, "as nn.LayerNorm((T, d_model)) would"),
    ("layer_norm", ln_float32_inside, "part of your computation ran in float32"),
    ("layer_norm", learner_ln(affine="none"), "gain and bias are missing"),
    ("layer_norm", learner_ln(affine="no_gain"), "the gain is missing"),
    ("layer_norm", learner_ln(affine="no_bias"), "the bias is missing"),
    ("layer_norm", learner_ln(affine="bias_first"), "added before the gain"),
    ("layer_norm", learner_ln(centre=False), "you divided x itself"),
    ("layer_norm", ln_rms, "this is RMS norm"),
    ("layer_norm", learner_ln(eps_at="variance"), "you divided by the variance"),
    ("layer_norm", learner_ln(eps_value=1e-5), "the eps argument is ignored"),
    ("layer_norm", learner_ln(eps_at="none"), "eps is missing"),
    ("layer_norm", ln_no_keepdim, "(the mean, the variance, or both) dropped that axis"),
    ("layer_norm", ln_var_no_keepdim, "(the mean, the variance, or both) dropped that axis"),
    ("layer_norm", ln_f_normalize, "eps becomes a floor on the length"),
    ("layer_norm", ln_eps_in_sum_of_squares, "which adds only eps / d: add it to the variance"),
    ("layer_norm", ln_in_place, "changed its input `x` in place"),
    ("layer_norm", ln_float32, "returned torch.float32 for torch.float64 inputs"),
    ("layer_norm", ln_float32_cast_back, "computed in float32 and cast back"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: F.layer_norm(x, (x.shape[-1],), gain, bias, eps)[..., :-1],
     "output shape"),
    ("layer_norm", ln_by_length(with_eps=False), "√d times too small"),
    ("layer_norm", ln_by_length(with_eps=True), "√d times too small"),
    ("layer_norm", ln_uncentred_variance, "the mean of x², not of (x - mean)²"),
    ("layer_norm", ln_eps_squared, "you added eps²"),
    ("layer_norm", ln_dim_2, "use dim=-1, the last axis"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: learner_ln()(x, bias, gain, eps), "gain and bias are swapped"),
    ("layer_norm", ln_global_mean, "one mean of the whole tensor"),
    ("layer_norm", ln_by_first_axis, "the size of the FIRST axis"),
    ("layer_norm", ln_root_eps, "sqrt(var) + sqrt(eps)"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: (x - x.mean(-1, keepdim=True))
     / x.std(-1, keepdim=True, unbiased=False).clamp_min(eps) * gain + bias, "eps is a floor in yours"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: (x - x.mean(1, keepdim=True))
     / torch.sqrt(x.var(1, keepdim=True, unbiased=False) + eps) * gain + bias, "by its number, dim=1"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: (x - x.sum(-1, keepdim=True) / x.shape[1])
     / torch.sqrt(((x - x.sum(-1, keepdim=True) / x.shape[1]) ** 2).sum(-1, keepdim=True) / x.shape[1] + eps)
     * gain + bias, "the size of the SECOND axis"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: (x - x.mean(-1, keepdim=True)
     / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps)) * gain + bias, "a bracket is missing"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: (x - x.mean(-1, keepdim=True))
     / torch.sqrt(x.std(-1, keepdim=True, unbiased=False) + eps) * gain + bias, "the square root twice"),
    ("absolute_value_ffn", ffn_returning(t([[1, -1], [0, 0]]), ZERO_2, t([[1, 1], [-1, 1]]), ZERO_2),
     "The FFN must return the CHANGE"),
    ("absolute_value_ffn", ffn_returning(t([[1, 0], [0, 0]]), ZERO_2, t([[0, 1], [0, 0]]), ZERO_2),
     "0 for negative a"),
    ("absolute_value_ffn", ffn_returning(RIGHT_W_1, ZERO_2, -RIGHT_W_2, ZERO_2), "feature 1 is -|a|"),
    ("absolute_value_ffn", ffn_returning(RIGHT_W_1.T, ZERO_2, RIGHT_W_2.T, ZERO_2), "column-vector convention"),
    ("absolute_value_ffn", ffn_returning(t([[1, 0, -1], [0, 0, 0]]).T, torch.zeros(3), t([[0, 0, 0], [1, 0, 1]]),
                                         ZERO_2), "column-vector convention"),
    ("absolute_value_ffn", ffn_returning(RIGHT_W_1, ZERO_2, t([[1, 0], [1, 0]]), ZERO_2), "went into feature 0"),
    ("absolute_value_ffn", ffn_returning(t([[1, -1], [0, math.nan]]), ZERO_2, RIGHT_W_2, ZERO_2), "NaN or inf"),
    ("absolute_value_ffn", ffn_returning(RIGHT_W_1, torch.zeros(1, 2), RIGHT_W_2, ZERO_2),
     "b_1 has shape (1, 2), expected (2,)"),
    ("absolute_value_ffn", ffn_returning(t([[1, -1, 0], [0, 0, 0]]), ZERO_2, RIGHT_W_2, ZERO_2),
     "b_1 has shape (2,), expected (3,)"),
    ("absolute_value_ffn", ffn_returning(RIGHT_W_1, t([-0.5, 0]), RIGHT_W_2, ZERO_2),
     "at x = (0.1, 0) the stream x + FFN(x) is (0.1, 0); it must be (0.1, 0.1)."),
    ("absolute_value_ffn", lambda: (RIGHT_W_1, RIGHT_W_2), "returned a tuple of 2 items; return a tuple (W_1,"),
    # 2 relu(a) - relu(a + 10) + 10: |a| for a >= -10 only, a kink beyond the near test points
    ("absolute_value_ffn", ffn_returning(t([[1, 1], [0, 0]]), t([0, 10]), t([[0, 2], [0, -1]]), t([0, 10])),
     "at x = (-100000, 0) the stream x + FFN(x) is (-1e+05, 10); it must be (-100000, 100000)."),
    ("absolute_value_ffn", ffn_returning(RIGHT_W_1 > 0, ZERO_2, RIGHT_W_2, ZERO_2), "return real numbers"),
    ("absolute_value_ffn", ffn_returning(RIGHT_W_1, ZERO_2, RIGHT_W_2, None), "b_2 is None"),
    ("absolute_value_ffn", ffn_returning(RIGHT_W_1.long(), ZERO_2.long(), RIGHT_W_2.long(), ZERO_2.long()),
     "W_1 has dtype torch.int64, integers"),
    ("block_forward", learner_block(pre="post_formula"), "for norm='pre' you computed the post-norm block"),
    ("block_forward", learner_block(pre="parallel_formula"), "for norm='pre' you computed the parallel block"),
    ("block_forward", learner_block(pre="normed_stream"), "replaced the stream by its normalised version"),
    ("block_forward", learner_block(pre="no_residual"), "for norm='pre' the residual additions are missing"),
    ("block_forward", learner_block(pre="ln_1_twice"), "for norm='pre', ln_1 was used twice"),
    ("block_forward", learner_block(pre="lns_swapped"), "for norm='pre', ln_1 and ln_2 are swapped"),
    ("block_forward", learner_block(pre="ffn_first"), "for norm='pre', the FFN came before attention"),
    ("block_forward", learner_block(pre="ffn_first_ln_1"), "for norm='pre', the FFN came first and took ln_1"),
    ("block_forward", learner_block(pre="ffn_reads_x"), "for norm='pre' you computed the parallel block"),
    ("block_forward", learner_block(post="pre_formula"), "for norm='post' you computed the pre-norm block"),
    ("block_forward", learner_block(post="no_residual"), "for norm='post' the residual additions are missing"),
    ("block_forward", learner_block(post="ln_1_twice"), "for norm='post', ln_1 was used twice"),
    ("block_forward", learner_block(post="lns_swapped"), "for norm='post', ln_1 and ln_2 are swapped"),
    ("block_forward", learner_block(post="ffn_first"), "for norm='post', the FFN came before attention"),
    ("block_forward", learner_block(post="ffn_first_ln_1"), "for norm='post', the FFN came first and took ln_1"),
    ("block_forward", learner_block(post="norm_inside"), "normalised the sublayer's output before adding"),
    ("block_forward", learner_block(post="ffn_reads_x"), "the FFN read the block's input x instead of the first sum"),
    ("block_forward", learner_block(post="no_ln_2"), "ln_2 is missing at the end"),
    ("block_forward", learner_block(parallel="pre_formula"), "you computed the sequential pre-norm block"),
    ("block_forward", block_else_pre, "you computed the sequential pre-norm block"),
    ("block_forward", learner_block(parallel="post_formula"), "an `else` treats every norm other than 'pre'"),
    ("block_forward", block_else_post, "an `else` treats every norm other than 'pre'"),
    ("block_forward", learner_block(parallel="unhandled"), "returned x unchanged"),
    ("block_forward", block_no_else, "returned x unchanged"),
    ("block_forward", learner_block(parallel="ln_1_twice"), "That is GPT-J's parallel block"),
    ("block_forward", block_gpt_j, "That is GPT-J's parallel block"),
    ("block_forward", block_with(pre=lambda x, a, f, l1, l2: (lambda h: h + f(h))(x + a(l1(x)))),
     "for norm='pre', the FFN read the stream itself"),
    ("block_forward", block_with(pre=lambda x, a, f, l1, l2: (lambda h: l2(h + f(l2(h))))(x + a(l1(x)))),
     "your block normalised its output with ln_2"),
    ("block_forward", block_with(post=lambda x, a, f, l1, l2: (lambda h: l2(h) + f(l2(h)))(l1(x + a(x)))),
     "ln_2 went on the FFN's input"),
    ("block_forward", block_with(pre=lambda x, a, f, l1, l2: (lambda h: x + f(l2(h)))(x + a(l1(x)))),
     "attention's write was lost"),
    ("block_forward", block_with(pre=lambda x, a, f, l1, l2: (lambda g: g + f(g))(l2(x + a(l1(x))))),
     "in the FFN half you replaced the stream by its normalised version"),
    ("block_forward", block_with(post=lambda x, a, f, l1, l2: l2(x + f(l1(x + a(x))))),
     "the second sum added the FFN's output to the block's input x"),
    ("block_forward", block_with(post=lambda x, a, f, l1, l2: (lambda h: l2(h + f(h)))(x + a(x))),
     "for norm='post', ln_1 is missing"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: (x - x.mean(-1, keepdim=True))
     / torch.sqrt(x.var(unbiased=False) + eps) * gain + bias, "x.var(unbiased=False) with no dim is ONE variance"),
    ("block_params", lambda d_model, n_heads, d_ff: 4 * d_model * d_model + 4 * n_heads * d_model
     + 2 * d_model * d_ff + d_ff + d_model + 4 * d_model, "the attention biases once per head"),
    ("block_params", lambda d_model, n_heads, d_ff: 3 * d_model * d_model + d_model * (d_model // n_heads)
     + 2 * d_model * d_ff + 4 * d_model + d_ff + d_model + 4 * d_model, "you counted W_O as (d_model, d_head)"),
    ("block_params", lambda d_model, n_heads, d_ff: 4 * d_model * d_model + 2 * d_model * d_ff + 4 + 2 + 4,
     "you counted each bias (and each layer norm's gain and bias) as one number"),
    ("block_forward", block_with(post=lambda x, a, f, l1, l2: (lambda h: l2(h + f(l2(h))))(l1(x + a(l1(x))))),
     "as well as the sum"),
    ("block_forward", block_with(parallel=lambda x, a, f, l1, l2: x + (a(l1(x)) + f(l2(x))) / 2),
     "the two writes were averaged"),
    ("block_forward", learner_block(parallel="lns_swapped"), "attention reads ln_1(x), the FFN ln_2(x)"),
    ("block_forward", learner_block(parallel="sublayers_swapped"), "attention reads ln_1(x), the FFN ln_2(x)"),
    ("block_forward", learner_block(parallel="residual_twice"), "x was added twice"),
    ("block_forward", learner_block(parallel="no_residual"), "for norm='parallel' the residual is missing"),
    ("block_forward", block_refuses, "your function refused norm='parallel'"),
    ("block_forward", block_by_key, "is not among the keys you look up"),
    ("block_forward", learner_block(pre="post_formula", post="pre_formula"), "the two placements are swapped"),
    ("block_forward", learner_block(pre="parallel_formula", parallel="pre_formula"),
     "'pre' and 'parallel' are swapped"),
    ("block_forward", lambda x, attn, ffn, ln_1, ln_2, norm: learner_pre(x, attn, ffn, ln_1, ln_2, "right"),
     "every case got the pre-norm block"),
    ("block_forward", lambda x, attn, ffn, ln_1, ln_2, norm: learner_post(x, attn, ffn, ln_1, ln_2, "right"),
     "every case got the post-norm block"),
    ("block_forward", lambda x, attn, ffn, ln_1, ln_2, norm: learner_parallel(x, attn, ffn, ln_1, ln_2, "right"),
     "every case got the parallel block"),
    ("block_forward", learner_block(pre="no_residual", post="no_residual", parallel="no_residual"),
     "there are no residual additions"),
    ("block_forward", learner_block(pre="ln_1_twice", post="ln_1_twice", parallel="ln_1_twice"),
     "ln_1 was used twice: the second sublayer"),
    ("block_forward", learner_block(pre="lns_swapped", post="lns_swapped", parallel="lns_swapped"),
     "ln_1 and ln_2 are swapped: ln_1 goes with attention"),
    ("block_forward", learner_block(pre="ffn_first", post="ffn_first"), "before attention: attention (with ln_1)"),
    ("block_forward", learner_block(pre="ffn_first_ln_1", post="ffn_first_ln_1", parallel="sublayers_swapped"),
     "(ln_1 went to the FFN)"),
    ("block_forward", learner_block(pre="ffn_reads_x", post="ffn_reads_x"), "let the FFN read that new x"),
    ("block_forward", learner_block(pre="ln_1_twice", post="ln_1_twice"),
     "wrong output for norm='pre' and norm='post' (norm='parallel' is right). Hint: for norm='pre', ln_1 was "
     "used twice"),
    ("block_forward", learner_block(post="no_ln_2", parallel="residual_twice"),
     "wrong output for norm='post' and norm='parallel' (norm='pre' is right). Hint: for norm='post', ln_2 is "
     "missing at the end"),
    ("block_forward", learner_block(pre="ffn_no_residual"), "the FFN's output replaced the stream"),
    ("block_forward", learner_block(pre="no_norms"),
     "wrong output for norm='pre' (norm='post' and norm='parallel' are right). Hint: pre-norm normalises"),
    ("block_forward", learner_block(post="no_norms"), "Hint: post-norm adds first and normalises the sum"),
    ("block_forward", learner_block(parallel="no_norms"), "Hint: the parallel block feeds the block's input x"),
    ("block_forward", learner_block(pre="no_norms", post="no_norms", parallel="no_norms"),
     "wrong values. Hint: pre: x = x + attn(ln_1(x))"),
    ("block_forward", block_unpacks, "attn(x) returns one tensor"),
    ("block_forward", block_qkv, "attn takes the stream alone"),
    ("block_forward", block_in_place, "changed its input `x` in place (its output is right)"),
    ("block_forward", block_no_return, "did you forget the `return` line?"),
    ("block_forward", lambda x, *parts: (learner_block()(x, *parts), x), "return only the block's output"),
    ("block_params", counting(attn_bias=False, ffn_bias=False), "the biases are missing"),
    ("block_params", counting(norms=0), "either the two layer norms"),
    ("block_params", lambda d, H, f: 4 * d * d + 3 * d + 2 * d * f + f + d + 4 * d, "you are d_model short"),
    ("block_params", lambda d, H, f: 4 * d * d + 4 * d + 2 * d * f + f + 4 * d, "you are d_model short"),
    ("block_params", lambda d, H, f: 4 * d * d + 4 * d + 2 * d * f + 2 * f + 4 * d, "b_2 has d_model numbers"),
    ("block_params", lambda d, H, f: 3 * d * d + 4 * d + 2 * d * f + f + d + 4 * d, "you are d_model² short"),
    ("block_params", lambda d, H, f: 4 * d * (d // H) + 4 * d + 2 * d * f + f + d + 4 * d,
     "each projection as (d_model, d_head)"),
    ("block_params", counting(attn_bias=False), "either the two layer norms"),
    ("block_params", counting(ffn_bias=False), "the feed-forward network's biases are missing"),
    ("block_params", counting(norms=3), "you counted three layer norms"),
    ("block_params", params_with_ln_f, "you counted three layer norms"),
    ("block_params", counting(per_norm=1), "you are 2·d_model short: either the layer norms"),
    ("block_params", counting(norms=1), "you are 2·d_model short: either the layer norms"),
    ("block_params", counting(attn_bias=False, ffn_bias=False, norms=0), "the weight matrices only"),
    ("block_params", counting(per_head=True), "once per head"),
    ("block_params", counting(four_d=True), "you assumed d_ff = 4·d_model"),
    ("block_params", lambda d, H, f: 4 * d * d + 4 * d + 2 * d * f + d + 4 * d, "b_1 is missing"),
    ("block_params", lambda d, H, f: 4 * d * d + d + 2 * d * f + f + d + 4 * d, "you are 3·d_model short"),
    ("block_params", lambda d_model, n_heads, d_ff: 12 * d_model ** 2, "12·d_model² is the usual approximation"),
    ("block_params", counting(ffn_mats=1), "you counted one"),
    ("block_params", counting(attn_mats=3), "W_O (and its bias) is missing"),
    ("block_params", params_by_head_floats, "the count is right but it is a float"),
    ("block_params", lambda d_model, n_heads, d_ff: counting()(d_model, n_heads, d_ff) - 1,
     "off by the same few parameters at every size"),
    ("block_params", lambda d_model, n_heads, d_ff: counting()(d_model, n_heads, d_ff) + 1,
     "off by the same few parameters at every size"),
    ("block_params", lambda d_model, n_heads, d_ff: counting()(d_model, n_heads, d_ff) + 3 * d_model,
     "you are 3·d_model over at every size"),
    ("block_params", lambda d_model, n_heads, d_ff: counting()(d_model, n_heads, d_ff) + d_ff,
     "you are 1·d_ff over at every size"),
    ("block_params", lambda d_model, n_heads, d_ff: counting()(d_model, n_heads, d_ff) - 7 * d_model - 3,
     "for d_model = 8, n_heads = 2, d_ff = 20 you counted 609; the block has 668"),
    ("block_params", lambda d_model, n_heads, d_ff: (d_model, d_ff), "return the parameter count, an int"),
    ("rms_norm", learner_rms(centre=True), "that is layer norm"),
    ("rms_norm", learner_rms(eps_at="outside"), "eps goes inside the square root"),
    ("rms_norm", learner_rms(gain=False), "the gain is missing"),
    ("rms_norm", learner_rms(eps_value=1e-6), "the eps argument is ignored"),
    ("rms_norm", learner_rms(reduce="sum"), "the vector's length"),
    ("rms_norm", learner_rms(root=False), "divided by the mean square"),
    ("rms_norm", rms_abs(with_eps=True), "the mean of |x|"),
    ("rms_norm", rms_abs(with_eps=False), "the mean of |x|"),
    ("rms_norm", rms_no_keepdim, "pass keepdim=True (x.pow(2)"),
    ("rms_norm", rms_length_plus_eps, "||x|| + eps"),
    ("rms_norm", rms_gemma, "Gemma's convention"),
    ("rms_norm", lambda x, gain, eps=1e-6: x / (x ** 2).mean(-1, keepdim=True).sqrt() * gain, "eps is missing"),
    ("rms_norm", lambda x, gain, eps=1e-6: x / torch.sqrt(x.mean(-1, keepdim=True) ** 2 + eps) * gain,
     "you squared the mean"),
    ("rms_norm", rms_by_std(unbiased=True, eps_inside=False), "you divided by the standard deviation"),
    ("rms_norm", rms_by_std(unbiased=False, eps_inside=True), "you divided by the standard deviation"),
    ("rms_norm", rms_llama, "LLaMA's x.float()"),
    ("rms_norm", lambda x, gain, eps=1e-6: x * torch.rsqrt((x ** 2).mean(-1, keepdim=True) + eps * eps) * gain,
     "you added eps² inside the root"),
    ("rms_norm", lambda x, gain, eps=1e-6: x / torch.sqrt((x ** 2).mean() + eps) * gain,
     "one mean square of the whole tensor"),
    ("rms_norm", lambda x, gain, eps=1e-6: x / torch.sqrt((x ** 2).sum(-1, keepdim=True) / (x.shape[-1] - 1) + eps)
     * gain, "divided the sum of squares by d - 1"),
    ("rms_norm", lambda x, gain, eps=1e-6: x / torch.sqrt((x ** 2).mean(-1, keepdim=True)) * gain + eps,
     "a misplaced bracket"),
    ("rms_norm", lambda x, gain, eps=1e-6: x / torch.sqrt((x ** 2).mean(2, keepdim=True) + eps) * gain,
     "use dim=-1, the last axis"),
    ("rms_norm", lambda x, gain, eps=1e-6: x / torch.sqrt((x ** 2).mean(-1, keepdim=True).clamp_min(eps)) * gain,
     "RMS norm ADDS it, sqrt(mean(x²) + eps)"),
    ("rms_norm", lambda x, gain, eps=1e-6: x / torch.clamp((x ** 2).mean(-1, keepdim=True).sqrt(), min=eps) * gain,
     "on the root: RMS norm ADDS it inside the root"),
    ("rms_norm", lambda x, gain, eps=1e-6: x / torch.sqrt((x ** 2).mean(0, keepdim=True) + eps) * gain,
     "over the first axis (dim=0)"),
    ("rms_norm", lambda x, gain, eps=1e-6: x / torch.sqrt((x ** 2).mean(-2, keepdim=True) + eps) * gain,
     "over the sequence axis (dim=-2)"),
    ("rms_norm", lambda x, gain, eps=1e-6: (x.half() * torch.rsqrt((x.half() ** 2).mean(-1, keepdim=True) + eps)
                                            * gain.half()).to(x.dtype), "every value is a float16 number"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: torch.nn.functional.layer_norm(
        x.bfloat16(), (x.shape[-1],), gain.bfloat16(), bias.bfloat16(), eps).double(),
     "every value is a bfloat16 number"),
    # the reviewers' slips (fifth review of chapter 3), each with its own hint
    ("layer_norm", ln_detached, "the gradient with respect to `x` is not"),
    ("layer_norm", ln_stats_without_grad, "the gradient with respect to `x` is not"),
    ("layer_norm", ln_all_without_grad, "your output carries no gradient"),
    ("layer_norm", learner_ln(eps_value=1e-6), "the one for eps = 1e-6"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: ((x - x.mean(-1, keepdim=True))
                                                    / x.var(-1, keepdim=True, unbiased=False).sqrt() + eps)
     * gain + bias, "eps was added after the division"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: torch.nn.functional.layer_norm(x * gain, (x.shape[-1],), eps=eps)
     + bias, "the gain was applied before normalising"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: (x - x.mean(-1, keepdim=True))
     / x.var(-1, keepdim=True, unbiased=False).clamp(min=eps).sqrt() * gain + bias, "a floor on the variance"),
    ("layer_norm", ln_var_over_sequence, "the variance over the sequence axis"),
    ("layer_norm", ln_mean_not_squared, "the mean SQUARED"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: (x - x.mean(-1, keepdim=True))
     / (x.var(-1, keepdim=True, unbiased=False) * (1 + eps)).sqrt() * gain + bias, "eps multiplied the variance"),
    ("layer_norm", ln_half_statistics, "right to about three digits only"),
    ("layer_norm", ln_shape_2, "d = x.shape[-1]"),
    ("rms_norm", rms_detached, "the gradient with respect to `x` is not"),
    ("rms_norm", learner_rms(eps_value=1e-5), "the one for eps = 1e-5"),
    ("rms_norm", lambda x, gain, eps=1e-6: x / torch.sqrt((x ** 2).mean(1, keepdim=True) + eps) * gain,
     "you named the axis by its number, dim=1"),
    ("rms_norm", lambda x, gain, eps=1e-6: (x * gain) * torch.rsqrt(((x * gain) ** 2).mean(-1, keepdim=True) + eps),
     "the gain was applied before normalising"),
    ("rms_norm", lambda x, gain, eps=1e-6: x * ((x ** 2).mean(-1, keepdim=True).rsqrt() + eps) * gain,
     "eps was added after rsqrt"),
    ("rms_norm", lambda x, gain, eps=1e-6: x / ((x ** 2).sum(-1, keepdim=True) + eps).sqrt() * x.shape[-1] ** 0.5
     * gain, "adds only eps / d"),
    ("rms_norm", lambda x, gain, eps=1e-6: torch.nn.functional.normalize(x, dim=-1) * gain, "F.normalize does"),
    ("rms_norm", rms_half_statistics, "right to about three digits only"),
    ("rms_norm", lambda x, gain, eps=1e-6: x / torch.sqrt((x ** 2).sum(-1, keepdim=True) / x.shape[2] + eps) * gain,
     "d = x.shape[-1]"),
    ("block_forward", block_attention_detached, "the gradient with respect to `x` is not"),
    ("block_forward", learner_block(post="pre_ffn"), "the FFN's half is pre-norm"),
    ("block_forward", learner_block(post="norm_inside_ffn"), "the FFN's output was normalised before adding it"),
    ("block_forward", learner_block(parallel="post_sum"), "as a post-norm block would"),
    ("block_forward", learner_block(parallel="norm_sum"), "the parallel block returns the raw sum"),
    ("block_params", lambda d_model, n_heads, d_ff: counting()(d_model, n_heads, d_ff) - d_ff + d_model,
     "b_1 has d_ff numbers, not d_model"),
    ("block_params", lambda d_model, n_heads, d_ff: counting()(d_model, n_heads, d_ff) - d_ff + 4 * d_model,
     "you counted 4·d_model, which is d_ff only when"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var() + eps) * gain
     + bias, "ONE variance of the whole tensor"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: (x - x.mean(-1, keepdim=True))
     * (x.var(-1, keepdim=True, unbiased=False).rsqrt() + eps) * gain + bias, "eps was added after rsqrt"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: (x - x.mean(-1, keepdim=True))
     / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) * (1 + eps) + eps) * gain + bias,
     "for each token: mean and biased variance"),
    ("rms_norm", lambda x, gain, eps=1e-6: torch.nn.functional.normalize(x, dim=-1, eps=eps) * x.shape[-1] ** 0.5
     * gain, "F.normalize(x) * √d is RMS norm with eps as a floor"),
    ("layer_norm", learner_ln(eps_value=1e-12), "the one for eps = 1e-12"),
    ("rms_norm", learner_rms(eps_value=1e-8), "the one for eps = 1e-08"),
    ("layer_norm", lambda x, gain, bias, eps=1e-5: (x - x.mean(-1, keepdim=True))
     / math.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * gain + bias, "math.sqrt (or float(...))"),
    ("rms_norm", lambda x, gain, eps=1e-6: x / math.sqrt((x ** 2).mean(-1, keepdim=True) + eps) * gain,
     "math.sqrt (or float(...))"),
    ("block_forward", block_with(pre=lambda x, attn, ffn, ln_1, ln_2: (lambda h: h + ffn(ln_2(h)))(
        ln_1(x) + attn(ln_1(x)))), "in the attention half you replaced the stream"),
    ("block_forward", learner_block(pre="index_0"), "attn(...)[0]"),
    ("block_forward", learner_block(post="index_0"), "attn(...)[0]"),
    ("block_forward", learner_block(parallel="index_0"), "attn(...)[0]"),
    ("block_forward", block_pre_float32, "right to float32's precision (~1e-7) only for norm='pre'"),

    ("absolute_value_ffn", ffn_returning(t([[1.0, 0.0], [-1.0, 0.0]]), t([0.0, 0.0]), t([[0.0, 1.0], [0.0, 1.0]]),
                                         t([0.0, 0.0])), "W_1 is transposed: x W_1 multiplies x by each COLUMN"),
    ("absolute_value_ffn", ffn_returning(t([[1.0, -1.0], [0.0, 0.0]]), t([0.0, 0.0]), t([[0.0, 0.0], [1.0, 1.0]]),
                                         t([0.0, 0.0])), "W_2 is transposed: row j of W_2"),
    ("block_params", lambda d_model, n_heads, d_ff: counting()(d_model, n_heads, d_ff) - 3 * d_model ** 2
     + 3 * d_model * (d_model // n_heads), "you counted W_Q, W_K and W_V as (d_model, d_head)"),
]


# What a check must refuse without raising: the odd answers of every chapter, and this chapter's own.
BAD = {
    **exercise_suite.odd_answers((2, 2)),
    "wrong-shape": lambda *a: torch.zeros(1),
    "meta": lambda *a: torch.empty(3, 3, device="meta"),
    "float16": lambda *a: torch.zeros(3, 4, 5, dtype=torch.float16),
    "four-of-anything": lambda *a: ("W_1", None, [1.0, [2.0]], exercise_suite.Hostile()),
    "four-big": lambda *a: tuple(torch.zeros(3, 3, dtype=torch.float64) for _ in range(4)),
}


# --------------------------------------------------------------------------- the generic tests

# Written once, in tests/exercise_suite.py (its docstring says what each checks); chapter 3 runs these.
globals().update(
    # test_solution_passes, test_solution_passes_for_every_seed, test_stub_is_not_implemented
    SUITE.solution_tests()
    # test_nearly_right_fails
    | SUITE.nearly_right_tests(["layer_norm", "block_forward", "rms_norm"])
    # test_the_chapter_has_a_cell_for_every_checked_exercise, test_chapter_solution_passes_for_every_seed
    | SUITE.notebook_tests()
    # test_every_registered_mistake_is_caught_by_its_own_hint,
    # test_the_cases_tell_every_mistake_from_the_reference_and_the_others (the outputs of a run flattened into one
    # vector, apart by more than 1e-9 somewhere)
    | SUITE.registered_mistake_tests(apart_by=1e-9, flattened=True)
    # the fixture wrong_verdicts; test_wrong_answer_gets_its_hint_whatever_the_seed (each answer of WRONG),
    # test_every_registered_hint_is_earned_by_a_wrong_answer, test_wrong_answers_get_different_verdicts
    | SUITE.wrong_answer_tests(WRONG)
    # test_any_wrong_answer_fails_without_raising (each answer of BAD)
    | SUITE.odd_answer_tests(BAD)
    # test_seed_changes_the_inputs (never for the fixed inputs of 3.2), test_cases_travel_to_the_sandbox_and_back
    # (these answers too)
    | SUITE.case_tests(fixed=["absolute_value_ffn"])
    | SUITE.travel_tests([BAD["tuple"], BAD["meta"], learner_block(pre="normed_stream")])
)


# --------------------------------------------------------------------------- the registry


def test_chapter_three_registry():
    SUITE.assert_registry(numbers=["3.1", "3.2", "3.3", "3.4"])


# --------------------------------------------------------------------------- solutions and stubs


def test_a_block_that_calls_an_unfinished_layer_norm_is_told_so(capsys):
    def block_forward(x, attn, ffn, ln_1, ln_2, norm):
        def layer_norm(x, gain, bias, eps=1e-5):
            raise NotImplementedError("layer_norm is not implemented yet")
        return x + attn(layer_norm(x, ln_1.weight, ln_1.bias))

    exercise_suite.assert_it_calls_an_unfinished(checks.check_block_forward(block_forward), "layer_norm", "3.1")
    capsys.readouterr()


# --------------------------------------------------------------------------- other right answers pass


def ln_var_mean(x, gain, bias, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return (x - mean) * torch.rsqrt(var + eps) * gain + bias


def ln_moments(x, gain, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean ** 2               # E[x²] - E[x]²
    return gain * (x - mean) / (var + eps).sqrt() + bias


@pytest.mark.parametrize("right", [ln_var_mean, ln_moments,
                                   lambda x, g, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], g, b, eps),
                                   lambda x, g, b, eps=1e-5: g * (x - x.mean(-1, keepdim=True))
                                   / (x.var(-1, keepdim=True, unbiased=False) + eps) ** 0.5 + b])
def test_other_right_layer_norms_pass(right):
    for seed in SEEDS:
        assert verdict_for("layer_norm", right, seed).passed


@pytest.mark.parametrize("answer", [
    ffn_returning(t([[2, -3], [0, 0]]), ZERO_2, t([[0, 0.5], [0, 1 / 3]]), ZERO_2),          # scaled units
    ffn_returning(t([[1, -1, 5], [0, 0, 7]]), t([0, 0, -1]), t([[0, 1], [0, 1], [0, 0]]), ZERO_2),  # a spare unit
    ffn_returning(t([[1, -1, 0], [0, 0, 0]]), t([0, 0, 1]), t([[0, 1], [0, 1], [0, -1]]), t([0, 1])),  # bias unit
    ffn_returning(t([[1], [0]]) @ t([[1, -1]]), ZERO_2, RIGHT_W_2.double(), torch.zeros(2, dtype=torch.float64)),
    lambda: ([[1, -1], [0, 0]], [0, 0], [[0, 1], [0, 1]], [0, 0]),                        # plain lists
    lambda: (np.array([[1.0, -1.0], [0, 0]]), np.zeros(2), np.array([[0.0, 1.0], [0, 1]]), np.zeros(2)),
])
def test_any_network_that_computes_the_absolute_value_passes(answer, capsys):
    verdict = checks.check_absolute_value_ffn(answer)
    capsys.readouterr()
    assert verdict.passed, verdict.message


def test_block_params_accepts_whole_numbers_only(capsys):
    right = solution("block_params")
    assert checks.check_block_params(lambda *a: np.int64(right(*a)))
    assert checks.check_block_params(lambda *a: torch.tensor(right(*a)))
    for as_float in (lambda *a: float(right(*a)), lambda *a: torch.tensor(float(right(*a)))):
        verdict = checks.check_block_params(as_float)
        assert not verdict and "it is a float" in verdict.message
    capsys.readouterr()


# --------------------------------------------------------------------------- whatever is returned, no exception


def test_another_device_is_named(capsys):
    verdict = checks.check_layer_norm(lambda x, *a: torch.zeros_like(x, device="meta"))
    capsys.readouterr()
    assert not verdict and "a tensor on the meta device, which holds no values" in verdict.message


# --------------------------------------------------------------------------- the cases


def test_the_cases_are_built_to_expose_the_mistakes():
    for seed in SEEDS:
        for x, gain, bias, _ in checks.cases_for(checks.EXERCISES["layer_norm"], seed):
            *lead, T, d = x.shape
            assert 3 <= d <= 8 and T >= 2 and T != d and all(b >= 2 for b in lead)
            assert gain.shape == bias.shape == (d,) and (gain - 1).abs().min() > 0 and bias.abs().min() > 0
        eps_values = [c[-1] for c in checks.cases_for(checks.EXERCISES["layer_norm"], seed)]
        assert 1e-5 in eps_values and max(eps_values) >= 0.05 and len(set(eps_values)) >= 3
        small = checks.cases_for(checks.EXERCISES["layer_norm"], seed)[-1][0]
        assert small.var(-1, unbiased=False).max() < 0.01                   # eps = 0.1 dominates
        cases = checks.cases_for(checks.EXERCISES["block_forward"], seed)
        assert sorted(c[-1] for c in cases) == ["parallel", "parallel", "post", "post", "pre", "pre"]
        assert all(c[0].shape[0] in (1, 3) for c in cases) and cases[0][0].shape[0] == 3
        for d_model, n_heads, _ in checks.cases_for(checks.EXERCISES["block_params"], seed):
            assert n_heads >= 2 and d_model % n_heads == 0
        assert sum(d_ff != 4 * d_model for d_model, _, d_ff in checks.cases_for(checks.EXERCISES["block_params"],
                                                                                 seed)) >= 3


def test_every_call_gets_fresh_modules(capsys):
    """A function that wrecks the modules it was given changes nothing for the next call, nor for
    the reference; and a check leaves the global random generator as it was."""
    seen = []

    def wrecks_its_modules(x, attn, ffn, ln_1, ln_2, norm):
        out = learner_block()(x, attn, ffn, ln_1, ln_2, norm)
        seen.append((attn, ln_1))
        with torch.no_grad():
            for module in (attn, ffn, ln_1, ln_2):
                for p in module.parameters():
                    p.zero_()
        return out

    state = torch.random.get_rng_state()
    assert checks.check_block_forward(wrecks_its_modules)
    assert checks.check_block_forward(solution("block_forward"))
    assert torch.equal(torch.random.get_rng_state(), state)
    capsys.readouterr()
    assert len({id(a) for a, _ in seen}) == len(seen) == 12   # 6 cases, for the values and the gradients
    (x, attn, ffn, ln_1, ln_2, norm), = checks.cases_for(checks.EXERCISES["block_forward"])[:1]
    built = engine._clone((attn, ln_1))
    assert isinstance(built[0], MultiHeadAttention) and isinstance(built[1], blocks.LayerNorm)
    assert all(p.dtype == torch.float64 and p.device.type == "cpu" for m in built for p in m.parameters())


# --------------------------------------------------------------------------- the engine features chapter 3 uses


def test_built_arguments_are_named_and_refused_when_unknown():
    case = checks.cases_for(checks.EXERCISES["block_forward"])[0]
    assert [engine.describe(a) for a in case[1:5]] == ["a MultiHeadAttention", "a FeedForward", "a LayerNorm",
                                                       "a LayerNorm"]
    with pytest.raises(ValueError, match="kind must be a registered builder"):
        engine.built("NoSuchModule", config={})
    with pytest.raises(ValueError, match="already registered"):
        engine.register_builder("LayerNorm", lambda **fields: None)


def test_a_wrong_shape_names_the_modules_not_their_weights(capsys):
    verdict = checks.check_block_forward(lambda x, *parts: x[:, :1])
    capsys.readouterr()
    assert "output shape (3, 1, 8), expected (3, 4, 8) for x of shape (3, 4, 8), attn = a MultiHeadAttention, " \
           "ffn = a FeedForward, ln_1 = a LayerNorm, ln_2 = a LayerNorm, norm = 'pre'." in verdict.message


# --------------------------------------------------------------------------- the grader, end to end


def test_the_grader_judges_chapter_three_in_its_sandbox(tmp_path):
    in_place = SOLUTIONS["block_forward"].replace("x = x + attn(ln_1(x))", "x += attn(ln_1(x))")
    rows = SUITE.graded(tmp_path, {**SOLUTIONS, "block_forward": in_place})
    assert list(rows) == CHAPTER + DRILLS
    assert all(rows[n][0] == checks.PASS for n in ALL if n != "block_forward"), rows
    assert rows["block_forward"][0] == checks.FAIL and "changed its input `x` in place" in rows["block_forward"][1]


def test_the_grader_reports_stubs_and_missing_cells(tmp_path):
    rows = SUITE.graded(tmp_path, {name: SUITE.stub(name) for name in ("layer_norm", "block_forward")})
    assert rows["layer_norm"][0] == rows["block_forward"][0] == checks.NOT_IMPLEMENTED
    assert rows["absolute_value_ffn"][0] == rows["block_params"][0] == "missing" and "rms_norm" not in rows


# --------------------------------------------------------------------------- the references


def test_layer_norm_reference_is_torch_layer_norm_and_the_library():
    for x, gain, bias, eps in checks.cases_for(checks.EXERCISES["layer_norm"], 2):
        d = x.shape[-1]
        torch_ln = nn.LayerNorm(d, eps=eps, dtype=torch.float64)
        ours = blocks.LayerNorm(d, eps).double()
        with torch.no_grad():
            for m in (torch_ln, ours):
                m.weight.copy_(gain)
                m.bias.copy_(bias)
            expected = torch_ln(x)
            torch.testing.assert_close(checks.EXERCISES["layer_norm"].reference(x, gain, bias, eps), expected)
            torch.testing.assert_close(ours(x), expected)


def test_rms_norm_reference_is_torch_rms_norm_and_the_library():
    for x, gain, eps in checks.cases_for(checks.EXERCISES["rms_norm"], 2):
        d = x.shape[-1]
        torch_rms = nn.RMSNorm(d, eps=eps, dtype=torch.float64)
        ours = blocks.RMSNorm(d, eps).double()
        with torch.no_grad():
            for m in (torch_rms, ours):
                m.weight.copy_(gain)
            expected = torch_rms(x)
            torch.testing.assert_close(checks.EXERCISES["rms_norm"].reference(x, gain, eps), expected)
            torch.testing.assert_close(ours(x), expected)


def block_by_hand(x, attn, ffn, ln_1, ln_2, norm):
    """The block from the stored weights and torch primitives (F.scaled_dot_product_attention)."""
    A, W, L1, L2 = attn["state"], ffn["state"], ln_1["state"], ln_2["state"]
    H = attn["config"]["n_heads"]

    def attention(t):
        B, T, C = t.shape
        q, k, v = (F.linear(t, A[f"{p}.weight"], A[f"{p}.bias"]).view(B, T, H, C // H).transpose(1, 2)
                   for p in ("q_proj", "k_proj", "v_proj"))
        heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.linear(heads.transpose(1, 2).reshape(B, T, C), A["o_proj.weight"], A["o_proj.bias"])

    def feed_forward(t):
        return F.linear(F.gelu(F.linear(t, W["up_proj.weight"], W["up_proj.bias"])), W["down_proj.weight"],
                        W["down_proj.bias"])

    def norm_1(t):
        return F.layer_norm(t, t.shape[-1:], L1["weight"], L1["bias"], 1e-5)

    def norm_2(t):
        return F.layer_norm(t, t.shape[-1:], L2["weight"], L2["bias"], 1e-5)

    if norm == "pre":
        x = x + attention(norm_1(x))
        return x + feed_forward(norm_2(x))
    if norm == "parallel":
        return x + attention(norm_1(x)) + feed_forward(norm_2(x))
    x = norm_1(x + attention(x))
    return norm_2(x + feed_forward(x))


def test_block_forward_reference_is_the_block_written_by_hand():
    ex = checks.EXERCISES["block_forward"]
    for case in checks.cases_for(ex, 4):
        torch.testing.assert_close(ex.reference(*engine._clone(case)), block_by_hand(*case), rtol=1e-12, atol=1e-12)


def test_block_forward_reference_is_a_transformer_block_with_the_same_weights():
    ex = checks.EXERCISES["block_forward"]
    for x, attn, ffn, ln_1, ln_2, norm in checks.cases_for(ex, 1):
        if norm == "parallel":                       # not a TransformerBlock placement: block_by_hand checks it
            continue
        block = blocks.TransformerBlock(attn["config"]["d_model"], attn["config"]["n_heads"],
                                        ffn["config"]["d_ff"], norm=norm).double()
        state = {f"{prefix}.{k}": v for prefix, part in (("attn", attn), ("ffn", ffn), ("ln_1", ln_1),
                                                          ("ln_2", ln_2)) for k, v in part["state"].items()}
        block.load_state_dict(state)
        with torch.no_grad():
            torch.testing.assert_close(ex.reference(*engine._clone((x, attn, ffn, ln_1, ln_2, norm))), block(x),
                                       rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("d_model", "n_heads", "d_ff"), [(8, 2, 20), (768, 12, 3072), (1024, 16, 4096),
                                                          (100, 5, 333)])
def test_block_params_reference_counts_what_torch_counts(d_model, n_heads, d_ff):
    with torch.device("meta"):
        torch_layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ff)     # the same parts, other names
    expected = sum(p.numel() for p in torch_layer.parameters())
    closed_form = 4 * d_model ** 2 + 2 * d_model * d_ff + 9 * d_model + d_ff
    assert ch03.block_params_reference(d_model, n_heads, d_ff) == expected == closed_form
    assert blocks.block_param_count(d_model, d_ff) == expected


def test_the_absolute_value_reference_works_in_the_library_feed_forward():
    W_1, b_1, W_2, b_2 = ch03.absolute_value_reference()
    ffn = blocks.FeedForward(2, W_1.shape[1], activation="relu").double()
    with torch.no_grad():                            # nn.Linear stores W transposed: y = x Wᵀ + b
        ffn.up_proj.weight.copy_(W_1.T)
        ffn.up_proj.bias.copy_(b_1)
        ffn.down_proj.weight.copy_(W_2.T)
        ffn.down_proj.bias.copy_(b_2)
        a = torch.linspace(-7, 7, 141, dtype=torch.float64)
        x = torch.stack([a, torch.zeros_like(a)], dim=-1)
        torch.testing.assert_close(x + ffn(x), torch.stack([a, a.abs()], dim=-1))
    assert verdict_for("absolute_value_ffn", ch03.absolute_value_reference)
    # the in-book check, like the grader, names the reference as the library's own answer
    assert not checks.check_absolute_value_ffn(ch03.absolute_value_reference)


# --------------------------------------------------------------------------- the library's own answers

LIBRARY_ANSWERS = [   # (exercise, a learner's answer that calls the library, the call the grader names)
    ("layer_norm", """
        import torch.nn.functional as F

        def layer_norm(x, gain, bias, eps=1e-5):
            return F.layer_norm(x, (x.shape[-1],), gain, bias, eps)
        """, "torch.nn.functional.layer_norm"),
    ("layer_norm", """
        import torch

        def layer_norm(x, gain, bias, eps=1e-5):
            ln = torch.nn.LayerNorm(x.shape[-1], eps=eps, dtype=x.dtype)
            with torch.no_grad():
                ln.weight.copy_(gain)
                ln.bias.copy_(bias)
            return ln(x).detach()
        """, "torch.nn.functional.layer_norm"),
    ("layer_norm", """
        from tinyformer.blocks import LayerNorm

        def layer_norm(x, gain, bias, eps=1e-5):
            ln = LayerNorm(x.shape[-1], eps).to(x.dtype)
            ln.weight.data, ln.bias.data = gain, bias
            return ln(x).detach()
        """, "tinyformer.blocks.LayerNorm"),
    ("block_forward", """
        from tinyformer.blocks import TransformerBlock

        def block_forward(x, attn, ffn, ln_1, ln_2, norm):
            block = TransformerBlock(x.shape[-1], 1, norm="pre" if norm == "parallel" else norm)
            block.attn, block.ffn, block.ln_1, block.ln_2 = attn, ffn, ln_1, ln_2
            if norm == "parallel":
                return x + attn(ln_1(x)) + ffn(ln_2(x))
            return block(x)
        """, "tinyformer.blocks.TransformerBlock"),
    ("block_params", """
        import torch
        from tinyformer.blocks import TransformerBlock

        def block_params(d_model, n_heads, d_ff):
            with torch.device("meta"):
                block = TransformerBlock(d_model, n_heads, d_ff)
            return sum(p.numel() for p in block.parameters())
        """, "tinyformer.blocks.TransformerBlock"),
    ("block_params", """
        from tinyformer.blocks import block_param_count

        def block_params(d_model, n_heads, d_ff):
            return block_param_count(d_model, d_ff)
        """, "tinyformer.blocks.block_param_count"),
    ("rms_norm", """
        import torch.nn.functional as F

        def rms_norm(x, gain, eps=1e-6):
            return F.rms_norm(x, (x.shape[-1],), gain, eps)
        """, "torch.nn.functional.rms_norm"),
    ("layer_norm", """
        import torch

        def layer_norm(x, gain, bias, eps=1e-5):
            return torch.native_layer_norm(x, (x.shape[-1],), gain, bias, eps)[0]
        """, "torch.native_layer_norm"),
    ("layer_norm", """
        import torch.nn.functional as F

        def layer_norm(x, gain, bias, eps=1e-5):
            d = x.shape[-1]
            return F.group_norm(x.reshape(-1, d), 1, gain, bias, eps).reshape(x.shape)
        """, "group_norm"),
    ("block_params", """
        import torch

        def block_params(d_model, n_heads, d_ff):
            with torch.device("meta"):
                layer = torch.nn.TransformerEncoderLayer(d_model, n_heads, d_ff)
            return sum(p.numel() for p in layer.parameters())
        """, "torch.nn.TransformerEncoderLayer"),
    ("block_params", """
        import torch
        from tinyformer.attention import MultiHeadAttention
        from tinyformer.blocks import FeedForward

        def block_params(d_model, n_heads, d_ff):
            with torch.device("meta"):
                parts = [MultiHeadAttention(d_model, n_heads), FeedForward(d_model, d_ff)]
            return sum(p.numel() for m in parts for p in m.parameters()) + 4 * d_model
        """, "tinyformer.attention.MultiHeadAttention"),
    ("block_params", """
        import torch.nn as nn

        def block_params(d_model, n_heads, d_ff):
            layers = [nn.Linear(d_model, d_model) for _ in range(4)]
            layers += [nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)]
            return sum(p.numel() for m in layers for p in m.parameters())
        """, "torch.nn.Linear"),
    ("layer_norm", """
        import torch.nn.functional as F

        def layer_norm(x, gain, bias, eps=1e-5):
            flat = x.reshape(1, -1, x.shape[-1])            # (1, tokens, d): each token a channel
            return F.instance_norm(flat, eps=eps).reshape(x.shape) * gain + bias
        """, "instance_norm"),
    ("layer_norm", """
        import torch.nn.functional as F

        def layer_norm(x, gain, bias, eps=1e-5):
            centred = x - x.mean(-1, keepdim=True)
            return F.rms_norm(centred, (x.shape[-1],), gain, eps) + bias
        """, "rms_norm"),
    ("layer_norm", """
        import torch

        def layer_norm(x, gain, bias, eps=1e-5):
            return torch.ops.aten.layer_norm(x, [x.shape[-1]], gain, bias, eps)
        """, "torch.layer_norm"),
    ("layer_norm", """
        import torch

        def layer_norm(x, gain, bias, eps=1e-5):
            return torch.ops.aten.native_layer_norm.default(x, [x.shape[-1]], gain, bias, eps)[0]
        """, "torch.native_layer_norm"),
    ("rms_norm", """
        import torch

        def rms_norm(x, gain, eps=1e-6):
            return torch.ops.aten.rms_norm(x, [x.shape[-1]], gain, eps)
        """, "torch.rms_norm"),
    ("layer_norm", """
        import torch

        def layer_norm(x, gain, bias, eps=1e-5):
            flat = x.reshape(1, -1, x.shape[-1])                     # (1, tokens, d): each token a channel
            out = torch.native_batch_norm(flat, None, None, None, None, True, 0.0, eps)[0]
            return out.reshape(x.shape) * gain + bias
        """, "torch.native_batch_norm"),
    ("layer_norm", """
        import torch

        def layer_norm(x, gain, bias, eps=1e-5):
            flat = x.reshape(-1, 1, x.shape[-1])                     # each token a group of one channel
            out = torch.native_group_norm(flat, None, None, flat.shape[0], 1, x.shape[-1], 1, eps)[0]
            return out.reshape(x.shape) * gain + bias
        """, "torch.native_group_norm"),
    ("layer_norm", """
        import torch._refs

        def layer_norm(x, gain, bias, eps=1e-5):
            return torch._refs.native_layer_norm(x, [x.shape[-1]], gain, bias, eps)[0]
        """, "torch._refs.native_layer_norm"),
    ("layer_norm", """
        import torch

        def layer_norm(x, gain, bias, eps=1e-5):
            centred = x - x.mean(-1, keepdim=True)
            return torch._fused_rms_norm(centred, [x.shape[-1]], gain, eps)[0] + bias
        """, "torch._fused_rms_norm"),
    ("rms_norm", """
        import torch

        def rms_norm(x, gain, eps=1e-6):
            both = torch.cat([x, -x], -1).reshape(1, -1, 2 * x.shape[-1])   # mean 0: each token a channel
            out = torch.native_batch_norm(both, None, None, None, None, True, 0.0, eps)[0]
            return out.reshape(*x.shape[:-1], -1)[..., :x.shape[-1]] * gain
        """, "torch.native_batch_norm"),
    ("rms_norm", """
        import torch
        import torch.nn.functional as F

        def rms_norm(x, gain, eps=1e-6):
            both = torch.cat([x, -x], -1)                  # mean 0, variance mean(x²)
            return F.layer_norm(both, (both.shape[-1],), eps=eps)[..., :x.shape[-1]] * gain
        """, "layer_norm"),
]


@pytest.mark.parametrize("k", range(len(LIBRARY_ANSWERS)),
                         ids=[f"{n}-{c}-{k}" for k, (n, _, c) in enumerate(LIBRARY_ANSWERS)])
def test_the_library_answer_is_flagged(k):
    name, source, caught = LIBRARY_ANSWERS[k]
    fn = define(textwrap.dedent(source), checks.EXERCISES[name].function)
    rec, verdict = exercise_suite.harvest(name, fn)
    assert any(caught in flag for flag in rec["flags"]), rec["flags"]
    # its outputs are right (a module's copied weights may give other gradients): the flag alone takes the credit
    assert verdict.status == checks.PASS or "the values are right" in verdict.message, verdict.message
    exercise_suite.in_book_refuses(name, fn, rec["flags"])


@pytest.mark.parametrize("name, fn", [("layer_norm", ln_detached), ("rms_norm", rms_detached),
                                      ("block_forward", block_attention_detached)])
def test_the_grader_compares_gradients_too(name, fn):
    """The grader's kernel records the gradients (a second pass, on fresh copies) and its verdict,
    like the in-book check's, refuses right values with a cut gradient."""
    rec, verdict = exercise_suite.harvest(name, fn)
    assert rec["grads"] and all(isinstance(g, list) for g in rec["grads"])
    assert verdict.status == checks.FAIL and "the gradient with respect to `x` is not" in verdict.message
    right, _ = exercise_suite.harvest(name, solution(name))
    assert exercise_suite.harvest(name, solution(name))[1].passed and right["grads"]


def test_a_torchscript_helper_is_named(tmp_path, monkeypatch):
    """TorchScript runs the library's operator in C++, out of the profiler's sight: its graph names it."""
    (tmp_path / "scripted_answer.py").write_text(textwrap.dedent("""
        import warnings

        import torch
        import torch.nn.functional as F


        def _normed(x, gain, bias, eps: float):
            return F.layer_norm(x, [x.shape[-1]], gain, bias, eps)


        with warnings.catch_warnings():                         # torch.jit is deprecated
            warnings.simplefilter("ignore", DeprecationWarning)
            _normed = torch.jit.script(_normed)


        def layer_norm(x, gain, bias, eps=1e-5):
            return _normed(x, gain, bias, eps)
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import scripted_answer
    rec, verdict = exercise_suite.harvest("layer_norm", scripted_answer.layer_norm)
    assert any("layer_norm" in flag for flag in rec["flags"]), rec["flags"]
    exercise_suite.in_book_refuses("layer_norm", scripted_answer.layer_norm, rec["flags"])


def test_torchscript_compiled_inside_the_answer_is_named(tmp_path, monkeypatch):
    """Scripted while the check runs, the helper stays Python (the JIT is off), so its call is seen."""
    (tmp_path / "scripted_inside.py").write_text(textwrap.dedent("""
        import warnings

        import torch
        import torch.nn.functional as F


        def _normed(x, gain, bias, eps: float):
            return F.layer_norm(x, [x.shape[-1]], gain, bias, eps)


        def layer_norm(x, gain, bias, eps=1e-5):
            with warnings.catch_warnings():                     # torch.jit is deprecated
                warnings.simplefilter("ignore", DeprecationWarning)
                return torch.jit.script(_normed)(x, gain, bias, eps)
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import scripted_inside
    rec, verdict = exercise_suite.harvest("layer_norm", scripted_inside.layer_norm)
    assert any("layer_norm" in flag for flag in rec["flags"]), rec["flags"]
    exercise_suite.in_book_refuses("layer_norm", scripted_inside.layer_norm, rec["flags"])
    import torch.jit._state
    assert torch.jit._state._enabled.enabled        # the JIT is back on after the check
