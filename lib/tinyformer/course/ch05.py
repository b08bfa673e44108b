"""Chapter 5 (the GPT): the exercises, their test inputs, references, known mistakes and hints.

Exercise 5.1 (``nucleus_probs``) turns logits into the distribution top-p sampling draws from, with
the library's semantics (:mod:`tinyformer.sampling`): temperature divides the logits first, the
nucleus is the smallest set of most likely tokens whose probability reaches ``top_p`` (the token
that crosses it is inside), and the kept probabilities are renormalised. Its random cases keep
every cumulative sum more than 1e-6 away from ``top_p`` (for the temperature given, for 1 and for
its inverse, sorted either way and in vocabulary order), so that a nucleus never depends on
rounding; one fixed case is exact on purpose (probabilities 0.5, 0.25, 0.125, 0.125 and
``top_p = 0.75``: the total reaches top_p exactly after two tokens and stops there, as the statement
says).

Exercise 5.2 (``gpt_params``) counts the parameters of the book's GPT (learned positions, pre-norm,
biases, ``d_ff = 4·d_model``) exactly. Only an int passes: a float that equals the count is told to
return an int (NumPy integers and 0-d integer tensors are read as ints). Single slips are known
mistakes (b_1 of d_model numbers, which leaves each block as short as unbiased W_Q, W_K and W_V, is named
with both); a ``diagnose`` decomposes the difference from the answer into two slips when exactly
one pair of unrelated slips explains it on every case.

Exercise 5.6 (``sample_tokens``) is a transfer of the decoding loop shown in the chapter: the loop with an
end-of-text token ``eos_id``, judged token for token against the library's ``generate(..., eos_id=eos_id)``
with the same seeded generator. Once a row has generated eos_id every later token of the row is eos_id (a token
is still drawn for every row at every step, then replaced in the finished rows, so the random draws are those
of the plain loop), decoding stops as soon as every row has finished (the output may be shorter than
T + max_new_tokens), and an eos_id inside the prompt does not count; eos_id=None is the plain loop. Each case
holds a small float32 GPT and a ``torch.Generator``, stored as seeds (see ``register_builder``) and built
afresh for every call. ``generate`` draws exactly as the exercise says: one
``torch.multinomial(probs, 1, generator=...)`` per step on the (B, V) probabilities, in the logits' dtype (a
test counts the calls). In this torch, ``multinomial`` with one sample is ``argmax(probs / E)`` with ``E`` one
Exp(1) draw per entry, so probabilities in float64, unnormalised weights or one call per row draw the same
tokens, and a loop that draws for the running rows only shifts the stream. The cases with eos_id, and one with
a vocabulary of 128 where top-k 50, top-p 0.99 and min-p 0.01 each change a draw, are searched for with the
reference and the named mistakes (their search is cached per seed), so that each shows what it is there for
whatever the seed. Sampling mistakes are registered like any other (they use the case's generator, so they are
reproducible); a loop that ignores ``generator`` draws from the global generator instead and is told by a pair
of identical cases that come out different; a loop that counts an eos_id in the prompt is told by a diagnosis
(any variant: the prompt scanned once, every step, or its last column only). Lengths that differ from
``generate``'s are left to the diagnosis (``check_shapes=False``): the first case that differs decides between
a shape message and the generic hint.

Exercise 5.7 (``cycle_weights``) wires a model with no blocks by hand: ``(E, W_U)`` of shapes (n, 2) and
(2, n), float64, such that softmax(E[a] @ W_U) gives token (a + 1) % n a probability of at least 0.9 for
every a. It is judged by that behaviour (``compare``), for n = 3, 4, 5, 8, 12 and 16, not against the
reference (one answer of many: the tokens on the unit circle, W_U's columns a step behind, scaled by 10·n); a
diagnosis names the tied choice W_U = Eᵀ (each token predicts itself), the cycle turned backwards, a scale
too small from n = 3 on or only from a larger n on, transposed shapes and d_model = n.

Library answers: 5.1's are the sampling functions that compute the distribution. For 5.2,
``gpt_param_count`` and ``block_param_count`` compute the count in closed form, and building the
model to sum its parameters' sizes is the library's answer in spirit, so the classes
``tinyformer.model.GPT``, ``tinyformer.blocks.TransformerStack`` and
``tinyformer.blocks.TransformerBlock`` are listed too (every function in their bodies, ``__init__``
included), as chapter 3 lists ``TransformerBlock`` for its block count (3.4). For 5.6, ``generate``,
``sample_next``, ``next_token_distribution`` and ``greedy``. For 5.7, none beyond its reference.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

from tinyformer.course.engine import (
    EXERCISES,
    Exercise,
    _fresh,
    _shape_message,
    built,
    register,
    register_builder,
    safe_diagnosis,
)
from tinyformer.course.engine import as_int as _as_int
from tinyformer.course.engine import randint as _randint
from tinyformer.model import GPT, GPTConfig, gpt_param_count
from tinyformer.sampling import generate, next_token_distribution

CHAPTER = "05-gpt"
F64 = torch.float64


def _uniform(g: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * torch.rand(1, generator=g, dtype=F64).item()


# --------------------------------------------------------------------------- 5.1 top-p (nucleus) filtering


MARGIN = 1e-6          # the random cases keep every cumulative sum this far from top_p


def _logits_of(*rows: list[float], shift: float = 0.0) -> torch.Tensor:
    """Logits whose softmax is each row of probabilities (rows sum to 1), shifted by a constant
    (the softmax does not see it; a cumulative sum of logits does)."""
    return torch.tensor(rows, dtype=F64).log() + shift


def _sums(logits: torch.Tensor, top_p: float, temperature: float) -> list[torch.Tensor]:
    """Every cumulative sum a nucleus (right or known-wrong) is decided by, paired with what it is
    compared with: sorted probabilities either way and in vocabulary order, sorted logits; for the
    temperature, for 1 and for its inverse. Returns the differences |sum - bound|. The sum of a
    whole row is left out: it is 1 in any order, and at top_p = 1 the reference keeps every token."""
    gaps = []
    for t in {temperature, 1.0, 1.0 / temperature}:
        z = logits / t
        probs = z.softmax(dim=-1)
        desc = probs.sort(dim=-1, descending=True).values
        asc = desc.flip(-1)
        for seq in (desc, asc, probs, z.sort(dim=-1, descending=True).values):
            gaps.append((seq.cumsum(dim=-1)[..., :-1] - top_p).abs())
        gaps.append((asc.cumsum(dim=-1)[..., :-1] - (1 - top_p)).abs())   # Hugging Face's cumsum <= 1 - p
    return gaps


def clear_of_the_boundary(logits: torch.Tensor, top_p: float, temperature: float = 1.0) -> bool:
    """No cumulative sum within MARGIN of top_p (or 1 - top_p): the nucleus never hangs on rounding."""
    return all(bool((gap > MARGIN).all()) for gap in _sums(logits, top_p, temperature))


# probabilities 0.125, 0.5, 0.125, 0.25 exactly: logits k·ln 2 (log-probabilities + ln 2) with k = -2, 0, -2, -1,
# so that x - max(x) is exact and exp gives powers of two; 0.5 + 0.25 reaches top_p = 0.75 exactly: keep 2
DYADIC = (torch.tensor([-2.0, 0.0, -2.0, -1.0], dtype=F64) * math.log(2), 0.75, 1.0)


def _nucleus_cases(g):
    """(logits, top_p[, temperature]): fixed cases first, so the first failing case (and the hint)
    never depends on the seed, none of them sorted in vocabulary order, no ties but among tokens
    outside the nucleus; then random ones, drawn until clear of the boundary.

    0. (2, 5), top_p 0.7, temperature 1: the crossing token matters (the rows keep 2 and 3 tokens).
    1. (3,), temperature left to its default: probabilities 0.5, 0.3, 0.2 and top_p 0.7 keep 2.
    2. the exact dyadic case: 0.5, 0.25, 0.125, 0.125 and top_p 0.75 keep 2 (the nucleus reaches p).
    3. (2, 5) at temperature 0.5: the nucleus shrinks (2 -> 1 and 3 -> 2 tokens).
    4. the same logits at temperature 2: it grows (2 -> 3 tokens in row 0).
    5. top_p = 1: every token (at temperature 0.7).
    6. a small top_p: the top token alone.
    7. probabilities 0.2, 0.4, 0.10005, 0.29995 and top_p 0.7: the mass in front of the third most
       likely token is 0.69995, just under top_p, so the nucleus holds 3 (a tolerance, before <
       top_p - 1e-4, drops it).
    8. a 3-D (2, 3, V) case; then 2-D cases and a 1-D one, random.
    """
    rows_a = [[0.12, 0.45, 0.04, 0.33, 0.06], [0.22, 0.07, 0.16, 0.40, 0.15]]
    rows_t = [[0.05, 0.25, 0.45, 0.10, 0.15], [0.28, 0.10, 0.30, 0.12, 0.20]]
    cases = [
        (_logits_of(*rows_a, shift=1.3), 0.7, 1.0),
        (_logits_of([0.3, 0.5, 0.2], shift=0.25)[0], 0.7),
        (DYADIC[0].clone(), DYADIC[1], DYADIC[2]),
        (_logits_of(*rows_t, shift=-0.4), 0.6, 0.5),
        (_logits_of(*rows_t, shift=0.9), 0.6, 2.0),
        (_logits_of([0.1, 0.35, 0.2, 0.3, 0.05], [0.4, 0.15, 0.25, 0.08, 0.12], [0.3, 0.1, 0.26, 0.2, 0.14]), 1.0,
         0.7),
        (_logits_of([0.14, 0.04, 0.5, 0.22, 0.1], [0.2, 0.3, 0.15, 0.25, 0.1], shift=-1.1), 0.05, 1.0),
        (_logits_of([0.2, 0.4, 0.10005, 0.29995], shift=0.6)[0], 0.7, 1.0),
    ]
    shapes = [(2, 3, _randint(g, 5, 9)), (_randint(g, 2, 4), _randint(g, 6, 12)),
              (_randint(g, 2, 4), _randint(g, 6, 12)), (_randint(g, 5, 12),)]
    for shape in shapes:
        while True:
            logits = 1.5 * torch.randn(*shape, generator=g, dtype=F64)
            top_p, temperature = _uniform(g, 0.3, 0.95), _uniform(g, 0.5, 2.0)
            if clear_of_the_boundary(logits, top_p, temperature):
                break
        cases.append((logits, top_p, temperature))
    return cases


def nucleus_probs_reference(logits: torch.Tensor, top_p: float, temperature: float = 1.0) -> torch.Tensor:
    return next_token_distribution(logits, temperature, top_p=top_p)


def _nucleus(*, keep="before<p", order="descending", cumulate="probs", temperature="first", renormalise=True,
             back="scatter", output="probs", dim=-1):
    """Top-p filtering with the mistakes named by the keywords; the defaults are right.

    keep: which sorted tokens stay: "before<p" (right: the mass in front is < p), "before<p-tol" (with a
    tolerance of 1e-3 below p), "before<=p" (a
    nucleus that reaches p exactly goes on), "cum<=p" (the crossing token excluded, possibly no token
    at all), "cum<=p,top" (the same, the top token always kept). order: "descending" or "ascending".
    cumulate: "probs" (sorted), "logits" (the sorted logits added up) or "vocab" (the probabilities
    in vocabulary order, unsorted). temperature: "first" (right), "after" (the nucleus chosen at
    temperature 1, the kept logits divided afterwards), "ignored", "multiplied", "nucleus only" (the
    nucleus chosen at the temperature, the output untempered). renormalise: False returns the full
    softmax's probabilities of the kept tokens; "zero logits" the softmax of the logits with 0 outside
    the nucleus. back: "scatter" (right), "none" (left in sorted order), "gather" (un-sorted with
    gather: the permutation applied twice) or "mask only" (the sorted keep mask applied to the
    probabilities in vocabulary order).
    output: "probs" or "mask" (the keep mask as 0.0 / 1.0). dim: the softmax axis.
    """
    def wrong(logits, top_p, temperature_=1.0):
        t = temperature_
        t_nucleus = {"first": t, "after": 1.0, "ignored": 1.0, "multiplied": 1.0 / t, "probs": 1.0,
                     "nucleus only": t}[temperature]
        t_final = {"first": t, "after": t, "ignored": 1.0, "multiplied": 1.0 / t, "probs": 1.0,
                   "nucleus only": 1.0}[temperature]
        z = logits / t_nucleus                                                  # (..., V)
        probs = z.softmax(dim=dim)
        if cumulate == "vocab":
            idx = torch.arange(logits.shape[-1]).expand(logits.shape)
            ranked = probs
        else:
            ranked, idx = probs.sort(dim=-1, descending=order == "descending", stable=True)
        values = z.gather(-1, idx) if cumulate == "logits" else ranked
        if temperature == "probs":                          # the probabilities divided by temperature
            values = values / t
        cum = values.cumsum(dim=-1)
        before = F.pad(cum[..., :-1], (1, 0))
        kept = {"before<p": before < top_p, "before<=p": before <= top_p, "cum<=p": cum <= top_p,
                "cum<=p,top": (cum <= top_p) | (torch.arange(cum.shape[-1]) == 0),
                "cum<p,top": (cum < top_p) | (torch.arange(cum.shape[-1]) == 0),
                "before<p-tol": before < top_p - 1e-3}[keep]                   # (..., V) ranked
        base = logits / t_final                                                 # (..., V)
        if back == "none":                                                      # all in sorted order
            mask, base = kept, base.gather(-1, idx)
        elif back == "gather":
            mask = kept.gather(-1, idx)
        elif back == "mask only":                                               # sorted mask, vocab order
            mask = kept
        else:
            mask = kept.scatter(-1, idx, kept)                                  # (..., V) vocabulary order
        if output == "mask":
            return mask.to(logits.dtype)
        if renormalise == "softmax":                        # a softmax of the zeroed probabilities
            return (base.softmax(dim=dim) * mask).softmax(dim=dim)
        if renormalise == "zero logits":                    # logits * mask: 0, not -inf, outside
            return (base * mask).softmax(dim=dim)
        if renormalise:
            return base.masked_fill(~mask, float("-inf")).softmax(dim=dim)
        return base.softmax(dim=dim) * mask
    return wrong


NUCLEUS_EXACT = ("a total that reaches top_p exactly stops there (cumulative >= top_p): with probabilities 0.5, "
                 "0.25, 0.125, 0.125 and top_p = 0.75 the first two tokens already reach 0.75, so the nucleus holds "
                 "2; drop a token when the mass in front of it is >= top_p (yours dropped it only when > top_p).")
NUCLEUS_LOGITS = ("your output has -inf or negative entries: those are logits (or log-probabilities), not "
                  "probabilities. Return probabilities: softmax of the filtered logits.")
NUCLEUS_EMPTY = ("some rows came out NaN: the nucleus was empty and 0/0 followed. The token that crosses top_p "
                 "belongs to the nucleus, so the most likely token is always kept.")
NUCLEUS_SUM = ("each row must sum to 1 over the nucleus: renormalise the kept probabilities (divide them by their "
               "sum), or take the softmax of the filtered logits.")
NUCLEUS_GENERIC = ("divide the logits by temperature, take the softmax, sort the probabilities in descending "
                   "order, keep each token while the mass in front of it is < top_p (so the token that crosses "
                   "top_p is kept), put the keep mask back in vocabulary order (scatter), and take the softmax of "
                   "the kept logits.")

NUCLEUS_MISTAKES = [
    (_nucleus(keep="before<=p"), NUCLEUS_EXACT),
    (_nucleus(keep="cum<=p"),
     "the token that crosses top_p belongs to the nucleus: keep a token while the mass in front of it is < top_p, "
     "not while the cumulative sum with it is <= top_p. Yours even kept no token at all when the top token's "
     "probability exceeds top_p (hence NaN): the most likely token is always kept."),
    (_nucleus(keep="cum<=p,top"),
     "the token that crosses top_p belongs to the nucleus, the smallest set whose total reaches top_p: keep a "
     "token while the mass in front of it is < top_p (yours keeps only those whose cumulative sum is <= top_p)."),
    (_nucleus(order="ascending"), "you sorted in ascending order, so your nucleus holds the LEAST likely tokens: "
                                  "sort the probabilities with descending=True."),
    (_nucleus(renormalise=False), "the kept probabilities are not renormalised, so they sum to less than 1: "
                                  "divide them by their sum (or take the softmax of the filtered logits)."),
    (_nucleus(temperature="after"),
     "temperature comes first: divide the logits by it before choosing the nucleus, since it changes which "
     "tokens reach top_p. Yours chose the nucleus from softmax(logits) and applied the temperature afterwards."),
    (_nucleus(temperature="ignored"), "the temperature argument is ignored: divide the logits by temperature "
                                      "before the softmax."),
    (_nucleus(temperature="multiplied"), "you multiplied the logits by temperature: divide them by it "
                                         "(temperature < 1 sharpens the distribution, > 1 flattens it)."),
    (_nucleus(cumulate="logits"), "you added up the logits: the nucleus is decided by the cumulative sum of the "
                                  "PROBABILITIES, softmax(logits / temperature), sorted from the most likely."),
    (_nucleus(cumulate="vocab"), "your cumulative sum runs in vocabulary order: sort the probabilities in "
                                 "descending order first, so that the nucleus collects the most likely tokens."),
    (_nucleus(back="none"), "your output is in sorted order (most likely first): put each probability back at "
                            "its token's index, scatter(-1, order, ...), so that the output lines up with logits."),
    (_nucleus(back="gather"), "you un-sorted with gather(-1, order), which reads sorted position order[i] into "
                              "token i: the sort applied twice. Write back with scatter(-1, order, values), or "
                              "gather with the inverse permutation, order.argsort(dim=-1)."),
    (_nucleus(output="mask"), "you returned the nucleus mask (1 inside, 0 outside): return the probabilities, "
                              "zero outside the nucleus and summing to 1 over it (the softmax of the filtered "
                              "logits)."),
    (_nucleus(dim=0), "a softmax over dim=0 normalises across the rows of the batch: the vocabulary is the LAST "
                      "axis, so use dim=-1 (logits may be (V,), (B, V) or (B, T, V))."),
    (_nucleus(renormalise="softmax"),
     "you took a softmax of the kept probabilities: the zeros outside the nucleus become e^0, not 0, and the "
     "kept ones are squashed together. Renormalise by dividing by their sum instead."),
    (_nucleus(temperature="probs"),
     "you divided the probabilities by temperature, not the logits: that changes their sum, so the nucleus is "
     "cut at another total, and it does not sharpen or flatten anything. Divide the LOGITS by temperature "
     "before the softmax."),
    (_nucleus(renormalise="zero logits"),
     "you set the logits outside the nucleus to 0 (logits * mask, or masked_fill with 0): e^0 is not 0, so those "
     "tokens keep probability. Fill them with float('-inf') before the softmax (or zero the probabilities and "
     "divide by their sum)."),
    (_nucleus(temperature="nucleus only"),
     "you used the temperature to choose the nucleus but returned untempered probabilities: divide the logits "
     "by temperature once, first, and take both the nucleus and the output from those logits."),
    (_nucleus(back="mask only"),
     "your keep mask is in sorted order (most likely first) but you applied it to the probabilities in "
     "vocabulary order: put it back first, mask.scatter(-1, order, mask), so that each token gets its own "
     "verdict."),
    (_nucleus(keep="before<p-tol"),
     "your boundary has a tolerance: a token whose mass in front is just under top_p (0.69995 with top_p = 0.7) "
     "belongs to the nucleus. Compare with top_p itself: keep while the mass in front is < top_p."),
    (_nucleus(keep="cum<p,top"),
     "the token whose cumulative sum reaches or crosses top_p belongs to the nucleus: yours stops one token "
     "early (cumulative < top_p), keeping the top token only because you forced it. Keep a token while the mass "
     "in front of it is < top_p."),
]


def _kept(t: torch.Tensor) -> torch.Tensor:
    return (t != 0).sum(dim=-1).reshape(-1)                   # tokens kept, per row


def _case_text(case) -> str:
    logits, top_p, *rest = case
    temperature = rest[0] if rest else 1.0
    return f"logits of shape {tuple(logits.shape)}, top_p = {top_p:.4g}, temperature = {temperature:.4g}"


def _diagnose_nucleus(cases, outputs, refs):
    if any(bool((o == -math.inf).any() or (o < 0).any()) for o in outputs):
        return f"wrong output. Hint: {NUCLEUS_LOGITS}"
    if any(bool(o.isnan().any()) for o in outputs):
        return f"wrong output. Hint: {NUCLEUS_EMPTY}"
    if not all(bool(torch.allclose(o.sum(dim=-1), torch.ones((), dtype=F64), rtol=0.0, atol=1e-5))
               for o in outputs):                             # (float32 sums are left to the engine)
        return f"wrong output. Hint: {NUCLEUS_SUM}"
    for case, out, ref in zip(cases, outputs, refs):
        got, want = _kept(out), _kept(ref)
        if not torch.equal(got, want):
            row = int(torch.nonzero(got != want)[0])
            where = f" (row {row} of {got.numel()})" if got.numel() > 1 else ""
            n, m = int(got[row]), int(want[row])
            return (f"for {_case_text(case)}{where} you kept {n} token{'s' if n != 1 else ''}; the nucleus holds "
                    f"{m}. Hint: {NUCLEUS_GENERIC}")
    return None


register(Exercise(
    name="nucleus_probs", number="5.1", function="nucleus_probs", chapter=CHAPTER,
    args=("logits", "top_p", "temperature"),
    library_answers=("tinyformer.sampling.next_token_distribution", "tinyformer.sampling.top_p_filter",
                     "tinyformer.sampling.sample_next"),
    make_cases=_nucleus_cases, reference=nucleus_probs_reference,
    returns="the (..., V) float64 probabilities: zero outside the nucleus, summing to 1 over it",
    mistakes=NUCLEUS_MISTAKES,
    error_hints=[
        (AttributeError, r"return_types\.sort",
         "torch.sort returns a pair (values, indices), not a tensor: unpack it, "
         "sorted_probs, order = probs.sort(dim=-1, descending=True)."),
        (TypeError, r"return_types\.sort",
         "you passed the result of torch.sort on as a tensor: it is a pair, so write values, order = "
         "torch.sort(...) and use values (and order, to put them back)."),
        (RuntimeError, r"[Ee]xpected dtype (int32/)?int64 for index",
         "scatter and gather take an integer index (torch.long): use the indices torch.sort returns (or "
         "torch.argsort), not a float copy of them."),
        (RuntimeError, r"[Ee]xpected self\.dtype to be equal to src\.dtype",
         "scatter writes src into a tensor of its own dtype: scatter a bool mask into a bool tensor "
         "(torch.zeros_like(mask)), or probabilities into a float64 one."),
        (RuntimeError, r"masked_fill_? only supports boolean masks",
         "masked_fill needs a torch.bool mask: a comparison such as before >= top_p gives one; a float mask of "
         "0s and 1s does not."),
        (ValueError, r"values to unpack",
         "logits may be (V,), (B, V) or (B, T, V): do not unpack logits.shape into two sizes; work along the "
         "last axis (dim=-1) and let the leading axes come along."),
        (IndexError, r"[Dd]imension out of range",
         "the vocabulary is the last axis, dim=-1: logits may be 1-D, of shape (V,), where dim=1 does not "
         "exist."),
        (RuntimeError, r"The size of tensor a \(\d+\) must match the size of tensor b \(\d+\) at non-singleton "
                       r"dimension \d+",
         "a sum over the last axis drops it, kept.sum(dim=-1) is (B,), and (B, V) / (B,) does not line up: keep "
         "the axis, kept.sum(dim=-1, keepdim=True), so that each row is divided by its own sum."),
        (TypeError, r"cumsum\(\) missing 1 required positional arguments?: \"dim\"",
         "torch.cumsum needs the axis to add along: probs.cumsum(dim=-1)."),
        (TypeError, r"missing 1 required positional argument: '",
         "temperature has a default: nucleus_probs(logits, top_p) means temperature = 1.0, so write "
         "def nucleus_probs(logits, top_p, temperature=1.0)."),
    ],
    diagnose=safe_diagnosis(_diagnose_nucleus), diagnose_hints=(NUCLEUS_LOGITS, NUCLEUS_EMPTY, NUCLEUS_SUM),
    generic_hint=NUCLEUS_GENERIC,
))


# --------------------------------------------------------------------------- 5.2 the parameters of a GPT


def gpt_params_reference(vocab_size: int, block_size: int, n_layer: int, d_model: int,
                         tie_weights: bool = True) -> int:
    return gpt_param_count(GPTConfig(vocab_size=vocab_size, block_size=block_size, n_layer=n_layer, n_head=1,
                                     d_model=d_model, tie_weights=tie_weights))


def _params_cases(g):
    """(vocab_size, block_size, n_layer, d_model[, tie_weights]): GPT-2 small first (its 124,439,808),
    small sizes tied and untied, one leaving tie_weights to its default (True), n_layer = 1 once; all
    with vocab_size != block_size != d_model; then a random size."""
    cases = [(50257, 1024, 12, 768, True), (65, 32, 4, 48, False), (10, 8, 1, 4, True), (300, 20, 3, 24),
             (50257, 1024, 12, 768, False), (1000, 128, 6, 64, True)]
    d = 4 * _randint(g, 1, 64)
    vocab = _randint(g, 10, 60000)
    block = _randint(g, 4, 2048)
    vocab += vocab == block
    return cases + [(vocab, block, _randint(g, 2, 24), d, bool(_randint(g, 0, 1)))]


def _gpt_count(V, T, L, d, tied=True, *, tokens=True, positions=True, head="right", head_bias=False,
               biases=True, attention_biases=True, b_1=4, norms=True, block_norms=2, final_norm=True, norm_size=2,
               w_o=True, d_ff=4, blocks="all", short_bias=0, final_norm_size=None):
    """The GPT's count with the slips named by the keywords; the defaults are right. positions: True, False or
    "plus1" (block_size + 1 rows); head: "right", "always", "never" or "inverted" (counted when tied only);
    b_1: the FFN's first bias in units of d_model; block_norms: layer norms per block; short_bias: bias vectors
    of width d_model left out of each block; final_norm_size: the final norm's size in units of d_model (default
    norm_size)."""
    f = d_ff * d
    attention = (4 if w_o else 3) * (d * d + (d if biases and attention_biases else 0))
    ffn = 2 * d * f + ((b_1 * d * d_ff // 4 + d) if biases else 0)
    lns = block_norms * norm_size * d if norms else 0
    block = attention + ffn + lns - short_bias * d
    n_blocks = L if blocks == "all" else 1
    final_size = norm_size if final_norm_size is None else final_norm_size
    total = n_blocks * block + (final_size * d if norms and final_norm else 0)
    total += (V * d if tokens else 0) + ({True: T, False: 0, "plus1": T + 1}[positions] * d)
    counts_head = {"right": not tied, "always": True, "never": False, "inverted": tied}[head]
    total += (V * d if counts_head else 0) + (V if head_bias is True or (head_bias == "untied" and not tied) else 0)
    return total


def _gpt(**slips):
    def wrong(vocab_size, block_size, n_layer, d_model, tie_weights=True):
        return _gpt_count(vocab_size, block_size, n_layer, d_model, tie_weights, **slips)
    return wrong


GPT_FLOAT = ("the count is right but it is a float: return an int (a count is a whole number; use // instead of /, "
             "or int(...)).")
GPT_GENERIC = ("list every parameter tensor with its shape: the token and position embeddings, n_layer blocks (a "
               "block's count is exercise 3.4's, with d_ff = 4·d_model), the final layer norm, and the LM head "
               "only when it is not tied; add their sizes.")

# (the slips, the hint, the parts of the count it touches: two slips combine when their parts are disjoint)
GPT_SLIPS = [
    (dict(positions=False), "the position embeddings are missing: a table of block_size × d_model learned "
                            "vectors, one per position.", {"positions"}),
    (dict(tokens=False), "the token embedding is missing: vocab_size × d_model, one vector per token (tied, it "
                         "is also the LM head's weight; untied, the head has its own copy).", {"tokens"}),
    (dict(head="always"), "you counted the LM head although it is tied: with tie_weights=True the head reuses "
                          "the token embedding's matrix, so it adds no parameters.", {"head"}),
    (dict(head="never"), "the LM head is missing in the untied model: with tie_weights=False it has its own "
                         "d_model × vocab_size weight (no bias).", {"head"}),
    (dict(head_bias=True), "the LM head has no bias (nn.Linear(d_model, vocab_size, bias=False)): it adds "
                           "vocab_size × d_model weights when untied and nothing when tied.", {"head bias"}),
    (dict(head_bias="untied"), "your untied LM head has a bias of vocab_size numbers: the head is nn.Linear(d_model, "
                               "vocab_size, bias=False), so untied it adds the d_model × vocab_size weights only.",
     {"head bias"}),
    (dict(biases=False), "the biases are missing: in each block the four projections have d_model each, the "
                         "FFN's b_1 has 4·d_model and b_2 d_model.", {"biases"}),
    (dict(norms=False), "the layer norms are missing: two per block and the final one, each with a gain and a "
                        "bias of d_model numbers.", {"norms"}),
    (dict(final_norm=False), "the final layer norm is missing: a pre-norm GPT normalises the stream once more "
                             "after the last block (ln_f: a gain and a bias, 2·d_model).", {"norms"}),
    (dict(final_norm_size=1), "the final layer norm ln_f has a gain AND a bias, 2·d_model numbers: you counted "
                              "d_model for it (the blocks' norms are right).", {"norms"}),
    (dict(norm_size=1), "each layer norm has a gain AND a bias, 2·d_model numbers: you counted d_model per "
                        "norm.", {"norms"}),
    (dict(w_o=False), "attention has four projections: the output projection W_O (d_model², and its bias) is "
                      "missing.", {"attention", "biases"}),
    (dict(d_ff=1), "the feed-forward network's hidden width is d_ff = 4·d_model: W_1 is d_model × 4·d_model "
                   "and W_2 4·d_model × d_model, and b_1 has 4·d_model numbers.", {"ffn", "biases"}),
    (dict(blocks="one"), "you counted one block: the GPT stacks n_layer of them.",
     {"blocks", "attention", "ffn", "biases", "norms"}),
    (dict(b_1=1), "each block is 3·d_model short: b_1, the FFN's first bias, has 4·d_model numbers, one per hidden "
                  "unit, not d_model. (If you left out the biases of W_Q, W_K and W_V instead, they have d_model "
                  "each.)", {"biases"}),
    (dict(attention_biases=False), "the four attention projections have biases too: W_Q, W_K, W_V and W_O add "
                                   "d_model each, 4·d_model per block (only the LM head has no bias).", {"biases"}),
    (dict(block_norms=1), "each block has TWO layer norms, ln_1 before attention and ln_2 before the FFN (pre-norm), "
                          "2·d_model each: you counted one per block.", {"norms"}),
    (dict(head="inverted"), "the tie is the other way round: tied (tie_weights=True), the head reuses the token "
                            "embedding and adds nothing; untied, it adds its own d_model × vocab_size matrix. You "
                            "counted the head when tied and left it out when untied.", {"head"}),
    (dict(short_bias=1), "each block is d_model short: one bias vector of width d_model is missing, W_O's (each of "
                         "the four attention projections has one) or b_2, the FFN's second bias.", {"biases"}),
    (dict(positions="plus1"), "the position table has block_size rows, one for each position 0 to block_size - 1: "
                              "you counted block_size + 1.", {"positions"}),
]

GPT_MISTAKES = [(lambda V, T, L, d, tied=True: 12 * L * d * d,
                 "12·n_layer·d_model² is Kaplan et al.'s estimate: the blocks' weight matrices only. The exercise "
                 "asks for the exact count: add the embeddings, the biases, the layer norms, and an untied LM "
                 "head.")]
GPT_MISTAKES += [(_gpt(**slips), hint) for slips, hint, _ in GPT_SLIPS]


def _two_slips(cases, outputs, refs) -> tuple[str, str] | None:
    """The hints of the one pair of unrelated slips whose differences add up to the reader's on
    every case; None if no pair, or more than one, does."""
    got = [_as_int(o) for o in outputs]
    if None in got:
        return None
    diffs = [o - r for o, r in zip(got, refs)]
    effects = [([_gpt(**slips)(*case) - r for case, r in zip(cases, refs)], hint, parts)
               for slips, hint, parts in GPT_SLIPS]
    found = [(a[1], b[1]) for i, a in enumerate(effects) for b in effects[i + 1:]
             if not a[2] & b[2] and all(x + y == z for x, y, z in zip(a[0], b[0], diffs))]
    return found[0] if len(found) == 1 else None


def _diagnose_params(cases, outputs, refs):
    if all(type(o) is float and o == r for o, r in zip(outputs, refs)):
        return f"wrong output. Hint: {GPT_FLOAT}"
    pair = _two_slips(cases, outputs, refs)
    if pair is not None:
        first, second = pair
        return f"wrong count: two slips. Hint: {first} And {second[0].lower()}{second[1:]}"
    names = ("vocab_size", "block_size", "n_layer", "d_model", "tie_weights")
    for case, out, ref in zip(cases, outputs, refs):
        if not (type(out) in (int, float) and math.isfinite(out)):
            return None
        if out != ref:
            said = ", ".join(f"{n} = {v}" for n, v in zip(names, case))
            off = abs(out - ref)
            return (f"for {said} you counted {out:,}; the GPT has {ref:,} ({off:,} too "
                    f"{'many' if out > ref else 'few'}). Hint: {GPT_GENERIC}")
    return None


register(Exercise(
    name="gpt_params", number="5.2", function="gpt_params", chapter=CHAPTER,
    args=("vocab_size", "block_size", "n_layer", "d_model", "tie_weights"),
    library_answers=("tinyformer.model.gpt_param_count", "tinyformer.blocks.block_param_count",
                     "tinyformer.model.matmul_params", "tinyformer.model.kaplan_estimate",
                     "tinyformer.model.GPT", "tinyformer.blocks.TransformerStack",
                     "tinyformer.blocks.TransformerBlock",
                     # torch's own blocks and layers, and the library's: counting a module's
                     # parameters is building the model, which the exercise asks not to do
                     "torch.nn.TransformerEncoderLayer", "torch.nn.TransformerDecoderLayer",
                     "torch.nn.TransformerEncoder", "torch.nn.Transformer",
                     "torch.nn.MultiheadAttention", "torch.nn.Linear", "torch.nn.LayerNorm",
                     "torch.nn.Embedding", "tinyformer.attention.MultiHeadAttention",
                     "tinyformer.blocks.FeedForward", "tinyformer.blocks.LayerNorm"),
    make_cases=_params_cases, reference=gpt_params_reference, returns="the parameter count, an int",
    rtol=0.0, atol=0.0, compare=lambda case, out, ref: type(out) is int and out == ref,
    mistakes=GPT_MISTAKES,
    error_hints=[
        (TypeError, r"missing 1 required positional argument: '",
         "tie_weights has a default: gpt_params(vocab_size, block_size, n_layer, d_model) means "
         "tie_weights=True, so write def gpt_params(..., d_model, tie_weights=True)."),
    ],
    diagnose=safe_diagnosis(_diagnose_params), diagnose_hints=(GPT_FLOAT,),
    generic_hint=GPT_GENERIC,
))


# --------------------------------------------------------------------------- 5.6 the decoding loop, with eos_id


# small GPTs with logits spread enough (std ~ init_std·√d_model = 2) that temperature, the position read and the
# context all change the samples; the library's own attention (not the fused kernel), the same with or without grad
SAMPLE_GPT = dict(vocab_size=11, block_size=8, n_layer=2, n_head=2, d_model=16, init_std=0.5, fused_attention=False)
SAMPLE_GPT_SHORT = {**SAMPLE_GPT, "vocab_size": 13, "block_size": 6}
# a vocabulary of 128 with flatter logits (std ~ 1.4): the 78 tokens outside the top 50 hold about a fifth of the
# mass, the tail below 1% of the top token's probability about 1%, so that a filter changes some draws
SAMPLE_GPT_WIDE = {**SAMPLE_GPT, "vocab_size": 128, "n_layer": 1, "init_std": 0.35}


def _build_gpt(config: dict, seed: int) -> GPT:
    """``GPT(GPTConfig(**config))`` initialised from ``seed``, leaving the global random generator as it was
    (the reader's notebook draws from it)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT(GPTConfig(**config))


def _build_generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


register_builder("GPT", _build_gpt)
register_builder("torch.Generator", _build_generator)


def _seed(g: torch.Generator) -> int:
    return _randint(g, 0, 2 ** 31 - 1)


def _sample_case(g, config: dict, B: int, T: int, max_new_tokens: int, temperature: float, *eos: int | None,
                 prompt: torch.Tensor | None = None) -> tuple:
    """(a GPT, a (B, T) int64 prompt, max_new_tokens, temperature, a seeded torch.Generator[, eos_id]), as plain
    data; the prompt is drawn unless given."""
    idx = torch.randint(0, config["vocab_size"], (B, T), generator=g) if prompt is None else prompt
    return (built("GPT", config=config, seed=_seed(g)), idx, max_new_tokens, temperature,
            built("torch.Generator", seed=_seed(g)), *eos)


def _eos_case(g, B: int, T: int, max_new_tokens: int, temperature: float, eos_id: int | None = None) -> tuple:
    """A case of SAMPLE_GPT with an eos_id (random unless given) that its prompt does not hold."""
    eos_id = _randint(g, 0, SAMPLE_GPT["vocab_size"] - 1) if eos_id is None else eos_id
    prompt = torch.randint(0, SAMPLE_GPT["vocab_size"] - 1, (B, T), generator=g)
    prompt = prompt + (prompt >= eos_id).long()                              # every id but eos_id
    return _sample_case(g, SAMPLE_GPT, B, T, max_new_tokens, temperature, eos_id, prompt=prompt)


def _run(fn, case) -> torch.Tensor:
    return fn(*(_fresh(a) for a in case))


def _has_negative_logit(case) -> bool:
    """Does the first step's (B, V) logits hold a negative entry in every row (so that torch.multinomial
    refuses the logits themselves at once)?"""
    model, idx = _fresh(case[0]), case[1]
    with torch.no_grad():
        return bool((model(idx[:, -model.config.block_size:])[:, -1, :] < 0).any(dim=-1).all())


def _finish_steps(out: torch.Tensor, T: int, eos_id: int) -> list[int | None]:
    """For each row, the step (0-based) at which it generated eos_id first, or None."""
    steps = []
    for row in (out[:, T:] == eos_id).tolist():
        steps.append(row.index(True) if True in row else None)
    return steps


def _all_apart(outputs: list[torch.Tensor]) -> bool:
    """Are these outputs pairwise different (by shape or by a token)?"""
    return all(not (a.shape == b.shape and torch.equal(a, b)) for i, a in enumerate(outputs) for b in outputs[:i])


def _greedy_avoids_eos(case) -> bool:
    """The argmax continuation (the library's greedy, which ignores eos_id) never generates eos_id, so that a
    greedy loop is the same with or without the end-of-text rule."""
    T, eos_id = case[1].shape[1], case[5]
    return _finish_steps(_run(_loop(pick="argmax", eos="ignored"), case), T, eos_id) == [None] * case[1].shape[0]


def _runs_on(case) -> bool:
    """Rows finish at different steps while one runs to the end (the output keeps its full length); the loop that
    ignores eos_id, the one that draws for the running rows only and the one that stops at the first finished row
    each give other tokens, each its own. (A loop whose finished rows keep sampling gives the tokens of the one
    that ignores eos_id here, where some row never finishes: _ends_early tells them apart.)"""
    ref, T, eos_id = _run(sample_tokens_reference, case), case[1].shape[1], case[5]
    steps = _finish_steps(ref, T, eos_id)
    done = [s for s in steps if s is not None]
    if not (ref.shape[1] == T + case[2] and None in steps and len(set(done)) >= 2 and _greedy_avoids_eos(case)):
        return False
    return _all_apart([ref] + [_run(_loop(**slip), case) for slip in (dict(eos="ignored"), dict(eos="subset"),
                                                                       dict(stop="any"))])


def _ends_early(case) -> bool:
    """Every row finishes, at different steps, at least two steps before max_new_tokens: the output is shorter;
    a finished row of the loop that goes on sampling draws another token than eos_id before the end."""
    ref, T, eos_id = _run(sample_tokens_reference, case), case[1].shape[1], case[5]
    steps = _finish_steps(ref, T, eos_id)
    if not (None not in steps and len(set(steps)) >= 2 and ref.shape[1] < T + case[2] - 1
            and _greedy_avoids_eos(case)):
        return False
    return _all_apart([ref, _run(_loop(eos="sampled"), case)])


def _eos_in_prompt(g) -> tuple:
    """B = 3, eos_id in the prompt of rows 0 (last position) and 1 (second position), not in row 2. Rows 0 and 1
    do not generate eos_id at their first step, row 2 never does: the output keeps its full length, and a loop
    that counts the prompt's eos_id finishes rows 0 and 1 from the start (and keeps the same length too)."""
    while True:
        case = _eos_case(g, 3, 4, 6, 1.0)
        eos_id = case[5]
        prompt = case[1].clone()
        prompt[0, -1] = prompt[1, 1] = eos_id
        case = (case[0], prompt, *case[2:])
        ref = _run(sample_tokens_reference, case)
        steps = _finish_steps(ref, 4, eos_id)
        if steps[2] is None and steps[0] != 0 and steps[1] != 0 and _greedy_avoids_eos(case):
            return case


def _filters_apart(case) -> bool:
    """The loops that add top-k 50, top-p 0.99 or min-p 0.01 each draw other tokens, each its own."""
    return _all_apart([_run(sample_tokens_reference, case)]
                      + [_run(_loop(keep=keep), case) for keep in (("top-k", 50), ("top-p", 0.99), ("min-p", 0.01))])


def _draw_sampling_cases(g):
    """(model, idx, max_new_tokens, temperature, generator[, eos_id]): a fresh GPT (vocab 11, block_size 8, 2
    layers, width 16, 2 heads, float32) and a fresh generator are built from their seeds for every call. Where a
    property is stated, the case was drawn until the reference (and the mistakes named) show it.

    0. B = 3, T = 5, 6 new tokens, temperature 1, eos_id = None given: the context outgrows block_size at the 5th
       step (so a loop that does not crop raises there, and one that crops to block_size - 1 draws other tokens),
       T > 1 (so appending along dim 0 raises at once), more than one step (so float tokens reach the model), a
       negative logit in every row of the first step (so torch.multinomial refuses raw logits at once); a loop
       without the argument eos_id raises at once.
    1. B = 1, T = 3, 4 new tokens at temperature 0.5: no cropping needed (eos_id left to its default, None, here
       and up to case 7).
    2. B = 3, T = 8 = block_size, 5 new tokens at temperature 2: cropped from the second step on.
    3. B = 1, T = 4, no new token: the prompt comes back.
    4. a model with block_size 6 and vocab 13, B = 3, T = 2, 9 new tokens at temperature 0.5.
    5. B = 1, T = 6, 8 new tokens at temperature 2.
    6. B = 3, T = 4, 6 new tokens at a random temperature in [0.6, 1.6].
    7. a vocabulary of 128 with flatter logits (1 layer), B = 4, T = 4, 20 new tokens: top-k 50, top-p 0.99 and
       min-p 0.01 each change some draw.
    8. eos_id = 0, B = 4, T = 3, 10 new tokens at temperature 1.5: rows finish at different steps while one runs on
       (the output keeps T + 10 columns); see _runs_on.
    9. eos_id, B = 3, T = 2, 12 new tokens at temperature 1.5: every row finishes, at different steps, at least
       two steps before the end (the output is shorter).
    10. eos_id in the prompt of two rows of three (see _eos_in_prompt).
    11, 12. the same case twice (B = 3, T = 3, 8 new tokens at temperature 2, one generator seed): a loop that
       draws from the global random generator instead of `generator` gives two different answers.
    13, 14. the same twice with eos_id (B = 3, T = 3, 10 new tokens at temperature 1.5), a row finishing early.
    In the cases with eos_id, the prompts hold no eos_id but in case 10, and the argmax continuation never
    generates it (so greedy decoding is the same with or without the end-of-text rule).
    """
    while True:
        first = _sample_case(g, SAMPLE_GPT, 3, 5, 6, 1.0, None)
        if _has_negative_logit(first) and _all_apart([_run(sample_tokens_reference, first),
                                                      _run(_loop(crop="block-1"), first)]):
            break
    cases = [first,
             _sample_case(g, SAMPLE_GPT, 1, 3, 4, 0.5),
             _sample_case(g, SAMPLE_GPT, 3, 8, 5, 2.0),
             _sample_case(g, SAMPLE_GPT, 1, 4, 0, 1.0),
             _sample_case(g, SAMPLE_GPT_SHORT, 3, 2, 9, 0.5),
             _sample_case(g, SAMPLE_GPT, 1, 6, 8, 2.0),
             _sample_case(g, SAMPLE_GPT, 3, 4, 6, round(_uniform(g, 0.6, 1.6), 3))]
    while True:
        wide = _sample_case(g, SAMPLE_GPT_WIDE, 4, 4, 20, 1.0)
        if _filters_apart(wide):
            break
    while True:
        runs_on = _eos_case(g, 4, 3, 10, 1.5, eos_id=0)  # 0: a loop testing `if eos_id:` ignores it
        if _runs_on(runs_on):
            break
    while True:
        early = _eos_case(g, 3, 2, 12, 1.5)
        if _ends_early(early):
            break
    twin = _sample_case(g, SAMPLE_GPT, 3, 3, 8, 2.0)
    while True:
        eos_twin = _eos_case(g, 3, 3, 10, 1.5)
        steps = _finish_steps(_run(sample_tokens_reference, eos_twin), 3, eos_twin[5])
        if any(s is not None and s < 9 for s in steps) and _greedy_avoids_eos(eos_twin):
            break
    return cases + [wide, runs_on, early, _eos_in_prompt(g), twin, twin, eos_twin, eos_twin]


_DRAWN: dict[bytes, tuple] = {}      # the cases of 5.6 for a generator's state, and its state after them


def _sampling_cases(g):
    """The cases of :func:`_draw_sampling_cases`. Their search runs a few hundred small decoding loops, on one CPU
    thread (on a busy machine a second one only waits), and its result is kept for the generator's state, since
    every check and test draws the cases of the same few seeds again."""
    key = g.get_state().numpy().tobytes()
    if key not in _DRAWN:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            cases = _draw_sampling_cases(g)
        finally:
            torch.set_num_threads(threads)
        if len(_DRAWN) >= 32:
            _DRAWN.pop(next(iter(_DRAWN)))
        _DRAWN[key] = (cases, g.get_state())
    cases, state = _DRAWN[key]
    g.set_state(state)
    return copy.deepcopy(cases)


def sample_tokens_reference(model, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                            generator: torch.Generator | None = None, eos_id: int | None = None) -> torch.Tensor:
    """The library's ``generate``. It also takes a case's items as they are stored (built data), so that
    it can be called on a case directly."""
    model, generator = _fresh(model), _fresh(generator)
    return generate(model, idx, max_new_tokens, temperature=temperature, generator=generator, eos_id=eos_id)


def _filtered(logits: torch.Tensor, keep) -> torch.Tensor:
    """The (B, V) logits with the filter ``keep`` applied: ("top-k", k), ("top-p", p) or ("min-p", fraction)."""
    how, value = keep
    if how == "top-k":
        kth = logits.topk(min(value, logits.shape[-1]), dim=-1).values[:, -1:]          # (B, 1)
        return logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(dim=-1)
    if how == "min-p":
        return logits.masked_fill(probs < value * probs.max(dim=-1, keepdim=True).values, float("-inf"))
    ranked, order = probs.sort(dim=-1, descending=True)
    drop = ranked.cumsum(dim=-1) - ranked >= value                                      # (B, V) sorted
    return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))


