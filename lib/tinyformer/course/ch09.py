"""Chapter 9 (LoRA): the exercises, their test inputs, references, known mistakes and hints.

Exercise 9.1 (``lora_forward``) is an adapted linear layer's forward pass from its tensors:
``x Wᵀ + b + (x A B) · alpha / r`` with ``weight`` stored as ``nn.Linear`` stores it, ``(d_out,
d_in)``, ``A`` ``(d_in, r)`` and ``B`` ``(r, d_out)``, so ``r`` is ``A.shape[1]``. Its layers
are square (``d_in == d_out``): an untransposed weight or update then runs and gives wrong numbers,
which name the slip, instead of raising one error message for both. The fixed cases come first, so
that the first failing case (and the hint) never depends on the seed, with ``r != alpha`` and
``r != d_in`` so that every scale slip gives another number. The gradients with respect to
``A`` and ``B`` must be the reference's: an update computed under ``torch.no_grad()`` or from
detached factors gives the right numbers and trains nothing.

Exercise 9.2 (``lora_params``) counts the trainable parameters of LoRA adapters of rank ``r`` on the
named linear maps of every block of a GPT (``d_ff = 4 · d_model``): ``r · (d_in + d_out)`` per
adapted map. As in 5.2 and 8.2, only an int passes (NumPy integers and 0-d integer tensors are
read as ints; a float that equals the count is told to return an int); each slip
(``r · d_in · d_out``, ``d_model`` for the feed-forward width, one layer, ``A`` or ``B`` only,
``(d_in + d_out)`` without ``r``, the base weights added, adapters with biases) gives its own
counts on the fixed cases.

Library answers: for 9.1, the library's ``LoRALinear`` and ``add_lora``; for 9.2,
``count_lora_params``, and ``add_lora`` and ``LoRALinear``, whose parameters an answer may count.
"""

from __future__ import annotations

import math

import torch

from tinyformer.course.engine import Exercise, register, safe_diagnosis
from tinyformer.course.engine import randint as _randint

CHAPTER = "09-lora"
F64 = torch.float64


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=F64)


# --------------------------------------------------------------------------- 9.1 the adapted layer's forward


def _forward_case(g, lead: tuple, d_in: int, d_out: int, r: int, alpha: float) -> tuple:
    """(x, weight, bias, A, B, alpha); B is random (a trained adapter), not zero."""
    return (_randn(g, *lead, d_in), _randn(g, d_out, d_in), _randn(g, d_out), _randn(g, d_in, r),
            _randn(g, r, d_out), alpha)


def _forward_cases(g):
    """Fixed first (lead dims, d, r, alpha), every layer square (d_in = d_out = d), so that an
    untransposed weight or update runs and gives wrong numbers instead of raising an error that
    could not tell the two apart:

    0. a batch of sequences (2, 3), d 4, r 2, alpha 6: every scale slip gives its own number
       (alpha/r = 3, alpha = 6, 1, r/alpha = 1/3, alpha/sqrt(r) = 4.24, alpha/d_in = 1.5).
    1. rows (2,), d 5, r 1, alpha 3.
    2. rows (3,), d 6, r 4, alpha 2.

    Then three random sizes: lead (N,) or (B, T), d 2-7, r 1-4 (below d), alpha in {0.5, 2, 8, 16}.
    """
    cases = [_forward_case(g, (2, 3), 4, 4, 2, 6.0), _forward_case(g, (2,), 5, 5, 1, 3.0),
             _forward_case(g, (3,), 6, 6, 4, 2.0)]
    for _ in range(3):
        lead = (_randint(g, 1, 4),) if _randint(g, 0, 1) else (_randint(g, 1, 3), _randint(g, 1, 4))
        alpha = (0.5, 2.0, 8.0, 16.0)[_randint(g, 0, 3)]
        d = _randint(g, 2, 7)
        cases.append(_forward_case(g, lead, d, d, _randint(g, 1, min(4, d - 1)), alpha))
    return cases


