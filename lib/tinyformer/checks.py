"""Self-checking exercises: one ``check_*`` function per coding exercise in the book.

A check runs the reader's function on randomized inputs, compares it with the library's
reference, and prints one verdict line that starts with ✓ or ✗. When the answer is wrong it
looks for the *mistake*: each exercise carries a list of known-wrong implementations (softmax
over the wrong axis, a missing ``1/√d_k``, a mask that hides the diagonal, …) and, if the
reader's outputs equal one of them, the hint names that mistake. A check never raises on a
wrong answer, and a stub that still raises ``NotImplementedError`` is told so.

The same judging code serves the grader (:mod:`tinyformer.grade`), which runs the reader's
function in a separate process and hands only its outputs to :func:`judge`.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from tinyformer import attention as A

PASS, FAIL, NOT_IMPLEMENTED, ERROR = "pass", "fail", "not implemented", "error"


@dataclass
class Verdict:
    """The result of a check. Truthy when the exercise passed; ``message`` is the printed line."""

    exercise: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return self.message

    def wrapped(self, width: int = 88) -> str:
        """The message folded to ``width`` columns (continuation lines indented), as printed."""
        return textwrap.fill(self.message, width, subsequent_indent="  ", break_long_words=False,
                             break_on_hyphens=False)

    def _ipython_display_(self):
        """The verdict line has already been printed; show nothing more in a notebook."""


@dataclass
class Outcome:
    """What the reader's function produced on the cases: outputs, or the exception it raised."""

    outputs: list | None = None
    error: tuple[str, str] | None = None  # (exception type name, message)


@dataclass
class Exercise:
    name: str                                  # the key, also the check's suffix: check_<name>
    number: str                                # "2.1"
    function: str                              # the name of the function the reader writes
    notebook: str                              # the chapter notebook it belongs to
    make_cases: Callable[[torch.Generator], list[tuple]]
    reference: Callable
    mistakes: list[tuple[Callable, str]] = field(default_factory=list)
    generic_hint: str = ""
    exact_dtype: bool = False                  # require the reference's dtype (e.g. a bool mask)

    @property
    def title(self) -> str:
        return f"Exercise {self.number} ({self.function})"


EXERCISES: dict[str, Exercise] = {}


def _register(ex: Exercise) -> Exercise:
    EXERCISES[ex.name] = ex
    return ex


# --------------------------------------------------------------------------- judging


def run_cases(fn: Callable, cases: list[tuple]) -> Outcome:
    """Call ``fn(*case)`` on every case; stop at the first exception and record it."""
    outputs = []
    for case in cases:
        try:
            outputs.append(fn(*_clone(case)))
        except Exception as err:  # noqa: BLE001 - any exception is the reader's to see
            return Outcome(error=(type(err).__name__, str(err)))
    return Outcome(outputs=outputs)


def _clone(case: tuple) -> tuple:
    """Fresh copies, so a function that writes into its inputs cannot corrupt the next call."""
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case)


def _same(out, ref, exact_dtype: bool) -> bool:
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
        return False
    if exact_dtype and out.dtype != ref.dtype:
        return False
    if ref.dtype == torch.bool or out.dtype == torch.bool:
        return bool(torch.equal(out.to(torch.float64), ref.to(torch.float64)))
    return bool(torch.allclose(out.to(torch.float64), ref.to(torch.float64), rtol=1e-5, atol=1e-7,
                               equal_nan=True))


def _all_same(outputs, refs, exact_dtype=False) -> bool:
    return len(outputs) == len(refs) and all(_same(o, r, exact_dtype) for o, r in zip(outputs, refs))


