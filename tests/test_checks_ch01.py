"""Chapter 1's checks: every solution passes, every stub is 'not implemented yet', every registered
mistake is caught by its own hint whatever the seed, and wrong answers written here, the way a
learner would write them, fail with the hint that names their slip. These generic tests are written
once, in tests/exercise_suite.py; the ``globals().update(SUITE...)`` lines below take in (and name)
those this chapter runs.

The solutions and wrong answers below are written independently of ``tinyformer.course.ch01``: the
SGNS gradients with einsum, with a loop over the pairs and with the log-sigmoid identities
(σ(x) - 1 = -σ(-x) = -exp(log σ(-x))), and as learners write them with autograd (loss.backward(),
F.cross_entropy); the context pairs with a double loop, with a band of a (n, n) mask (triu/tril,
nonzero) and with unfold over padded positions. The references are checked against
torch.autograd.grad of the float64 loss, against central finite differences, against the
library's training step (_sgns_step), and against a brute-force double loop compared as multisets,
with the count 2·window·n - window·(window + 1). The chapter notebook (book/01-embeddings.ipynb)
is optional here: the tests that read it are skipped while it does not exist.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter

import exercise_suite
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from exercise_suite import SEEDS, verdict_for

from tinyformer import checks
from tinyformer import embeddings as E
from tinyformer.course import ch01, engine

from conftest import BOOK, define

CHAPTER = ["sgns_grads", "context_pairs"]
DRILLS: list[str] = []
ALL = CHAPTER + DRILLS
NOTEBOOK = BOOK / "01-embeddings.ipynb"
F64 = torch.float64

# --------------------------------------------------------------------------- solutions (exercise cells)

SOLUTIONS = {
    "sgns_grads": '''\
import torch


def sgns_grads(v_c, u_o, u_neg):
    """Gradients of -log σ(u_o·v_c) - Σ_j log σ(-u_j·v_c) with respect to
    v_c (B, d), u_o (B, d) and u_neg (B, k, d), for a batch of pairs."""
    # BEGIN SOLUTION
    x_o = torch.einsum("bd,bd->b", u_o, v_c)            # (B,)
    x_neg = torch.einsum("bkd,bd->bk", u_neg, v_c)      # (B, k)
    c_o = torch.sigmoid(x_o) - 1        # d/dx of -log σ(x)
    c_neg = torch.sigmoid(x_neg)        # d/dx of -log σ(-x)
    g_c = c_o[:, None] * u_o + torch.einsum("bk,bkd->bd", c_neg, u_neg)
    g_o = c_o[:, None] * v_c
    g_neg = torch.einsum("bk,bd->bkd", c_neg, v_c)
    return g_c, g_o, g_neg
    # END SOLUTION
''',
    "context_pairs": '''\
import torch


def context_pairs(ids, window):
    """Every (centre, context) pair of ids with 1 <= |i - j| <= window."""
    # BEGIN SOLUTION
    n = len(ids)
    centres, contexts = [], []
    for i in range(n):
        for j in range(max(0, i - window), min(n, i + window + 1)):
            if j != i:
                centres.append(ids[i])
                contexts.append(ids[j])
    return torch.stack(centres), torch.stack(contexts)
    # END SOLUTION
''',
}

SUITE = exercise_suite.Chapter(CHAPTER, DRILLS, SOLUTIONS, NOTEBOOK)
solution = SUITE.solution


def sgns_loss(v_c, u_o, u_neg):
    """The loss of every pair of the batch, summed: -log σ(u_o·v_c) - Σ_j log σ(-u_j·v_c)."""
    x_o = (u_o * v_c).sum(-1)
    x_neg = (u_neg @ v_c.unsqueeze(-1)).squeeze(-1)
    return -(F.logsigmoid(x_o).sum() + F.logsigmoid(-x_neg).sum())


# --------------------------------------------------------------------------- 1.2, as learners write it


def learner_grads(*, pos="sigmoid-1", neg="sigmoid", softmax=False, ascent=False, gc_negs="sum",
                  order="c,o,neg", dtype=None, g_neg_summed=False):
    """A learner's gradients, pair by pair in a loop, with the slip chosen by the keywords.

    pos: the context's coefficient, "sigmoid-1" (right) or "sigmoid". neg: the negatives',
    "sigmoid" (right), "minus" (-σ(x_j): the sign of the negative term) or "sigmoid(-x)". softmax:
    one softmax over the context and its negatives. ascent: the gradients of the objective to
    maximise. gc_negs: the negatives' terms in g_c, "sum" (right), "mean" or "none". order: "c,o,neg"
    (right) or "o,c,neg". dtype: computed in this dtype and cast back. g_neg_summed: g_neg summed
    over the negatives, (B, d).
    """
    def sgns_grads(v_c, u_o, u_neg):
        given = v_c.dtype
        if dtype is not None:
            v_c, u_o, u_neg = v_c.to(dtype), u_o.to(dtype), u_neg.to(dtype)
        g_c, g_o, g_neg = torch.zeros_like(v_c), torch.zeros_like(u_o), torch.zeros_like(u_neg)
        for b in range(v_c.shape[0]):
            v, u, U = v_c[b], u_o[b], u_neg[b]
            x_o, x_neg = torch.dot(u, v), U @ v                      # (), (k,)
            if softmax:
                p = torch.softmax(torch.cat([x_o.reshape(1), x_neg]), dim=0)
                c_o, c_neg = p[0] - 1, p[1:]
            else:
                c_o = torch.sigmoid(x_o) - 1 if pos == "sigmoid-1" else torch.sigmoid(x_o)
                c_neg = {"sigmoid": torch.sigmoid(x_neg), "minus": -torch.sigmoid(x_neg),
                         "sigmoid(-x)": torch.sigmoid(-x_neg)}[neg]
            negs = c_neg @ U                                         # (d,)
            if gc_negs == "mean":
                negs = negs / len(x_neg)
            g_c[b] = c_o * u + (negs if gc_negs != "none" else 0)
            g_o[b] = c_o * v
            g_neg[b] = torch.outer(c_neg, v)
        out = (g_c, g_o, g_neg.sum(1) if g_neg_summed else g_neg)
        if ascent:
            out = tuple(-g for g in out)
        if order == "o,c,neg":
            out = (out[1], out[0], out[2])
        return tuple(g.to(given) for g in out)
    return sgns_grads


def grads_one_minus_sigma(v_c, u_o, u_neg):
    """1 - σ(x) for the context (the objective's derivative), the negatives right."""
    s_o = torch.sigmoid(torch.einsum("bd,bd->b", u_o, v_c))[:, None]
    s_n = torch.sigmoid(torch.einsum("bkd,bd->bk", u_neg, v_c))
    return ((1 - s_o) * u_o + torch.einsum("bk,bkd->bd", s_n, u_neg), (1 - s_o) * v_c,
            s_n[..., None] * v_c[:, None])


def grads_of_sigma(v_c, u_o, u_neg):
    """The derivative of σ, not of log σ: -σ(1-σ) for the context, σ(1-σ) for the negatives."""
    s_o = torch.sigmoid((u_o * v_c).sum(-1, keepdim=True))
    s_n = torch.sigmoid((u_neg * v_c[:, None]).sum(-1, keepdim=True))
    c_o, c_n = -s_o * (1 - s_o), s_n * (1 - s_n)
    return c_o * u_o + (c_n * u_neg).sum(1), c_o * v_c, c_n * v_c[:, None]


def grads_averaged_over_k(v_c, u_o, u_neg):
    """The negatives' terms averaged, in g_c and in g_neg."""
    k = u_neg.shape[1]
    s_o = torch.sigmoid((u_o * v_c).sum(-1, keepdim=True))
    s_n = torch.sigmoid((u_neg * v_c[:, None]).sum(-1, keepdim=True))
    return (s_o - 1) * u_o + (s_n * u_neg).mean(1), (s_o - 1) * v_c, s_n * v_c[:, None] / k


def grads_of_the_objective(v_c, u_o, u_neg):
    """Autograd on log σ(u_o·v_c) + Σ_j log σ(-u_j·v_c), the objective to maximise."""
    v_c, u_o, u_neg = (t.clone().requires_grad_() for t in (v_c, u_o, u_neg))
    x_o = (u_o * v_c).sum(-1)
    x_neg = torch.bmm(u_neg, v_c.unsqueeze(-1)).squeeze(-1)
    (F.logsigmoid(x_o) + F.logsigmoid(-x_neg).sum(-1)).sum().backward()
    return v_c.grad, u_o.grad, u_neg.grad


def grads_by_cross_entropy(v_c, u_o, u_neg):
    """Autograd on a cross-entropy over [context, negatives], the context as the target."""
    v_c, u_o, u_neg = (t.clone().requires_grad_() for t in (v_c, u_o, u_neg))
    scores = torch.cat([(u_o * v_c).sum(-1, keepdim=True), torch.einsum("bkd,bd->bk", u_neg, v_c)], dim=1)
    target = torch.zeros(len(scores), dtype=torch.long)
    F.cross_entropy(scores, target, reduction="sum").backward()
    return v_c.grad, u_o.grad, u_neg.grad


def grads_of_the_mean_loss(v_c, u_o, u_neg):
    """Autograd on the loss averaged over the batch (as SkipGram.forward returns it)."""
    v_c, u_o, u_neg = (t.clone().requires_grad_() for t in (v_c, u_o, u_neg))
    (sgns_loss(v_c, u_o, u_neg) / len(v_c)).backward()
    return v_c.grad, u_o.grad, u_neg.grad


def grads_sign_by_calculus(v_c, u_o, u_neg):
    """d/dx log σ(-x) = -σ(x), so the negatives' coefficient is taken as -σ(x_j) (vectorised)."""
    s_o = torch.sigmoid((u_o * v_c).sum(1, keepdim=True))
    s_neg = torch.sigmoid(torch.bmm(u_neg, v_c[:, :, None]))           # (B, k, 1)
    return (s_o - 1) * u_o - (s_neg * u_neg).sum(1), (s_o - 1) * v_c, -s_neg * v_c[:, None, :]


def grads_no_unsqueeze(v_c, u_o, u_neg):
    """u_neg * v_c without unsqueeze: (B, k, d) against (B, d)."""
    s_o = torch.sigmoid((u_o * v_c).sum(-1, keepdim=True))
    s_neg = torch.sigmoid((u_neg * v_c).sum(-1, keepdim=True))
    return (s_o - 1) * u_o + (s_neg * u_neg).sum(1), (s_o - 1) * v_c, s_neg * v_c


def grads_unsqueeze_in_place(v_c, u_o, u_neg):
    """Right numbers, but v_c.unsqueeze_(1) changes the caller's tensor."""
    s_o = torch.sigmoid((u_o * v_c).sum(-1, keepdim=True))
    v = v_c.unsqueeze_(1)                                               # (B, 1, d), in place
    s_neg = torch.sigmoid((u_neg * v).sum(-1, keepdim=True))
    v = v.squeeze(1)
    return (s_o - 1) * u_o + (s_neg * u_neg).sum(1), (s_o - 1) * v, s_neg * v[:, None]



def grads_with(**items):
    """The right gradients with some items replaced, each a function of (σ(x_o), σ(x_j), v_c, u_o, u_neg)."""
    def sgns_grads(v_c, u_o, u_neg):
        s_pos = torch.sigmoid((u_o * v_c).sum(-1, keepdim=True))                   # (B, 1)
        s_neg = torch.sigmoid((u_neg * v_c.unsqueeze(1)).sum(-1, keepdim=True))    # (B, k, 1)
        grads = {"g_c": (s_pos - 1) * u_o + (s_neg * u_neg).sum(1), "g_o": (s_pos - 1) * v_c,
                 "g_neg": s_neg * v_c.unsqueeze(1)}
        for name, make in items.items():
            grads[name] = make(s_pos, s_neg, v_c, u_o, u_neg)
        return grads["g_c"], grads["g_o"], grads["g_neg"]
    return sgns_grads


def grads_negatives_like_context(v_c, u_o, u_neg):
    """Every pair coded like the context: coefficient σ(x) - 1 for the negatives too."""
    s_pos = torch.sigmoid((u_o * v_c).sum(-1, keepdim=True))
    c_neg = torch.sigmoid((u_neg * v_c.unsqueeze(1)).sum(-1, keepdim=True)) - 1
    return (s_pos - 1) * u_o + (c_neg * u_neg).sum(1), (s_pos - 1) * v_c, c_neg * v_c.unsqueeze(1)


GRAD_WRONG = [
    (learner_grads(neg="minus"), "the negatives' terms have the wrong sign"),
    (grads_sign_by_calculus, "the negatives' terms have the wrong sign"),
    (learner_grads(pos="sigmoid"), "the context's coefficient lacks its -1"),
    (learner_grads(neg="sigmoid(-x)"), "at the negatives you used σ(-u_j·v_c)"),
    (learner_grads(softmax=True), "that is a softmax over the context and its k negatives"),
    (grads_by_cross_entropy, "that is a softmax over the context and its k negatives"),
    (learner_grads(ascent=True), "every sign is flipped: these are the gradients of the objective to MAXIMISE"),
    (grads_of_the_objective, "every sign is flipped: these are the gradients of the objective to MAXIMISE"),
    (learner_grads(gc_negs="none"), "g_c misses the negatives"),
    (learner_grads(gc_negs="mean"), "g_c averages the negatives' terms"),
    (learner_grads(order="o,c,neg"), "you returned g_o where g_c belongs"),
    (grads_of_the_mean_loss, "the right ones divided by the batch size B"),
    (grads_one_minus_sigma, "the context's coefficient has the wrong sign"),
    (grads_of_sigma, "you differentiated σ itself, not log σ"),
    (grads_averaged_over_k, "you averaged over the k negatives"),
    (learner_grads(dtype=torch.float32), "every value is a float32 number, so your function computed in float32"),
    (lambda *a: tuple(g.float() for g in learner_grads()(*a)), "g_c has torch.float32 for torch.float64 inputs"),
    (learner_grads(g_neg_summed=True), "g_neg shape (1, 2), expected (1, 1, 2) for v_c of shape (1, 2), u_o of "
                                       "shape (1, 2), u_neg of shape (1, 1, 2)"),
    (lambda *a: learner_grads()(*a)[:2], "returned a tuple of 2 items; return a tuple (g_c, g_o, g_neg) shaped like "
                                         "(v_c, u_o, u_neg)"),
    (lambda *a: None, "returned None; return a tuple (g_c, g_o, g_neg)"),
    (grads_no_unsqueeze, "your function raised RuntimeError: The size of tensor a"),
    (grads_unsqueeze_in_place, "your function changed its input `v_c` in place"),
    (grads_with(g_o=lambda s_pos, s_neg, v_c, u_o, u_neg: (s_pos - 1) * u_o), "g_o is a multiple of u_o"),
    (grads_with(g_neg=lambda s_pos, s_neg, v_c, u_o, u_neg: s_neg * u_neg), "g_neg is a multiple of u_neg"),
    (grads_negatives_like_context, "the negatives got the context's coefficient σ(x_j) - 1"),
    (grads_with(g_c=lambda s_pos, s_neg, v_c, u_o, u_neg: (s_neg * u_neg).sum(1)), "g_c misses the context's term"),
    (grads_with(g_c=lambda s_pos, s_neg, v_c, u_o, u_neg: (1 - s_pos) * u_o + (s_neg * u_neg).sum(1)),
     "g_c's context term has the wrong sign"),
    (grads_with(g_neg=lambda s_pos, s_neg, v_c, u_o, u_neg: s_neg * v_c.unsqueeze(1) / u_neg.shape[1]),
     "g_neg is divided by k"),
]


# --------------------------------------------------------------------------- 1.3, as learners write it


def learner_pairs(*, self_pair=False, short=False, one_side=False, wrap=False):
    """A learner's double loop over positions, with the slip chosen by the keywords."""
    def context_pairs(ids, window):
        n, reach = len(ids), window - 1 if short else window
        centres, contexts = [], []
        for i in range(n):
            for j in range(i - reach, i + reach + 1):
                if (j == i and not self_pair) or (one_side and j < i):
                    continue
                if j < 0 or j >= n:
                    if not wrap:
                        continue
                    j = j % n
                centres.append(ids[i].item())
                contexts.append(ids[j].item())
        return torch.tensor(centres, dtype=torch.long), torch.tensor(contexts, dtype=torch.long)
    return context_pairs


def pairs_left_only(ids, window):
    """Only the words before each centre."""
    c, o = [], []
    for i in range(len(ids)):
        for j in range(max(0, i - window), i):
            c.append(int(ids[i]))
            o.append(int(ids[j]))
    return torch.tensor(c), torch.tensor(o)


def pairs_negative_index(ids, window):
    """j < len(ids) checked, j >= 0 forgotten: Python's negative indices wrap to the end."""
    c, o = [], []
    for i in range(len(ids)):
        for j in range(i - window, i + window + 1):
            if j != i and j < len(ids):
                c.append(int(ids[i]))
                o.append(int(ids[j]))
    return torch.tensor(c), torch.tensor(o)


def pairs_lopsided(ids, window):
    """range(i - window, i + window): one short on the right."""
    c, o = [], []
    for i in range(len(ids)):
        for j in range(max(0, i - window), min(len(ids), i + window)):
            if j != i:
                c.append(int(ids[i]))
                o.append(int(ids[j]))
    return torch.tensor(c), torch.tensor(o)


def pairs_by_band(ids, window, *, low=1, high=None, lower=True):
    """The pairs of a band of the (n, n) position grid, listed by nonzero(): high defaults to window;
    lower=False keeps the upper half only (j > i)."""
    n = len(ids)
    high = window if high is None else high
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    dist = (j - i) if not lower else (j - i).abs()
    rows, cols = ((dist >= low) & (dist <= high)).nonzero(as_tuple=True)
    return ids[rows], ids[cols]


def pairs_by_offsets(ids, window, offsets=None, both=True):
    """Slices by offset, as the chapter shows: ids[:-k] with ids[k:]."""
    centres, contexts = [], []
    for k in (range(1, window + 1) if offsets is None else offsets(window)):
        centres.append(ids[:-k] if k else ids)
        contexts.append(ids[k:])
        if both and k:
            centres.append(ids[k:])
            contexts.append(ids[:-k])
    return torch.cat(centres), torch.cat(contexts)


def pairs_rolled(ids, window):
    """torch.roll for the neighbours at each distance: it wraps around the ends."""
    centres, contexts = [], []
    for k in range(1, window + 1):
        for shift in (k, -k):
            centres.append(ids)
            contexts.append(torch.roll(ids, shift))
    return torch.cat(centres), torch.cat(contexts)


def pairs_unique(ids, window):
    """Each distinct pair once, through a set."""
    n, seen = len(ids), set()
    for i in range(n):
        for j in range(max(0, i - window), min(n, i + window + 1)):
            if j != i:
                seen.add((int(ids[i]), int(ids[j])))
    pairs = sorted(seen)
    return torch.tensor([c for c, _ in pairs]), torch.tensor([o for _, o in pairs])


def pairs_right_side_twice(ids, window):
    """Slices, with the second half copied from the first: the right-hand pairs twice."""
    centres, contexts = [], []
    for d in range(1, window + 1):
        centres += [ids[:-d], ids[:-d]]
        contexts += [ids[d:], ids[d:]]
    return torch.cat(centres), torch.cat(contexts)


def pairs_end_clipped(ids, window):
    """range(max(0, i - window), min(n - 1, i + window)): the end clipped at n - 1, exclusive."""
    n, centres, contexts = len(ids), [], []
    for i in range(n):
        for j in range(max(0, i - window), min(n - 1, i + window)):
            if j != i:
                centres.append(int(ids[i]))
                contexts.append(int(ids[j]))
    return torch.tensor(centres), torch.tensor(contexts)


def pairs_stacked(ids, window):
    return torch.stack(learner_pairs()(ids, window), dim=1)                # (N, 2)


def pairs_as_lists(ids, window):
    centres, contexts = learner_pairs()(ids, window)
    return centres.tolist(), contexts.tolist()


def pairs_sorted_apart(ids, window):
    """Each tensor sorted on its own (to 'put the pairs in order'): the pairs come apart."""
    centres, contexts = learner_pairs()(ids, window)
    return centres.sort().values, contexts.sort(descending=True).values


def pairs_of_positions(ids, window):
    """The positions i, j instead of the words ids[i], ids[j]."""
    n = len(ids)
    pos = [(i, j) for i in range(n) for j in range(n) if 1 <= abs(i - j) <= window]
    return torch.tensor([i for i, _ in pos]), torch.tensor([j for _, j in pos])


PAIRS_NOT_THE_RIGHT_ONES = ("the right number of pairs (10) but not the right ones with 6 ids and window = 1: are "
                            "centres and contexts aligned, position by position?")

PAIRS_WRONG = [
    (learner_pairs(self_pair=True), "the centre word is paired with itself (distance 0)"),
    (lambda ids, w: pairs_by_band(ids, w, low=0), "the centre word is paired with itself (distance 0)"),
    (learner_pairs(short=True), "your window is one short"),
    (lambda ids, w: pairs_by_band(ids, w, high=w - 1), "your window is one short"),
    (learner_pairs(one_side=True), "you pair each centre only with the words after it"),
    (lambda ids, w: pairs_by_band(ids, w, lower=False), "you pair each centre only with the words after it"),
    (learner_pairs(wrap=True), "some pairs wrap around the ends of the stream"),
    # in another order than the registered mistakes' loop, a slip is still named (compared as multisets)
    (pairs_rolled, "some pairs wrap around the ends of the stream"),
    (lambda ids, w: pairs_by_offsets(ids, w, both=False), "you pair each centre only with the words after it"),
    (lambda ids, w: pairs_by_offsets(ids, w, offsets=lambda w: range(w + 1)),
     "the centre word is paired with itself (distance 0)"),
    (lambda ids, w: pairs_by_offsets(ids, w, offsets=lambda w: range(1, w)), "torch.cat got an empty list"),
    (pairs_left_only, "you pair each centre only with the words before it"),
    (pairs_negative_index, "negative indices wrap around in Python"),
    (pairs_lopsided, "your window is lopsided"),
    (pairs_sorted_apart, PAIRS_NOT_THE_RIGHT_ONES),
    (pairs_of_positions, "your pairs hold positions (i, j), not words"),
    (lambda ids, w: (learner_pairs()(ids, w)[0], learner_pairs()(ids, w)[1][:-1]), "centres has 10 entries and "
                                                                                    "contexts 9"),
    (pairs_stacked, "returned a tensor of shape (10, 2); return a tuple (centres, contexts) of two 1-D integer "
                    "tensors"),
    (pairs_as_lists, "centres is a list of 10 items; return a torch.Tensor"),
    (lambda ids, w: learner_pairs()(ids, w)[1], "returned a tensor of shape (10,); return a tuple (centres, "
                                                "contexts)"),
    (lambda ids, w: tuple(t.bool() for t in learner_pairs()(ids, w)), "centres has dtype torch.bool; return real "
                                                                       "numbers"),
    (lambda ids, w: None, "returned None; return a tuple (centres, contexts)"),
    (lambda ids, w: tuple(t.float() for t in learner_pairs()(ids, w)), "centres has dtype torch.float32; return "
                                                                        "an integer tensor"),
    (pairs_unique, "you kept each distinct (centre, context) pair once"),
    (pairs_right_side_twice, "you listed the pairs of one side twice"),
    (pairs_end_clipped, "the end of your range is clipped at n - 1"),
]

WRONG = [("sgns_grads", fn, phrase) for fn, phrase in GRAD_WRONG] + \
        [("context_pairs", fn, phrase) for fn, phrase in PAIRS_WRONG]


# What a check must refuse without raising: the odd answers of every chapter, and this chapter's own.
BAD = {
    **exercise_suite.odd_answers((3, 4)),
    "triple": lambda *a: (torch.zeros(1, dtype=F64),) * 3,
    "triple-meta": lambda *a: tuple(torch.empty(3, 4, dtype=F64, device="meta") for _ in range(3)),
    "triple-none": lambda *a: (None, None, None),
    "triple-numbers": lambda *a: (1.0, 2.0, 3.0),
    "triple-float16": lambda *a: tuple(torch.zeros(3, 4, dtype=torch.float16) for _ in range(3)),
    "inputs-back": lambda *a: tuple(a),
    "inputs-times-nan": lambda *a: tuple(x * math.nan for x in a),
    "inputs-times-inf": lambda *a: tuple(x * math.inf for x in a),
    "pair-meta": lambda *a: (torch.empty(10, dtype=torch.long, device="meta"),) * 2,
    "pair-nan": lambda *a: (torch.full((10,), math.nan), torch.full((10,), math.nan)),
    "pair-huge": lambda *a: (torch.full((10,), 2 ** 62), torch.full((10,), 2 ** 62)),
    "pair-negative": lambda *a: (-torch.ones(10, dtype=torch.long), -torch.ones(10, dtype=torch.long)),
    "pair-bool": lambda *a: (torch.ones(10, dtype=torch.bool), torch.ones(10, dtype=torch.bool)),
    "pair-complex": lambda *a: (torch.zeros(10, dtype=torch.complex128),) * 2,
    "pair-2d": lambda *a: (torch.zeros(5, 2, dtype=torch.long), torch.zeros(5, 2, dtype=torch.long)),
    "pair-0d": lambda *a: (torch.tensor(1), torch.tensor(2)),
    "pair-empty": lambda *a: (torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)),
    "pair-ragged": lambda *a: (torch.zeros(10, dtype=torch.long), torch.zeros(3, dtype=torch.long)),
    "pair-numbers": lambda *a: (1, 2),
    "pair-nested-lists": lambda *a: ([[1, 2]], [[3]]),
    "pair-ndarrays": lambda *a: (np.zeros(10, dtype=np.int64), np.zeros(10, dtype=np.int64)),
    "pair-none": lambda *a: (None, None),
    "generator": lambda *a: (x for x in a),
}


