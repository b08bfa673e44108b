"""Chapter 10's checks: every solution passes, every stub is 'not implemented yet', every registered
mistake is caught by its own hint whatever the seed, and wrong answers written here, the way a
learner would write them, fail with the hint that names their slip. The generic tests are written
once, in tests/exercise_suite.py; the ``globals().update(SUITE...)`` lines below take in those this
chapter runs.

The solutions and wrong answers below are written independently of ``tinyformer.course.ch10``: the
induction score with a Python loop over the queries, with ``torch.diagonal`` and by masks; the
circuit in other ways that work (the shift on the query's side, the copy in W_O0, a smaller scale,
the mean kept at zero, a rolled identity) and in the ways a learner gets it wrong, one per hint. The
score's reference is checked against ``tinyformer.interp.induction_score`` and a plain loop; the
circuit's against the scores the library measures on it, and the blank circuit against the layout it
promises (the stream's blocks, a mean of zero, nothing else written, the global random generator left
alone). Right circuits that call the helpers Exercise 10.2 tells the reader to use (``build_circuit`` for a
self-test or a search over scales, ``circuit_layout``, ``blank_circuit``, ``distinct_spans``, defined in
``tinyformer.experiments.ch10``) earn a ✓ from the book's check and the grader alike; the reference is refused.
The chapter notebook (book/10-interp.ipynb) is optional here: the tests that read it are skipped while it does
not exist.
"""

from __future__ import annotations

import contextlib
import io
import math
import textwrap

import exercise_suite
import numpy as np
import pytest
import torch
from exercise_suite import SEEDS, verdict_for

from tinyformer import checks, interp
from tinyformer.course import ch10, engine
from tinyformer.model import GPT

from conftest import BOOK, define

CHAPTER = ["induction_score", "wire_induction"]
DRILLS: list[str] = []
NOTEBOOK = BOOK / "10-interp.ipynb"
F64 = torch.float64

SOLUTIONS = {
    "induction_score": '''\
import torch


def score_induction(patterns, period):
    """How much each head attends from query t to key t - period + 1,
    the token after the earlier copy of token t: patterns (..., B, H,
    T, T) on sequences that repeat with `period` -> (..., H)."""
    # BEGIN SOLUTION
    T = patterns.shape[-1]
    t = torch.arange(period, T)             # the queries with an earlier copy
    picked = patterns[..., t, t - period + 1]   # (..., B, H, T - period)
    return picked.mean(dim=-1).mean(dim=-2)     # over queries, then batch
    # END SOLUTION
''',
    "wire_induction": '''\
import torch


def wire_induction(layout):
    """The six (d_model, d_model) matrices of an induction circuit, in
    the row convention (q = x̂ @ W_Q: rows read, columns write): head
    0.0's W_Q0, W_K0, W_V0, W_O0 and head 1.0's W_Q1, W_K1."""
    # BEGIN SOLUTION
    d, V, T = layout.d_model, layout.V, layout.T
    TOK, PREV, POS = layout.TOK, layout.PREV, layout.POS
    W_Q0, W_K0, W_V0, W_O0, W_Q1, W_K1 = torch.zeros(6, d, d)
    big = 100.0                  # a sharp softmax: each head picks one key
    # head 0.0, previous token: the query of position t meets the key of
    # position t - 1 (the key of position s lands on dimension s + 1) ...
    W_Q0[POS, POS] = big * torch.eye(T)
    W_K0[POS, POS] = torch.diag(torch.ones(T - 1), 1)
    # ... and copies that position's token into the PREV block
    W_V0[TOK, PREV] = torch.eye(V)
    W_O0[:] = torch.eye(d)
    # head 1.0, induction: the current token (TOK) meets the keys whose
    # previous token (PREV, written by head 0.0) is the same token
    W_Q1[TOK, TOK] = big * torch.eye(V)
    W_K1[PREV, TOK] = torch.eye(V)
    return W_Q0, W_K0, W_V0, W_O0, W_Q1, W_K1
    # END SOLUTION
''',
}

SUITE = exercise_suite.Chapter(CHAPTER, DRILLS, SOLUTIONS, NOTEBOOK)
solution = SUITE.solution


# --------------------------------------------------------------------------- 10.1, as learners write it