def _loop(*, crop="last", position="last", temperature="divided", softmax_dim=-1, pick="sample", returns="all",
          keep=None, eos="right", stop="all"):
    """The decoding loop with the mistakes named by the keywords; the defaults are right.

    crop: "last" (right: the last block_size tokens), "first" (the first block_size tokens), "token" (the
    last token alone) or "block-1" (the last block_size - 1). position: "last" (right) or "first", the logits
    read. temperature: "divided" (right), "multiplied" or "ignored". softmax_dim: the softmax axis of the (B, V)
    logits. pick: "sample" (right) or "argmax" (greedy). returns: "all" (right: prompt and new tokens) or "new"
    (the new tokens alone). keep: None (right: every token) or a filter added, ("top-k", 50), ("top-p", 0.99),
    ("min-p", 0.01). eos: "right" (a finished row writes eos_id), "ignored" (eos_id never used), "sampled" (the
    finished rows go on sampling; the loop still stops once every row has drawn eos_id) or "subset" (a draw for
    the running rows only, torch.multinomial(probs[~finished], ...)) or "flat" (the finished mask of shape (B,),
    which masked_fill broadcasts with the (B, 1) tokens to (B, B)), "zero" (finished rows padded with 0) or
    "reassigned" (finished = this step's draws only, so a row that finished before runs on). stop: "all"
    (right: once every row has finished), "never", "any" (once one row has) or "before append" (the loop
    stops before appending the token that finished the last row).
    """
    def wrong(model, idx, max_new_tokens, temperature_=1.0, generator=None, eos_id=None):
        block_size = model.config.block_size
        out = idx
        finished = torch.zeros(idx.shape[0], 1, dtype=torch.bool)                          # (B, 1)
        if eos == "flat":
            finished = torch.zeros(idx.shape[0], dtype=torch.bool)                         # (B,)
        ends = eos_id is not None and eos != "ignored"
        with torch.no_grad():
            for _ in range(max_new_tokens):
                context = {"last": out[:, -block_size:], "first": out[:, :block_size], "token": out[:, -1:],
                           "block-1": out[:, -(block_size - 1):]}[crop]
                logits = model(context)[:, -1 if position == "last" else 0, :]          # (B, V)
                logits = {"divided": logits / temperature_, "multiplied": logits * temperature_,
                          "ignored": logits}[temperature]
                if keep is not None:
                    logits = _filtered(logits, keep)
                probs = logits.softmax(dim=softmax_dim)
                if pick == "argmax":
                    token = logits.argmax(dim=-1, keepdim=True)                         # (B, 1)
                elif ends and eos == "subset":
                    token = torch.full_like(finished, eos_id, dtype=idx.dtype)
                    token[~finished[:, 0]] = torch.multinomial(probs[~finished[:, 0]], 1, generator=generator)
                else:
                    token = torch.multinomial(probs, 1, generator=generator)
                if ends:
                    if eos == "reassigned":                                             # forgets earlier rows
                        finished = token == eos_id
                    else:
                        if eos == "zero":
                            token = token.masked_fill(finished, 0)
                        elif eos != "sampled":
                            token = token.masked_fill(finished, eos_id)
                        finished = finished | (token == eos_id)
                    if stop == "before append" and finished.all():
                        break
                out = torch.cat((out, token), dim=1)
                if ends and ((stop == "all" and finished.all()) or (stop == "any" and finished.any())):
                    break
        return out if returns == "all" else out[:, idx.shape[1]:]
    return wrong


