"""Chapter 1 (static and contextual embeddings): the exercises, their test inputs, references,
known mistakes and hints.

Exercise 1.2 (``sgns_grads``) returns the gradients of one skip-gram pair's negative-sampling loss
``-log σ(u_o·v_c) - Σ_j log σ(-u_j·v_c)`` with respect to ``v_c`` (B, d), ``u_o`` (B, d) and
``u_neg`` (B, k, d). The cases hold dot products of both signs and several sizes, so that each slip
(the sign of the negative term, the -1 of the positive one forgotten, σ(-x) for σ(x) at the
negatives, a softmax over the context and its negatives in place of k + 1 sigmoids, the gradient of
the objective to maximise instead of the loss, the negatives left out of ``g_c`` or averaged,
``g_c`` and ``g_o`` swapped, the gradients of the batch's mean loss) gives a different answer;
``u_neg * v_c`` without a k axis raises, and is told how to broadcast.

Exercise 1.3 (``context_pairs``) lists every (centre, context) pair of a stream of ids whose
distance is 1 to ``window``, on both sides. The order of the pairs is free: the check compares them
as multisets, and so are the known slips (``mistakes_by_compare``), so that a slip is named
whatever order the pairs come in: the centre paired with itself, a window one short, one side only
(or each pair of positions once), pairs that wrap around the ends, positions returned instead of
ids; an empty ``torch.cat`` (a loop over ``range(1, window)`` with window 1) is told so.

Library answers: ``tinyformer.embeddings.sgns_gradients`` (and ``SkipGram``'s autograd) for 1.2;
``tinyformer.embeddings.skipgram_pairs`` for 1.3.
"""

from __future__ import annotations

import torch

from tinyformer import embeddings as E
from tinyformer.course.engine import Exercise, register, safe_diagnosis

CHAPTER = "01-embeddings"
F64 = torch.float64


# --------------------------------------------------------------------------- 1.2 the SGNS gradient


def _grad_cases(g):
    cases = []
    for B, k, d, scale in ((1, 1, 2, 1.0), (3, 2, 4, 1.5), (5, 5, 8, 0.7), (4, 3, 3, 2.5)):
        cases.append((torch.randn(B, d, generator=g, dtype=F64) * scale,
                      torch.randn(B, d, generator=g, dtype=F64) * scale,
                      torch.randn(B, k, d, generator=g, dtype=F64) * scale))
    return cases


def sgns_grads_reference(v_c, u_o, u_neg):
    return E.sgns_gradients(v_c, u_o, u_neg)


def _grads(*, neg_sign=1, pos="s-1", neg="s", softmax=False, flip=False, gc_neg="sum", sigma_prime=False):
    """The SGNS gradients with the named slip; the defaults are right."""
    def wrong(v_c, u_o, u_neg):
        x_pos = (u_o * v_c).sum(-1, keepdim=True)                       # (B, 1)
        x_neg = (u_neg * v_c.unsqueeze(1)).sum(-1, keepdim=True)        # (B, k, 1)
        if softmax:   # one softmax over the context and its negatives, the context as the target
            p = torch.softmax(torch.cat([x_pos, x_neg.squeeze(-1)], 1), 1)
            c_pos, c_neg = p[:, :1] - 1, p[:, 1:].unsqueeze(-1)
        elif sigma_prime:   # the derivative of σ itself, not of log σ
            s_pos, s_neg = torch.sigmoid(x_pos), torch.sigmoid(x_neg)
            c_pos, c_neg = -s_pos * (1 - s_pos), s_neg * (1 - s_neg)
        else:
            c_pos = {"s-1": torch.sigmoid(x_pos) - 1, "s": torch.sigmoid(x_pos),
                     "1-s": 1 - torch.sigmoid(x_pos)}[pos]
            c_neg = torch.sigmoid(x_neg) if neg == "s" else torch.sigmoid(-x_neg)
            c_neg = neg_sign * c_neg
        negs = (c_neg * u_neg).sum(1)
        if gc_neg in ("mean", "mean both"):
            negs = negs / u_neg.shape[1]
        g_c = c_pos * u_o + (negs if gc_neg != "none" else 0)
        g_o, g_neg = c_pos * v_c, c_neg * v_c.unsqueeze(1)
        if gc_neg == "mean both":
            g_neg = g_neg / u_neg.shape[1]
        if flip:
            return -g_c, -g_o, -g_neg
        return g_c, g_o, g_neg
    return wrong