# --------------------------------------------------------------------------- the generic tests

# Written once, in tests/exercise_suite.py (its docstring says what each checks); chapter 1 runs these.
globals().update(
    # test_solution_passes, test_solution_passes_for_every_seed, test_solution_code_fits_the_page (79 columns),
    # test_stub_is_not_implemented
    SUITE.solution_tests(page_width=79)
    # test_the_chapter_has_a_cell_for_every_checked_exercise, test_chapter_solution_passes_for_every_seed
    | SUITE.notebook_tests()
    # test_nearly_right_fails (1.2's gradients times 1 + 1e-4 or 1e-7 fail; 1.3's integer pairs are judged exactly)
    | SUITE.nearly_right_tests(["sgns_grads"])
    # test_every_registered_mistake_is_caught_by_its_own_hint,
    # test_the_cases_tell_every_mistake_from_the_reference_and_the_others (the tuples of every case compared as
    # one vector: 1.3's pairs differ in number, which tuples of tensors compared item by item could not say)
    | SUITE.registered_mistake_tests(apart_by=1e-3, flattened=True)
    # the fixture wrong_verdicts; test_wrong_answer_gets_its_hint_whatever_the_seed (each answer of WRONG),
    # test_every_registered_hint_is_earned_by_a_wrong_answer, test_wrong_answers_get_different_verdicts
    | SUITE.wrong_answer_tests(WRONG)
    # test_any_wrong_answer_fails_without_raising (each answer of BAD, for both exercises)
    | SUITE.odd_answer_tests(BAD)
    # test_the_diagnoses_never_raise: only 1.3 has a diagnosis (the suite's test calls every exercise's)
    | exercise_suite.Chapter(["context_pairs"], [], SOLUTIONS, NOTEBOOK).diagnosis_tests()
    # test_seed_changes_the_inputs (1.2: float64 tensors; 1.3: int64 ids and an int window),
    # test_cases_travel_to_the_sandbox_and_back (these answers too)
    | SUITE.case_tests(dtypes=(torch.float64, torch.int64))
    | SUITE.travel_tests([BAD["triple"], BAD["triple-meta"], BAD["pair-meta"], BAD["ndarray"], BAD["pair-ragged"],
                          learner_grads(neg="minus"), learner_grads(dtype=torch.float32), learner_pairs(wrap=True),
                          pairs_stacked, pairs_as_lists, pairs_sorted_apart])
    # test_every_hint_is_written_once
    | SUITE.hint_tests()
)
# The suite's meta_device_tests turns the output into one tensor (torch.as_tensor), which a tuple of tensors of
# different shapes is not: test_the_outputs_on_the_meta_device_are_named, below, moves each item.


