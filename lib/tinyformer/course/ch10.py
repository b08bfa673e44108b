"""Chapter 10 (interpretability): the exercises, their test inputs, references, known mistakes and hints.

Exercise 10.1 (``induction_score``; the reader's function is ``score_induction``, as 2.6's is
``all_heads_at_once``, so that it never shares a name with the library's ``interp.induction_score``,
which the chapter uses) measures how much each head behaves as an induction head: for attention
weights ``patterns`` of shape ``(..., B, n_heads, T, T)`` (rows queries, columns keys) on sequences
that repeat with ``period``, the mean over the queries ``t >= period`` and over the batch of the
weight on key ``t - period + 1``, returned as ``(..., n_heads)``. Leading dimensions are part of the
exercise, so that the function takes ``attention_patterns``' ``(n_layer, B, n_heads, T, T)`` whole.
The patterns are causal (zero above the diagonal) and every allowed weight is at least half its
row's uniform weight, so that each known slip (another key, another first query, the last query left
out, a mask from query ``period - 1`` divided by ``T - period``, the axes swapped, a mean left out or
taken over too much, a sum over the queries or over the batch, a batch axis counted from the front)
gives its own numbers, far apart; a diagnosis names any other key ``t - period + 1 ± k``. The fixed
cases come first: a 4-D one, then a 5-D one whose batch is not axis 0 and whose H = 2 < period makes
an answer that indexes axes 2 and 3 raise an IndexError (its own hint). An axis counted after a
reduction as before it (``.mean(-1).mean(-3)``) raises "Dimension out of range" on the 4-D case (its
own hint: after the first mean the batch is axis -2).

Exercise 10.2 (``wire_induction``) wires an induction circuit by hand into :func:`blank_circuit`, a
two-layer ``tinyformer.model.GPT`` with one head per layer whose residual stream has a named layout
(:func:`circuit_layout`, a plain namespace, so that reading it runs no code at all): the
current token's one-hot (``TOK``), an empty block for the previous token (``PREV``), the position's
one-hot (``POS``) and two dimensions (``MEAN``) of which the first holds -2, so that every embedded
vector has mean zero and the layer norms only rescale it. The reader's function gets the layout and
returns the six matrices ``(W_Q0, W_K0, W_V0, W_O0, W_Q1, W_K1)``, each ``(d_model, d_model)`` in
the book's row convention (``q = x̂ @ W_Q``); everything else stays as :func:`blank_circuit` made
it. It returns the matrices rather than setting them on a model because the grader judges what a
function returns, outside the reader's kernel; :func:`build_circuit` puts them into the model.

The check runs that model on sequences of ``period`` distinct tokens said twice and passes it when
head 0.0's previous-token score and head 1.0's induction score (the library's
:func:`tinyformer.interp.previous_token_score` and :func:`~tinyformer.interp.induction_score`) are
both above 0.9. The periods are at least 8, so that the perfect circuit scores at least 0.94 (its
query at ``t = period`` splits between keys 0 and 1: position 0 has no previous token, and head 0.0
copies its own). It is judged by behaviour (``compare``): any large scale and any equivalent wiring
pass. A diagnosis names what the circuit does instead, in order: shapes, non-finite weights,
overflowing scores; head 0.0's pattern (flat, too soft, matching tokens instead of positions,
attending to itself, to the next position, further back); what it writes, measured with a hook on
its output (nothing, into ``TOK`` instead of ``PREV`` or as well, minus the token, something else);
then head 1.0's pattern (flat, too soft, a duplicate-token head whose key reads ``TOK``, a query that
reads ``PREV``, the two swapped, a second previous-token head, the match turned upside down), told
apart where patterns alone cannot by the blocks of ``W_Q1 W_K1ᵀ``. The fixed cases' sequences are
fixed too, so a message quotes the same scores whatever the seed; the last case's sizes and
sequences change with it.

Library answers: for 10.1, ``tinyformer.interp.induction_score`` (and its helper ``_offset_score``);
for 10.2, the optimizers, as for 5.7: the weights are to be set by hand, not fitted (and, as for
every exercise, the reference ``wire_induction_reference`` and any other code of ``tinyformer.course``).
The four helpers the exercise tells the reader to use (``blank_circuit``, ``build_circuit``,
``circuit_layout``, ``distinct_spans``) are defined in :mod:`tinyformer.experiments.ch10` and imported
here, so that an answer that calls them (a self-test, a layout made again, sizes read off a blank
circuit, a search over scales) runs no course code and is not refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from tinyformer.course.engine import Exercise, _fresh, built, register, register_builder, safe_diagnosis
from tinyformer.course.engine import randint as _randint
from tinyformer.experiments.ch10 import CIRCUIT_MATRICES as MATRICES

# Exercise 10.2's helpers live in tinyformer.experiments.ch10, outside the course's checking code (whose
# calls a grader refuses), so that an answer may call them; the chapter imports them from here.
from tinyformer.experiments.ch10 import (  # noqa: F401 - re-exported: the chapter's import
    blank_circuit,
    build_circuit,
    circuit_layout,
    distinct_spans,
)

CHAPTER = "10-interp"
F64 = torch.float64


# --------------------------------------------------------------------------- 10.1 the induction score


def _causal_patterns(g: torch.Generator, *shape: int) -> torch.Tensor:
    """Attention weights ``(*lead, T, T)``: zero above the diagonal, each row a random distribution
    over its allowed keys, half of it uniform (so that no allowed weight is below half the uniform
    one, and every slip moves the score by a visible amount)."""
    *lead, T = shape
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    scores = (2.0 * torch.randn(*lead, T, T, generator=g, dtype=F64)).masked_fill(~allowed, -math.inf)
    uniform = allowed.to(F64) / allowed.sum(-1, keepdim=True)
    return 0.5 * scores.softmax(-1) + 0.5 * uniform


def _score_cases(g):
    """(patterns, period): fixed first, so that the first failing case never depends on the seed:

    0. (B, H, T) = (2, 3, 10), period 4: 4-D.
    1. (n_layer, B, H, T) = (2, 3, 2, 9), period 3: leading dimensions, and H = 2 < period, so that
       indexing axes 2 and 3 as if they were the last two raises an IndexError.
    2. (4, 1, 6), period 2: one head.

    Then two random ones, 4-D or 5-D, T from 5 to 12, period from 2 to T - 2.
    """
    cases = [(_causal_patterns(g, 2, 3, 10), 4), (_causal_patterns(g, 2, 3, 2, 9), 3),
             (_causal_patterns(g, 4, 1, 6), 2)]
    for _ in range(2):
        T = _randint(g, 5, 12)
        lead = (_randint(g, 1, 4), _randint(g, 1, 4))
        if _randint(g, 0, 1):
            lead = (_randint(g, 1, 3), *lead)
        cases.append((_causal_patterns(g, *lead, T), _randint(g, 2, T - 2)))
    return cases


def induction_score_reference(patterns, period):
    T = patterns.shape[-1]
    t = torch.arange(period, T)
    return patterns[..., t, t - period + 1].mean(dim=-1).mean(dim=-2)     # (..., B, H, queries) -> (..., H)


def _score(*, offset="induction", first="period", last="T - 1", swapped=False, batch="mean", heads=False,
           reduce="mean"):
    """The score with the slips named by the keywords; the defaults are right."""
    def wrong(patterns, period):
        T = patterns.shape[-1]
        start = {"period": period, "0": 0, "1": 1, "period-1": period - 1}[first]
        t = torch.arange(start, {"T - 1": T, "T - 2": T - 1}[last])
        key = t - {"induction": period - 1, "duplicate": period, "plus2": period - 2, "previous": 1}[offset]
        picked = patterns[..., key, t] if swapped else patterns[..., t, key]          # (..., B, H, queries)
        if reduce == "sum":
            per = picked.sum(dim=-1)
        elif reduce == "over T":
            per = picked.sum(dim=-1) / T
        elif reduce == "over T - period":
            per = picked.sum(dim=-1) / (T - period)
        else:
            per = picked.mean(dim=-1)
        if batch == "mean":
            per = per.mean(dim=-2)
        elif batch == "axis 0":
            per = per.mean(dim=0)
        elif batch == "sum":
            per = per.sum(dim=-2)
        if heads == "all":
            return picked.mean()
        return per.mean(dim=-1) if heads else per
    return wrong


IND_DUPLICATE = ("you read key t - period, the earlier copy of the current token itself: that is a duplicate-token "
                 "score. An induction head attends to the token AFTER the earlier copy, key t - period + 1, because "
                 "that token is what comes next.")
IND_PLUS2 = ("you read key t - period + 2, one past the target: the token that followed the earlier copy of token t "
             "sits at t - period + 1.")
IND_PREVIOUS = ("you read key t - 1, the previous token: that is a previous-token score. The induction target is key "
                "t - period + 1, the position after the earlier copy of the current token.")
IND_FROM_0 = ("you averaged over every query from t = 0: queries before `period` have no earlier copy, and for "
              "them t - period + 1 is negative, which wraps around to the end of the row (the masked upper "
              "triangle, zeros). Average over t = period, ..., T - 1 only.")
IND_FROM_1 = ("you started at query t = 1: queries before `period` are in the first copy and have no earlier "
              "occurrence to look back to (and a negative key index wraps around to the end of the row). Start at "
              "t = period.")
IND_FROM_P_MINUS_1 = ("you included query t = period - 1 (torch.diagonal(..., offset=-(period - 1)) starts there): "
                      "its key is position 0, but that query is still in the first copy and has no earlier "
                      "occurrence. Start at t = period (drop the diagonal's first entry).")
IND_LAST_DROPPED = ("you left out the last query, t = T - 1: range(period, T - 1) stops at T - 2, because a range "
                    "excludes its end. The queries run to the last position: range(period, T) (or torch.arange(period, "
                    "T)).")
IND_MASK_FROM_P_MINUS_1 = ("your mask includes query t = period - 1 (key 0), so you add T - period + 1 weights but "
                           "divide by T - period: that query is still in the first copy, with no earlier occurrence. "
                           "Set the mask from query t = period only.")
IND_BATCH_SUM = ("you summed over the batch instead of averaging: the score is a mean over the sequences as well as "
                 "the queries (a perfect induction head scores 1 whatever the batch size), so use .mean over the "
                 "batch axis (axis -3 of patterns).")
IND_SWAPPED = ("you indexed [key, query]: rows are queries and columns keys, so the weight from query t on key "
               "t - period + 1 is patterns[..., t, t - period + 1]; [t - period + 1, t] reads the upper triangle, "
               "which the causal mask makes zero.")
IND_NO_BATCH_MEAN = ("you returned a score per sequence and head, (..., B, n_heads): average over the batch too (axis "
                     "-3 of patterns), so that the result is (..., n_heads).")
IND_HEADS_TOO = ("you averaged over the heads too: the score tells heads apart, one number per head, "
                 "(..., n_heads).")
IND_ONE_NUMBER = ("you returned one number, the mean of everything: the score tells heads apart (and layers, when "
                  "patterns has leading dimensions), so average over the queries and the batch only, which leaves "
                  "(..., n_heads).")
IND_SUM = ("you summed over the queries instead of averaging: divide by their number, T - period, so that a perfect "
           "induction head scores 1.")
IND_OVER_T = ("you divided by T, not by the number of queries you summed over, T - period: a perfect induction head "
              "must score 1.")
IND_AXIS_0 = ("you averaged over axis 0, which is the batch only when patterns is 4-D: patterns may have leading "
              "dimensions, (n_layer, B, n_heads, T, T), so count the batch axis from the end (axis -3 of "
              "patterns).")
IND_AXIS_AFTER_MEAN = ("an axis was counted as if nothing had been reduced yet: after the first mean (over "
                       "the queries) the result is (..., B, n_heads), so the batch is axis -2, not -3 (-3 is the "
                       "batch before that mean, in patterns[..., t, t - period + 1]). Count each axis from the end of "
                       "the tensor you reduce, or take both means at once: .mean(dim=(-1, -3)) on the picked "
                       "weights.")
IND_LEADING = ("patterns may have leading dimensions, (n_layer, B, n_heads, T, T): index the last two axes whatever "
               "comes before them, patterns[..., t, t - period + 1], and count the other axes from the end.")
IND_GENERIC = ("average patterns[..., t, t - period + 1] (query t, key t - period + 1) over the queries t = period, "
               "..., T - 1 and over the batch (axis -3 of patterns), which leaves (..., n_heads).")

SCORE_MISTAKES = [
    (_score(offset="duplicate"), IND_DUPLICATE),
    (_score(offset="plus2"), IND_PLUS2),
    (_score(offset="previous"), IND_PREVIOUS),
    (_score(first="0"), IND_FROM_0),
    (_score(first="1"), IND_FROM_1),
    (_score(first="period-1"), IND_FROM_P_MINUS_1),
    (_score(first="period-1", reduce="over T - period"), IND_MASK_FROM_P_MINUS_1),
    (_score(last="T - 2"), IND_LAST_DROPPED),
    (_score(swapped=True), IND_SWAPPED),
    (_score(batch="none"), IND_NO_BATCH_MEAN),
    (_score(batch="sum"), IND_BATCH_SUM),
    (_score(heads=True), IND_HEADS_TOO),
    (_score(heads="all"), IND_ONE_NUMBER),
    (_score(reduce="sum"), IND_SUM),
    (_score(reduce="over T"), IND_OVER_T),
    (_score(batch="axis 0"), IND_AXIS_0),
]

IND_OTHER_KEY = ("you read another key: the induction target of query t is key t - period + 1, the position just "
                 "after the earlier copy of token t (the token that came next then, and should come next now).")


def _diagnose_score(cases, outputs, refs):
    """The mean weight on another key, t - period + 1 - delta, for one delta on every case (an offset no
    registered mistake reads)."""
    for delta in [d for k in range(1, 13) for d in (k, -k)]:
        agree = True
        for (patterns, period), out in zip(cases, outputs):
            T = patterns.shape[-1]
            t = torch.arange(period, T)
            key = t - period + 1 - delta
            if not isinstance(out, torch.Tensor) or bool((key >= T).any()):
                agree = False
                break
            other = patterns[..., t, key].mean(dim=-1).mean(dim=-2)
            if out.shape != other.shape or not torch.allclose(out, other, rtol=1e-9, atol=1e-12):
                agree = False
                break
        if agree:
            sign = "-" if delta > 0 else "+"
            return (f"your scores are the mean weight on key t - period + 1 {sign} {abs(delta)}. "
                    f"Hint: {IND_OTHER_KEY}")
    return None


register(Exercise(
    name="induction_score", number="10.1", function="score_induction", chapter=CHAPTER,
    args=("patterns", "period"),
    library_answers=("tinyformer.interp.induction_score", "tinyformer.interp._offset_score"),
    make_cases=_score_cases, reference=induction_score_reference,
    returns="the scores, one per head: (..., n_heads)",
    mistakes=SCORE_MISTAKES, dtype_from="patterns",
    diagnose=safe_diagnosis(_diagnose_score), diagnose_hints=(IND_OTHER_KEY,),
    error_hints=[(IndexError, r"(out of bounds|too many indices)", IND_LEADING),
                 (IndexError, r"Dimension out of range", IND_AXIS_AFTER_MEAN)],
    generic_hint=IND_GENERIC,
))


# --------------------------------------------------------------------------- 10.2 an induction circuit by hand


def wire_induction_reference(layout: SimpleNamespace):
    """Head 0.0: the query of position t (scaled by 100, so that the softmax picks one key) matches the
    key of position t - 1, and W_V0 copies that position's token into PREV (W_O0 the identity). Head
    1.0: the current token (TOK) matches a position whose previous token (PREV) is the same. It also
    takes a case's item as it is stored (built data), so that it can be called on a case directly."""
    layout = _fresh(layout)
    d, V, T = layout.d_model, layout.V, layout.T
    W_Q0, W_K0, W_V0, W_O0, W_Q1, W_K1 = torch.zeros(6, d, d, dtype=F64)
    W_Q0[layout.POS, layout.POS] = 100.0 * torch.eye(T, dtype=F64)
    W_K0[layout.POS, layout.POS] = torch.diag(torch.ones(T - 1, dtype=F64), 1)    # key of s -> dim s + 1
    W_V0[layout.TOK, layout.PREV] = torch.eye(V, dtype=F64)
    W_O0[:] = torch.eye(d, dtype=F64)
    W_Q1[layout.TOK, layout.TOK] = 100.0 * torch.eye(V, dtype=F64)
    W_K1[layout.PREV, layout.TOK] = torch.eye(V, dtype=F64)
    return W_Q0, W_K0, W_V0, W_O0, W_Q1, W_K1