SAMPLE_CROP = ("the model takes at most block_size tokens: crop the context to the LAST block_size tokens "
               "before each call, idx[:, -block_size:] with block_size = model.config.block_size, so that the "
               "loop can run past the context window.")
SAMPLE_PROMPT = ("your output does not start with the prompt: return idx followed by the new tokens, each appended "
                 "at the end, torch.cat((idx, next_id), dim=1).")
SAMPLE_GENERATOR = ("two runs with the same seeded generator gave different tokens: your draws ignore `generator`. "
                    "Pass it on, torch.multinomial(probs, 1, generator=generator), so that a seed reproduces the "
                    "sample (and the global random state is left alone).")
SAMPLE_EOS_PROMPT = ("an eos_id inside the prompt does not count: a row finishes when it GENERATES eos_id. Start "
                     "with no row finished, torch.zeros(B, 1, dtype=torch.bool), and update the mask from the new "
                     "tokens only (not from idx or its last column).")
SAMPLE_GENERIC = ("each step: crop the context to the last block_size tokens, run the model, take the last "
                  "position's logits (B, V), divide them by temperature, softmax over the vocabulary, draw one token "
                  "per row with torch.multinomial(probs, 1, generator=generator), write eos_id instead in the rows "
                  "that have finished, and append, torch.cat((idx, next_id), dim=1); stop once every row has "
                  "generated eos_id.")

