"""Chapter 9's checks: every solution passes, every stub is 'not implemented yet', every registered
mistake is caught by its own hint whatever the seed, and wrong answers written here, the way a
learner would write them, fail with the hint that names their slip. The generic tests are written
once, in tests/exercise_suite.py; the ``globals().update(SUITE...)`` lines below take in those this
chapter runs.

The solutions and wrong answers below are written independently of ``tinyformer.course.ch09``: the
adapted layer with ``@``, ``F.linear`` and ``einsum``, and from a merged weight; the count by a loop
over the maps. The references are checked against the library's ``LoRALinear`` (an ``nn.Linear``
with the same tensors) and ``count_lora_params`` on a GPT adapted by ``add_lora``, and against Hu et
al.'s and PEFT's well-known count (4,194,304 for rank 8 on q and v of a 32-layer, 4096-wide model).
The chapter notebook (book/09-lora.ipynb) is optional here: the tests that read it are skipped
while it does not exist.
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

from tinyformer import checks
from tinyformer.course import ch09, engine
from tinyformer.lora import LoRALinear, add_lora, count_lora_params
from tinyformer.model import GPT, GPTConfig

from conftest import BOOK, define

CHAPTER = ["lora_forward", "lora_params"]
DRILLS: list[str] = []
NOTEBOOK = BOOK / "09-lora.ipynb"
F64 = torch.float64
SIX = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj")

SOLUTIONS = {
    "lora_forward": '''\
import torch


def lora_forward(x, weight, bias, A, B, alpha):
    """A LoRA-adapted linear layer: the frozen nn.Linear (weight
    (d_out, d_in), bias (d_out,)) plus the update (x A B) * alpha / r,
    with A (d_in, r) and B (r, d_out). x: (..., d_in) -> (..., d_out)."""
    # BEGIN SOLUTION
    r = A.shape[1]                          # the rank
    base = x @ weight.T + bias              # the pretrained layer
    update = (x @ A) @ B                    # through the r-wide bottleneck
    return base + update * (alpha / r)
    # END SOLUTION
''',
    "lora_params": '''\
def lora_params(d_model, n_layer, r, targets):
    """Trainable parameters of rank-r adapters on the linear maps named
    in targets (of q_proj, k_proj, v_proj, o_proj, up_proj, down_proj)
    in every block of a GPT whose feed-forward width is 4 * d_model."""
    # BEGIN SOLUTION
    d_ff = 4 * d_model
    shapes = {"up_proj": (d_model, d_ff), "down_proj": (d_ff, d_model)}
    total = 0
    for name in targets:
        d_in, d_out = shapes.get(name, (d_model, d_model))
        total += r * (d_in + d_out)         # A (d_in, r) and B (r, d_out)
    return n_layer * total
    # END SOLUTION
''',
}

SUITE = exercise_suite.Chapter(CHAPTER, DRILLS, SOLUTIONS, NOTEBOOK)
solution = SUITE.solution


# --------------------------------------------------------------------------- 9.1, as learners write it

def learner_forward(*, scale="alpha/r", bias=True, api="matmul", weight_t=True, update_t=False, scale_all=False):
    def lora_forward(x, weight, bias_, A, B, alpha):
        r = A.shape[1]
        s = {"alpha/r": alpha / r, "alpha": alpha, "none": 1, "r/alpha": r / alpha, "rs": alpha / r ** 0.5,
             "A.shape[0]": alpha / A.shape[0], "B.shape[1]": alpha / B.shape[1]}[scale]
        if api == "linear":
            base = F.linear(x, weight, bias_ if bias else None)
        else:
            base = x @ (weight.T if weight_t else weight) + (bias_ if bias else 0)
        if api == "einsum":
            update = torch.einsum("...i,ir,ro->...o", x, A, B)
        else:
            update = x @ ((A @ B).T if update_t else A @ B)
        if scale_all:
            return (base + update) * s
        return base + s * update
    return lora_forward


def forward_merged(x, weight, bias, A, B, alpha):
    """Right: the merged weight, W + (alpha/r) (A B)^T in nn.Linear's layout."""
    merged = weight + (alpha / A.shape[1]) * (A @ B).T
    return F.linear(x, merged, bias)


def forward_no_grad(x, weight, bias, A, B, alpha):
    with torch.no_grad():
        update = x @ A @ B
    return x @ weight.T + bias + update * alpha / A.shape[1]


def forward_detached(x, weight, bias, A, B, alpha):
    return x @ weight.T + bias + (x @ A.detach() @ B) * alpha / A.shape[1]


def forward_float32(x, weight, bias, A, B, alpha):
    return learner_forward()(x.float(), weight.float(), bias.float(), A.float(), B.float(), alpha).double()