GRAD_NEG_SIGN = ("the negatives' terms have the wrong sign. The loss has -log σ(-u_j·v_c), whose derivative "
                 "in x = u_j·v_c is +σ(x): it pushes v_c AWAY from u_j, so g_neg = σ(u_j·v_c) v_c and g_c gains "
                 "+Σ_j σ(u_j·v_c) u_j.")
GRAD_POS_NO_MINUS_ONE = ("the context's coefficient lacks its -1: d/dx of -log σ(x) is σ(x) - 1 (negative, so the "
                         "step pulls u_o and v_c together), not σ(x).")
GRAD_NEG_SIGMOID_OF_MINUS = ("at the negatives you used σ(-u_j·v_c): d/dx of -log σ(-x) is σ(x) = 1 - σ(-x). A "
                             "negative the model already rejects (x very negative) should get almost no push.")
GRAD_SOFTMAX = ("that is a softmax over the context and its k negatives (a (k+1)-way classification). "
                "Negative sampling scores each pair on its own with a sigmoid: k + 1 binary decisions, "
                "coefficients σ(x_o) - 1 and σ(x_j), which need not sum to zero.")
GRAD_ASCENT = ("every sign is flipped: these are the gradients of the objective to MAXIMISE, log σ(u_o·v_c) + "
               "Σ_j log σ(-u_j·v_c). The check asks for the gradients of the loss, its negative (a step then "
               "SUBTRACTS them).")
GRAD_GC_NO_NEG = ("g_c misses the negatives: v_c appears in every term, so its gradient is (σ(u_o·v_c) - 1) u_o "
                  "+ Σ_j σ(u_j·v_c) u_j.")
GRAD_GC_MEAN = ("g_c averages the negatives' terms: the loss SUMS over the k negatives, so does the gradient "
                "(Σ_j σ(u_j·v_c) u_j, no 1/k).")
GRAD_SWAPPED = ("you returned g_o where g_c belongs (or the reverse): return (g_c, g_o, g_neg), the gradient "
                "with respect to v_c first.")
GRAD_BATCH_MEAN = ("your gradients are the right ones divided by the batch size B: they belong to the batch's MEAN "
                   "loss. The check asks for each pair's own gradients, those of the sum over pairs.")
GRAD_BROADCAST = ("two shapes do not broadcast. u_neg is (B, k, d) and v_c is (B, d): give v_c an axis for the k "
                  "negatives, v_c.unsqueeze(1) of shape (B, 1, d). And a coefficient that scales rows needs its "
                  "axis kept: (u_o * v_c).sum(-1, keepdim=True) is (B, 1), where .sum(-1) alone is (B,).")
GRAD_ONE_MINUS = ("the context's coefficient has the wrong sign: d/dx of -log σ(x) is σ(x) - 1, which is negative; "
                  "1 - σ(x) belongs to the objective you maximise, not to the loss.")
GRAD_SIGMA_PRIME = ("you differentiated σ itself, not log σ: d/dx log σ(x) = σ'(x)/σ(x) = 1 - σ(x). The log's "
                    "derivative divides by σ, which leaves σ(x) - 1 for the context and σ(x_j) for each negative.")
GRAD_MEAN_BOTH = ("you averaged over the k negatives: the loss SUMS their terms, so neither g_c's sum nor g_neg "
                  "has a 1/k.")
GRAD_GENERIC = ("compute one pair's gradients with torch.autograd and compare them with yours, term by term: is "
                "the context's coefficient wrong, or the negatives'? Start from d/dx of -log σ(x) and of "
                "-log σ(-x), then the chain rule through each dot product.")