def _build_layout(V: int, T: int, period: int, seed: int) -> SimpleNamespace:
    """The reader's argument: the layout. ``period`` and ``seed`` are the check's (which sequences it
    runs the circuit on) and stay out of it."""
    return circuit_layout(V, T)


register_builder("circuit layout", _build_layout)

WIRE_PASS = 0.9           # both scores must be above this
WIRE_BATCH = 8


def _wire_case(V: int, T: int, period: int, seed: int) -> tuple:
    return (built("circuit layout", V=V, T=T, period=period, seed=seed),)


def _wire_cases(g):
    """(layout,) with the sequences' period and seed stored beside it: fixed sizes (and sequences) first,
    periods of at least 8, sequences of 2·period tokens, as long as the block or shorter (case 1), V = period
    once (case 2: every token in every span); then one of random sizes and sequences."""
    cases = [_wire_case(10, 16, 8, 1), _wire_case(12, 22, 9, 2), _wire_case(8, 16, 8, 3), _wire_case(16, 24, 12, 4)]
    period = _randint(g, 8, 12)
    V = _randint(g, period, 16)
    cases.append(_wire_case(V, _randint(g, 2 * period, 2 * period + 4), period, _randint(g, 5, 2 ** 31 - 1)))
    return cases


def _case_sizes(case) -> tuple[SimpleNamespace, int, int]:
    item = case[0]
    return circuit_layout(int(item["V"]), int(item["T"])), int(item["period"]), int(item["seed"])


