"""Tests for the two diversity measures of tinyformer.sampling: distinct-n (distinct n-grams over
all n-grams, pooled across samples) and repetition (seq-rep-n: the share of a sample's n-grams seen
earlier in that sample, averaged over samples). References are hand-computed examples and plain
loops with collections.Counter and a set of n-grams seen so far."""

from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction

import pytest
import torch

from tinyformer.sampling import distinct_n, repetition


def grams_by_hand(seq, n):
    out = []
    for i in range(len(seq)):
        if i + n <= len(seq):
            out.append(tuple(seq[i:i + n]))
    return out


def distinct_by_hand(samples, n):
    counts = Counter()
    for s in samples:
        counts.update(grams_by_hand(s, n))
    return Fraction(len(counts), sum(counts.values()))


def repetition_by_hand(samples, n):
    """For each sample long enough: walk its n-grams, counting those already seen in it."""
    rates = []
    for s in samples:
        grams = grams_by_hand(s, n)
        if not grams:
            continue
        seen, repeated = set(), 0
        for g in grams:
            repeated += g in seen
            seen.add(g)
        rates.append(Fraction(repeated, len(grams)))
    return sum(rates) / len(rates)


# --------------------------------------------------------------------------------------------
# Hand-computed examples
# --------------------------------------------------------------------------------------------


def test_one_sample_by_hand():
    # 2-grams of 1 2 1 2: (1,2) (2,1) (1,2): 2 distinct of 3, 1 of 3 seen before
    assert distinct_n([[1, 2, 1, 2]], 2) == pytest.approx(2 / 3)
    assert repetition([[1, 2, 1, 2]], 2) == pytest.approx(1 / 3)
    # 1-grams: 1 2 1 2: 2 distinct of 4, 2 of 4 seen before
    assert distinct_n([[1, 2, 1, 2]], 1) == pytest.approx(1 / 2)
    assert repetition([[1, 2, 1, 2]], 1) == pytest.approx(1 / 2)
    # a 4-gram of length 4: one n-gram, distinct, not repeated
    assert distinct_n([[1, 2, 1, 2]], 4) == 1.0
    assert repetition([[1, 2, 1, 2]], 4) == 0.0


def test_no_repeats_and_a_loop():
    assert distinct_n([[0, 1, 2, 3, 4, 5]], 2) == 1.0
    assert repetition([[0, 1, 2, 3, 4, 5]], 2) == 0.0
    loop = [[7] * 11]                       # 10 two-grams, all (7, 7)
    assert distinct_n(loop, 2) == pytest.approx(1 / 10)
    assert repetition(loop, 2) == pytest.approx(9 / 10)


def test_distinct_n_pools_across_samples():
    """Two identical samples, each without a repeat: pooled, half the 2-grams are repeats
    (a per-sample average would say 1)."""
    assert distinct_n([[1, 2, 3], [1, 2, 3]], 2) == pytest.approx(2 / 4)
    # different lengths: pooled counts 1 distinct of 4 grams, not the mean of 1/3 and 1/1
    assert distinct_n([[5, 5, 5, 5], [5, 5]], 2) == pytest.approx(1 / 4)


def test_repetition_averages_per_sample():
    """[1 1 1 1] repeats 2 of its 3 two-grams, [1 2] none of its 1: the mean of 2/3 and 0 is 1/3
    (pooling the grams would give 2/4, and counting repeats across samples more still)."""
    assert repetition([[1, 1, 1, 1], [1, 2]], 2) == pytest.approx(1 / 3)
    # the same sample twice: repetition looks within a sample only
    assert repetition([[1, 2, 3], [1, 2, 3]], 2) == 0.0


def test_repetition_skips_samples_shorter_than_n():
    assert repetition([[1, 2, 1, 2], [5]], 2) == pytest.approx(1 / 3)
    assert repetition([[1, 2, 1, 2], [], [9]], 2) == pytest.approx(1 / 3)
    # distinct_n: a short sample simply contributes no n-gram
    assert distinct_n([[1, 2, 1, 2], [5]], 2) == pytest.approx(2 / 3)


def test_default_n():
    s = [[1, 2, 3, 1, 2, 3, 1, 2, 3]]
    assert distinct_n(s) == distinct_n(s, 2)
    assert repetition(s) == repetition(s, 4)
    assert repetition(s) == pytest.approx(3 / 6)        # 4-grams: 6, the last 3 seen before


# --------------------------------------------------------------------------------------------
# Random samples against the loops
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_random_samples_match_loops(n):
    rng = random.Random(n)
    for _ in range(30):
        samples = [[rng.randrange(4) for _ in range(rng.randrange(0, 15))]
                   for _ in range(rng.randrange(1, 5))]
        if not any(len(s) >= n for s in samples):
            continue
        assert distinct_n(samples, n) == pytest.approx(float(distinct_by_hand(samples, n)))
        assert repetition(samples, n) == pytest.approx(float(repetition_by_hand(samples, n)))


def test_tensor_tuple_and_list_inputs_agree():
    g = torch.Generator().manual_seed(0)
    t = torch.randint(0, 5, (6, 12), generator=g)
    as_list = t.tolist()
    as_tuples = tuple(tuple(s) for s in as_list)
    for n in (1, 2, 3):
        d, r = distinct_n(t, n), repetition(t, n)
        assert d == distinct_n(as_list, n) == distinct_n(as_tuples, n)
        assert r == repetition(as_list, n) == repetition(as_tuples, n)
        assert d == pytest.approx(float(distinct_by_hand(as_list, n)))
        assert r == pytest.approx(float(repetition_by_hand(as_list, n)))
    assert distinct_n(t.int(), 2) == distinct_n(t, 2)


def test_results_are_floats_in_range():
    s = [[1, 2, 1, 2, 3]]
    for value in (distinct_n(s, 2), repetition(s, 2)):
        assert isinstance(value, float) and 0.0 <= value <= 1.0


def test_inputs_are_not_modified():
    samples = [[1, 2, 1], [3, 4]]
    distinct_n(samples, 2)
    repetition(samples, 2)
    assert samples == [[1, 2, 1], [3, 4]]


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [distinct_n, repetition])
@pytest.mark.parametrize(("samples", "n", "error", "name"), [
    ([[1, 2, 3]], 0, ValueError, "n"),
    ([[1, 2, 3]], -2, ValueError, "n"),
    ([[1, 2, 3]], 2.0, TypeError, "n"),
    ([[1, 2, 3]], True, TypeError, "n"),
    (torch.zeros(2, 3, 4, dtype=torch.long), 2, ValueError, "samples"),   # 3-D
    (torch.zeros(5, dtype=torch.long), 2, ValueError, "samples"),         # 1-D
    ("1 2 3", 2, TypeError, "samples"),
    (5, 2, TypeError, "samples"),
    ([1, 2, 3], 2, TypeError, "samples"),                                 # not a list of lists
    ({1: [1, 2]}, 2, TypeError, "samples"),
    ([[1]], 2, ValueError, "samples"),                                    # nothing long enough
    ([[1, 2], [3]], 3, ValueError, "samples"),
    ([], 1, ValueError, "samples"),
    (torch.zeros(0, 3, dtype=torch.long), 1, ValueError, "samples"),
])
def test_bad_input(fn, samples, n, error, name):
    with pytest.raises(error, match=rf"\b{name}\b"):
        fn(samples, n)