# --------------------------------------------------------------------------- the registry


def test_chapter_one_registry():
    SUITE.assert_registry(numbers=["1.2", "1.3"])
    assert checks.EXERCISES["sgns_grads"].args == ("v_c", "u_o", "u_neg")
    assert checks.EXERCISES["context_pairs"].args == ("ids", "window")
    assert checks.EXERCISES["sgns_grads"].item_names == ("g_c", "g_o", "g_neg")
    assert checks.EXERCISES["context_pairs"].item_names == ("centres", "contexts")


def test_the_library_answers_name_functions():
    for name in ALL:
        keys = engine.library_answer_keys(checks.EXERCISES[name])
        named = {dotted for *_, dotted in keys["code"]}
        assert all(any(n == a or n.startswith(a + ".") for n in named) for a in checks.EXERCISES[name].library_answers)
    named = {d for *_, d in engine.library_answer_keys(checks.EXERCISES["sgns_grads"])["code"]}
    assert {"tinyformer.embeddings.sgns_gradients", "tinyformer.embeddings.SkipGram.forward",
            "tinyformer.embeddings._sgns_step", "torch.autograd.grad"} <= named


def test_a_gradient_that_calls_an_unfinished_exercise_is_told_so(capsys):
    def sgns_grads(v_c, u_o, u_neg):
        raise NotImplementedError("context_pairs is not implemented yet")

    verdict = checks.check_sgns_grads(sgns_grads)
    exercise_suite.assert_it_calls_an_unfinished(verdict, "context_pairs", "1.3")
    capsys.readouterr()