def learner_score(*, key="induction", start="period", swapped=False, batch=True, heads=False, divide="count",
                  batch_axis=-2):
    """A learner's loop over the queries, with the slip chosen by the keywords."""
    def score_induction(patterns, period):
        T = patterns.shape[-1]
        first = {"period": period, "0": 0, "1": 1, "period-1": period - 1}[start]
        total = 0
        for t in range(first, T):
            k = {"induction": t - period + 1, "duplicate": t - period, "two": t - period + 2, "previous": t - 1,
                 "one before": t - (period + 1)}[key]
            total = total + (patterns[..., k, t] if swapped else patterns[..., t, k])   # (..., B, H)
        n = {"count": T - first, "T": T, "none": 1}[divide]
        per = total / n
        if batch:
            per = per.mean(dim=batch_axis)
        return per.mean(dim=-1) if heads else per
    return score_induction


def score_by_diagonal(patterns, period):
    """Right: the diagonal t - k = period - 1, without its first entry (query period - 1)."""
    d = torch.diagonal(patterns, offset=-(period - 1), dim1=-2, dim2=-1)    # (..., B, H, T - period + 1)
    return d[..., 1:].mean(dim=(-1, -3))


def score_by_mask(patterns, period):
    """Right: a 0/1 mask of the (query, key) pairs, summed and divided."""
    T = patterns.shape[-1]
    mask = torch.zeros(T, T, dtype=patterns.dtype)
    for t in range(period, T):
        mask[t, t - period + 1] = 1.0
    return (patterns * mask).sum(dim=(-1, -2)).mean(dim=-2) / (T - period)


def score_first_axes(patterns, period):
    """Indexes axes 2 and 3 as if patterns were always (B, H, T, T)."""
    T = patterns.shape[-1]
    return torch.stack([patterns[:, :, t, t - period + 1] for t in range(period, T)], dim=-1).mean(-1).mean(0)


def score_diagonal_whole(patterns, period):
    return torch.diagonal(patterns, offset=-(period - 1), dim1=-2, dim2=-1).mean(dim=(-1, -3))


def score_last_query_dropped(patterns, period):
    """Stops one query short: range(period, T - 1) leaves out t = T - 1."""
    T = patterns.shape[-1]
    weights = [patterns[..., t, t - period + 1] for t in range(period, T - 1)]
    return torch.stack(weights, dim=-1).mean(dim=-1).mean(dim=-2)


def score_batch_summed(patterns, period):
    T = patterns.shape[-1]
    t = torch.arange(period, T)
    return patterns[..., t, t - period + 1].mean(dim=-1).sum(dim=-2)


def score_mask_from_period_minus_1(patterns, period):
    """The mask set from query period - 1 (the whole diagonal), divided by the T - period queries that count."""
    T = patterns.shape[-1]
    mask = torch.zeros(T, T, dtype=patterns.dtype)
    for t in range(period - 1, T):
        mask[t, t - period + 1] = 1.0
    return (patterns * mask).sum(dim=(-1, -2)).mean(dim=-2) / (T - period)


def score_axis_after_mean(patterns, period):
    """Counts the batch as axis -3 after the queries' axis is gone: IndexError on a 4-D patterns."""
    T = patterns.shape[-1]
    t = torch.arange(period, T)
    return patterns[..., t, t - period + 1].mean(-1).mean(-3)


def score_in_place(patterns, period):
    patterns.tril_(-(period - 1))                     # keep the diagonal and below: changes the caller's tensor
    return learner_score()(patterns, period)


SCORE_WRONG = [
    (learner_score(key="duplicate"), ch10.IND_DUPLICATE),
    (lambda p, P: torch.diagonal(p, offset=-P, dim1=-2, dim2=-1).mean(-1).mean(-2), ch10.IND_DUPLICATE),
    (learner_score(key="two"), ch10.IND_PLUS2),
    (learner_score(key="previous"), ch10.IND_PREVIOUS),
    (learner_score(key="one before"), "your scores are the mean weight on key t - period + 1 - 2. Hint: you read "
                                      "another key"),
    (learner_score(start="0"), ch10.IND_FROM_0),
    (learner_score(start="1"), ch10.IND_FROM_1),
    (learner_score(start="period-1"), ch10.IND_FROM_P_MINUS_1),
    (score_diagonal_whole, ch10.IND_FROM_P_MINUS_1),
    (score_mask_from_period_minus_1, ch10.IND_MASK_FROM_P_MINUS_1),
    (score_last_query_dropped, ch10.IND_LAST_DROPPED),
    (learner_score(swapped=True), ch10.IND_SWAPPED),
    (learner_score(batch=False), ch10.IND_NO_BATCH_MEAN),
    (score_batch_summed, ch10.IND_BATCH_SUM),
    (learner_score(heads=True), ch10.IND_HEADS_TOO),
    (lambda p, P: learner_score()(p, P).mean(), ch10.IND_ONE_NUMBER),
    (learner_score(divide="none"), ch10.IND_SUM),
    (learner_score(divide="T"), ch10.IND_OVER_T),
    (learner_score(batch_axis=0), ch10.IND_AXIS_0),
    (score_first_axes, ch10.IND_LEADING),
    (score_axis_after_mean, ch10.IND_AXIS_AFTER_MEAN),              # IndexError: Dimension out of range
    (lambda p, P: learner_score()(p, P) + 0.01, ch10.IND_GENERIC),
    (lambda p, P: learner_score()(p.float(), P), "torch.float32 for torch.float64"),
    (lambda p, P: learner_score()(p, P).tolist(), "returned a list"),
    (score_in_place, "changed its input `patterns` in place"),
]