def forward_b_a(x, weight, bias, A, B, alpha):
    return x @ weight.T + bias + (x @ B @ A) * alpha / A.shape[1]


def forward_in_place(x, weight, bias, A, B, alpha):
    out = x @ weight.T
    out += bias
    B *= alpha / A.shape[1]                           # scales the caller's B
    return out + x @ A @ B


FORWARD_WRONG = [
    (learner_forward(scale="alpha"), ch09.SCALE_ALPHA),
    (learner_forward(scale="alpha", api="linear"), ch09.SCALE_ALPHA),
    (learner_forward(scale="none"), ch09.SCALE_NONE),
    (learner_forward(scale="none", api="einsum"), ch09.SCALE_NONE),
    (learner_forward(scale="r/alpha"), ch09.SCALE_FLIPPED),
    (learner_forward(scale="rs"), ch09.SCALE_RS),
    (learner_forward(scale="A.shape[0]"), ch09.SCALE_D_IN),
    (learner_forward(bias=False), ch09.BIAS_MISSING),
    (learner_forward(bias=False, api="linear"), ch09.BIAS_MISSING),
    (learner_forward(scale_all=True), ch09.BIAS_SCALED),
    (learner_forward(weight_t=False), ch09.WEIGHT_UNTRANSPOSED),
    (learner_forward(update_t=True), ch09.UPDATE_TRANSPOSED),
    (forward_b_a, ch09.FORWARD_SHAPES),
    (lambda x, w, b, A, B, alpha: x @ w.T + b + (x @ A @ B) * alpha * A.shape[1], ch09.SCALE_TIMES_R),
    (lambda x, w, b, A, B, alpha: F.linear(x, w, b) + b + (x @ A @ B) * alpha / A.shape[1], ch09.BIAS_TWICE),
    (lambda x, w, b, A, B, alpha: x.mm(w.T) + b + x.mm(A).mm(B) * alpha / A.shape[1], "torch.mm and .mm() take 2-D"),
    (lambda x, w, b, A, B, alpha: (x @ w.T + b) * alpha / A.shape[1] + x @ A @ B, ch09.SCALED_BASE),
    (lambda x, w, b, A, B, alpha: x @ w.T + (x @ A @ B + b) * (alpha / A.shape[1]), ch09.BIAS_IN_UPDATE),
    (lambda x, w, b, A, B, alpha: x @ w + b + x @ (A @ B).T * alpha / A.shape[1], ch09.BOTH_TRANSPOSED),
    (learner_forward(scale="B.shape[1]"), ch09.SCALE_D_IN),
    (lambda x, w, b, A, B, alpha: (x @ A @ B) * alpha / A.shape[1], ch09.BASE_MISSING),
    (lambda x, w, b, A, B, alpha: x @ w.T + b + (x @ A @ B) * 2 * alpha / A.shape[1], ch09.FORWARD_FACTOR),
    (lambda x, w, b, A, B, alpha: x @ w.T + b + (x @ A @ B) * (alpha // A.shape[1]), ch09.SCALE_FLOOR),
    (lambda x, w, b, A, B, alpha: x @ w.T + b + (x @ A @ B) * alpha / (A.shape[1] * x.shape[-1]),
     ch09.FORWARD_FACTOR),                                                     # divided by d as well
    (lambda x, w, b, A, B, alpha: x @ w.T + b + (x @ A @ B) * alpha / A.shape[1] + 0.5, ch09.FORWARD_GENERIC),
    (forward_no_grad, "your output carries no gradient"),
    (forward_detached, "the gradient with respect to `A` is not"),
    (forward_float32, "computed in float32"),
    (forward_in_place, "changed its input `B` in place"),
]


# --------------------------------------------------------------------------- 9.2, as learners write it

def learner_params(*, per="r(in+out)", ffn=True, layers=True, base=False, as_float=False):
    def lora_params(d_model, n_layer, r, targets):
        total = 0
        for name in targets:
            d_in = 4 * d_model if (ffn and name == "down_proj") else d_model
            d_out = 4 * d_model if (ffn and name == "up_proj") else d_model
            total += {"r(in+out)": r * (d_in + d_out), "full": r * d_in * d_out, "A": d_in * r, "B": r * d_out,
                      "no r": d_in + d_out}[per]
            if base:
                total += d_in * d_out + d_out
        total = total * (n_layer if layers else 1)
        return total / 1 if as_float else total
    return lora_params


PARAMS_WRONG = [
    (learner_params(per="full"), ch09.PARAMS_FULL),
    (learner_params(ffn=False), ch09.PARAMS_FFN),
    (learner_params(layers=False), ch09.PARAMS_ONE_LAYER),
    (learner_params(per="A"), ch09.PARAMS_A_ONLY),
    (learner_params(per="B"), ch09.PARAMS_B_ONLY),
    (learner_params(per="no r"), ch09.PARAMS_NO_R),
    (learner_params(base=True), ch09.PARAMS_BASE),
    (lambda d, n, r, t: learner_params()(d, n, r, t) + n * sum(r + (4 * d if x == "up_proj" else d) for x in t),
     ch09.PARAMS_BIAS),
    (learner_params(as_float=True), ch09.PARAMS_FLOAT),
    (lambda d, n, r, t: n * r * 2 * d * len(t), ch09.PARAMS_FFN),                 # every map taken as square
    (lambda d, n, r, t: n * r * (4 * 2 * d + 2 * 5 * d), ch09.PARAMS_ALL_SIX),     # targets ignored
    (lambda d, n, r, t: 2 * n * r * 2 * d, ch09.PARAMS_QV),                        # "LoRA adapts q and v"
    (lambda d, n, r, t: n * sum(r * (4 * d if x == "down_proj" else d) + (4 * d if x == "up_proj" else d)
                                for x in t), ch09.PARAMS_ONE_FACTOR),
    (lambda d, n, r, t: n * sum(r * (5 * d if x == "up_proj" else 2 * d) for x in t), ch09.PARAMS_DOWN_SQUARE),
    (lambda d, n, r, t: n * sum(r * (5 * d if x == "down_proj" else 2 * d) for x in t), ch09.PARAMS_UP_SQUARE),
    (lambda d, n, r, t: learner_params()(d, n, r, t) + 1, "wrong values. Hint: per adapted map"),
    (lambda d, n, r, t: str(learner_params()(d, n, r, t)), "returned a str"),
    (lambda *a: None, "returned None"),
]

WRONG = [("lora_forward", fn, phrase) for fn, phrase in FORWARD_WRONG] + \
        [("lora_params", fn, phrase) for fn, phrase in PARAMS_WRONG]

BAD = {
    **exercise_suite.odd_answers((2, 3, 4)),
    "float": lambda *a: 7.5,
    "nan-float": lambda *a: math.nan,
    "numpy-float": lambda *a: np.float64(1.0),
    "huge-int": lambda *a: 10 ** 400,
    "meta": lambda *a: torch.empty(2, 3, 4, dtype=F64, device="meta"),
}

globals().update(
    SUITE.solution_tests(page_width=79)
    | SUITE.notebook_tests()
    | SUITE.nearly_right_tests(["lora_forward"])
    | SUITE.registered_mistake_tests(apart_by=1e-3)
    | SUITE.wrong_answer_tests(WRONG)
    | SUITE.odd_answer_tests(BAD) | SUITE.diagnosis_tests()
    | SUITE.case_tests()
    | SUITE.travel_tests([BAD["float"], BAD["meta"], learner_forward(scale="alpha"), learner_params(per="A")])
    | SUITE.hint_tests()
)


def test_chapter_nine_registry():
    SUITE.assert_registry(numbers=["9.1", "9.2"])
    assert checks.EXERCISES["lora_forward"].args == ("x", "weight", "bias", "A", "B", "alpha")


@pytest.mark.parametrize("right", [learner_forward(api="linear"), learner_forward(api="einsum"), forward_merged])
def test_other_right_forwards_pass(right):
    for seed in SEEDS:
        assert verdict_for("lora_forward", right, seed).passed, seed


def test_other_right_counts_pass():
    def by_formula(d_model, n_layer, r, targets):
        return n_layer * r * sum(5 * d_model if t in ("up_proj", "down_proj") else 2 * d_model for t in targets)
    for seed in SEEDS:
        assert verdict_for("lora_params", by_formula, seed).passed, seed


# --------------------------------------------------------------------------- the references, checked independently

def test_the_forward_reference_is_the_librarys_lora_layer():
    for x, weight, bias, A, B, alpha in checks.cases_for(checks.EXERCISES["lora_forward"], 3):
        d_out, d_in = weight.shape
        base = nn.Linear(d_in, d_out, dtype=F64)
        with torch.no_grad():
            base.weight.copy_(weight)
            base.bias.copy_(bias)
        layer = LoRALinear(base, A.shape[1], alpha)
        with torch.no_grad():
            layer.A.copy_(A)
            layer.B.copy_(B)
            torch.testing.assert_close(layer(x), ch09.lora_forward_reference(x, weight, bias, A, B, alpha))


def test_the_count_reference_is_what_add_lora_trains():
    for d_model, n_layer, r, targets in checks.cases_for(checks.EXERCISES["lora_params"], 2)[1:]:
        model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=n_layer, n_head=2, d_model=d_model))
        add_lora(model, list(targets), r, 1.0)
        trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert ch09.lora_params_reference(d_model, n_layer, r, targets) == count_lora_params(model) == trained
    assert ch09.lora_params_reference(4096, 32, 8, ("q_proj", "v_proj")) == 4_194_304     # Llama-2-7B, q and v