@dataclass
class _Run:
    """What the wired circuit did on a case's sequences."""

    layout: SimpleNamespace
    period: int
    idx: torch.Tensor            # (B, 2·period)
    patterns: torch.Tensor       # (2, B, L, L): the weights of heads 0.0 and 1.0
    raw: torch.Tensor            # (2, B, L, L): their scores before the causal mask
    written: torch.Tensor        # (B, L, d_model): what layer 0's attention added to the stream
    weights: tuple

    def offset(self, layer: int, k: int, first: int) -> float:
        """The mean weight of head ``layer``.0 from query t >= first on key t - k."""
        L = self.patterns.shape[-1]
        t = torch.arange(first, L)
        return float(self.patterns[layer][:, t, t - k].mean())

    def argmax_share(self, layer: int, k: int, first: int, raw: bool = False) -> float:
        """The share of queries t >= first whose largest weight (or unmasked score) is on key t - k alone."""
        A = (self.raw if raw else self.patterns)[layer]
        L = A.shape[-1]
        t = torch.arange(max(first, k, -k), L if k >= 0 else L + k)
        if len(t) == 0:
            return 0.0
        rows = A[:, t]                                                    # (B, queries, L)
        target = rows[:, torch.arange(len(t)), t - k]                      # (B, queries)
        others = rows.clone()
        others[:, torch.arange(len(t)), t - k] = -math.inf
        if not raw:
            others = others.masked_fill(torch.arange(L) > t[:, None], -math.inf)
        margin = 1e-9 * (1.0 + rows.abs().amax(dim=-1))
        return float((target > others.amax(dim=-1) + margin).double().mean())