# --------------------------------------------------------------------------- 10.2, as learners write it

def learner_wire(*, scale=50.0, scale1=None, shift=1, layer0="POS", value="copy", out="identity",
                 query1="TOK", key1="PREV", key1_transposed=False, d_extra=0, sign1=1.0):
    """A learner's circuit, with the slip chosen by the keywords; the defaults are right."""
    def wire_induction(layout):
        V, T = layout.V, layout.T
        d = layout.d_model + d_extra
        W = [torch.zeros(d, d, dtype=F64) for _ in range(6)]
        TOK, PREV, POS = layout.TOK, layout.PREV, layout.POS
        # layer 0: previous-token head
        if layer0 == "POS":
            for t in range(T):
                W[0][POS.start + t, POS.start + t] = scale
                if 0 <= t + shift < T:
                    W[1][POS.start + t, POS.start + t + shift] = 1.0      # key of t -> dimension t + shift
        elif layer0 == "TOK":
            W[0][TOK, TOK] = scale * torch.eye(V, dtype=F64)
            W[1][TOK, TOK] = torch.eye(V, dtype=F64)
        if value == "copy":
            W[2][TOK, PREV] = torch.eye(V, dtype=F64)
        elif value == "identity":
            W[2] = torch.eye(d, dtype=F64)
        elif value == "identity and copy":
            W[2] = torch.eye(d, dtype=F64)
            W[2][TOK, PREV] = torch.eye(V, dtype=F64)
        elif value == "transposed":
            W[2][PREV, TOK] = torch.eye(V, dtype=F64)
        elif value == "minus":
            W[2][TOK, PREV] = -torch.eye(V, dtype=F64)
        elif value == "position":
            W[2][POS.start:POS.start + V, PREV] = torch.eye(V, dtype=F64)
        if out == "identity":
            W[3] = torch.eye(d, dtype=F64)
        # layer 1: induction head
        s1 = scale if scale1 is None else scale1
        blocks = {"TOK": TOK, "PREV": PREV}
        W[4][blocks[query1], TOK] = sign1 * s1 * torch.eye(V, dtype=F64)
        W[5][blocks[key1], TOK] = torch.eye(V, dtype=F64)
        if key1_transposed:
            W[5] = W[5].T.clone()
        return tuple(W)
    return wire_induction


def wire_shift_on_the_query(layout):
    """Right: the query of t lands on dimension t - 1, the key of s on s; the copy done by W_O0."""
    d, V, T = layout.d_model, layout.V, layout.T
    W_Q0, W_K0, W_V0, W_O0, W_Q1, W_K1 = (torch.zeros(d, d) for _ in range(6))
    P = layout.POS.start
    for t in range(1, T):
        W_Q0[P + t, P + t - 1] = 20.0
    W_K0[layout.POS, layout.POS] = torch.eye(T)
    W_V0 = torch.eye(d)
    W_O0[layout.TOK, layout.PREV] = torch.eye(V)
    W_Q1[layout.TOK, layout.TOK] = 20.0 * torch.eye(V)
    W_K1[layout.PREV, layout.TOK] = torch.eye(V)
    return W_Q0, W_K0, W_V0, W_O0, W_Q1, W_K1