def test_the_forward_cases_expose_the_slips():
    cases = checks.cases_for(checks.EXERCISES["lora_forward"], 0)
    assert all(c[1].shape[0] == c[1].shape[1] for c in cases)       # square: untransposed slips run
    assert all(c[3].shape[1] < c[3].shape[0] for c in cases)         # r below d
    r, alpha = cases[0][3].shape[1], cases[0][5]
    scales = [alpha / r, alpha, 1, r / alpha, alpha / math.sqrt(r), alpha / cases[0][3].shape[0]]
    assert len({round(s, 9) for s in scales}) == len(scales)
    assert all(bool(c[4].abs().min() > 0) for c in cases)            # B trained, not zero


LIBRARY_ANSWERS = [
    ("lora_forward", """\
        import torch.nn as nn
        from tinyformer.lora import LoRALinear

        def lora_forward(x, weight, bias, A, B, alpha):
            base = nn.Linear(weight.shape[1], weight.shape[0], dtype=x.dtype)
            base.weight.data, base.bias.data = weight, bias
            layer = LoRALinear(base, A.shape[1], alpha)
            layer.A.data, layer.B.data = A, B
            return layer(x)
        """, "tinyformer.lora.LoRALinear.forward"),
    ("lora_params", """\
        from tinyformer.lora import add_lora, count_lora_params
        from tinyformer.model import GPT, GPTConfig

        def lora_params(d_model, n_layer, r, targets):
            model = GPT(GPTConfig(vocab_size=8, block_size=4, n_layer=n_layer, n_head=1, d_model=d_model),
                        ) if d_model < 1000 else None
            if model is None:
                return n_layer * r * sum(5 * d_model if t.startswith(("up", "down")) else 2 * d_model
                                         for t in targets)
            return count_lora_params(add_lora(model, list(targets), r, 1.0))
        """, "tinyformer.lora.count_lora_params"),
    ("lora_params", """\
        import torch.nn as nn
        from tinyformer.lora import LoRALinear

        def lora_params(d_model, n_layer, r, targets):
            total = 0
            for t in targets:
                d_in, d_out = {"up_proj": (d_model, 4 * d_model),
                               "down_proj": (4 * d_model, d_model)}.get(t, (d_model, d_model))
                layer = LoRALinear(nn.Linear(d_in, d_out, device="meta"), r, 1.0)
                total += sum(p.numel() for p in layer.parameters() if p.requires_grad)
            return n_layer * total
        """, "tinyformer.lora.LoRALinear.__init__"),
]