SAMPLE_FLAT = ("your finished mask has shape (B,) and the new tokens (B, 1): masked_fill, torch.where and | "
               "broadcast the two to (B, B), so a step appends B columns. Give the mask the tokens' shape, "
               "torch.zeros(B, 1, dtype=torch.bool).")
SAMPLE_FLAT_INPLACE = ("finished |= (next_id == eos_id) cannot hold its result: your mask has shape (B,) and the "
                       "new tokens (B, 1), which broadcast to (B, B). Give the mask the tokens' shape, "
                       "torch.zeros(B, 1, dtype=torch.bool).")

SAMPLE_MISTAKES = [
    (_loop(crop="first"), "you cropped to the FIRST block_size tokens, so once the sequence is longer than the "
                          "window the model never sees the newest ones: keep the last, idx[:, -block_size:]."),
    (_loop(crop="token"), "you fed the model the last token alone (a bigram model's context): give it the last "
                          "block_size tokens, idx[:, -block_size:], so that it can attend to all of them."),
    (_loop(crop="block-1"), "you cropped the context to block_size - 1 tokens: the model reads block_size of them, "
                            "so keep the last block_size, idx[:, -block_size:] (one token fewer changes the logits "
                            "once the sequence fills the window)."),
    (_loop(position="first"), "you read the logits of the FIRST position, which predict the second token: the "
                              "next token is predicted at the LAST position, logits[:, -1, :]."),
    (_loop(temperature="multiplied"), "the logits were multiplied by temperature: divide them by it before the "
                                      "softmax (temperature < 1 sharpens the distribution, > 1 flattens it)."),
    (_loop(temperature="ignored"), "your tokens do not depend on temperature: divide the LOGITS by it before the "
                                   "softmax (dividing the probabilities changes nothing: torch.multinomial "
                                   "renormalises them)."),
    (_loop(softmax_dim=0), "a softmax over dim=0 normalises across the rows of the batch: the vocabulary is the "
                           "last axis of the (B, V) logits, dim=-1."),
    (_loop(pick="argmax"), "you took the most likely token (greedy decoding): sample it, "
                           "torch.multinomial(probs, 1, generator=generator), so that temperature and the seed "
                           "matter."),
    (_loop(returns="new"), "you returned the new tokens alone: return the prompt followed by them, shape "
                           "(B, T + max_new_tokens), or fewer columns when every row has finished."),
    (_loop(keep=("top-k", 50)), "you kept only the 50 likeliest tokens (top-k): sample from the whole "
                                "distribution, the softmax of logits / temperature over all V tokens, with no "
                                "filter (the check's vocabulary of 128 tokens shows the difference)."),
    (_loop(keep=("top-p", 0.99)), "you cut the distribution to a nucleus (top-p): sample from every token, the "
                                  "softmax of logits / temperature with no filter, so that the rare tokens of the "
                                  "tail stay possible."),
    (_loop(keep=("min-p", 0.01)), "you dropped the tokens below a fraction of the most likely one (min-p): sample "
                                  "from every token, the softmax of logits / temperature with no filter."),
    (_loop(eos="ignored"), "you never use eos_id, or your finished mask forgets: once a row has generated eos_id, "
                           "every later token of that row is eos_id, and the loop stops as soon as every row has "
                           "generated it (so the output may be shorter than T + max_new_tokens). A mask rebuilt "
                           "each step, finished = (next_id == eos_id), holds only that step's rows: keep the rows "
                           "that finished, finished = finished | (next_id == eos_id)."),
    (_loop(eos="sampled"), "a row that has generated eos_id has finished: write eos_id as each of its later tokens "
                           "(draw for every row as usual, then next_id.masked_fill(finished, eos_id)); yours went "
                           "on sampling in the finished rows."),
    (_loop(eos="subset"), "you drew tokens for the running rows only (probs[~finished]), so from the first finished "
                          "row on every draw takes other random numbers: draw for EVERY row at every step, one "
                          "torch.multinomial(probs, 1, generator=generator) on the whole (B, V) batch, then "
                          "overwrite the finished rows with eos_id."),
    (_loop(eos="flat"), SAMPLE_FLAT),
    (_loop(eos="zero"), "a finished row is padded with eos_id, not 0: 0 is a token like any other (here it would "
                        "read as a real token after the end). Write next_id.masked_fill(finished, eos_id)."),
    (_loop(stop="before append"), "you stopped before appending the token that finished the last row, so its "
                                  "eos_id is missing: append next_id first, then break once finished.all()."),
    (_loop(stop="never"), "decoding stops as soon as every row has finished: yours always runs max_new_tokens steps "
                          "(padding with eos_id); break out of the loop once finished.all()."),
    (_loop(stop="any"), "you stopped as soon as ONE row finished: the others run on, their tokens drawn as usual, "
                        "until every row has finished (finished.all()) or max_new_tokens are written."),
]