def wire_mean_kept(layout):
    """Right: as tests/test_interp.py wires it, the mean kept at zero by the second MEAN dimension and
    layer norm's 1/std undone by W_O0; queries and keys on the first dimensions of the head."""
    d, V, T = layout.d_model, layout.V, layout.T
    TOK, PREV, POS, MEAN = layout.TOK.start, layout.PREV.start, layout.POS.start, layout.MEAN.start
    W = [np.zeros((d, d)) for _ in range(6)]
    sharp = 40.0 * d
    for t in range(1, T):
        W[0][POS + t, t] = sharp
        W[1][POS + t - 1, t] = 1.0
    for v in range(V):
        W[2][TOK + v, PREV + v] = 1.0
        W[2][TOK + v, MEAN + 1] = -1.0
        W[4][TOK + v, v] = sharp
        W[5][PREV + v, v] = 1.0
    W[3] = np.eye(d) * math.sqrt(6 / d)
    return tuple(torch.tensor(w) for w in W)


def wire_rolled(layout):
    """Right: the shift as a rolled identity (its wrapped corner attends to the future, which is masked)."""
    d, V, T = layout.d_model, layout.V, layout.T
    W_Q0, W_K0, W_V0, W_O0, W_Q1, W_K1 = torch.zeros(6, d, d, dtype=F64)
    W_Q0[layout.POS, layout.POS] = 30 * torch.eye(T, dtype=F64)
    W_K0[layout.POS, layout.POS] = torch.eye(T, dtype=F64).roll(1, dims=1)
    W_V0[layout.TOK, layout.PREV] = torch.eye(V, dtype=F64)
    W_O0 += torch.eye(d, dtype=F64)
    W_Q1[layout.TOK, layout.PREV] = 30 * torch.eye(V, dtype=F64)
    W_K1[layout.PREV, layout.PREV] = torch.eye(V, dtype=F64)
    return W_Q0, W_K0, W_V0, W_O0, W_Q1, W_K1


def wire_random_layer0(layout):
    g = torch.Generator().manual_seed(0)
    weights = list(learner_wire()(layout))
    weights[0] = torch.randn(layout.d_model, layout.d_model, generator=g, dtype=F64)
    weights[1] = torch.randn(layout.d_model, layout.d_model, generator=g, dtype=F64)
    return tuple(weights)


def wire_random_key1(layout):
    g = torch.Generator().manual_seed(0)
    weights = list(learner_wire()(layout))
    weights[5] = torch.randn(layout.d_model, layout.d_model, generator=g, dtype=F64)
    return tuple(weights)


def wire_positional_layer1(layout):
    """Layer 1 wired as layer 0: a second previous-token head."""
    W = learner_wire()(layout)
    return W[:4] + (W[0].clone(), W[1].clone())


def wire_overflow(layout):
    """'As large as possible': 1e160 in both W_Q0 and W_K0, whose product overflows float64."""
    return tuple(w * (1e160 if i in (0, 1) else 1.0) for i, w in enumerate(learner_wire()(layout)))


def wire_the_model(layout):
    """Returns a wired model rather than its matrices."""
    return ch10.build_circuit(layout, learner_wire()(layout))


def wire_forgot_mean(layout):
    """Sized the stream as 2V + T, without the two MEAN dimensions."""
    return learner_wire(d_extra=-2)(layout)


WIRE_WRONG = [
    (learner_wire(scale=math.inf), ch10.WIRE_NONFINITE),
    (wire_overflow, ch10.WIRE_OVERFLOW),
    (learner_wire(scale=0.0), ch10.L0_FLAT),
    (learner_wire(scale=1.0), "head 0.0's previous-token score is 0.32 (above 0.9 needed). Hint: head 0.0 puts its "
                              "largest weight on the previous token"),
    (learner_wire(layer0="TOK"), ch10.L0_TOKENS),
    (learner_wire(shift=0), ch10.L0_SELF),
    (learner_wire(shift=-1), ch10.L0_AHEAD),
    (learner_wire(shift=2), "its largest weight is on the token 2 positions back"),
    (learner_wire(shift=3), ch10.L0_OFFSET),
    (wire_random_layer0, ch10.L0_GENERIC),
    (learner_wire(out="missing"), ch10.L0_SILENT),
    (learner_wire(value="missing"), ch10.L0_SILENT),
    (learner_wire(value="transposed"), ch10.L0_SILENT),
    (learner_wire(value="identity"), ch10.L0_INTO_TOK),
    (learner_wire(value="identity and copy"), ch10.L0_ALSO_TOK),
    (learner_wire(value="minus"), ch10.L0_NEGATIVE),
    (learner_wire(value="position"), ch10.L0_WRITE_GENERIC),
    (learner_wire(key1_transposed=True), ch10.L1_FLAT),
    (learner_wire(scale1=1.0), ch10.L1_SOFT),
    (learner_wire(key1="TOK"), "its weight on the earlier copy of the current token is 0.50. Hint: head 1.0 is a "
                               "duplicate-token head"),
    (learner_wire(query1="PREV"), ch10.L1_QUERY_PREV),
    (learner_wire(query1="PREV", key1="TOK"), ch10.L1_SWAPPED),
    (wire_positional_layer1, ch10.L1_PREVIOUS),
    (learner_wire(sign1=-1.0), ch10.L1_NEGATIVE),
    (wire_random_key1, ch10.L1_GENERIC),
    (wire_forgot_mean, "W_Q0 has shape (36, 36), expected (38, 38) for V = 10, T = 16"),
    (lambda layout: learner_wire()(layout)[:4], "returned a tuple of 4 items; return the six matrices"),
    (lambda layout: dict(zip(ch10.MATRICES, learner_wire()(layout))), "returned a dict; return the six matrices"),
    (wire_the_model, "returned a tinyformer.GPT; return the six matrices"),
    (lambda layout: None, "returned None"),
    (lambda layout: torch.stack(learner_wire()(layout)), "returned a tensor of shape (6, 38, 38); return the six"),
    (lambda layout: tuple(w.tolist() for w in learner_wire()(layout)), "W_Q0 is a list"),
]