def judge(ex: Exercise, cases: list[tuple], outcome: Outcome) -> Verdict:
    """Compare an :class:`Outcome` with the reference and name the likely mistake."""
    t = ex.title
    if outcome.error is not None:
        kind, msg = outcome.error
        if kind == "NotImplementedError":
            return Verdict(ex.name, NOT_IMPLEMENTED,
                           f"✗ {t}: not implemented yet - replace the `raise NotImplementedError` line with your code.")
        return Verdict(ex.name, ERROR, f"✗ {t}: your function raised {kind}: {msg}")
    outputs = outcome.outputs or []
    refs = [ex.reference(*_clone(c)) for c in cases]
    if _all_same(outputs, refs, ex.exact_dtype):
        return Verdict(ex.name, PASS, f"✓ {t}: correct on all {len(cases)} test inputs.")
    for wrong, hint in ex.mistakes:
        if _all_same(outputs, [wrong(*_clone(c)) for c in cases], ex.exact_dtype):
            return Verdict(ex.name, FAIL, f"✗ {t}: wrong output. Hint: {hint}")
    for case, out, ref in zip(cases, outputs, refs):
        if not isinstance(out, torch.Tensor):
            return Verdict(ex.name, FAIL, f"✗ {t}: returned {type(out).__name__}, expected a torch.Tensor.")
        if out.shape != ref.shape:
            return Verdict(ex.name, FAIL, f"✗ {t}: output shape {tuple(out.shape)}, expected {tuple(ref.shape)} "
                           f"for inputs of shapes {_shapes(case)}.")
        if ex.exact_dtype and out.dtype != ref.dtype:
            return Verdict(ex.name, FAIL, f"✗ {t}: output dtype {out.dtype}, expected {ref.dtype}.")
        if out.is_floating_point() and not torch.isfinite(out).all() and torch.isfinite(ref).all():
            return Verdict(ex.name, FAIL, f"✗ {t}: the output contains NaN or inf where the reference is finite. "
                           f"Hint: {ex.generic_hint}")
    return Verdict(ex.name, FAIL, f"✗ {t}: wrong values. Hint: {ex.generic_hint}")


def _shapes(case: tuple) -> str:
    return ", ".join(str(tuple(a.shape)) if isinstance(a, torch.Tensor) else repr(a) for a in case)


def cases_for(ex: Exercise, seed: int = 0) -> list[tuple]:
    return ex.make_cases(torch.Generator().manual_seed(seed))


def check(name: str, fn: Callable, seed: int = 0) -> Verdict:
    """Run exercise ``name`` on ``fn``, print the verdict line, and return the :class:`Verdict`."""
    ex = EXERCISES[name]
    if not callable(fn):
        verdict = Verdict(name, ERROR, f"✗ {ex.title}: expected a function, got {type(fn).__name__}.")
    else:
        cases = cases_for(ex, seed)
        verdict = judge(ex, cases, run_cases(fn, cases))
    print(verdict.wrapped())
    return verdict


# --------------------------------------------------------------------------- chapter 2


def _randn(g, *shape, scale=1.0):
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale


# Exercise 2.1: a stable softmax over the last axis.

def _softmax_cases(g):
    big = _randn(g, 3, 6, scale=1.0)
    big[0] += 1000.0        # exp(1000) overflows: only a shifted softmax survives this row
    big[2] -= 1000.0        # far below the other rows: a *global* shift underflows here
    return [(_randn(g, 4, 5),), (_randn(g, 2, 3, 7, scale=3.0),), (big,)]


def _naive_softmax(s):
    return s.exp() / s.exp().sum(-1, keepdim=True)


def _softmax_first_axis(s):
    return A.softmax(s, dim=0)


def _softmax_global_max(s):
    e = (s - s.max()).exp()
    return e / e.sum(-1, keepdim=True)


def _softmax_unnormalised(s):
    return (s - s.amax(-1, keepdim=True)).exp()


