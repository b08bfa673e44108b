"""Chapter 6: tokenizers, from characters to byte-pair encoding.

A tokenizer turns text into a list of integer ids and back. Two are here:

* :class:`CharTokenizer`: one id per distinct character of a training text;
  small, exact, and unable to spell a character it never saw.
* :class:`BPETokenizer`: byte-level **byte-pair encoding** (Sennrich et al.,
  2016; GPT-2's byte-level variant, Radford et al., 2019). It starts from
  the 256 byte values, so it can encode *any* string, and learns merges: at
  each step the most frequent adjacent pair of tokens in the training text
  becomes one new token. Text is first split into pieces (words with their
  leading space, runs of digits, of punctuation, of spaces) and merges never
  cross a piece's boundary.

Both have ``encode(text) -> list[int]``, ``decode(ids) -> str``,
``vocab_size``, and ``save(path)`` / ``load(path)`` to a readable JSON file.
``decode(encode(s)) == s`` for every string ``s`` (for the byte-level BPE,
lone surrogates included: their bytes pass through ``surrogatepass``).
"""

from __future__ import annotations

import functools
import heapq
import inspect
import json
import re
import types
from collections import Counter
from pathlib import Path

from tinyformer.validation import check_int

#: GPT-2's pre-tokenisation split, written for Python's ``re`` (no ``\p{L}``): English
#: contractions, an optional space and a run of letters, of digits, or of other
#: symbols, then runs of whitespace. ``[^\W\d_]`` is a letter or a numeral that is
#: not a decimal digit (², ½, Ⅻ: GPT-2's ``\p{L}`` would split them off); ``\d`` a digit.
SPLIT_PATTERN = (r"'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|_+"
                 r"|\s+(?!\S)|\s+")
FORMAT = "tinyformer-tokenizer"


class _train_method:
    """``train`` that works on the class (``BPETokenizer.train(text, 1000)``
    returns a new tokenizer) and on an instance (``tok.train(text)`` trains
    it in place and returns it)."""

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)   # its name, doc, and __wrapped__

    def __get__(self, obj, cls):
        fn = self.fn

        def train(owner, *args, **kwargs):
            return fn(cls, obj, *args, **kwargs)

        # bound to the class or the tokenizer, with the name, docstring and signature of ``fn``
        # (``text, vocab_size, …``), so that help() and the book's API reference show them
        functools.update_wrapper(train, fn)
        train.__signature__ = inspect.signature(fn).replace(
            parameters=list(inspect.signature(fn).parameters.values())[1:])
        return types.MethodType(train, cls if obj is None else obj)


def _check_text(name: str, text) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    return text


def _check_ids(ids, vocab_size: int) -> list[int]:
    if hasattr(ids, "tolist"):                 # a tensor or an array
        ids = ids.tolist()
    if not isinstance(ids, (list, tuple)):
        raise TypeError(f"ids must be a list of ints (or a 1-D tensor), got "
                        f"{type(ids).__name__}")
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"ids must hold ints, got {i!r}")
        if not 0 <= i < vocab_size:
            raise ValueError(f"token id {i} is outside the vocabulary "
                             f"[0, {vocab_size})")
    return list(ids)


def _read(path, kind: str) -> dict:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a tinyformer tokenizer file")
    if data.get("type") != kind:
        raise ValueError(f"{path} holds a {data.get('type')!r} tokenizer, "
                         f"not a {kind!r} one")
    return data