WRONG = [("induction_score", fn, phrase) for fn, phrase in SCORE_WRONG] + \
        [("wire_induction", fn, phrase) for fn, phrase in WIRE_WRONG]

BAD = {
    **exercise_suite.odd_answers((3,)),
    "six-nans": lambda *a: tuple(torch.full((38, 38), math.nan) for _ in range(6)),
    "six-scalars": lambda *a: tuple(torch.tensor(1.0) for _ in range(6)),
    "six-bools": lambda *a: tuple(torch.ones(38, 38, dtype=torch.bool) for _ in range(6)),
    "six-strings": lambda *a: ("W",) * 6,
    "meta": lambda *a: torch.empty(3, device="meta"),
    "six-meta": lambda *a: tuple(torch.empty(38, 38, device="meta") for _ in range(6)),
    "huge": lambda *a: tuple(torch.full((38, 38), 1e300, dtype=F64) for _ in range(6)),
}

globals().update(
    SUITE.solution_tests(page_width=79)
    | SUITE.notebook_tests()
    | SUITE.nearly_right_tests(["induction_score"])
    | SUITE.registered_mistake_tests(apart_by=1e-3)
    | SUITE.wrong_answer_tests(WRONG)
    | SUITE.odd_answer_tests(BAD) | SUITE.diagnosis_tests()
    | SUITE.case_tests()
    | SUITE.travel_tests([BAD["six-nans"], learner_score(key="duplicate"), learner_wire(key1="TOK"),
                          learner_wire(scale=1.0)])
    | SUITE.hint_tests()
)


def test_chapter_ten_registry():
    SUITE.assert_registry(numbers=["10.1", "10.2"], functions={"induction_score": "score_induction"})
    assert checks.EXERCISES["induction_score"].args == ("patterns", "period")
    assert checks.EXERCISES["wire_induction"].item_names == ("W_Q0", "W_K0", "W_V0", "W_O0", "W_Q1", "W_K1")


@pytest.mark.parametrize("right", [score_by_diagonal, score_by_mask, learner_score()])
def test_other_right_scores_pass(right):
    for seed in SEEDS:
        assert verdict_for("induction_score", right, seed).passed, seed


@pytest.mark.parametrize("right", [wire_shift_on_the_query, wire_mean_kept, wire_rolled, learner_wire(scale=10.0),
                                   learner_wire(), ch10.wire_induction_reference])
def test_other_right_circuits_pass(right):
    for seed in SEEDS:
        verdict = verdict_for("wire_induction", right, seed)
        assert verdict.passed, (seed, verdict.message)


# --------------------------------------------------------------------------- the references, checked independently

def test_the_score_reference_is_the_librarys_and_a_loops():
    for patterns, period in checks.cases_for(checks.EXERCISES["induction_score"], 3):
        want = ch10.induction_score_reference(patterns, period)
        torch.testing.assert_close(want, interp.induction_score(patterns, period), rtol=1e-12, atol=1e-15)
        flat = patterns.reshape(-1, *patterns.shape[-4:])               # (lead, B, H, T, T)
        T = patterns.shape[-1]
        by_loop = torch.tensor([[sum(float(flat[i, b, h, t, t - period + 1]) for b in range(flat.shape[1])
                                     for t in range(period, T)) / (flat.shape[1] * (T - period))
                                 for h in range(flat.shape[2])] for i in range(flat.shape[0])], dtype=F64)
        torch.testing.assert_close(want.reshape(by_loop.shape), by_loop, rtol=1e-12, atol=1e-15)