_register(Exercise(
    "stable_softmax", "2.1", "stable_softmax", "02-attention",
    _softmax_cases, lambda s: A.softmax(s, dim=-1),
    [
        (_naive_softmax, "exp() overflows for large scores (exp(1000) is inf). "
                         "Subtract each row's maximum before exponentiating."),
        (_softmax_first_axis, "you normalised over the first axis; normalise over the last one "
                              "(dim=-1), so that every row sums to 1."),
        (_softmax_global_max, "you subtracted the maximum of the whole tensor; subtract each row's own "
                              "maximum (amax(dim=-1, keepdim=True)), or rows far below it underflow to 0/0."),
        (_softmax_unnormalised, "the rows do not sum to 1: divide the exponentials by their sum over the row."),
    ],
    "compare with torch.softmax(scores, dim=-1) on a small input, row by row.",
))


# Exercise 2.2: the causal mask.

def _mask_cases(g):
    return [(1,), (2,), (5,), (8,)]


_register(Exercise(
    "causal_mask", "2.2", "causal_mask", "02-attention",
    _mask_cases, A.causal_mask,
    [
        (lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1),
         "the diagonal must be True: token i may attend to itself. With tril(-1) the first row is "
         "all False and its softmax is 0/0 = NaN."),
        (lambda T: torch.ones(T, T, dtype=torch.bool).triu(1),
         "True must mean *allowed*. You marked the future positions, the ones to hide: invert it."),
        (lambda T: torch.ones(T, T, dtype=torch.bool).triu(),
         "this is the upper triangle: row i (the query) may see columns 0..i, which is the lower triangle."),
        (lambda T: torch.ones(T, T, dtype=torch.bool),
         "everything is allowed, so nothing is masked: a token would see the tokens after it."),
        (lambda T: torch.ones(T, T).tril(),
         "the pattern is right but the dtype is not: return a torch.bool tensor (True = allowed)."),
    ],
    "row i should be True in columns 0..i and False after; compare with a 3x3 example drawn by hand.",
    exact_dtype=True,
))


# Exercise 2.3: one causal attention head.

def _head_cases(g):
    cases = []
    for B, T, d_model, d_k, d_v in ((2, 5, 8, 4, 6), (1, 7, 16, 8, 3), (3, 4, 6, 6, 6)):
        x = _randn(g, B, T, d_model)
        cases.append((x, _randn(g, d_model, d_k, scale=0.8), _randn(g, d_model, d_k, scale=0.8),
                      _randn(g, d_model, d_v)))
    return cases


def _head_variant(scale="sqrt", axis=-1, mask="causal"):
    """A head built with one deliberate mistake, to recognise that mistake in a reader's output."""
    def head(x, W_Q, W_K, W_V):
        Q, K, V = x @ W_Q, x @ W_K, x @ W_V
        d_k = Q.shape[-1]
        s = Q @ K.transpose(-2, -1)
        s = {"sqrt": s / math.sqrt(d_k), "none": s, "d_k": s / d_k}[scale]
        T = x.shape[-2]
        allowed = {"causal": A.causal_mask(T), "strict": torch.ones(T, T, dtype=torch.bool).tril(-1),
                   "none": None}[mask]
        if allowed is not None:
            s = s.masked_fill(~allowed, float("-inf"))
        return torch.softmax(s, dim=axis) @ V
    return head


_HEAD_MISTAKES = [
    (_head_variant(scale="none"), "the scores are not scaled: divide QKᵀ by √d_k (d_k = the width of the keys)."),
    (_head_variant(scale="d_k"), "you divided by d_k; divide by its square root, √d_k."),
    (_head_variant(axis=-2), "the softmax runs over the wrong axis: each *query's* row of weights must sum "
                             "to 1, so use dim=-1 (over the keys), not dim=-2."),
    (_head_variant(mask="strict"), "your mask hides the diagonal (tril(-1) or triu(0)): a token must be "
                                   "allowed to attend to itself, or the first row is all -inf and gives NaN."),
    (_head_variant(mask="none"), "there is no causal mask: position i sees the tokens after it. Fill the "
                                 "scores above the diagonal with -inf before the softmax."),
]