def lora_forward_reference(x, weight, bias, A, B, alpha):
    r = A.shape[1]
    return x @ weight.T + bias + (x @ A @ B) * (alpha / r)


def _forward(*, scale="alpha/r", bias="added", weight="transposed", update="xAB", base="added",
             scaled="update"):
    """The adapted layer with the slips named by the keywords; the defaults are right."""
    base_ = base

    def wrong(x, weight_, bias_, A, B, alpha):
        r, d_in = A.shape[1], A.shape[0]
        s = {"alpha/r": alpha / r, "alpha": alpha, "1": 1.0, "r/alpha": r / alpha, "alpha*r": alpha * r,
             "alpha/sqrt(r)": alpha / math.sqrt(r), "alpha/d_in": alpha / d_in, "alpha//r": alpha // r}[scale]
        out = x @ (weight_.T if weight == "transposed" else weight_)
        delta = x @ A @ B if update == "xAB" else x @ (A @ B).T
        if base_ == "missing":
            return delta * s
        if scaled == "base":                          # the frozen output scaled, the update not
            return (out + bias_) * s + delta
        if scaled == "bias too":                      # the bias inside the scaled update
            return out + (delta + bias_) * s
        if bias == "twice":                           # once in the base output, once more after
            return out + bias_ + delta * s + bias_
        if bias == "missing":
            return out + delta * s
        if bias == "scaled":                          # everything scaled, not the update alone
            return (out + bias_ + delta) * s
        return out + bias_ + delta * s
    return wrong


SCALE_ALPHA = ("you scaled the update by alpha, not alpha / r: the rank divides it (A.shape[1] is r), so that "
               "changing r does not change how large the update's steps are.")
SCALE_TIMES_R = "you multiplied by r: the scale is alpha / r, alpha divided by the rank A.shape[1]."
BIAS_TWICE = ("you added the bias twice (F.linear(x, weight, bias) already adds it, as does x @ weight.T + bias): add "
              "it once.")
SCALE_NONE = ("you added x A B without its scale: the update is (x A B) * alpha / r, and alpha is not always "
              "equal to r.")
SCALE_FLIPPED = "your scale is upside down: r / alpha where it should be alpha / r."
SCALE_RS = ("you scaled by alpha / sqrt(r), rsLoRA's rule (Kalajdzievski, 2023); this exercise, like Hu et al. and "
            "the library, divides by r itself.")
SCALE_D_IN = ("you divided alpha by a width (A.shape[0] is d_in, B.shape[1] is d_out), not by the rank: A is "
              "(d_in, r), so r is A.shape[1] (or B.shape[0]).")
BIAS_MISSING = "the base layer's bias is missing: the frozen layer computes x Wᵀ + b, and the update adds to that."
BIAS_SCALED = ("you scaled the base layer's output too: only the update, x A B, is multiplied by alpha / r; "
               "x Wᵀ + b stays as the pretrained layer computes it.")
WEIGHT_UNTRANSPOSED = ("weight is stored as nn.Linear stores it, (d_out, d_in): the base output is x @ weight.T "
                       "(or F.linear(x, weight, bias)), not x @ weight.")
UPDATE_TRANSPOSED = ("you transposed the update: A is (d_in, r) and B is (r, d_out), so x @ A @ B is already "
                     "(…, d_out); (A @ B).T is how the update looks in nn.Linear's weight layout, not how x "
                     "meets it.")
BASE_MISSING = ("you returned the update alone: the adapted layer is the frozen layer's output, x Wᵀ + b, plus "
                "the update (x A B) * alpha / r.")
SCALED_BASE = ("you scaled the frozen layer's output, (x Wᵀ + b) · alpha / r, and added the update unscaled: it is the "
               "other way round, the pretrained output stays as it is and only x A B is scaled.")
BIAS_IN_UPDATE = ("you put the bias inside the scaled update, (x A B + b) · alpha / r: the bias belongs to the frozen "
                  "layer, x Wᵀ + b, and is not scaled.")
BOTH_TRANSPOSED = ("both products are transposed: weight is (d_out, d_in), so the base output is x @ weight.T, while A "
                   "(d_in, r) and B (r, d_out) already meet x as x @ A @ B; you wrote x @ weight and x @ (A @ B).T.")
SCALE_FLOOR = ("you divided with //, floor division: alpha // r rounds the scale down (to 0 whenever r > alpha, "
               "which switches the update off); use alpha / r.")
FORWARD_FACTOR = ("the base output is right and your update points the right way, but its size is off by a factor: "
                  "the update is (x A B) * alpha / r, with r = A.shape[1].")
FORWARD_SHAPES = ("shapes: x is (…, d_in), weight (d_out, d_in) as nn.Linear stores it, A (d_in, r), B (r, d_out). "
                  "The base output is x @ weight.T, the update x @ A @ B, both (…, d_out); B @ A or A.T is the "
                  "wrong order.")
FORWARD_GENERIC = ("compute x @ weight.T + bias + (x @ A @ B) * (alpha / r) with r = A.shape[1], on the last axis "
                   "of x whatever the dimensions before it.")

FORWARD_MISTAKES = [
    (_forward(scale="alpha"), SCALE_ALPHA),
    (_forward(scale="alpha*r"), SCALE_TIMES_R),
    (_forward(bias="twice"), BIAS_TWICE),
    (_forward(scale="1"), SCALE_NONE),
    (_forward(scale="r/alpha"), SCALE_FLIPPED),
    (_forward(scale="alpha/sqrt(r)"), SCALE_RS),
    (_forward(scale="alpha/d_in"), SCALE_D_IN),
    (_forward(bias="missing"), BIAS_MISSING),
    (_forward(bias="scaled"), BIAS_SCALED),
    (_forward(weight="untransposed"), WEIGHT_UNTRANSPOSED),
    (_forward(update="transposed"), UPDATE_TRANSPOSED),
    (_forward(base="missing"), BASE_MISSING),
    (_forward(scaled="base"), SCALED_BASE),
    (_forward(scaled="bias too"), BIAS_IN_UPDATE),
    (_forward(weight="untransposed", update="transposed"), BOTH_TRANSPOSED),
    (_forward(scale="alpha//r"), SCALE_FLOOR),
]


def _diagnose_forward(cases, outputs, refs):
    """An update right up to one factor on every case (a scale slip no registered mistake makes)."""
    factors = []
    for (x, weight, bias, *_), out, ref in zip(cases, outputs, refs):
        base = x @ weight.T + bias
        want, got = (ref - base).reshape(-1), (out.to(ref.dtype) - base).reshape(-1)
        c = float(got @ want / (want @ want))
        if not (math.isfinite(c) and torch.allclose(got, c * want, rtol=1e-6, atol=1e-9)):
            return None
        factors.append(c)
    if factors and all(abs(c - 1) > 1e-6 for c in factors):
        return f"wrong output. Hint: {FORWARD_FACTOR}"
    return None

register(Exercise(
    name="lora_forward", number="9.1", function="lora_forward", chapter=CHAPTER,
    args=("x", "weight", "bias", "A", "B", "alpha"),
    library_answers=("tinyformer.lora.LoRALinear", "tinyformer.lora.add_lora"),
    make_cases=_forward_cases, reference=lora_forward_reference, returns="the output tensor, (…, d_out)",
    grad_args=(3, 4), mistakes=FORWARD_MISTAKES,
    diagnose=safe_diagnosis(_diagnose_forward), diagnose_hints=(FORWARD_FACTOR,),
    error_hints=[
        (RuntimeError, r"(self must be a matrix|must be a matrix|Expected 2-D|2D)",
         "torch.mm and .mm() take 2-D matrices only, and x may have several leading dimensions, (B, T, d_in): use @ "
         "(torch.matmul), which multiplies over the last two axes and broadcasts the rest."),
        (RuntimeError, r"(cannot be multiplied|size of tensor a|must match the size|Expected size|mismatch)",
         FORWARD_SHAPES),
    ],
    generic_hint=FORWARD_GENERIC,
))


# --------------------------------------------------------------------------- 9.2 trainable parameters

MAPS = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj")


def _shape(name: str, d: int, d_ff: int) -> tuple[int, int]:
    """(d_in, d_out) of a block's linear map."""
    return {"up_proj": (d, d_ff), "down_proj": (d_ff, d)}.get(name, (d, d))


def _params(d_model, n_layer, r, targets, *, per="r(in+out)", d_ff="4d", layers="all", base=False,
            bias=False):
    """The count with the slips named by the keywords; the defaults are right."""
    width = 4 * d_model if d_ff in ("4d", "down square", "up square") else d_model
    total = 0
    for name in targets:
        d_in, d_out = _shape(name, d_model, width)
        if d_ff == "down square" and name == "down_proj":
            d_in = d_model                            # taken as (d_model, d_model)
        if d_ff == "up square" and name == "up_proj":
            d_out = d_model
        total += {"r(in+out)": r * (d_in + d_out), "r*in*out": r * d_in * d_out, "in+out": d_in + d_out,
                  "A only": r * d_in, "B only": r * d_out, "r*in+out": r * d_in + d_out}[per]
        if base:
            total += d_in * d_out + d_out
        if bias:                                      # the adapters given biases of their own
            total += r + d_out
    return total * (n_layer if layers == "all" else 1)


def lora_params_reference(d_model, n_layer, r, targets):
    return _params(d_model, n_layer, r, targets)


def _params_cases(g):
    """Fixed first (d_model, n_layer, r, targets): a GPT-2-medium-sized model's q and v at rank 8
    (786,432; small enough that an answer which builds the model to count it still runs), the
    chapter's model on all six maps at rank 8, a small model on the feed-forward maps alone, one
    layer; then three random ones."""
    cases = [(1024, 24, 8, ("q_proj", "v_proj")), (128, 4, 8, MAPS), (64, 3, 2, ("up_proj", "down_proj")),
             (32, 1, 4, ("q_proj", "o_proj", "up_proj"))]
    for _ in range(3):
        k = _randint(g, 1, 6)
        chosen = tuple(name for i, name in enumerate(MAPS) if (_randint(g, 0, 1) or i == k - 1))
        cases.append((8 * _randint(g, 2, 40), _randint(g, 2, 12), (1, 2, 4, 8, 16)[_randint(g, 0, 4)], chosen))
    return cases


PARAMS_FULL = ("you counted r · d_in · d_out, r copies of the full matrix: the adapter is two thin matrices, A "
               "(d_in, r) and B (r, d_out), so r · (d_in + d_out) numbers per map.")
PARAMS_FFN = ("the feed-forward maps are not square: up_proj is (d_model, 4·d_model) and down_proj (4·d_model, "
              "d_model), so each adapter there holds r · 5 · d_model numbers.")
PARAMS_ONE_LAYER = "that is one block's adapters: every one of the n_layer blocks has its own."
PARAMS_A_ONLY = "you counted A alone, r · d_in: B, (r, d_out), is trained too."
PARAMS_B_ONLY = "you counted B alone, r · d_out: A, (d_in, r), is trained too."
PARAMS_NO_R = "you left out the rank: A and B hold d_in · r and r · d_out numbers, r · (d_in + d_out) in all."
PARAMS_BASE = ("you added the frozen base weights (and biases): they do not train, so they count as zero here; "
               "only A and B do.")
PARAMS_BIAS = ("you gave the adapters biases (r + d_out more per map, as two nn.Linear layers would have): LoRA's A "
               "and B are plain matrices, with no bias.")
PARAMS_ALL_SIX = ("you counted all six maps whatever targets names: only the maps in targets get adapters "
                  "(loop over targets, not over every projection).")
PARAMS_QV = ("you counted q_proj and v_proj whatever targets names (Hu et al.'s choice, not the exercise's): loop "
             "over the names in targets.")
PARAMS_ONE_FACTOR = ("you multiplied only A's size by r, r · d_in + d_out: B is (r, d_out), so it holds r · d_out "
                     "numbers too; r · (d_in + d_out) in all.")
PARAMS_DOWN_SQUARE = ("down_proj is not square: it maps the feed-forward width back, (4·d_model, d_model), so its "
                      "adapter holds r · (4·d_model + d_model), as up_proj's does.")
PARAMS_UP_SQUARE = ("up_proj is not square: it widens the stream to the feed-forward width, (d_model, "
                    "4·d_model), so its adapter holds r · (d_model + 4·d_model), as down_proj's does.")
PARAMS_FLOAT = "the count is right but a float: return an int (use // or int(), not /)."
PARAMS_GENERIC = ("per adapted map of shape (d_in, d_out): r · (d_in + d_out); q, k, v and o are (d_model, d_model), "
                  "up (d_model, 4·d_model), down (4·d_model, d_model); times n_layer.")

PARAMS_MISTAKES = [
    (lambda d, n, r, t: _params(d, n, r, t, per="r*in*out"), PARAMS_FULL),
    (lambda d, n, r, t: _params(d, n, r, t, d_ff="d"), PARAMS_FFN),
    (lambda d, n, r, t: _params(d, n, r, t, layers="one"), PARAMS_ONE_LAYER),
    (lambda d, n, r, t: _params(d, n, r, t, per="A only"), PARAMS_A_ONLY),
    (lambda d, n, r, t: _params(d, n, r, t, per="B only"), PARAMS_B_ONLY),
    (lambda d, n, r, t: _params(d, n, r, t, per="in+out"), PARAMS_NO_R),
    (lambda d, n, r, t: _params(d, n, r, t, base=True), PARAMS_BASE),
    (lambda d, n, r, t: _params(d, n, r, t, bias=True), PARAMS_BIAS),
    (lambda d, n, r, t: _params(d, n, r, MAPS), PARAMS_ALL_SIX),
    (lambda d, n, r, t: _params(d, n, r, ("q_proj", "v_proj")), PARAMS_QV),
    (lambda d, n, r, t: _params(d, n, r, t, per="r*in+out"), PARAMS_ONE_FACTOR),
    (lambda d, n, r, t: _params(d, n, r, t, d_ff="down square"), PARAMS_DOWN_SQUARE),
    (lambda d, n, r, t: _params(d, n, r, t, d_ff="up square"), PARAMS_UP_SQUARE),
]


def _diagnose_params(cases, outputs, refs):
    if all(type(o) is float and o == r for o, r in zip(outputs, refs)):
        return f"wrong output. Hint: {PARAMS_FLOAT}"
    return None


register(Exercise(
    name="lora_params", number="9.2", function="lora_params", chapter=CHAPTER,
    args=("d_model", "n_layer", "r", "targets"),
    library_answers=("tinyformer.lora.count_lora_params", "tinyformer.lora.add_lora", "tinyformer.lora.LoRALinear"),
    make_cases=_params_cases, reference=lora_params_reference, returns="the number of trainable parameters, an int",
    rtol=0.0, atol=0.0, compare=lambda case, out, ref: type(out) is int and out == ref,
    mistakes=PARAMS_MISTAKES,
    diagnose=safe_diagnosis(_diagnose_params), diagnose_hints=(PARAMS_FLOAT,),
    generic_hint=PARAMS_GENERIC,
))