# --------------------------------------------------------------------------- learners' answers


def test_the_outputs_on_the_meta_device_are_named(capsys):
    for name in ALL:
        right = solution(name)
        verdict = checks.check(name, lambda *a, right=right: tuple(t.to("meta") for t in right(*a)))
        assert not verdict and "a tensor on the meta device, which holds no values" in verdict.message, name
    capsys.readouterr()


def test_the_pairs_are_judged_as_multisets_in_any_order(capsys):
    """Any order of the pairs passes, in any integer dtype, as a tuple or a list; one pair more, one less,
    one changed, or float ids fail."""
    right = solution("context_pairs")

    def permuted(ids, window):
        c, o = right(ids, window)
        perm = torch.randperm(len(c), generator=torch.Generator().manual_seed(len(c)))
        return c[perm], o[perm]

    for fn in (permuted, lambda *a: tuple(t.flip(0) for t in right(*a)), lambda *a: list(right(*a)),
               lambda *a: (right(*a)[1], right(*a)[0]),                     # the pairs reversed: the same multiset
               lambda *a: tuple(t.int() for t in right(*a))):
        assert checks.check_context_pairs(fn).passed
    for fn in (lambda *a: tuple(t[1:] for t in right(*a)), lambda *a: tuple(t.double() for t in right(*a)),
               lambda *a: tuple(torch.cat([t, t[:1]]) for t in right(*a)),
               lambda *a: (right(*a)[0], torch.cat([right(*a)[1][:-1], right(*a)[1][-1:] + 1]))):
        verdict = checks.check_context_pairs(fn)
        assert not verdict and verdict.status == checks.FAIL, verdict.message
    capsys.readouterr()


