"""The exercise checks can pass, and can fail with the right hint.

The wrong implementations below are written here, independently of the ones inside
``tinyformer.checks``, the way a learner would get them wrong.
"""

from __future__ import annotations

import math

import nbformat
import pytest
import torch

from tinyformer import checks
from tinyformer.student import make_student

from conftest import define

CHAPTER_EXERCISES = ["stable_softmax", "causal_mask", "attention_head", "multi_head_attention"]


def test_every_chapter_two_exercise_has_a_solution(solutions):
    assert set(CHAPTER_EXERCISES) <= set(solutions)
    assert set(solutions) <= set(checks.EXERCISES)


@pytest.mark.parametrize("name", CHAPTER_EXERCISES)
def test_solution_passes(name, solutions, capsys):
    fn = define(solutions[name], checks.EXERCISES[name].function)
    verdict = getattr(checks, f"check_{name}")(fn)
    line = capsys.readouterr().out.strip()
    assert verdict.passed and bool(verdict)
    assert line.startswith("✓") and line == verdict.message


@pytest.mark.parametrize("name", CHAPTER_EXERCISES)
def test_stub_is_not_implemented(name, solutions, capsys):
    cell = nbformat.v4.new_code_cell(solutions[name], metadata={"tags": [f"exercise-{name}"]})
    student = make_student(nbformat.v4.new_notebook(cells=[cell]))
    fn = define(student.cells[0].source, checks.EXERCISES[name].function)
    verdict = checks.check(name, fn)
    line = capsys.readouterr().out.strip()
    assert verdict.status == checks.NOT_IMPLEMENTED and not verdict
    assert line.startswith("✗") and "not implemented yet" in line


# --------------------------------------------------------------------------- known-wrong answers


def naive_softmax(s):
    return torch.exp(s) / torch.exp(s).sum(dim=-1, keepdim=True)


def softmax_columns(s):
    z = s - s.max(dim=0, keepdim=True).values
    return z.exp() / z.exp().sum(dim=0, keepdim=True)


def mask_hides_diagonal(T):
    i = torch.arange(T)
    return i[:, None] > i[None, :]


def mask_nothing(T):
    return torch.ones(T, T, dtype=torch.bool)


def mask_upper(T):
    i = torch.arange(T)
    return i[:, None] <= i[None, :]


def mask_float(T):
    i = torch.arange(T)
    return (i[:, None] >= i[None, :]).float()


def make_head(scale=True, dim=-1, allowed=lambda i, j: i >= j):
    def head(x, W_Q, W_K, W_V):
        q, k, v = x @ W_Q, x @ W_K, x @ W_V
        s = torch.einsum("bid,bjd->bij", q, k)
        if scale:
            s = s / math.sqrt(q.shape[-1])
        i = torch.arange(x.shape[1])
        s = torch.where(allowed(i[:, None], i[None, :]), s, torch.tensor(-math.inf, dtype=s.dtype))
        return torch.einsum("bij,bjd->bid", torch.softmax(s, dim=dim), v)
    return head


def make_mha(use_W_O=True, scale_by_model=False, causal=True):
    def mha(x, W_Q, W_K, W_V, W_O, n_heads):
        B, T, C = x.shape
        D = C // n_heads
        outs = []
        for h in range(n_heads):
            cols = slice(h * D, (h + 1) * D)
            q, k, v = x @ W_Q[:, cols], x @ W_K[:, cols], x @ W_V[:, cols]
            s = q @ k.transpose(1, 2) / math.sqrt(C if scale_by_model else D)
            if causal:
                s = s.masked_fill(torch.ones(T, T).triu(1).bool(), -math.inf)
            outs.append(torch.softmax(s, dim=-1) @ v)
        cat = torch.cat(outs, dim=-1)
        return cat @ W_O if use_W_O else cat
    return mha