@pytest.mark.parametrize("k", range(len(LIBRARY_ANSWERS)),
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(LIBRARY_ANSWERS)])
def test_the_library_answer_is_flagged(k):
    name, source, caught = LIBRARY_ANSWERS[k]
    fn = define(textwrap.dedent(source), checks.EXERCISES[name].function)
    rec, verdict = exercise_suite.harvest(name, fn)
    assert caught in rec["flags"], rec["flags"]
    if verdict.passed:
        exercise_suite.in_book_refuses(name, fn, rec["flags"])


@pytest.mark.parametrize("name", CHAPTER)
def test_honest_solutions_are_not_flagged(name):
    rec, verdict = exercise_suite.harvest(name, solution(name))
    assert not rec["flags"] and verdict.passed, (rec["flags"], verdict.message)


def test_the_grader_judges_chapter_nine_in_its_sandbox(tmp_path):
    alpha_only = SOLUTIONS["lora_forward"].replace("update * (alpha / r)", "update * alpha")
    assert alpha_only != SOLUTIONS["lora_forward"]
    rows = SUITE.graded(tmp_path, {"lora_forward": alpha_only, "lora_params": SOLUTIONS["lora_params"]})
    assert list(rows) == CHAPTER
    assert rows["lora_forward"][0] == checks.FAIL and ch09.SCALE_ALPHA in rows["lora_forward"][1], rows
    assert rows["lora_params"][0] == checks.PASS, rows


def test_the_engine_names_no_hint_twice():
    hints = [h for n in CHAPTER for h in checks.EXERCISES[n].hints()]
    assert len(hints) == len(set(hints))
    assert engine.EXERCISES["lora_params"].compare((1, 1, 1, ("q_proj",)), 4, 4)