def test_the_score_cases_are_causal_patterns_with_leading_dimensions():
    for seed in SEEDS:
        cases = checks.cases_for(checks.EXERCISES["induction_score"], seed)
        assert [c[0].dim() for c in cases[:3]] == [4, 5, 4]
        for patterns, period in cases:
            T = patterns.shape[-1]
            assert 2 <= period <= T - 2
            assert patterns.triu(1).abs().max() == 0
            torch.testing.assert_close(patterns.sum(-1), torch.ones(patterns.shape[:-1], dtype=F64))
            allowed = torch.ones(T, T, dtype=torch.bool).tril()
            floor = 0.5 / allowed.sum(-1, keepdim=True)                 # half the uniform weight of each row
            assert bool((patterns[..., allowed] >= floor.expand(T, T)[allowed] - 1e-15).all())


def test_a_perfect_pattern_scores_one_and_the_reference_circuit_is_an_induction_circuit():
    T, P = 12, 5
    perfect = torch.zeros(1, 1, T, T, dtype=F64)
    for t in range(T):
        perfect[0, 0, t, t - P + 1 if t >= P else 0] = 1.0
    assert ch10.induction_score_reference(perfect, P).item() == 1.0
    for case in checks.cases_for(checks.EXERCISES["wire_induction"], 2):
        fields = case[0]
        layout = ch10.circuit_layout(fields["V"], fields["T"])
        model = ch10.build_circuit(layout, ch10.wire_induction_reference(layout))
        idx = ch10.distinct_spans(layout.V, fields["period"], 16, torch.Generator().manual_seed(0))
        patterns = interp.attention_patterns(model, idx)                 # (2, B, 1, L, L)
        assert interp.previous_token_score(patterns[0]).item() > 0.99
        # the query at t = period splits between keys 0 and 1 (position 0 copies its own token)
        assert interp.induction_score(patterns[1], fields["period"]).item() > 1 - 0.5 / fields["period"] - 0.01


def test_the_blank_circuit_writes_its_layout_and_nothing_else():
    state = torch.random.get_rng_state()
    model, layout = ch10.blank_circuit(10, 16)
    assert torch.equal(torch.random.get_rng_state(), state)               # the reader's random stream untouched
    assert type(model) is GPT and model.config.n_layer == 2 and model.config.n_head == 1
    assert layout.d_model == 38 == model.config.d_model
    assert (layout.TOK, layout.PREV, layout.POS, layout.MEAN) == (slice(0, 10), slice(10, 20), slice(20, 36),
                                                                  slice(36, 38))
    idx = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    _, cache = interp.run_with_cache(model, idx)
    stream = cache["blocks.0.hook_resid_pre"][0]                           # (T, d)
    want = torch.zeros(8, 38)
    want[torch.arange(8), idx[0]] = 1.0
    want[torch.arange(8), 20 + torch.arange(8)] = 1.0
    want[:, 36] = -2.0
    assert torch.equal(stream, want)
    assert stream.mean(-1).abs().max() == 0                                # the layer norms only rescale
    for layer in range(2):                                                 # heads and FFNs add nothing
        assert cache[f"blocks.{layer}.hook_attn_out"].abs().max() == 0
        assert cache[f"blocks.{layer}.hook_mlp_out"].abs().max() == 0
    blank = (torch.zeros(38, 38),) * 6
    assert not verdict_for("wire_induction", lambda layout: blank)
    with pytest.raises(ValueError, match="W_K0 must be a"):
        ch10.build_circuit(layout, (torch.zeros(38, 38), torch.zeros(3, 3), *blank[2:]))


def test_build_circuit_sets_the_transposes_and_a_row_convention_query():
    layout = ch10.circuit_layout(10, 16)
    weights = [torch.randn(38, 38, generator=torch.Generator().manual_seed(i)) for i in range(6)]
    model = ch10.build_circuit(layout, weights)
    a0, a1 = (b.attn for b in model.blocks.blocks)
    for linear, w in zip((a0.q_proj, a0.k_proj, a0.v_proj, a0.o_proj, a1.q_proj, a1.k_proj), weights):
        assert torch.equal(linear.weight, w.T)
    x = torch.randn(2, 38)
    assert torch.allclose(a0.q_proj(x), x @ weights[0], atol=1e-5)      # q = x̂ @ W_Q, as the exercise says
    assert a1.v_proj.weight.abs().max() == 0 and a1.o_proj.weight.abs().max() == 0