def _run(case, weights) -> _Run | None:
    """Run the circuit ``weights`` on the case's sequences; None if the weights cannot be run (wrong
    shapes, not tensors)."""
    from tinyformer import interp

    layout, period, seed = _case_sizes(case)
    d = layout.d_model
    if not (isinstance(weights, (tuple, list)) and len(weights) == len(MATRICES)
            and all(isinstance(w, torch.Tensor) and tuple(w.shape) == (d, d) for w in weights)):
        return None
    weights = tuple(w.to(F64) for w in weights)
    model = build_circuit(layout, weights, dtype=F64)
    idx = distinct_spans(layout.V, period, WIRE_BATCH, torch.Generator().manual_seed(seed))
    names = ["blocks.0.hook_attn_out"] + [f"blocks.{i}.attn.hook_{x}" for i in (0, 1) for x in ("q", "k", "pattern")]
    _, cache = interp.run_with_cache(model, idx, names)
    q = [cache[f"blocks.{i}.attn.hook_q"][:, :, 0] for i in (0, 1)]     # (B, L, d_head): one head
    k = [cache[f"blocks.{i}.attn.hook_k"][:, :, 0] for i in (0, 1)]
    raw = torch.stack([q[i] @ k[i].transpose(-1, -2) / math.sqrt(d) for i in (0, 1)])
    patterns = torch.stack([cache[f"blocks.{i}.attn.hook_pattern"][:, 0] for i in (0, 1)])
    return _Run(layout, period, idx, patterns, raw, cache["blocks.0.hook_attn_out"], weights)