def _same_case(a, b) -> bool:
    return (len(a) == len(b) and a[0] == b[0] and torch.equal(a[1], b[1]) and a[2:4] == b[2:4] and a[4] == b[4]
            and a[5:] == b[5:])


SAMPLE_EOS_ZERO = ("your loop is right for every end-of-text id but 0, and with eos_id = 0 it never stops: 0 is a "
                   "token id like any other, and `if eos_id:` reads it as no eos_id at all. Test `eos_id is not "
                   "None`.")


def _diagnose_sampling(cases, outputs, refs):
    for case, out in zip(cases, outputs):
        prompt = case[1]
        if (out.dim() != 2 or out.shape[0] != prompt.shape[0] or out.shape[1] < prompt.shape[1]
                or not torch.equal(out[:, :prompt.shape[1]], prompt)):
            return f"wrong output. Hint: {SAMPLE_PROMPT}"
    for i, a in enumerate(cases):
        for j in range(i):
            if _same_case(a, cases[j]) and not (outputs[i].shape == outputs[j].shape
                                                and torch.equal(outputs[i], outputs[j])):
                return f"wrong output. Hint: {SAMPLE_GENERATOR}"
    for case, out, ref in zip(cases, outputs, refs):
        eos_id, T = (case[5] if len(case) > 5 else None), case[1].shape[1]
        if eos_id is None or out.shape[1] == T:
            continue
        for row in (case[1] == eos_id).any(dim=1).nonzero()[:, 0].tolist():
            if bool((out[row, T:] == eos_id).all()) and not bool((ref[row, T:] == eos_id).all()):
                return f"wrong output. Hint: {SAMPLE_EOS_PROMPT}"
    wrong = [i for i, (out, ref) in enumerate(zip(outputs, refs))
             if out.shape != ref.shape or not torch.equal(out, ref)]
    if wrong and all(len(cases[i]) > 5 and cases[i][5] == 0 for i in wrong):
        return f"wrong output. Hint: {SAMPLE_EOS_ZERO}"
    for case, out, ref in zip(cases, outputs, refs):      # the first case that differs: its shape, else the generic
        if out.shape != ref.shape:
            return f"{_shape_message(EXERCISES['sample_tokens'], case, out, ref)}."
        if not torch.equal(out, ref):
            return None
    return None