GRAD_GO_WRONG_FACTOR = ("g_o is a multiple of u_o: the chain rule through x = u_o·v_c gives ∂x/∂u_o = v_c, so "
                        "g_o = (σ(u_o·v_c) - 1) v_c, a multiple of v_c (and g_c, through ∂x/∂v_c = u_o, a "
                        "multiple of u_o).")
GRAD_GNEG_WRONG_FACTOR = ("g_neg is a multiple of u_neg: through x_j = u_j·v_c, ∂x_j/∂u_j = v_c, so each "
                          "negative's gradient is σ(u_j·v_c) v_c, a multiple of v_c.")
GRAD_NEG_LIKE_CONTEXT = ("the negatives got the context's coefficient σ(x_j) - 1: their loss term is "
                         "-log σ(-x_j), not -log σ(x_j), and its derivative is +σ(x_j). A negative is pushed "
                         "away, the context pulled closer.")
GRAD_GC_NO_CONTEXT = ("g_c misses the context's term: v_c appears in the context's dot product too, so g_c = "
                      "(σ(u_o·v_c) - 1) u_o + Σ_j σ(u_j·v_c) u_j.")
GRAD_GC_CONTEXT_SIGN = ("g_o is right but g_c's context term has the wrong sign: both come from the same "
                        "coefficient σ(u_o·v_c) - 1, times u_o for g_c and v_c for g_o.")
GRAD_GNEG_OVER_K = ("g_neg is divided by k: the loss sums the k negatives' terms, so each negative's gradient is "
                    "σ(u_j·v_c) v_c, with no 1/k.")


def _diagnose_grads(cases, outputs, refs):
    """Slips of the chain rule that touch one of the three gradients: which one, and how."""
    def pieces(v_c, u_o, u_neg):
        s_pos = torch.sigmoid((u_o * v_c).sum(-1, keepdim=True))                  # (B, 1)
        s_neg = torch.sigmoid((u_neg * v_c.unsqueeze(1)).sum(-1, keepdim=True))   # (B, k, 1)
        return s_pos, s_neg

    def matches(item, make):
        return all(isinstance(o, tuple) and len(o) == 3 and isinstance(o[item], torch.Tensor)
                   and o[item].shape == r[item].shape and torch.allclose(o[item], make(*c), rtol=1e-9, atol=1e-12)
                   for c, o, r in zip(cases, outputs, refs))

    def right(item):
        return matches(item, lambda v_c, u_o, u_neg: sgns_grads_reference(v_c, u_o, u_neg)[item])

    def g_o_by_u(v_c, u_o, u_neg):
        return (pieces(v_c, u_o, u_neg)[0] - 1) * u_o

    def g_neg_by_u(v_c, u_o, u_neg):
        return pieces(v_c, u_o, u_neg)[1] * u_neg

    def g_neg_like_context(v_c, u_o, u_neg):
        return (pieces(v_c, u_o, u_neg)[1] - 1) * v_c.unsqueeze(1)

    def g_c_no_context(v_c, u_o, u_neg):
        return (pieces(v_c, u_o, u_neg)[1] * u_neg).sum(1)

    def g_c_context_flipped(v_c, u_o, u_neg):
        s_pos, s_neg = pieces(v_c, u_o, u_neg)
        return (1 - s_pos) * u_o + (s_neg * u_neg).sum(1)

    def g_neg_over_k(v_c, u_o, u_neg):
        return sgns_grads_reference(v_c, u_o, u_neg)[2] / u_neg.shape[1]

    for item, make, hint in ((1, g_o_by_u, GRAD_GO_WRONG_FACTOR), (2, g_neg_by_u, GRAD_GNEG_WRONG_FACTOR),
                             (2, g_neg_like_context, GRAD_NEG_LIKE_CONTEXT), (0, g_c_no_context, GRAD_GC_NO_CONTEXT),
                             (2, g_neg_over_k, GRAD_GNEG_OVER_K)):
        if matches(item, make):
            return f"wrong output. Hint: {hint}"
    if right(1) and right(2) and matches(0, g_c_context_flipped):
        return f"wrong output. Hint: {GRAD_GC_CONTEXT_SIGN}"
    return None