# --------------------------------------------------------------------------- other right answers pass


def grads_by_pairs(v_c, u_o, u_neg):
    """One pair at a time, with σ(x) - 1 = -σ(-x) (right)."""
    rows = []
    for v, u, U in zip(v_c, u_o, u_neg):
        c_o = -torch.sigmoid(-(u @ v))
        c_neg = torch.sigmoid(U @ v)                                    # (k,)
        rows.append((c_o * u + c_neg @ U, c_o * v, c_neg[:, None] * v[None, :]))
    return tuple(torch.stack(r) for r in zip(*rows))


def grads_by_logsigmoid(v_c, u_o, u_neg):
    """The derivatives through log σ: d/dx -log σ(x) = -exp(log σ(-x)), d/dx -log σ(-x) = exp(log σ(x)) (right)."""
    x_o = torch.bmm(u_o[:, None, :], v_c[:, :, None])[:, 0]            # (B, 1)
    x_neg = torch.bmm(u_neg, v_c[:, :, None])                           # (B, k, 1)
    c_o, c_neg = -torch.exp(F.logsigmoid(-x_o)), torch.exp(F.logsigmoid(x_neg))
    return c_o * u_o + (c_neg * u_neg).sum(1), c_o * v_c, c_neg * v_c[:, None]


def grads_by_backward(v_c, u_o, u_neg):
    """Autograd through loss.backward() (right numbers)."""
    v_c, u_o, u_neg = (t.clone().requires_grad_() for t in (v_c, u_o, u_neg))
    sgns_loss(v_c, u_o, u_neg).backward()
    return v_c.grad, u_o.grad, u_neg.grad