_register(Exercise(
    "attention_head", "2.3", "attention_head", "02-attention",
    _head_cases, lambda x, W_Q, W_K, W_V: A.attention_head(x, W_Q, W_K, W_V, causal=True),
    _HEAD_MISTAKES,
    "check the order Q = x @ W_Q, K = x @ W_K, V = x @ W_V; scores Q @ K.transpose(-2, -1) / √d_k; "
    "mask; softmax over the last axis; then weights @ V.",
))


# Exercise 2.4: multi-head attention.

def _mha_cases(g):
    cases = []
    for B, T, d_model, H in ((2, 5, 8, 2), (1, 6, 12, 3), (2, 4, 8, 4)):
        W = [_randn(g, d_model, d_model, scale=d_model ** -0.5 * 2) for _ in range(4)]
        cases.append((_randn(g, B, T, d_model), *W, H))
    return cases


def _mha_variant(split="contiguous", scale="head", mask=True, use_W_O=True):
    def mha(x, W_Q, W_K, W_V, W_O, n_heads):
        *lead, T, C = x.shape
        D = C // n_heads

        def heads(t):  # (..., T, C) -> (..., H, T, D)
            if split == "interleaved":
                return t.reshape(*lead, T, D, n_heads).movedim(-1, -3)
            return t.reshape(*lead, T, n_heads, D).transpose(-3, -2)

        Q, K, V = heads(x @ W_Q), heads(x @ W_K), heads(x @ W_V)
        s = Q @ K.transpose(-2, -1) / math.sqrt(D if scale == "head" else C)
        if mask:
            s = s.masked_fill(~A.causal_mask(T), float("-inf"))
        out = torch.softmax(s, dim=-1) @ V                       # (..., H, T, D)
        if split == "interleaved":
            out = out.movedim(-3, -1).reshape(*lead, T, C)
        else:
            out = out.transpose(-3, -2).reshape(*lead, T, C)
        return out @ W_O if use_W_O else out
    return mha


_register(Exercise(
    "multi_head_attention", "2.4", "multi_head_attention", "02-attention",
    _mha_cases, A.multi_head_attention,
    [
        (_mha_variant(use_W_O=False), "the heads are concatenated but never mixed: multiply the "
                                      "concatenation by W_O."),
        (_mha_variant(scale="model"), "each head's scores must be scaled by √d_head = √(d_model / n_heads), "
                                      "not by √d_model."),
        (_mha_variant(split="interleaved"), "the heads are interleaved: head h must own the contiguous "
                                            "features h·d_head:(h+1)·d_head, so reshape to (..., T, n_heads, "
                                            "d_head) before moving the head axis."),
        (_mha_variant(mask=False), "there is no causal mask: every head must hide the tokens after the query."),
        (lambda x, W_Q, W_K, W_V, W_O, n_heads: A.multi_head_attention(x, W_Q, W_K, W_V, W_O, 1),
         "you computed a single head over all d_model features; split Q, K and V into n_heads heads."),
    ],
    "split with reshape(..., T, n_heads, d_head).transpose(-3, -2), attend per head, merge back with the "
    "inverse, then apply W_O.",
))


def check_stable_softmax(fn) -> Verdict:
    """Exercise 2.1: ``fn(scores)`` is a softmax over the last axis that never overflows."""
    return check("stable_softmax", fn)


def check_causal_mask(fn) -> Verdict:
    """Exercise 2.2: ``fn(T)`` is the ``(T, T)`` boolean causal mask (True = may attend)."""
    return check("causal_mask", fn)


def check_attention_head(fn) -> Verdict:
    """Exercise 2.3: ``fn(x, W_Q, W_K, W_V)`` is one causal, scaled attention head."""
    return check("attention_head", fn)


def check_multi_head_attention(fn) -> Verdict:
    """Exercise 2.4: ``fn(x, W_Q, W_K, W_V, W_O, n_heads)`` is causal multi-head attention."""
    return check("multi_head_attention", fn)