def _scores(run: _Run) -> tuple[float, float]:
    from tinyformer import interp

    return (float(interp.previous_token_score(run.patterns[0][:, None])[0]),
            float(interp.induction_score(run.patterns[1][:, None], run.period)[0]))


def _wire_ok(case, out, ref) -> bool:
    try:
        run = _run(case, out)
        if run is None or not all(bool(torch.isfinite(w).all()) for w in run.weights):
            return False
        prev, ind = _scores(run)
        return prev > WIRE_PASS and ind > WIRE_PASS
    except Exception:  # noqa: BLE001 - an answer that breaks the model is wrong, not unjudgeable
        return False


WIRE_NONFINITE = "your matrices contain NaN or inf: every weight must be a finite number."
WIRE_OVERFLOW = ("the scores overflow: with weights this large, q · k is inf and the softmax gives NaN. A scale of "
                 "10 to 1000 is plenty.")
L0_FLAT = ("every score of head 0.0 is the same, so it spreads its attention evenly: W_Q0 and W_K0 must send the query "
           "of position t and the key of position t - 1 to the same dimension (both read POS), so that their dot "
           "product is the only large one.")
L0_SOFT = ("head 0.0 puts its largest weight on the previous token, but not enough of it: its softmax is too soft. "
           "The layer norm and the 1/√d_head leave a one-hot match a score of about 1, not enough to outweigh a dozen "
           "other keys: multiply W_Q0 by a large number (100, say).")