@pytest.mark.parametrize("right", [learner_grads(), grads_by_pairs, grads_by_logsigmoid, grads_by_backward,
                                   lambda *a: list(learner_grads()(*a))])
def test_other_right_gradients_pass(right):
    for seed in SEEDS:
        verdict = verdict_for("sgns_grads", right, seed)
        assert verdict.passed, (seed, verdict.message)


def pairs_by_triangles(ids, window):
    """The band from triu / tril of a square of ones, the diagonal taken out (right)."""
    n = len(ids)
    ones = torch.ones(n, n, dtype=torch.bool)
    band = ones.triu(-window) & ones.tril(window) & ~torch.eye(n, dtype=torch.bool)
    i, j = band.nonzero(as_tuple=True)
    return ids[i], ids[j]


def pairs_by_unfold(ids, window):
    """Windows of 2·window + 1 positions over positions padded with -1, by unfold (right)."""
    n = len(ids)
    pad = torch.full((window,), -1)
    pos = torch.cat([pad, torch.arange(n), pad]).unfold(0, 2 * window + 1, 1)   # (n, 2w + 1)
    around = torch.cat([pos[:, :window], pos[:, window + 1:]], dim=1)         # (n, 2w)
    centre = torch.arange(n)[:, None].expand_as(around)
    keep = around >= 0
    return ids[centre[keep]], ids[around[keep]]


def pairs_by_numpy(ids, window):
    """NumPy positions, tensors of int32 back (right)."""
    a = ids.numpy()
    i, j = np.nonzero(np.abs(np.subtract.outer(np.arange(len(a)), np.arange(len(a)))) - 1 < window)
    keep = i != j
    return torch.from_numpy(a[i[keep]].astype(np.int32)), torch.from_numpy(a[j[keep]].astype(np.int32))


@pytest.mark.parametrize("right", [learner_pairs(), pairs_by_band, pairs_by_offsets, pairs_by_triangles,
                                   pairs_by_unfold, pairs_by_numpy])
def test_other_right_pairs_pass(right):
    for seed in SEEDS:
        verdict = verdict_for("context_pairs", right, seed)
        assert verdict.passed, (seed, verdict.message)


# --------------------------------------------------------------------------- the cases


def test_the_gradient_cases_are_built_to_expose_the_mistakes():
    ex = checks.EXERCISES["sgns_grads"]
    for seed in SEEDS:
        cases = checks.cases_for(ex, seed)
        sizes = [(u_neg.shape[0], u_neg.shape[1], u_neg.shape[2]) for _, _, u_neg in cases]
        assert sizes == [(1, 1, 2), (3, 2, 4), (5, 5, 8), (4, 3, 3)]               # B, k, d
        x_o, x_neg = [], []
        for v_c, u_o, u_neg in cases:
            assert v_c.shape == u_o.shape == (u_neg.shape[0], u_neg.shape[2])
            assert all(t.dtype == F64 for t in (v_c, u_o, u_neg))
            x_o.append((u_o * v_c).sum(-1))
            x_neg.append(torch.einsum("bkd,bd->bk", u_neg, v_c).reshape(-1))
        x_o, x_neg = torch.cat(x_o), torch.cat(x_neg)
        # dot products of both signs: σ(x) and σ(-x), σ(x) - 1 and σ(x), are apart on every seed
        assert (x_o > 0).any() and (x_o < 0).any() and (x_neg > 0).any() and (x_neg < 0).any()
        assert any(k > 1 for _, k, _ in sizes)                          # the sum and the mean over k differ


