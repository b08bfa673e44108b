"""Tests for tinyformer.data (Chapter 5's corpus): the prose of CPython's ``pydoc_data`` topics and
its split into words. The references are written here: the paragraphs are re-derived from the
topics with a loop over lines (no regular expressions), and the words with a loop over
characters."""

from __future__ import annotations

import pytest

from tinyformer.data import english_text, words

MARKS = "*=~^-"


@pytest.fixture(scope="module")
def text() -> str:
    return english_text()


@pytest.fixture(scope="module")
def paragraphs(text) -> list[str]:
    return text.split("\n")


# --------------------------------------------------------------------------------------------
# Independent references
# --------------------------------------------------------------------------------------------


def has_run_of_three(line: str) -> bool:
    """Three or more consecutive characters from ``*=~^-`` (a rule or an underline)."""
    run = 0
    for c in line:
        run = run + 1 if c in MARKS else 0
        if run >= 3:
            return True
    return False


def topic_blocks(doc: str) -> list[list[str]]:
    """The blocks of non-blank lines of one topic, split at blank (or whitespace-only) lines."""
    blocks, block = [], []
    for line in doc.split("\n") + [""]:
        if line.strip():
            block.append(line)
        elif block:
            blocks.append(block)
            block = []
    return blocks


def prose_by_hand() -> list[str]:
    """Every block of every topic (topics in alphabetical order) that is prose: no indented line,
    no ``>>>`` prompt, no run of three marks, more than 60 characters; its lines stripped and
    joined by single spaces."""
    from pydoc_data import topics

    out = []
    for name in sorted(topics.topics):
        for block in topic_blocks(topics.topics[name]):
            if any(line[0].isspace() for line in block):
                continue
            if any(line.startswith(">>>") or has_run_of_three(line) for line in block):
                continue
            if len("\n".join(block)) > 60:
                out.append(" ".join(line.strip() for line in block))
    return out


def words_by_hand(text: str) -> list[str]:
    """Lower-case the text, then walk it: runs of a-z are words, "." and "," are tokens of their
    own, and every other character ends the current word."""
    out, word = [], ""
    for c in text.lower():
        if "a" <= c <= "z":
            word += c
            continue
        if word:
            out.append(word)
            word = ""
        if c in ".,":
            out.append(c)
    if word:
        out.append(word)
    return out


# --------------------------------------------------------------------------------------------
# english_text
# --------------------------------------------------------------------------------------------


def test_deterministic_str_of_the_documented_size(text):
    assert isinstance(text, str)
    assert english_text() == text
    assert 150_000 <= len(text) <= 300_000


def test_one_paragraph_per_line(paragraphs):
    assert len(paragraphs) > 300
    for p in paragraphs:
        assert p, "an empty line: paragraphs must not be separated by blank lines"
        assert not p[0].isspace() and not p[-1].isspace(), p[:60]
        assert "\n" not in p and "\t" not in p
        assert len(p) > 50, p


def test_no_code_prompts_or_rules(paragraphs):
    for p in paragraphs:
        assert ">>>" not in p, p[:80]
        assert not has_run_of_three(p), p[:80]


def test_paragraphs_are_mostly_sentences(paragraphs):
    """Prose: most paragraphs end like a sentence, and most characters are letters or spaces."""
    ends = sum(p[-1] in ".:" for p in paragraphs)
    assert ends / len(paragraphs) > 0.8
    letters = sum(c.isalpha() or c == " " for p in paragraphs for c in p)
    assert letters / sum(map(len, paragraphs)) > 0.85


def test_every_paragraph_is_one_from_the_topics(paragraphs):
    """Containment: each paragraph, its whitespace collapsed, is a whole blank-line-separated
    block of some topic (also whitespace-collapsed), not a fragment or a merge of two."""
    from pydoc_data import topics

    blocks = {" ".join(" ".join(b).split()) for doc in topics.topics.values() for b in topic_blocks(doc)}
    for p in paragraphs:
        assert " ".join(p.split()) in blocks, p[:80]


def test_equals_an_independent_rederivation(paragraphs):
    assert paragraphs == prose_by_hand()


def test_follows_topic_order(paragraphs):
    """Topics in alphabetical order: walking the sorted topics forward, each paragraph is found in
    the current topic or a later one, never an earlier one."""
    from pydoc_data import topics

    flat = [" ".join(topics.topics[name].split()) for name in sorted(topics.topics)]
    i = 0
    for p in paragraphs:
        p = " ".join(p.split())
        while i < len(flat) and p not in flat[i]:
            i += 1
        assert i < len(flat), f"out of order: {p[:80]}"
    assert paragraphs[0].startswith("Assert statements")


# --------------------------------------------------------------------------------------------
# words
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("Hello, World!", ["hello", ",", "world"]),
    ("It's 3.14, e.g. naïve", ["it", "s", ".", ",", "e", ".", "g", ".", "na", "ve"]),
    ("x_1 = (a+b)...", ["x", "a", "b", ".", ".", "."]),
    ("  \n\t", []),
    ("", []),
    ("ABC;def\nGHI", ["abc", "def", "ghi"]),
])
def test_words_on_hand_made_strings(text, expected):
    assert words(text) == expected
    assert words_by_hand(text) == expected


def test_words_match_a_character_loop_on_the_corpus(text):
    out = words(text)
    assert out == words_by_hand(text)
    assert len(out) > 20_000
    assert all(w in ".," or (w.isascii() and w.isalpha() and w.islower()) for w in out)


@pytest.mark.parametrize("bad", [3, None, b"bytes", ["a", "b"]])
def test_words_rejects_non_str(bad):
    with pytest.raises(TypeError, match="text"):
        words(bad)