class CharTokenizer:
    """One id per distinct character of ``text``, in sorted order (or build
    it empty and call :meth:`train` with the text)."""

    def __init__(self, text: str | None = None):
        self.chars: list[str] = []
        self.stoi: dict[str, int] = {}
        if text is not None:
            self._fit(text)

    def _fit(self, text: str) -> None:
        chars = sorted(set(_check_text("text", text)))
        if not chars:
            raise ValueError("text is empty: a CharTokenizer needs at least "
                             "one character to build its vocabulary")
        self.chars = chars
        self.stoi = {ch: i for i, ch in enumerate(chars)}

    @_train_method
    def train(cls, self, text: str, vocab_size=None) -> CharTokenizer:
        """The vocabulary of ``text``'s characters (``vocab_size`` is
        ignored: a character tokenizer has one token per character).
        Called on the class it returns a new tokenizer; called on a
        tokenizer it replaces that one's vocabulary and returns it."""
        tok = cls() if self is None else self
        tok._fit(text)
        return tok

    @property
    def vocab_size(self) -> int:
        """The number of ids: one per distinct character."""
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        """The id of every character of ``text``; a character the
        tokenizer never saw is an error (it has no id to give it)."""
        _check_text("text", text)
        if not self.chars:
            raise ValueError("this CharTokenizer has no vocabulary yet: "
                             "train it on a text first")
        try:
            return [self.stoi[ch] for ch in text]
        except KeyError as err:
            raise ValueError(f"the character {err.args[0]!r} is not in the "
                             f"vocabulary of {self.vocab_size} characters "
                             f"this tokenizer was built from") from None

    def decode(self, ids) -> str:
        """The text of ``ids`` (a list or a 1-D tensor): the inverse of
        :meth:`encode`."""
        return "".join(self.chars[i] for i in _check_ids(ids, self.vocab_size))

    def save(self, path) -> None:
        """A JSON file a person can read: the characters, in id order."""
        data = {"format": FORMAT, "type": "char", "chars": self.chars}
        Path(path).write_text(json.dumps(data, ensure_ascii=False, indent=1),
                              encoding="utf-8")

    @classmethod
    def load(cls, path) -> CharTokenizer:
        """The tokenizer :meth:`save` wrote to ``path``."""
        data = _read(path, "char")
        return cls("".join(data["chars"]))

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


def _to_bytes(text: str) -> bytes:
    # surrogatepass: a lone surrogate (invalid in UTF-8) still has bytes, so
    # that decode(encode(s)) == s for every Python string
    return text.encode("utf-8", errors="surrogatepass")


def merge_pair(ids: list[int], pair: tuple[int, int],
               new_id: int) -> list[int]:
    """``ids`` with every occurrence of ``pair``, left to right and never
    overlapping, replaced by ``new_id``: ``(a, a)`` in ``a a a`` merges once,
    the first two."""
    out, i, n = [], 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _pairs(ids: list[int]) -> Counter:
    """The adjacent pairs of one piece, counted (``a a a`` has ``(a, a)`` twice)."""
    return Counter(zip(ids, ids[1:]))