def test_the_pair_cases():
    ex = checks.EXERCISES["context_pairs"]
    for seed in SEEDS:
        cases = checks.cases_for(ex, seed)
        assert [(len(ids), window) for ids, window in cases] == [(6, 1), (9, 2), (12, 3), (7, 5)]
        for (ids, window), V in zip(cases, (4, 5, 7, 3)):
            assert ids.dtype == torch.int64 and ids.dim() == 1 and type(window) is int
            assert 0 <= int(ids.min()) and int(ids.max()) < V
        # the last window reaches past the middle: wrapping pairs land on positions already paired
        ids, window = cases[-1]
        assert len(ids) // 2 < window < len(ids)


# --------------------------------------------------------------------------- the grader's honesty flags


@pytest.mark.parametrize("name", ALL)
def test_honest_solutions_are_not_flagged(name):
    rec, verdict = exercise_suite.harvest(name, solution(name))
    assert rec["flags"] == [] and rec["tampering"] == [], rec["flags"]
    assert verdict.status == checks.PASS, verdict.message


LIBRARY_ANSWERS = [
    ("sgns_grads", """
        from tinyformer.embeddings import sgns_gradients

        def sgns_grads(v_c, u_o, u_neg):
            return sgns_gradients(v_c, u_o, u_neg)
        """, "tinyformer.embeddings.sgns_gradients"),
    ("sgns_grads", """
        import torch
        from tinyformer.embeddings import SkipGram

        def sgns_grads(v_c, u_o, u_neg):
            B, k, d = u_neg.shape
            model = SkipGram(1, d).double()
            model.W_in = torch.nn.Parameter(v_c.clone())
            model.W_out = torch.nn.Parameter(torch.cat([u_o, u_neg.reshape(B * k, d)]))
            ids = torch.arange(B)
            (model(ids, ids, B + torch.arange(B * k).reshape(B, k)) * B).backward()
            g_out = model.W_out.grad
            return model.W_in.grad, g_out[:B], g_out[B:].reshape(B, k, d)
        """, "tinyformer.embeddings.SkipGram.forward"),
    ("sgns_grads", """
        import torch
        from tinyformer.embeddings import _sgns_step

        def sgns_grads(v_c, u_o, u_neg):
            g_c, g_out = _sgns_step(v_c, torch.cat([u_o[:, None], u_neg], dim=1), -1.0)
            return g_c, g_out[:, 0], g_out[:, 1:]
        """, "tinyformer.embeddings._sgns_step"),
    ("sgns_grads", """
        import torch
        import torch.nn.functional as F

        def sgns_grads(v_c, u_o, u_neg):
            v_c, u_o, u_neg = (t.clone().requires_grad_() for t in (v_c, u_o, u_neg))
            x_neg = torch.einsum("bkd,bd->bk", u_neg, v_c)
            loss = -(F.logsigmoid((u_o * v_c).sum(-1)).sum() + F.logsigmoid(-x_neg).sum())
            return torch.autograd.grad(loss, (v_c, u_o, u_neg))
        """, "torch.autograd.grad"),
    ("sgns_grads", """
        import torch.nn.functional as F
        from torch.func import grad

        def sgns_grads(v_c, u_o, u_neg):
            def loss(v_c, u_o, u_neg):
                x_neg = (u_neg * v_c[:, None]).sum(-1)
                return -(F.logsigmoid((u_o * v_c).sum(-1)).sum() + F.logsigmoid(-x_neg).sum())
            return grad(loss, argnums=(0, 1, 2))(v_c, u_o, u_neg)
        """, "torch.autograd.grad"),
    ("context_pairs", """
        from tinyformer.embeddings import skipgram_pairs

        def context_pairs(ids, window):
            return skipgram_pairs(ids, window)
        """, "tinyformer.embeddings.skipgram_pairs"),
]


@pytest.mark.parametrize("k", range(len(LIBRARY_ANSWERS)), ids=[f"{n}-{c}" for n, _, c in LIBRARY_ANSWERS])
def test_the_library_answer_is_flagged(k):
    name, source, caught = LIBRARY_ANSWERS[k]
    fn = define(textwrap.dedent(source), checks.EXERCISES[name].function)
    rec, verdict = exercise_suite.harvest(name, fn)
    assert caught in rec["flags"], rec["flags"]
    if verdict.passed:          # the in-book check names the call too
        exercise_suite.in_book_refuses(name, fn, rec["flags"])
    assert verdict.status == checks.PASS, verdict.message   # its outputs are right: the flag alone takes the credit


# --------------------------------------------------------------------------- the grader, end to end


def test_the_grader_judges_chapter_one_in_its_sandbox(tmp_path):
    ascent = SOLUTIONS["sgns_grads"].replace("return g_c, g_o, g_neg", "return -g_c, -g_o, -g_neg")
    assert ascent != SOLUTIONS["sgns_grads"]
    rows = SUITE.graded(tmp_path, {"sgns_grads": ascent, "context_pairs": SOLUTIONS["context_pairs"]})
    assert list(rows) == CHAPTER
    assert rows["sgns_grads"][0] == checks.FAIL and ch01.GRAD_ASCENT in rows["sgns_grads"][1], rows
    assert rows["context_pairs"][0] == checks.PASS, rows


# --------------------------------------------------------------------------- 1.2's reference


def random_triples(seed: int):
    """Inputs beyond the cases: more sizes, and scales where σ saturates."""
    g = torch.Generator().manual_seed(seed)
    for B, k, d, scale in ((1, 1, 1, 1.0), (2, 7, 3, 0.1), (6, 4, 5, 3.0), (3, 10, 16, 0.5), (8, 2, 2, 6.0)):
        yield tuple(torch.randn(*shape, generator=g, dtype=F64) * scale for shape in ((B, d), (B, d), (B, k, d)))


