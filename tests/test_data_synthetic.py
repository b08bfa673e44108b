"""The synthetic language (chapter 6's data, scored against in chapters 1 and 10): seeded, any size,
and its ground truth agrees with its text."""

from __future__ import annotations

import pytest

from tinyformer.data import PRONOUN_TEMPLATES, RELATIONS, synthetic_corpus


@pytest.fixture(scope="module")
def corpus():
    return synthetic_corpus(2000, seed=3)


def test_same_seed_same_corpus_other_seed_other_corpus():
    assert synthetic_corpus(300, seed=1) == synthetic_corpus(300, seed=1)
    assert synthetic_corpus(300, seed=1).text != synthetic_corpus(300, seed=2).text
    assert synthetic_corpus(300, seed=1).text.split("\n")[:50] == \
        synthetic_corpus(50, seed=1).text.split("\n")


def test_every_kind_appears_in_roughly_its_share(corpus):
    lines = corpus.text.split("\n")
    assert len(lines) == 2000
    assert 0.35 < len(corpus.pronouns) / 2000 < 0.45
    assert 0.25 < sum(map(len, corpus.relations.values())) / 2000 < 0.35
    assert 0.15 < len(corpus.repeats) / 2000 < 0.25


def test_pronoun_ground_truth_matches_the_text(corpus):
    lines = corpus.text.split("\n")
    firsts = 0
    for p in corpus.pronouns:
        assert corpus.text[p["start"]:p["end"]] == "it"
        words = lines[p["line"]].split()
        assert words[1] in (p["antecedent"], p["other"]) and {p["antecedent"], p["other"]} <= set(words)
        assert words[-2] == p["adjective"]
        # the adjective decides: it belongs to the list of the noun it refers to
        template = next(t for t in PRONOUN_TEMPLATES
                        if words[1] in t[1] and t[0].split()[2:5] == words[2:5])
        refers_to_first = p["antecedent"] == words[1]
        assert p["adjective"] in (template[3] if refers_to_first else template[4])
        firsts += refers_to_first
    assert 0.4 < firsts / len(corpus.pronouns) < 0.6      # both answers are common


def test_relations_and_repeats_match_the_text(corpus):
    text = corpus.text
    for name, pairs in corpus.relations.items():
        for x, y in pairs:
            assert (x, y) in RELATIONS[name]
    assert f"the capital of {corpus.relations['capital'][0][0]} is {corpus.relations['capital'][0][1]} ." in text
    for r in corpus.repeats:
        n = len(r["span"])
        assert text[r["first"]:r["first"] + n] == text[r["second"]:r["second"] + n] == r["span"]
        assert r["second"] > r["first"]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="n_sentences"):
        synthetic_corpus(0)
    with pytest.raises(ValueError, match="mix must be 4"):
        synthetic_corpus(10, mix=(1, 1))