L0_TOKENS = ("head 0.0 matches tokens, not positions: it attends to the earlier copy of the current token (and to "
             "itself). A previous-token head finds position t - 1 whatever the tokens: its query and key read the POS "
             "block.")
L0_SELF = ("head 0.0 attends to the current position, not the previous one: its query and key read the same position, "
           "so each position matches itself. Shift the key by one: the key of position s must land on the dimension "
           "of the query of position s + 1 (W_K0[POS, POS] with ones just above the diagonal, in the row convention "
           "where rows are what a matrix reads).")
L0_AHEAD = ("head 0.0's scores peak at the NEXT position, t + 1, which the causal mask hides, so it spreads its weight "
            "over the rest: your shift runs the wrong way (a transposed W_K0 does this; rows are what a matrix "
            "reads, columns what it writes). The key of position s must land on the query dimension of s + 1.")
L0_OFFSET = ("head 0.0 attends further back than the previous token: shift the key by exactly one position (the key of "
             "position s lands on the query dimension of s + 1).")
L0_GENERIC = ("head 0.0 must be a previous-token head: the query of position t and the key of position t - 1 meet on "
              "one dimension (W_Q0 and W_K0 read POS), with a large scale so that the softmax picks that key.")
L0_SILENT = ("head 0.0 attends to the previous token but writes nothing into the stream's PREV block (it stays empty): "
             "its output, x̂ @ W_V0 @ W_O0, must copy the TOK block into PREV (e.g. W_V0[TOK, PREV] the identity and "
             "W_O0 the identity; rows are what a matrix reads, columns what it writes).")
L0_INTO_TOK = ("head 0.0 copies the previous token into the TOK block, on top of the current token, and leaves PREV "
               "empty: write it into PREV instead (W_V0 reads TOK and writes PREV, W_V0[TOK, PREV]).")
L0_ALSO_TOK = ("head 0.0 also writes into the TOK block (W_V0 @ W_O0 copies more than TOK into PREV: an identity in "
               "W_V0 copies the whole stream), so layer 1's query, which reads TOK, holds two tokens, the current one "
               "and the previous one, and looks for both. Copy TOK into PREV only.")
L0_NEGATIVE = ("head 0.0 writes MINUS the previous token's one-hot into PREV: flip the sign of W_V0 (or W_O0), so that "
               "the matching token in layer 1 gets the highest score, not the lowest.")
L0_WRITE_GENERIC = ("head 0.0 attends to the previous token, but the PREV block does not then hold that token's "
                    "one-hot: W_V0 must read the TOK block and W_V0 @ W_O0 write it, unchanged, into PREV.")
L1_FLAT = ("every score of head 1.0 is the same: its queries and keys never meet. q = x̂ @ W_Q1 and k = x̂ @ W_K1 must "
           "put token v of the query (TOK) and token v of the key's PREV block on the same dimension (a transposed "
           "matrix sends them to different ones).")
L1_SOFT = ("head 1.0 puts its largest weight on the induction target, but not enough of it: its softmax is too soft. "
           "Multiply W_Q1 by a large number (100, say).")
L1_DUPLICATE = ("head 1.0 is a duplicate-token head: it attends to the earlier copy of the current token (offset "
                "period) and to itself, because its key reads TOK. The key must read PREV, which head 0.0 filled: the "
                "position whose PREVIOUS token is the current one is the position after the earlier copy.")
L1_QUERY_PREV = ("head 1.0's query reads PREV: it then looks for the previous token, and finds itself and the earlier "
                 "copy of its own previous token. The query reads the current token (TOK), the key reads PREV.")
L1_SWAPPED = ("head 1.0 attends to the previous token: its query reads PREV and its key TOK, the other way round. The "
              "query is the current token (TOK), and it looks for keys whose previous token (PREV) is the same.")
L1_PREVIOUS = ("head 1.0 is a second previous-token head: layer 1 must compare tokens, not positions. Its query reads "
               "the current token (TOK) and its key the previous token (PREV) that head 0.0 wrote.")