class BPETokenizer:
    """Byte-level byte-pair encoding. Build with :meth:`train`, or from
    ``merges``, a list of pairs ``(a, b)`` in the order they were learned:
    merge ``k`` makes token ``256 + k``. ``special_tokens`` (strings such as
    ``"<|endoftext|>"``) get the ids after the merges and are never split."""

    def __init__(self, merges=(), special_tokens=(), pattern: str = SPLIT_PATTERN,
                 vocab_size: int | None = None):
        self.default_vocab_size = vocab_size   # for train(text) without one
        self.pattern = pattern
        self._split = re.compile(pattern)
        self.merges: dict[tuple[int, int], int] = {}
        self.vocab: dict[int, bytes] = {i: bytes([i]) for i in range(256)}
        for k, pair in enumerate(merges):
            a, b = (int(t) for t in pair)
            if not (0 <= a < 256 + k and 0 <= b < 256 + k):
                raise ValueError(f"merge {k} ({a}, {b}) uses a token that does "
                                 f"not exist yet (ids below {256 + k})")
            self.merges[(a, b)] = 256 + k
            self.vocab[256 + k] = self.vocab[a] + self.vocab[b]
        self.special_tokens: dict[str, int] = {}
        for s in special_tokens:
            _check_text("a special token", s)
            if not s or s in self.special_tokens:
                raise ValueError(f"special tokens must be distinct, non-empty "
                                 f"strings, got {s!r}")
            self.special_tokens[s] = len(self.vocab) + len(self.special_tokens)
        self._special_split = (re.compile("(" + "|".join(
            re.escape(s) for s in sorted(self.special_tokens, key=len,
                                         reverse=True)) + ")")
            if self.special_tokens else None)
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        """The number of ids: 256 bytes, one per merge, then the special
        tokens."""
        return len(self.vocab) + len(self.special_tokens)

    # ------------------------------------------------------------------ training

    @_train_method
    def train(cls, self, text: str, vocab_size: int | None = None,
              special_tokens=None, pattern: str | None = None,
              verbose: bool = False) -> BPETokenizer:
        """Learn ``vocab_size - 256 - len(special_tokens)`` merges from
        ``text``. Called on the class it returns a new tokenizer; called on
        a tokenizer it replaces that one's merges (keeping its special
        tokens, pattern and ``vocab_size`` unless given) and returns it.

        Each merge replaces the most frequent adjacent pair (ties: the pair
        of smaller ids) by a new token, counted over the pieces of
        the text weighted by how often each piece occurs. The counts are
        updated incrementally: a merge revisits only the pieces that hold
        the pair, so training does not recount the whole text every time."""
        _check_text("text", text)
        if self is not None:
            vocab_size = vocab_size or self.default_vocab_size
            special_tokens = (list(self.special_tokens) if special_tokens is None
                              else special_tokens)
            pattern = pattern or self.pattern
        special_tokens = tuple(special_tokens or ())
        pattern = pattern or SPLIT_PATTERN
        if vocab_size is None:
            raise TypeError("train() needs vocab_size (or a tokenizer built "
                            "with one)")
        vocab_size = check_int("vocab_size", vocab_size)
        n_special = len(special_tokens)
        if vocab_size < 256 + n_special:
            raise ValueError(f"vocab_size must be at least 256 (one token per "
                             f"byte) + {n_special} special tokens, got "
                             f"{vocab_size}")
        if not text:
            raise ValueError("text is empty: there is nothing to learn merges "
                             "from")
        split = re.compile(pattern)
        pieces = Counter(split.findall(text))
        words = [list(_to_bytes(p)) for p in pieces]   # each piece as ids
        freq = list(pieces.values())
        counts: Counter = Counter()                     # pair -> weighted count
        where: dict[tuple[int, int], set[int]] = {}     # pair -> pieces with it
        for w, ids in enumerate(words):
            for pair, c in _pairs(ids).items():
                counts[pair] += c * freq[w]
                where.setdefault(pair, set()).add(w)
        heap = [(-c, pair) for pair, c in counts.items()]
        heapq.heapify(heap)
        merges = []
        for k in range(vocab_size - 256 - n_special):
            while heap and -heap[0][0] != counts.get(heap[0][1], 0):
                heapq.heappop(heap)                     # a stale entry
            if not heap or -heap[0][0] < 1:
                break                                   # no pair left to merge
            _, pair = heapq.heappop(heap)
            new_id = 256 + k
            merges.append(pair)
            changed = set()
            for w in where.pop(pair, ()):
                old, new = words[w], merge_pair(words[w], pair, new_id)
                for p, c in _pairs(old).items():        # take the piece out ...
                    counts[p] -= c * freq[w]
                    changed.add(p)
                for p, c in _pairs(new).items():        # ... and put it back
                    counts[p] += c * freq[w]
                    where.setdefault(p, set()).add(w)
                    changed.add(p)
                words[w] = new
            counts.pop(pair, None)
            changed.discard(pair)
            for p in changed:            # new counts; old heap entries go stale
                if counts[p] > 0:
                    heapq.heappush(heap, (-counts[p], p))
            if verbose and (k + 1) % 100 == 0:
                print(f"merge {k + 1}: {pair} -> {new_id}")
        trained = cls(merges, special_tokens, pattern, vocab_size)
        if self is None:
            return trained
        self.__dict__.update(trained.__dict__)     # in place
        return self

    # ------------------------------------------------------------------ encoding

    def _encode_piece(self, piece: str) -> list[int]:
        ids = self._cache.get(piece)
        if ids is None:
            ids = list(_to_bytes(piece))
            while len(ids) > 1:
                # the earliest-learned merge among the adjacent pairs
                rank, pair = min((self.merges.get(p, 1 << 62), p)
                                 for p in zip(ids, ids[1:]))
                if rank == 1 << 62:
                    break
                ids = merge_pair(ids, pair, rank)
            self._cache[piece] = ids
        return ids

    def encode(self, text: str, allowed_special="none_raise") -> list[int]:
        """The ids of ``text``: split into pieces, each piece merged by rank
        (the earliest-learned merge among its adjacent pairs first, until
        none applies).

        ``allowed_special`` says what happens to a special token's text
        (``"<|endoftext|>"``) inside ``text``: ``"none_raise"`` (the default,
        as in tiktoken and minbpe) refuses it, so that text from a user or a
        document cannot smuggle in a control token; ``"all"`` encodes it as
        the special token; ``"none"`` encodes it as ordinary text; a set of
        special tokens' texts allows those and refuses the others."""
        _check_text("text", text)
        allowed = self._allowed(allowed_special)
        parts = (self._special_split.split(text) if self._special_split
                 else [text])
        out: list[int] = []
        for part in parts:
            if part in self.special_tokens:
                if part in allowed:
                    out.append(self.special_tokens[part])
                    continue
                if allowed_special != "none":
                    raise ValueError(
                        f"text contains the special token {part!r}; pass "
                        f"allowed_special='all' (or a set naming it) to encode "
                        f"it as the special token, or allowed_special='none' to "
                        f"encode it as ordinary text")
            for piece in self._split.findall(part):
                out.extend(self._encode_piece(piece))
        return out

    def _allowed(self, allowed_special) -> set:
        if allowed_special == "all":
            return set(self.special_tokens)
        if allowed_special in ("none", "none_raise"):
            return set()
        if isinstance(allowed_special, (set, frozenset, list, tuple)):
            unknown = [s for s in allowed_special if s not in self.special_tokens]
            if unknown:
                raise ValueError(f"allowed_special names {unknown}, which are not "
                                 f"special tokens of this tokenizer "
                                 f"({sorted(self.special_tokens)})")
            return set(allowed_special)
        raise ValueError(f"allowed_special must be 'none_raise', 'all', 'none' or "
                         f"a set of special tokens, got {allowed_special!r}")

    def decode(self, ids) -> str:
        """The text of ``ids`` (an inverse of :meth:`encode`). A sequence of
        ids that cuts a character's bytes apart decodes that character as
        U+FFFD."""
        ids = _check_ids(ids, self.vocab_size)
        special = {i: s for s, i in self.special_tokens.items()}
        out, chunk = [], bytearray()
        for i in ids:
            if i in special:
                out.append(_decode_bytes(chunk))
                out.append(special[i])
                chunk = bytearray()
            else:
                chunk += self.vocab[i]
        out.append(_decode_bytes(chunk))
        return "".join(out)

    def token_bytes(self, i: int) -> bytes:
        """The bytes token ``i`` stands for (special tokens: their UTF-8)."""
        check_int("i", i, minimum=0)
        for s, j in self.special_tokens.items():
            if i == j:
                return s.encode("utf-8")
        if i not in self.vocab:
            raise ValueError(f"token id {i} is outside the vocabulary "
                             f"[0, {self.vocab_size})")
        return self.vocab[i]

    # ------------------------------------------------------------------ files

    def save(self, path) -> None:
        """A JSON file a person can read: the split pattern, the special
        tokens, and each merge with the text of the token it makes."""
        merges = [[a, b] for (a, b) in self.merges]
        data = {"format": FORMAT, "type": "bpe", "pattern": self.pattern,
                "special_tokens": list(self.special_tokens),
                "merges": merges,
                "tokens": {str(i): self.vocab[i].decode("utf-8", "replace")
                           for i in range(256, len(self.vocab))}}
        Path(path).write_text(json.dumps(data, ensure_ascii=False, indent=1),
                              encoding="utf-8")

    @classmethod
    def load(cls, path) -> BPETokenizer:
        """The tokenizer :meth:`save` wrote to ``path``."""
        data = _read(path, "bpe")
        return cls(data["merges"], data["special_tokens"], data["pattern"])

    def __repr__(self) -> str:
        return (f"BPETokenizer(vocab_size={self.vocab_size}, "
                f"merges={len(self.merges)}, "
                f"special_tokens={list(self.special_tokens)})")


def _decode_bytes(chunk: bytes) -> str:
    """UTF-8 bytes to text; lone surrogates (from surrogatepass) come back
    as themselves, bytes that are no character anywhere as U+FFFD."""
    try:
        return bytes(chunk).decode("utf-8", errors="surrogatepass")
    except UnicodeDecodeError:
        return bytes(chunk).decode("utf-8", errors="replace")


__all__ = ["BPETokenizer", "CharTokenizer", "SPLIT_PATTERN", "merge_pair"]