register(Exercise(
    name="sample_tokens", number="5.6", function="sample_tokens", chapter=CHAPTER,
    args=("model", "idx", "max_new_tokens", "temperature", "generator", "eos_id"),
    library_answers=("tinyformer.sampling.generate", "tinyformer.sampling.sample_next",
                     "tinyformer.sampling.next_token_distribution", "tinyformer.sampling.greedy",
                     "tinyformer.sampling._generate_uncached", "tinyformer.sampling._generate_cached",
                     "tinyformer.sampling._draw", "tinyformer.sampling._stop"),
    make_cases=_sampling_cases, reference=sample_tokens_reference,
    returns="the int64 token ids, the prompt followed by the new tokens, shape (B, T + max_new_tokens) or fewer "
            "columns when every row has finished (the tokens only, without the finished mask)",
    rtol=0.0, atol=0.0, check_shapes=False,      # a length differs from generate's: _diagnose_sampling says how
    mistakes=SAMPLE_MISTAKES,
    error_hints=[
        (ValueError, r"positions; the model takes 1 to block_size", SAMPLE_CROP),
        (AttributeError, r"has no attribute 'block_size'",
         "the context length is in the model's configuration: block_size = model.config.block_size."),
        (RuntimeError, r"a Tensor with \d+ elements cannot be converted to Scalar|Boolean value of Tensor with "
                       r"more than one value is ambiguous",
         "next_id holds one token per row, (B, 1), so .item() or `if next_id == eos_id:` (a B = 1 habit) cannot "
         "read it as one number: compare per row, next_id == eos_id gives a (B, 1) mask; keep the rows that "
         "finished in a mask, finished = finished | (next_id == eos_id), and stop once finished.all()."),
        (RuntimeError, r"probability tensor contains either .*element < 0",
         "torch.multinomial draws from probabilities (weights >= 0), and logits can be negative: divide the "
         "logits by temperature and take their softmax over the vocabulary first."),
        (RuntimeError, r"prob_dist must be 1 or 2 dim",
         "torch.multinomial takes the (B, V) probabilities of the last position: take logits[:, -1, :] (B, V), "
         "not logits[:, -1:, :] (B, 1, V) or the whole (B, T, V)."),
        (RuntimeError, r"Sizes of tensors must match except in dimension 0",
         "the new tokens go at the end of each row, along the time axis: torch.cat((idx, next_id), dim=1) "
         "(dim=0 stacks them under the batch)."),
        (RuntimeError, r"Tensors must have same number of dimensions",
         "torch.multinomial(probs, 1) gives the new tokens as (B, 1), ready to append to idx (B, T): keep that "
         "axis (no squeeze, no [:, 0])."),
        (RuntimeError, r"output with shape \[(\d+)\] doesn't match the broadcast shape \[\1, \1\]",
         SAMPLE_FLAT_INPLACE),
        (TypeError, r"idx must hold integer token ids",
         "token ids must stay integers (int64): torch.multinomial returns int64 ids, so append them as they are, "
         "without .float()."),
        (TypeError, r"takes (from \d+ to )?5 positional arguments but 6 were given",
         "sample_tokens takes a sixth argument, eos_id, with a default: def sample_tokens(model, idx, "
         "max_new_tokens, temperature=1.0, generator=None, eos_id=None)."),
        (TypeError, r"(invalid combination of arguments - got \([^)]*NoneType|must be Number, not NoneType)",
         "eos_id may be None (its default: no end-of-text token, the plain loop), and a tensor cannot be filled "
         "with None: do the end-of-text steps only when eos_id is not None."),
    ],
    diagnose=safe_diagnosis(_diagnose_sampling),
    diagnose_hints=(SAMPLE_PROMPT, SAMPLE_GENERATOR, SAMPLE_EOS_PROMPT, SAMPLE_EOS_ZERO),
    generic_hint=SAMPLE_GENERIC,
))