register(Exercise(
    name="sgns_grads", number="1.2", function="sgns_grads", chapter=CHAPTER,
    args=("v_c", "u_o", "u_neg"),
    library_answers=("tinyformer.embeddings.sgns_gradients", "tinyformer.embeddings.SkipGram",
                     "tinyformer.embeddings._sgns_step", "torch.autograd.grad", "torch.autograd.backward",
                     "torch.Tensor.backward"),
    make_cases=_grad_cases, reference=sgns_grads_reference,
    returns="a tuple (g_c, g_o, g_neg) shaped like (v_c, u_o, u_neg)",
    item_names=("g_c", "g_o", "g_neg"), rtol=1e-9, atol=1e-12,
    mistakes=[
        (_grads(neg_sign=-1), GRAD_NEG_SIGN),
        (_grads(pos="s"), GRAD_POS_NO_MINUS_ONE),
        (_grads(neg="s(-x)"), GRAD_NEG_SIGMOID_OF_MINUS),
        (_grads(softmax=True), GRAD_SOFTMAX),
        (_grads(flip=True), GRAD_ASCENT),
        (_grads(gc_neg="none"), GRAD_GC_NO_NEG),
        (_grads(gc_neg="mean"), GRAD_GC_MEAN),
        (lambda v_c, u_o, u_neg: _swap_first(sgns_grads_reference(v_c, u_o, u_neg)), GRAD_SWAPPED),
        (lambda v_c, u_o, u_neg: tuple(g / len(v_c) for g in sgns_grads_reference(v_c, u_o, u_neg)),
         GRAD_BATCH_MEAN),
        (_grads(pos="1-s"), GRAD_ONE_MINUS),
        (_grads(sigma_prime=True), GRAD_SIGMA_PRIME),
        (_grads(gc_neg="mean both"), GRAD_MEAN_BOTH),
    ],
    error_hints=[(RuntimeError, r"size of tensor a \(\d+\) must match the size of tensor b", GRAD_BROADCAST)],
    diagnose=safe_diagnosis(_diagnose_grads),
    diagnose_hints=(GRAD_GO_WRONG_FACTOR, GRAD_GNEG_WRONG_FACTOR, GRAD_NEG_LIKE_CONTEXT, GRAD_GC_NO_CONTEXT,
                    GRAD_GC_CONTEXT_SIGN, GRAD_GNEG_OVER_K),
    generic_hint=GRAD_GENERIC,
))


# --------------------------------------------------------------------------- 1.3 the context pairs


def _pair_cases(g):
    cases = []
    for n, V, window in ((6, 4, 1), (9, 5, 2), (12, 7, 3), (7, 3, 5)):
        cases.append((torch.randint(V, (n,), generator=g), window))
    return cases


def context_pairs_reference(ids, window):
    return E.skipgram_pairs(ids, window)


def _swap_first(grads):
    g_c, g_o, g_neg = grads
    return g_o, g_c, g_neg


def _pairs(*, self_pair=False, short=False, one_side=False, wrap=False, positions=False, left_only=False,
           wrap_left=False, asymmetric=False):
    """The pairs with the named slip; the defaults are right."""
    def wrong(ids, window):
        n, centres, contexts = len(ids), [], []
        reach = window - 1 if short else window
        for i in range(n):
            for j in range(i - reach, i + reach + (0 if asymmetric else 1)):
                if j == i and not self_pair:
                    continue
                if (one_side and j < i) or (left_only and j > i):
                    continue
                if not 0 <= j < n:
                    if not (wrap or (wrap_left and j < 0)):
                        continue
                    j %= n
                centres.append(i if positions else int(ids[i]))
                contexts.append(j if positions else int(ids[j]))
        return torch.tensor(centres, dtype=torch.long), torch.tensor(contexts, dtype=torch.long)
    return wrong