L1_NEGATIVE = ("head 1.0 gives the matching key the LOWEST score: the sign of W_Q1 @ W_K1ᵀ is flipped. Make the "
               "product of the query's TOK and the key's PREV positive.")
L1_GENERIC = ("head 1.0 must be an induction head: its query reads the current token (TOK), its key the previous token "
              "(PREV, written by head 0.0), both onto the same dimensions, with a large scale.")
WIRE_GENERIC = ("head 0.0 (W_Q0, W_K0 on POS, shifted by one; W_V0 @ W_O0 copying TOK into PREV) must be a previous-"
                "token head and head 1.0 (W_Q1 on TOK, W_K1 on PREV) an induction head, each with a large scale.")


def _block_norms(M: torch.Tensor, layout: SimpleNamespace) -> dict[tuple[str, str], float]:
    """The size of each (query block, key block) part of the bilinear form M = W_Q W_Kᵀ: how much the
    score reads that block of the query's stream against that block of the key's."""
    blocks = {"TOK": layout.TOK, "PREV": layout.PREV, "POS": layout.POS}
    return {(a, b): float(M[blocks[a], blocks[b]].norm()) for a in blocks for b in blocks}


def _dominant(norms: dict) -> tuple[str, str] | None:
    best = max(norms, key=norms.get)
    return best if norms[best] > 0 else None


def _layer0(run: _Run) -> str | None:
    """Why head 0.0 is not a previous-token head (None if it is one)."""
    prev = run.offset(0, 1, 1)
    if prev > WIRE_PASS:
        return None
    said = f"head 0.0's previous-token score is {prev:.2f} (above {WIRE_PASS} needed)"
    P = run.period
    raw = run.raw[0]
    if float((raw.amax(-1) - raw.amin(-1)).abs().max()) <= 1e-9 * (1.0 + float(raw.abs().max())):
        return f"{said}. Hint: {L0_FLAT}"
    if run.argmax_share(0, 1, 1) > 0.9:
        return f"{said}. Hint: {L0_SOFT}"
    if run.offset(0, P, P) > 0.3 and run.offset(0, P, P) + run.offset(0, 0, P) > 0.8:
        said += f"; its weight on the earlier copy of the current token is {run.offset(0, P, P):.2f}"
        return f"{said}. Hint: {L0_TOKENS}"
    if run.argmax_share(0, 0, 1) > 0.9:
        return f"{said}; its weight on the current position is {run.offset(0, 0, 1):.2f}. Hint: {L0_SELF}"
    if run.argmax_share(0, -1, 0, raw=True) > 0.9:
        return f"{said}. Hint: {L0_AHEAD}"
    for k in range(2, P):
        if run.argmax_share(0, k, k) > 0.9:
            return f"{said}; its largest weight is on the token {k} positions back. Hint: {L0_OFFSET}"
    return f"{said}. Hint: {L0_GENERIC}"


def _written(run: _Run) -> str | None:
    """Why the PREV block after layer 0 does not hold the previous token (None if it does)."""
    lay = run.layout
    out = run.written[:, 1:]                                              # (B, L - 1, d): positions t >= 1
    target = torch.nn.functional.one_hot(run.idx[:, :-1], lay.V).to(F64)  # the previous tokens
    prev_block, tok_block = out[..., lay.PREV], out[..., lay.TOK]

    def cosine(x):
        return float(((x * target).sum(-1) / (x.norm(dim=-1) * target.norm(dim=-1)).clamp_min(1e-300)).mean())

    size = float(out.norm(dim=-1).max())
    if float(prev_block.norm(dim=-1).max()) <= 1e-6 * max(1.0, size):
        if size > 0 and cosine(tok_block) > 0.9:
            return f"head 0.0 is a previous-token head. Hint: {L0_INTO_TOK}"
        if size <= 1e-9:
            return f"head 0.0 is a previous-token head. Hint: {L0_SILENT}"
        return f"head 0.0 is a previous-token head. Hint: {L0_WRITE_GENERIC}"
    c = cosine(prev_block)
    if c < -0.9:
        return f"head 0.0 is a previous-token head. Hint: {L0_NEGATIVE}"
    if c < 0.9:
        return f"head 0.0 is a previous-token head. Hint: {L0_WRITE_GENERIC}"
    if float(tok_block.norm()) > 0.1 * float(prev_block.norm()):
        return f"head 0.0 is a previous-token head and fills PREV. Hint: {L0_ALSO_TOK}"
    return None