WRONG = [
    ("stable_softmax", naive_softmax, "Subtract each row's maximum"),
    ("stable_softmax", softmax_columns, "normalised over the first axis"),
    ("causal_mask", mask_hides_diagonal, "diagonal must be True"),
    ("causal_mask", mask_nothing, "nothing is masked"),
    ("causal_mask", mask_upper, "upper triangle"),
    ("causal_mask", mask_float, "torch.bool"),
    ("attention_head", make_head(scale=False), "not scaled"),
    ("attention_head", make_head(dim=-2), "wrong axis"),
    ("attention_head", make_head(allowed=lambda i, j: i > j), "hides the diagonal"),
    ("attention_head", make_head(allowed=lambda i, j: i >= 0), "no causal mask"),
    ("multi_head_attention", make_mha(use_W_O=False), "W_O"),
    ("multi_head_attention", make_mha(scale_by_model=True), "√d_head"),
    ("multi_head_attention", make_mha(causal=False), "no causal mask"),
]


@pytest.mark.parametrize(("name", "wrong", "hint"), WRONG, ids=[f"{n}-{w.__name__}" for n, w, _ in WRONG])
def test_known_mistake_gets_its_hint(name, wrong, hint, capsys):
    verdict = checks.check(name, wrong)  # must not raise
    printed = capsys.readouterr().out.strip()
    assert not verdict and verdict.status == checks.FAIL
    assert printed.startswith("✗") and printed == verdict.wrapped()
    assert " ".join(printed.split()) == verdict.message  # folded, never cut
    assert hint in verdict.message, verdict.message
    assert all(len(line) <= 88 for line in printed.splitlines())


def test_mistakes_get_different_hints(capsys):
    hints = {}
    for name, wrong, _ in WRONG:
        hints.setdefault(name, set()).add(checks.check(name, wrong).message)
    capsys.readouterr()
    for name in hints:
        assert len(hints[name]) == sum(n == name for n, _, _ in WRONG), name


@pytest.mark.parametrize("bad", [
    lambda *a: (_ for _ in ()).throw(RuntimeError("boom")),  # raises something else
    lambda *a: "not a tensor",
    lambda *a: torch.zeros(1),
    lambda *a: torch.full((1, 1), float("nan")),
])
@pytest.mark.parametrize("name", CHAPTER_EXERCISES)
def test_any_wrong_answer_fails_without_raising(name, bad, capsys):
    verdict = checks.check(name, bad)
    line = capsys.readouterr().out.strip()
    assert not verdict and line.startswith("✗")


def test_raising_function_is_reported_with_its_error(capsys):
    def broken(scores):
        raise IndexError("dimension out of range")

    verdict = checks.check_stable_softmax(broken)
    assert verdict.status == checks.ERROR
    capsys.readouterr()
    assert "IndexError: dimension out of range" in verdict.message


def test_wrong_shape_is_named(capsys):
    verdict = checks.check_attention_head(lambda x, W_Q, W_K, W_V: x)
    capsys.readouterr()
    assert "output shape" in verdict.message


def test_not_callable(capsys):
    verdict = checks.check_causal_mask(42)
    capsys.readouterr()
    assert not verdict and "expected a function" in verdict.message


def test_function_mutating_its_input_cannot_fool_the_reference(capsys):
    def zeroes_scores(scores):
        scores.zero_()
        return torch.softmax(scores, dim=-1)

    assert not checks.check_stable_softmax(zeroes_scores)
    capsys.readouterr()


def test_verdict_shows_nothing_extra_in_ipython():
    v = checks.Verdict("x", checks.PASS, "✓ fine")
    assert v._ipython_display_() is None and str(v) == "✓ fine"


def test_judge_on_outputs_from_elsewhere():
    """The grader judges outputs computed in another process: strings stand for non-tensors."""
    ex = checks.EXERCISES["causal_mask"]
    cases = checks.cases_for(ex, seed=3)
    good = [torch.ones(T, T, dtype=torch.bool).tril() for (T,) in cases]
    assert checks.judge(ex, cases, checks.Outcome(outputs=good)).passed
    verdict = checks.judge(ex, cases, checks.Outcome(outputs=["<ndarray>"] * len(cases)))
    assert not verdict and "expected a torch.Tensor" in verdict.message