def _pair_codes(out, n_ids: int) -> torch.Tensor | None:
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
        return None
    c, o = (t.reshape(-1).long() for t in out)
    if len(c) != len(o):
        return None
    return torch.sort(c * (n_ids + 1) + o).values


def _pairs_agree(case, out, ref) -> bool:
    if isinstance(out, tuple) and any(isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
                                      for t in out):
        return False   # ids index an embedding table: they must stay integers
    values = [case[0]] + [t for t in (out if isinstance(out, tuple) else ()) if isinstance(t, torch.Tensor)]
    top = max(int(t.max()) for t in values + list(ref) if t.numel()) + 1   # codes c·(top + 1) + o are unique
    a, b = _pair_codes(out, top), _pair_codes(ref, top)
    return a is not None and b is not None and torch.equal(a, b)


def _pair_list(ids, window, *, lo, hi):
    """Pairs (ids[i], ids[j]) for j in range(lo(i, n), hi(i, n)), j != i: a loop as learners write it."""
    n, centres, contexts = len(ids), [], []
    for i in range(n):
        for j in range(lo(i, n), hi(i, n)):
            if j != i:
                centres.append(int(ids[i]))
                contexts.append(int(ids[j]))
    return torch.tensor(centres, dtype=torch.long), torch.tensor(contexts, dtype=torch.long)


def _unique_pairs(ids, window):
    ref = E.skipgram_pairs(ids, window)
    unique = sorted(set(zip(ref[0].tolist(), ref[1].tolist())))
    return tuple(torch.tensor(side, dtype=torch.long) for side in zip(*unique)) if unique else ref


def _one_side_twice(ids, window, flip):
    one = _pairs(one_side=True)(ids, window)
    c, o = (one[1], one[0]) if flip else one
    return torch.cat([c, c]), torch.cat([o, o])


def _end_clipped(ids, window):
    return _pair_list(ids, window, lo=lambda i, n: max(0, i - window), hi=lambda i, n: min(n - 1, i + window))


def _pair_slip(cases, outputs) -> str | None:
    """A named slip that explains every case's multiset of pairs: pairs made unique, one side listed
    twice, the end of the range clipped at n - 1."""
    def explains(make) -> bool:
        return all(_pairs_agree(case, out, make(*case)) for case, out in zip(cases, outputs))

    if explains(_unique_pairs):
        return PAIRS_UNIQUE
    if any(explains(lambda ids, w, flip=flip: _one_side_twice(ids, w, flip)) for flip in (False, True)):
        return PAIRS_ONE_SIDE_TWICE
    if explains(_end_clipped):
        return PAIRS_CLIPPED_END
    return None


def _diagnose_pairs(cases, outputs, refs):
    slip = _pair_slip(cases, outputs)
    if slip:
        return f"wrong output. Hint: {slip}"
    for (ids, window), out, ref in zip(cases, outputs, refs):
        if _pairs_agree((ids, window), out, ref):
            continue
        if not (isinstance(out, tuple) and len(out) == 2):
            return "return a tuple (centres, contexts) of two 1-D tensors of the same length."
        n_out, n_ref = len(out[0].reshape(-1)), len(ref[0])
        if len(out[1].reshape(-1)) != n_out:
            return (f"centres has {n_out} entries and contexts {len(out[1].reshape(-1))}: one entry of each per "
                    f"pair. Hint: {PAIRS_GENERIC}")
        if n_out != n_ref:
            return (f"with {len(ids)} ids and window = {window} there are {n_ref} pairs (each position pairs "
                    f"with up to {window} on each side); you returned {n_out}. Hint: {PAIRS_GENERIC}")
        return (f"the right number of pairs ({n_ref}) but not the right ones with {len(ids)} ids and "
                f"window = {window}: are centres and contexts aligned, position by position? "
                f"Hint: {PAIRS_GENERIC}")
    return None


PAIRS_SELF = ("the centre word is paired with itself (distance 0): skip j == i. A word is not its own "
              "context, and those pairs would teach every vector to score its own word high.")