# --------------------------------------------------------------------------- 5.7 a cycle, wired by hand


CYCLE_P = 0.9           # the probability the next token in the cycle must get, from every token


def cycle_weights_reference(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token a on the unit circle at angle 2πa/n; column b of W_U where E[b - 1] points, scaled by 10·n, so that
    E[a] lines up with column a + 1 alone (the lead over the neighbours, 10·n·(1 - cos 2π/n), grows with n)."""
    angles = 2 * math.pi * torch.arange(n, dtype=F64) / n
    E = torch.stack([angles.cos(), angles.sin()], dim=1)                 # (n, 2)
    return E, 10 * n * E.roll(1, dims=0).T                               # (n, 2), (2, n)


def cycle_probs(E: torch.Tensor, W_U: torch.Tensor) -> torch.Tensor:
    """The (n, n) next-token probabilities of the model with no blocks: row a is softmax(E[a] @ W_U)."""
    return (E.to(F64) @ W_U.to(F64)).softmax(dim=-1)


def _cycle_shapes_ok(n: int, E, W_U) -> bool:
    return (isinstance(E, torch.Tensor) and isinstance(W_U, torch.Tensor) and tuple(E.shape) == (n, 2)
            and tuple(W_U.shape) == (2, n))


def _next_probs(n: int, E, W_U) -> torch.Tensor:
    a = torch.arange(n)
    return cycle_probs(E, W_U)[a, (a + 1) % n]                           # (n,): p(a + 1 | a)


def _cycle_ok(case, out, ref) -> bool:
    (n,) = case
    E, W_U = out
    if not (_cycle_shapes_ok(n, E, W_U) and bool(torch.isfinite(E).all()) and bool(torch.isfinite(W_U).all())):
        return False
    return bool((_next_probs(n, E, W_U) >= CYCLE_P).all())


CYCLE_TIED = ("your model predicts each token itself, as the tied choice W_U = Eᵀ does: the logits are then E Eᵀ, a "
              "symmetric table, and when the rows of E have equal length each row's largest entry is on the "
              "diagonal, E[a]·E[a]. A tied model with no blocks cannot follow a cycle: untie W_U, and point column "
              "b where E[b - 1] points, so that E[a] lines up with column a + 1.")
CYCLE_BACKWARD = ("your model predicts a - 1: the cycle runs backwards. Turn W_U the other way: column b must point "
                  "where E[b - 1] points (angle 2π(b - 1)/n, not 2π(b + 1)/n), so that E[a] lines up with column "
                  "a + 1.")
CYCLE_WEAK = ("the next token in the cycle is the likeliest, but with a probability under 0.9: scale W_U up. The "
              "logits of token a are s·cos(angle between E[a] and each column), so the right token leads its "
              "neighbours by s·(1 - cos 2π/n), which must be a few nats.")
CYCLE_GROWS = ("a scale that is enough for a few tokens is not enough for many: neighbours on the circle get closer "
               "as n grows, and the right token's lead over them, s·(1 - cos 2π/n), about 20·s/n², shrinks with it. "
               "Let the scale grow with n (s = 10·n is enough up to n = 16), or take one large enough for n = 16.")
CYCLE_TRANSPOSED = ("E and W_U are transposed: E holds one row per token, shape (n, 2), and W_U one column per token, "
                    "shape (2, n), so that the logits of token a are E[a] @ W_U.")
CYCLE_WIDTH = ("this model is two-dimensional, d_model = 2: E is (n, 2) and W_U (2, n). With d_model = n (one-hot "
               "rows, E = I) any table of next tokens is easy; in two dimensions the tokens share the plane, so put "
               "them on the unit circle.")
CYCLE_NONFINITE = "your matrices contain NaN or inf: use a large but finite scale."
CYCLE_ENDPOINT = ("tokens 0 and n - 1 sit on the same point of the circle: torch.linspace(0, 2π, n) includes both "
                  "ends, so its step is 2π/(n - 1) and the last angle is 2π, the first again. Use the angles "
                  "2πa/n, torch.arange(n) * 2 * math.pi / n.")
CYCLE_GENERIC = ("put the rows of E on the unit circle at angles 2πa/n, point column b of W_U where E[b - 1] points "
                 "(angle 2π(b - 1)/n), and scale W_U by a factor s large enough that token a + 1 gets probability "
                 ">= 0.9 for every n up to 16.")


def _proportional(W_U: torch.Tensor, E: torch.Tensor) -> bool:
    """Is W_U a positive multiple of Eᵀ (the tied choice, scaled)?"""
    A, B = W_U.T.to(F64).reshape(-1), E.to(F64).reshape(-1)
    c = float(A @ B) / max(float(B @ B), 1e-300)
    return c > 0 and bool(torch.allclose(A, c * B, rtol=1e-6, atol=1e-9 * float(A.abs().max())))


def _diagnose_cycle(cases, outputs, refs):
    for (n,), (E, W_U) in zip(cases, outputs):
        if tuple(E.shape) == (2, n) and tuple(W_U.shape) == (n, 2):
            return f"E has shape {tuple(E.shape)} and W_U {tuple(W_U.shape)} for n = {n}. Hint: {CYCLE_TRANSPOSED}"
        if E.dim() == 2 and W_U.dim() == 2 and E.shape[0] == n and W_U.shape[1] == n and E.shape[1] == W_U.shape[0]:
            if E.shape[1] != 2:
                return (f"E has shape {tuple(E.shape)} and W_U {tuple(W_U.shape)} for n = {n}, expected ({n}, 2) "
                        f"and (2, {n}). Hint: {CYCLE_WIDTH}")
        else:
            return (f"E has shape {tuple(E.shape)} and W_U {tuple(W_U.shape)} for n = {n}, expected ({n}, 2) and "
                    f"(2, {n}): the logits of token a are E[a] @ W_U.")
        if not (torch.isfinite(E).all() and torch.isfinite(W_U).all()):
            return f"wrong output. Hint: {CYCLE_NONFINITE}"
    passed_before = False
    for (n,), (E, W_U) in zip(cases, outputs):
        p = _next_probs(n, E, W_U)
        if bool((p >= CYCLE_P).all()):
            passed_before = True
            continue
        a = torch.arange(n)
        likeliest = cycle_probs(E, W_U).argmax(dim=-1)                  # (n,)
        worst = int((p <= p.min() + 1e-9).nonzero()[0])                   # the first of the worst (no rounding)
        said = (f"for n = {n}, token {worst} gives token {(worst + 1) % n} a probability of {p[worst].item():.3f} "
                f"(0.9 needed); its likeliest next token is {int(likeliest[worst])}")
        if _proportional(W_U, E) or bool((likeliest == a).all()):
            return f"{said}, itself. Hint: {CYCLE_TIED}"
        if bool((likeliest == (a - 1) % n).all()):
            return f"{said}. Hint: {CYCLE_BACKWARD}"
        if bool((likeliest == (a + 1) % n).all()):
            return f"{said}. Hint: {CYCLE_GROWS if passed_before else CYCLE_WEAK}"
        first, last = E[0].to(torch.float64), E[-1].to(torch.float64)
        if bool(first.norm() > 0) and torch.allclose(first / first.norm(), last / last.norm().clamp_min(1e-300),
                                                     atol=1e-6):
            return f"{said}. Hint: {CYCLE_ENDPOINT}"
        return f"{said}. Hint: {CYCLE_GENERIC}"
    return None


register(Exercise(
    name="cycle_weights", number="5.7", function="cycle_weights", chapter=CHAPTER, args=("n",),
    # the weights are to be set by hand: fitting them with an optimizer is not the exercise
    library_answers=("tinyformer.course.ch05.cycle_weights_reference", "torch.optim.Adam", "torch.optim.AdamW",
                     "torch.optim.SGD", "torch.optim.RMSprop", "torch.optim.LBFGS"),
    make_cases=lambda g: [(3,), (4,), (5,), (8,), (12,), (16,)], reference=cycle_weights_reference,
    returns="the pair (E, W_U) of real weights, E of shape (n, 2) and W_U of shape (2, n) (the matrices "
            "themselves, not the logits E @ W_U or their softmax)",
    item_names=("E", "W_U"), check_shapes=False, compare=_cycle_ok,
    exact_dtype=False, integers_for_floats=False,  # no tensor comes in: float32 or float64, as the learner likes
    diagnose=safe_diagnosis(_diagnose_cycle),
    diagnose_hints=(CYCLE_TIED, CYCLE_BACKWARD, CYCLE_WEAK, CYCLE_GROWS, CYCLE_TRANSPOSED, CYCLE_WIDTH,
                    CYCLE_NONFINITE, CYCLE_ENDPOINT),
    generic_hint=CYCLE_GENERIC,
))
