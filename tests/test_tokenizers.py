"""Tokenizers (chapter 6): round trips on any string, BPE merges against a slow reference that
recounts every pair at every merge, files, and clear errors."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
import torch

from tinyformer.data import english_text
from tinyformer.tokenizers import SPLIT_PATTERN, BPETokenizer, CharTokenizer, merge_pair

ODD_STRINGS = [
    "", "a", "hello world", "  leading and trailing  ", "tabs\tand\nnewlines\r\n",
    "naïve café, déjà vu — Ünïcödé", "emoji 🙂👍🏽 and flags 🇫🇷", "中文字符和日本語のテキスト",
    "lone surrogate \ud800 here", "\udfff", "numbers 12345 and 3.14159", "it's we'll they've I'd",
    "snake_case __dunder__ CamelCase", "\x00\x01 control \x7f", "<|endoftext|> looks special",
]
TEXT = ("the cat sat on the mat. the dog sat on the log. a cat and a dog met on a mat, "
        "and the cat's hat was the dog's hat. ") * 20
RICH = english_text()[:20_000]  # real prose: more pairs than merges asked for


def reference_merges(text: str, n_merges: int) -> list[tuple[int, int]]:
    """Byte-level BPE the slow way: split, then at every merge recount every adjacent pair of every
    piece from scratch, merge the most frequent (ties: the smaller pair) everywhere."""
    pieces = [list(p.encode("utf-8", "surrogatepass")) for p in re.findall(SPLIT_PATTERN, text)]
    merges = []
    for k in range(n_merges):
        counts = Counter()
        for ids in pieces:
            counts.update(zip(ids, ids[1:]))
        if not counts:
            break
        best = max(counts.values())
        pair = min(p for p, c in counts.items() if c == best)
        merges.append(pair)
        pieces = [merge_pair(ids, pair, 256 + k) for ids in pieces]
    return merges


# --- round trips -----------------------------------------------------------------------------------

@pytest.mark.parametrize("s", ODD_STRINGS)
def test_bpe_round_trip_on_any_string(s):
    tok = BPETokenizer.train(TEXT, 300)
    assert tok.decode(tok.encode(s)) == s
    untrained = BPETokenizer()
    assert untrained.decode(untrained.encode(s)) == s
    assert untrained.encode(s) == list(s.encode("utf-8", "surrogatepass"))


def test_bpe_round_trip_on_random_unicode():
    g = torch.Generator().manual_seed(0)
    tok = BPETokenizer.train(TEXT + "".join(ODD_STRINGS), 320)
    for _ in range(50):
        codes = torch.randint(1, 0x110000, (30,), generator=g).tolist()
        s = "".join(chr(c) for c in codes)
        assert tok.decode(tok.encode(s)) == s


def test_char_round_trip_and_unknown_character():
    tok = CharTokenizer(TEXT)
    assert tok.decode(tok.encode("the cat")) == "the cat"
    assert tok.vocab_size == len(set(TEXT))
    with pytest.raises(ValueError, match="'Z' is not in the vocabulary"):
        tok.encode("Zebra")


# --- merges ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [TEXT, RICH[:5000], "aaaaaaaaaa bbbb aaaa", "".join(ODD_STRINGS) * 3,
                                  "abababab abab ab aaaa aaa aa"])
def test_merges_equal_the_slow_reference(text):
    tok = BPETokenizer.train(text, 256 + 40)
    assert list(tok.merges) == reference_merges(text, 40)


def test_each_merge_adds_exactly_one_token():
    for n in (256, 257, 280):
        tok = BPETokenizer.train(RICH, n)
        assert tok.vocab_size == n == 256 + len(tok.merges)
    tok = BPETokenizer.train(RICH, 300, special_tokens=["<|endoftext|>"])
    assert tok.vocab_size == 300 and len(tok.merges) == 299 - 256


def test_merging_overlapping_pairs_goes_left_to_right():
    assert merge_pair([1, 1, 1], (1, 1), 9) == [9, 1]
    assert merge_pair([1, 1, 1, 1], (1, 1), 9) == [9, 9]
    assert merge_pair([2, 1, 1, 2], (1, 2), 9) == [2, 1, 9]


def test_merges_never_cross_a_piece_boundary():
    tok = BPETokenizer.train("ab ab ab ab ab ab", 300)
    merged = [tok.vocab[i] for i in range(256, tok.vocab_size)]
    assert merged == [b"ab", b" ab"]      # a space leads a word; "b a" never forms
    tok = BPETokenizer.train(RICH, 400)
    assert all(b" " not in tok.vocab[i][1:].strip(b" ") for i in range(256, 400))


def test_training_stops_when_no_pair_is_left():
    tok = BPETokenizer.train("ab", 1000)
    assert list(tok.merges) == [(97, 98)] and tok.vocab_size == 257


def test_encoding_compresses_and_common_words_become_tokens():
    tok = BPETokenizer.train(TEXT, 320)
    ids = tok.encode(" the cat")
    assert len(ids) < len(b" the cat")
    assert any(tok.vocab[i] == b" the" for i in ids)


def test_special_tokens_are_never_split():
    tok = BPETokenizer.train(RICH, 300, special_tokens=["<|endoftext|>"])
    eot = tok.special_tokens["<|endoftext|>"]
    ids = tok.encode("the cat<|endoftext|>the dog", allowed_special="all")
    assert ids.count(eot) == 1 and eot == 299
    assert tok.encode("the cat<|endoftext|>the dog", allowed_special={"<|endoftext|>"}) == ids
    assert tok.decode(ids) == "the cat<|endoftext|>the dog"
    assert tok.token_bytes(eot) == b"<|endoftext|>"


def test_special_token_text_in_ordinary_text_is_refused_unless_allowed():
    tok = BPETokenizer.train(RICH, 300, special_tokens=["<|endoftext|>"])
    eot = tok.special_tokens["<|endoftext|>"]
    text = "a user quoting <|endoftext|> here"
    with pytest.raises(ValueError, match="allowed_special"):
        tok.encode(text)                                 # the default refuses it, as tiktoken does
    plain = tok.encode(text, allowed_special="none")     # as ordinary bytes: no control token
    assert eot not in plain and tok.decode(plain) == text
    assert eot in tok.encode(text, allowed_special="all")
    assert tok.encode("no special text here") == tok.encode("no special text here", allowed_special="all")
    for bad in ("some", {"<|im_start|>"}, 3):
        with pytest.raises(ValueError, match="allowed_special"):
            tok.encode(text, allowed_special=bad)


# --- files -----------------------------------------------------------------------------------------

def test_save_and_load_give_the_same_tokenizer(tmp_path):
    tok = BPETokenizer.train(RICH, 300, special_tokens=["<|endoftext|>"])
    path = tmp_path / "tok.json"
    tok.save(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["type"] == "bpe" and len(data["merges"]) == 43 and " the" in data["tokens"].values()
    again = BPETokenizer.load(path)
    for s in ODD_STRINGS + [TEXT]:
        assert again.encode(s, allowed_special="all") == tok.encode(s, allowed_special="all")
    char = CharTokenizer(TEXT)
    char.save(tmp_path / "char.json")
    assert CharTokenizer.load(tmp_path / "char.json").encode("the cat") == char.encode("the cat")
    with pytest.raises(ValueError, match="'char' tokenizer, not a 'bpe'"):
        BPETokenizer.load(tmp_path / "char.json")
    (tmp_path / "other.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ValueError, match="not a tinyformer tokenizer"):
        CharTokenizer.load(tmp_path / "other.json")


# --- bad input -------------------------------------------------------------------------------------

def test_bad_input_gets_clear_errors():
    with pytest.raises(ValueError, match="at least 256"):
        BPETokenizer.train(TEXT, 255)
    with pytest.raises(ValueError, match="at least 256.*1 special"):
        BPETokenizer.train(TEXT, 256, special_tokens=["<|endoftext|>"])
    with pytest.raises(ValueError, match="text is empty"):
        BPETokenizer.train("", 300)
    with pytest.raises(ValueError, match="text is empty"):
        CharTokenizer("")
    with pytest.raises(TypeError, match="text must be a str"):
        BPETokenizer().encode(b"bytes")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        BPETokenizer().decode([256])
    with pytest.raises(TypeError, match="ids must hold ints"):
        BPETokenizer().decode([1.0])
    with pytest.raises(ValueError, match="does not exist yet"):
        BPETokenizer(merges=[(300, 1)])
    assert BPETokenizer().decode(torch.tensor([104, 105])) == "hi"