def _layer1(run: _Run) -> str | None:
    """Why head 1.0 is not an induction head (None if it is one)."""
    P = run.period
    ind = run.offset(1, P - 1, P)
    if ind > WIRE_PASS:
        return None
    said = f"head 0.0 works; head 1.0's induction score is {ind:.2f} (above {WIRE_PASS} needed)"
    raw = run.raw[1]
    if float((raw.amax(-1) - raw.amin(-1)).abs().max()) <= 1e-9 * (1.0 + float(raw.abs().max())):
        return f"{said}. Hint: {L1_FLAT}"
    if run.argmax_share(1, P - 1, P + 1) > 0.9:
        return f"{said}. Hint: {L1_SOFT}"
    lay = run.layout
    W_Q1, W_K1 = run.weights[4], run.weights[5]
    norms = _block_norms(W_Q1 @ W_K1.T, lay)
    main = _dominant(norms)
    dup, self_ = run.offset(1, P, P), run.offset(1, 0, P)
    if dup > 0.3 and dup + self_ > 0.8:
        said += f"; its weight on the earlier copy of the current token is {dup:.2f}"
        return f"{said}. Hint: {L1_QUERY_PREV if main == ('PREV', 'PREV') else L1_DUPLICATE}"
    if run.offset(1, 1, 1) > 0.5 or run.offset(1, 1, 1) + run.offset(1, P + 1, P + 1) > 0.8:
        return f"{said}. Hint: {L1_SWAPPED if main == ('PREV', 'TOK') else L1_PREVIOUS}"
    if main == ("TOK", "PREV"):
        M = (W_Q1 @ W_K1.T)[lay.TOK, lay.PREV]
        if float(torch.diagonal(M).sum()) < 0:
            return f"{said}. Hint: {L1_NEGATIVE}"
    return f"{said}. Hint: {L1_GENERIC}"


def _diagnose_wire(cases, outputs, refs):
    for case, out in zip(cases, outputs):
        layout, _, _ = _case_sizes(case)
        d = layout.d_model
        for name, w in zip(MATRICES, out):
            if tuple(w.shape) != (d, d):
                return (f"{name} has shape {tuple(w.shape)}, expected ({d}, {d}) for V = {layout.V}, T = {layout.T}: "
                        f"every matrix maps the d_model = 2V + T + 2 = {d} dimensions of the stream to d_head = "
                        f"d_model (one head per layer).")
        if not all(bool(torch.isfinite(w).all()) for w in out):
            return f"wrong output. Hint: {WIRE_NONFINITE}"
    for case, out in zip(cases, outputs):
        if _wire_ok(case, out, None):
            continue
        run = _run(case, out)
        layout = run.layout
        where = f"for V = {layout.V}, T = {layout.T} (period {run.period})"
        if not (torch.isfinite(run.patterns).all() and torch.isfinite(run.raw).all()):
            return f"{where}: the attention weights are NaN. Hint: {WIRE_OVERFLOW}"
        for step in (_layer0, _written, _layer1):
            said = step(run)
            if said is not None:
                return f"{where}: {said}"
        return None
    return None


register(Exercise(
    name="wire_induction", number="10.2", function="wire_induction", chapter=CHAPTER, args=("layout",),
    # the weights are to be set by hand: fitting them with an optimizer is not the exercise
    library_answers=("torch.optim.Adam", "torch.optim.AdamW", "torch.optim.SGD", "torch.optim.RMSprop",
                     "torch.optim.LBFGS"),
    make_cases=_wire_cases, reference=wire_induction_reference,
    returns="the six matrices (W_Q0, W_K0, W_V0, W_O0, W_Q1, W_K1), each (d_model, d_model)",
    item_names=MATRICES, check_shapes=False, compare=_wire_ok,
    exact_dtype=False,             # no tensor comes in: float32 or float64, as the learner likes
    diagnose=safe_diagnosis(_diagnose_wire),
    diagnose_hints=(WIRE_NONFINITE, WIRE_OVERFLOW, L0_FLAT, L0_SOFT, L0_TOKENS, L0_SELF, L0_AHEAD, L0_OFFSET,
                    L0_GENERIC, L0_SILENT, L0_INTO_TOK, L0_ALSO_TOK, L0_NEGATIVE, L0_WRITE_GENERIC, L1_FLAT, L1_SOFT,
                    L1_DUPLICATE, L1_QUERY_PREV, L1_SWAPPED, L1_PREVIOUS, L1_NEGATIVE, L1_GENERIC),
    generic_hint=WIRE_GENERIC,
))