def test_gradient_reference_is_autograd_of_the_float64_loss():
    ex = checks.EXERCISES["sgns_grads"]
    triples = [c for seed in SEEDS for c in checks.cases_for(ex, seed)]
    triples += [t for s in range(3) for t in random_triples(s)]
    for v_c, u_o, u_neg in triples:
        inputs = tuple(t.clone().requires_grad_() for t in (v_c, u_o, u_neg))
        auto = torch.autograd.grad(sgns_loss(*inputs), inputs)
        ref = ch01.sgns_grads_reference(v_c, u_o, u_neg)
        assert isinstance(ref, tuple) and len(ref) == 3
        for r, a, x in zip(ref, auto, (v_c, u_o, u_neg)):
            assert r.dtype == F64 and r.shape == x.shape
            torch.testing.assert_close(r, a, rtol=1e-12, atol=1e-14)


def test_gradient_reference_is_the_finite_difference_of_the_loss():
    """Central differences of the loss, one coordinate at a time (no autograd)."""
    v_c, u_o, u_neg = checks.cases_for(checks.EXERCISES["sgns_grads"], 3)[1]
    ref = ch01.sgns_grads_reference(v_c, u_o, u_neg)
    h = 1e-6
    for which, x in enumerate((v_c, u_o, u_neg)):
        numeric = torch.zeros_like(x).reshape(-1)
        for n in range(x.numel()):
            step = torch.zeros(x.numel(), dtype=F64)
            step[n] = h
            args = [v_c, u_o, u_neg]
            args[which] = x + step.reshape(x.shape)
            up = float(sgns_loss(*args))
            args[which] = x - step.reshape(x.shape)
            numeric[n] = (up - float(sgns_loss(*args))) / (2 * h)
        torch.testing.assert_close(ref[which], numeric.reshape(x.shape), rtol=1e-6, atol=1e-8)


def test_gradient_reference_treats_each_pair_alone():
    """The pairs of a batch do not interact: the batch's gradients are those of each pair, stacked."""
    for v_c, u_o, u_neg in random_triples(1):
        ref = ch01.sgns_grads_reference(v_c, u_o, u_neg)
        for b in range(len(v_c)):
            one = ch01.sgns_grads_reference(v_c[b:b + 1], u_o[b:b + 1], u_neg[b:b + 1])
            for r, o in zip(ref, one):
                torch.testing.assert_close(r[b:b + 1], o, rtol=1e-15, atol=0)


def test_gradient_reference_is_the_library_training_step():
    """_sgns_step(v_c, [u_o, u_neg], rate) is -rate times the reference's gradients."""
    for v_c, u_o, u_neg in random_triples(2):
        g_c, g_o, g_neg = ch01.sgns_grads_reference(v_c, u_o, u_neg)
        step_c, step_out = E._sgns_step(v_c, torch.cat([u_o[:, None], u_neg], dim=1), 0.025)
        torch.testing.assert_close(step_c, -0.025 * g_c, rtol=1e-12, atol=1e-15)
        torch.testing.assert_close(step_out, -0.025 * torch.cat([g_o[:, None], g_neg], dim=1), rtol=1e-12,
                                   atol=1e-15)


def test_gradient_reference_by_hand():
    """v_c = (1, 0), u_o = (2, 0) and one negative u_1 = (0, 3): x_o = 2 and x_1 = 0, so σ(x_1) = 1/2 and
    g_c = (σ(2) - 1) u_o + u_1 / 2, g_o = (σ(2) - 1) v_c, g_neg = v_c / 2."""
    v_c, u_o, u_neg = torch.tensor([[1.0, 0.0]], dtype=F64), torch.tensor([[2.0, 0.0]], dtype=F64), \
        torch.tensor([[[0.0, 3.0]]], dtype=F64)
    g_c, g_o, g_neg = ch01.sgns_grads_reference(v_c, u_o, u_neg)
    s = 1 / (1 + math.exp(-2.0))
    torch.testing.assert_close(g_c, torch.tensor([[2 * (s - 1), 1.5]], dtype=F64), rtol=1e-15, atol=1e-15)
    torch.testing.assert_close(g_o, torch.tensor([[s - 1, 0.0]], dtype=F64), rtol=1e-15, atol=1e-15)
    torch.testing.assert_close(g_neg, torch.tensor([[[0.5, 0.0]]], dtype=F64), rtol=1e-15, atol=1e-15)


# --------------------------------------------------------------------------- 1.3's reference


def brute_force_pairs(ids: torch.Tensor, window: int) -> Counter:
    ids = ids.tolist()
    return Counter((ids[i], ids[j]) for i in range(len(ids)) for j in range(len(ids)) if 1 <= abs(i - j) <= window)


def random_streams(seed: int):
    g = torch.Generator().manual_seed(seed)
    for n, V, window in ((1, 3, 1), (2, 2, 1), (5, 2, 4), (5, 9, 7), (30, 6, 2), (40, 50, 5), (17, 1, 3)):
        yield torch.randint(V, (n,), generator=g), window


def test_pair_reference_is_the_double_loop_as_multisets():
    ex = checks.EXERCISES["context_pairs"]
    streams = [c for seed in SEEDS for c in checks.cases_for(ex, seed)]
    streams += [s for i in range(3) for s in random_streams(i)]
    for ids, window in streams:
        centres, contexts = ch01.context_pairs_reference(ids, window)
        assert centres.dtype == contexts.dtype == torch.long and centres.shape == contexts.shape
        assert Counter(zip(centres.tolist(), contexts.tolist())) == brute_force_pairs(ids, window)
        n = len(ids)
        reach = min(window, n - 1)                  # a window past the ends pairs every two positions
        assert len(centres) == 2 * reach * n - reach * (reach + 1)


def test_pair_reference_agrees_with_the_check_and_the_cooccurrence_counts():
    """Judged against itself it passes; counted into a (V, V) table, its pairs are E.cooccurrence's counts."""
    ex = checks.EXERCISES["context_pairs"]
    for ids, window in checks.cases_for(ex, 1):
        ref = ch01.context_pairs_reference(ids, window)
        assert ch01._pairs_agree((ids, window), ref, ref)
        words = [f"w{i}" for i in ids.tolist()]
        vocab = E.Vocab(words)
        table = torch.zeros(len(vocab), len(vocab), dtype=F64)
        for c, o in zip(*ref):
            table[vocab.index[f"w{int(c)}"], vocab.index[f"w{int(o)}"]] += 1
        assert torch.equal(table, E.cooccurrence(words, vocab, window))