def test_the_circuit_cases_run_distinct_spans_said_twice():
    for seed in SEEDS:
        for case in checks.cases_for(checks.EXERCISES["wire_induction"], seed):
            fields = case[0]
            assert 8 <= fields["period"] <= fields["V"] and 2 * fields["period"] <= fields["T"]
    idx = ch10.distinct_spans(9, 8, 5, torch.Generator().manual_seed(1))
    assert idx.shape == (5, 16) and torch.equal(idx[:, :8], idx[:, 8:])
    assert all(len(set(row[:8].tolist())) == 8 for row in idx)


def test_the_circuit_is_judged_by_what_it_does_not_by_its_numbers():
    """Scaled by any large number, or the copy moved from W_V0 to W_O0, the circuit still passes; a scale
    just too small fails on head 0.0 with the soft-softmax hint."""
    for scale in (8.0, 1e3):
        assert verdict_for("wire_induction", learner_wire(scale=scale)).passed, scale
    verdict = verdict_for("wire_induction", learner_wire(scale=2.0))
    assert not verdict and ch10.L0_SOFT in verdict.message


LIBRARY_ANSWERS = [
    ("induction_score", """\
        from tinyformer import interp

        def score_induction(patterns, period):
            return interp.induction_score(patterns, period)
        """, "tinyformer.interp.induction_score"),
    ("induction_score", """\
        from tinyformer.interp import _offset_score

        def score_induction(patterns, period):
            return _offset_score(patterns, period - 1, period)
        """, "tinyformer.interp._offset_score"),
    ("wire_induction", """\
        import torch

        def wire_induction(layout):
            d, V, T = layout.d_model, layout.V, layout.T
            W = torch.zeros(6, d, d)
            opt = torch.optim.SGD([W.requires_grad_()], lr=0.0)     # 'trained', then set by hand anyway
            opt.step()
            W = W.detach()
            W[0][layout.POS, layout.POS] = 50 * torch.eye(T)
            W[1][layout.POS, layout.POS] = torch.diag(torch.ones(T - 1), 1)
            W[2][layout.TOK, layout.PREV] = torch.eye(V)
            W[3] = torch.eye(d)
            W[4][layout.TOK, layout.TOK] = 50 * torch.eye(V)
            W[5][layout.PREV, layout.TOK] = torch.eye(V)
            return tuple(W)
        """, "torch.optim.SGD.__init__"),
    ("wire_induction", """\
        from tinyformer.course.ch10 import wire_induction_reference as wire_induction
        """, "tinyformer.course.ch10.wire_induction_reference"),
    ("wire_induction", """\
        from tinyformer.course.ch10 import wire_induction_reference

        def wire_induction(layout):
            return tuple(w.clone() for w in wire_induction_reference(layout))
        """, "tinyformer.course.ch10.wire_induction_reference"),
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


# --------------------------------------------------------------------------- 10.2's helpers are no library answer

# The wiring by hand, as a learner writes it; each answer below adds a use of the helpers the exercise tells
# the reader to use (blank_circuit, build_circuit, circuit_layout, distinct_spans), imported as the chapter does.
_WIRING = """\
    W_Q0, W_K0, W_V0, W_O0, W_Q1, W_K1 = torch.zeros(6, d, d)
    W_Q0[lay.POS, lay.POS] = big * torch.eye(T)
    W_K0[lay.POS, lay.POS] = torch.diag(torch.ones(T - 1), 1)
    W_V0[lay.TOK, lay.PREV] = torch.eye(V)
    W_O0[:] = torch.eye(d)
    W_Q1[lay.TOK, lay.TOK] = big * torch.eye(V)
    W_K1[lay.PREV, lay.TOK] = torch.eye(V)
    W = (W_Q0, W_K0, W_V0, W_O0, W_Q1, W_K1)
"""
_IMPORTS = """\
import torch
from tinyformer import interp
from tinyformer.course.ch10 import blank_circuit, build_circuit, circuit_layout, distinct_spans


"""

HELPER_ANSWERS = {
    # the self-test the exercise recommends, inside the function (spans of 8: every case has V >= 8, T >= 16)
    "self-test": _IMPORTS + """\
def wire_induction(layout):
    lay, d, V, T, big = layout, layout.d_model, layout.V, layout.T, 100.0
""" + _WIRING + """\
    patterns = interp.attention_patterns(build_circuit(layout, W), distinct_spans(layout.V, 8, 8))
    assert interp.previous_token_score(patterns[0]).item() > 0.9
    assert interp.induction_score(patterns[1], 8).item() > 0.9
    return W
""",
    "layout made again": _IMPORTS + """\
def wire_induction(layout):
    lay = circuit_layout(layout.V, layout.T)
    d, V, T, big = lay.d_model, lay.V, lay.T, 100.0
""" + _WIRING + """\
    return W
""",
    "sizes from a blank circuit": _IMPORTS + """\
def wire_induction(layout):
    model, lay = blank_circuit(layout.V, layout.T)
    d, big = model.config.d_model, 100.0
    V, T = model.config.vocab_size, model.config.block_size
""" + _WIRING + """\
    return W
""",
    "scales tried": _IMPORTS + """\
def wire_induction(layout):
    lay, d, V, T = layout, layout.d_model, layout.V, layout.T
    spans = distinct_spans(V, 8, 8, torch.Generator().manual_seed(0))
    for big in (1.0, 10.0, 100.0):
""" + textwrap.indent(_WIRING, "    ") + """\
        patterns = interp.attention_patterns(build_circuit(layout, W), spans)
        if min(interp.previous_token_score(patterns[0]).item(),
               interp.induction_score(patterns[1], 8).item()) > 0.9:
            return W
    raise ValueError("no scale worked")
""",
    "one trial build": _IMPORTS + """\
def wire_induction(layout):
    lay, d, V, T, big = layout, layout.d_model, layout.V, layout.T, 100.0
""" + _WIRING + """\
    build_circuit(layout, W)
    return W
""",
}


@pytest.mark.parametrize("kind", list(HELPER_ANSWERS))
def test_a_wiring_that_calls_the_exercises_helpers_is_credited(kind):
    """Review ch10-v1, section 3: five right answers that call the helpers the exercise names were refused as
    library answers. The grader flags none of them, and the in-book check passes each with a ✓."""
    fn = define(HELPER_ANSWERS[kind], "wire_induction")
    for seed in (0, 3):
        rec, verdict = exercise_suite.harvest("wire_induction", fn, seed)
        assert not rec["flags"] and not rec["tampering"] and verdict.passed, (seed, rec["flags"], verdict.message)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        verdict = checks.check("wire_induction", fn)
    assert verdict.passed and verdict.message.startswith("✓"), verdict.message
    assert printed.getvalue().startswith("✓")


def test_the_helpers_live_outside_the_courses_checking_code():
    """The grader refuses calls of any code in tinyformer/course/; the helpers run none, and the chapter's
    import of them from tinyformer.course.ch10 still works."""
    from tinyformer.experiments import ch10 as experiments

    for name in ("blank_circuit", "build_circuit", "circuit_layout", "distinct_spans"):
        helper = getattr(ch10, name)
        assert helper is getattr(experiments, name)
        assert "/tinyformer/course/" not in helper.__code__.co_filename.replace("\\", "/"), name
    assert ch10.MATRICES == experiments.CIRCUIT_MATRICES


def test_the_grader_credits_a_self_tested_wiring(tmp_path):
    rows = SUITE.graded(tmp_path, {"wire_induction": HELPER_ANSWERS["self-test"]})
    assert rows["wire_induction"][0] == checks.PASS, rows


@pytest.mark.parametrize("name", CHAPTER)
def test_honest_solutions_are_not_flagged(name):
    """The layout is a plain namespace: reading layout.TOK runs no code of the course."""
    rec, verdict = exercise_suite.harvest(name, solution(name))
    assert not rec["flags"] and verdict.passed, (rec["flags"], verdict.message)


def test_the_grader_judges_chapter_ten_in_its_sandbox(tmp_path):
    duplicate = SOLUTIONS["wire_induction"].replace("W_K1[PREV, TOK]", "W_K1[TOK, TOK]")
    assert duplicate != SOLUTIONS["wire_induction"]
    rows = SUITE.graded(tmp_path, {"induction_score": SOLUTIONS["induction_score"], "wire_induction": duplicate})
    assert list(rows) == CHAPTER
    assert rows["induction_score"][0] == checks.PASS, rows
    assert rows["wire_induction"][0] == checks.FAIL and ch10.L1_DUPLICATE in rows["wire_induction"][1], rows


def test_the_engine_names_no_hint_twice():
    hints = [h for n in CHAPTER for h in checks.EXERCISES[n].hints()]
    assert len(hints) == len(set(hints))
    assert engine.EXERCISES["wire_induction"].compare is not None