PAIRS_SHORT = ("your window is one short: distances run from 1 to window INCLUSIVE (range(1, window + 1)).")
PAIRS_ONE_SIDE = ("you pair each centre only with the words after it (or list each pair of positions once): "
                  "skip-gram's context is on both sides, distances -window … -1 and 1 … window, so (i, j) and "
                  "(j, i) are two training pairs.")
PAIRS_WRAP = ("some pairs wrap around the ends of the stream (an index taken modulo the length, or torch.roll): "
              "the first words have no left context and the last no right context.")
PAIRS_POSITIONS = ("your pairs hold positions (i, j), not words: return the ids at those positions, "
                   "(ids[i], ids[j]).")
PAIRS_EMPTY = ("torch.cat got an empty list: with window = 1 your loop over distances ran zero times. Distances run "
               "from 1 to window inclusive: range(1, window + 1).")
PAIRS_LEFT_ONLY = ("you pair each centre only with the words before it: skip-gram's context is on both sides, "
                   "distances -window … -1 and 1 … window.")
PAIRS_WRAP_LEFT = ("negative indices wrap around in Python: ids[-1] is the LAST word, so your first words were "
                   "paired with the end of the stream. Check 0 <= j as well as j < len(ids).")
PAIRS_ASYMMETRIC = ("your window is lopsided: range(i - window, i + window) stops one short on the right. The "
                    "context runs from i - window to i + window inclusive: range(i - window, i + window + 1).")
PAIRS_UNIQUE = ("you kept each distinct (centre, context) pair once (a set, or torch.unique): a pair that occurs "
                "twice in the stream is two training examples, and the counts are what skip-gram learns from.")
PAIRS_ONE_SIDE_TWICE = ("you listed the pairs of one side twice and the other side's not at all (a copy-paste "
                        "slip?): for each distance d the two halves are (ids[:-d], ids[d:]) and (ids[d:], "
                        "ids[:-d]).")
PAIRS_CLIPPED_END = ("the end of your range is clipped at n - 1 and exclusive: the last word is never a context and "
                     "the right side stops one short. Use range(max(0, i - window), min(n, i + window + 1)).")
PAIRS_GENERIC = ("for every position i and every j with 1 <= |i - j| <= window and 0 <= j < len(ids), one pair "
                 "(ids[i], ids[j]).")

register(Exercise(
    name="context_pairs", number="1.3", function="context_pairs", chapter=CHAPTER,
    args=("ids", "window"),
    library_answers=("tinyformer.embeddings.skipgram_pairs", "tinyformer.embeddings.cooccurrence"),
    make_cases=_pair_cases, reference=context_pairs_reference,
    returns="a tuple (centres, contexts) of two 1-D integer tensors, in any order of the pairs",
    item_names=("centres", "contexts"), check_shapes=False, exact_dtype=False,
    compare=_pairs_agree,
    mistakes=[
        (_pairs(self_pair=True), PAIRS_SELF),
        (_pairs(short=True), PAIRS_SHORT),
        (_pairs(one_side=True), PAIRS_ONE_SIDE),
        (_pairs(wrap=True), PAIRS_WRAP),
        (_pairs(positions=True), PAIRS_POSITIONS),
        (_pairs(left_only=True), PAIRS_LEFT_ONLY),
        (_pairs(wrap_left=True), PAIRS_WRAP_LEFT),
        (_pairs(asymmetric=True), PAIRS_ASYMMETRIC),
    ],
    mistakes_by_compare=True,   # the pairs may come in any order: a slip is recognised in any order too
    error_hints=[(ValueError, r"expected a non-empty list of Tensors", PAIRS_EMPTY)],   # torch.cat([])
    diagnose=safe_diagnosis(_diagnose_pairs),
    diagnose_hints=(PAIRS_UNIQUE, PAIRS_ONE_SIDE_TWICE, PAIRS_CLIPPED_END),
    generic_hint=PAIRS_GENERIC,
))
