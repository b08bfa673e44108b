"""Chapter 6 (tokenization, data and training): the exercises, their test inputs, references, known
mistakes and hints.

Exercise 6.1 (``bpe_merges``) trains byte-pair encoding the slow way: the pieces start as their
byte values; each merge counts every adjacent pair within each piece (pairs never cross from one
piece to the next, overlapping pairs count, a repeated piece counts as often as it occurs), takes
the most frequent pair (ties: the smallest pair, as tuples compare), gives it the id ``256 + k``
and replaces it in every piece, left to right and without overlap; training stops early when no
piece holds a pair. The pieces are a list, which a function may change in place: a case stores
them as :func:`built` data (a list of bytes) and every call gets a fresh list. The answer is a
list of pairs: each pair may be a tuple or a list of two ints (NumPy integers and 0-d integer
tensors are read as ints), and the list may be a tuple; floats, bytes or tensors of pairs are
refused with what is wrong. A wrong answer whose pairs are lists is told its known mistake too
(the engine matches the mistakes on the output as returned, so ``diagnose`` matches them again on
the pairs read as tuples). The fixed cases come first, so that the first failing case (and the
message) never depends on the seed: runs of one byte (overlapping pairs), a pair frequent only
across pieces, a second merge that needs a recount, ties, ``n_merges = 0``, and a text whose
pieces run out of pairs; then random pieces over small random byte alphabets, so that pairs repeat.

Exercise 6.2 (``warmup_cosine``) is the learning rate of a linear warm-up followed by half a cosine
from ``max_lr`` down to ``min_lr`` at ``step = total`` (and ``min_lr`` after), steps counted from
1: the library's ``cosine_lr``. A number passes (an int, a NumPy float, a 0-d tensor), within
``rtol = 1e-9``. The fixed cases cover step 1, the end of the warm-up, the step after it, the
middle of the decay, ``total`` and after it, ``min_lr`` left to its default, and no warm-up at all
(``warmup = 0``: step 1 is already in the decay; ``cosine_lr`` never divides by ``warmup`` then,
since ``step <= warmup`` never holds).

Library answers: for 6.1, ``BPETokenizer`` (every function its class body defines) and
``merge_pair``; ``train`` is a descriptor that works on the class and on an instance, which the
engine does not open, so a call of it is caught through the ``__init__`` and ``merge_pair`` it
calls. For 6.2, ``cosine_lr`` and ``noam_lr``.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import partial

import torch

from tinyformer.course.engine import (
    _FOREIGN,
    Exercise,
    _fresh,
    built,
    describe,
    register,
    register_builder,
    safe_diagnosis,
)
from tinyformer.course.engine import randint as _randint
from tinyformer.training import cosine_lr

CHAPTER = "06-training"
F64 = torch.float64


def _uniform(g: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * torch.rand(1, generator=g, dtype=F64).item()


# --------------------------------------------------------------------------- 6.1 byte-pair encoding


def _build_pieces(pieces: list) -> list[bytes]:
    return [bytes(p) for p in pieces]


register_builder("list of bytes", _build_pieces)


def _pieces(*texts: str | bytes) -> dict:
    """A case item: the pieces (str encoded as UTF-8), a fresh list for every call."""
    return built("list of bytes", pieces=[t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in texts])


def _bpe_cases(g):
    """(pieces, n_merges), fixed first, so that the first failing case never depends on the seed:

    0. runs of one byte, "aaa" twice and "aaaa", and "ab" five times: (97, 97), 7 times, is the
       most frequent pair only when overlapping pairs count (4 times without), and its merge must
       not overlap ([97, 97, 97] -> [256, 97]); 4 merges.
    1. "xa" "by" "xa" "bz" "xa" "bw" "ab": (97, 98), "a" then "b", is frequent across the pieces
       (three times) but occurs once within one; 3 merges.
    2. "abc" three times and "bd": (97, 98) first, then (256, 99), which only a recount finds
       ((98, 99) is gone); 3 merges.
    3. "mn" "zy" "ba", twice each: every pair occurs twice, a tie that the smallest pair (98, 97)
       wins, not the first counted (109, 110) nor the largest (122, 121); 3 merges.
    4. n_merges = 0: no merge.
    5. " hello", " hi", " hello", " ha": the pieces run out of pairs after 7 merges of the 20 asked.
    6. bytes 12 1 2, 2 1, 2 1: merging by str.replace on the ids written out ("12 1 2" holds "2 1"
       across the boundary of 12 and 1) gives (1256, 2) as merge 2 where the pairs give (1, 2); 3 merges.
    7. "abab" three times and "ba" twice: (97, 98) occurs 6 times, (98, 97) 5; counted once per piece
       (a set of each piece's pairs) (97, 98) has 3 and loses, and a padded str.replace merges only
       one of the two in "abab" (" 97 98 97 98 " -> " 256 97 98 "); 2 merges.

    Then four random ones: 4-12 pieces of 1-7 bytes over a random alphabet of 2-4 byte values
    (a space in front of some), 1-10 merges.
    """
    cases = [
        (_pieces("aaa", "ab", "aaa", "ab", "ab", "aaaa", "ab", "ab"), 4),
        (_pieces("xa", "by", "xa", "bz", "xa", "bw", "ab"), 3),
        (_pieces("abc", "abc", "bd", "abc"), 3),
        (_pieces("mn", "zy", "ba", "mn", "zy", "ba"), 3),
        (_pieces(" the", " cat", " the"), 0),
        (_pieces(" hello", " hi", " hello", " ha"), 20),
        (_pieces(b"\x0c\x01\x02", b"\x02\x01", b"\x02\x01"), 3),
        (_pieces("abab", "abab", "abab", "ba", "ba"), 2),
    ]
    for _ in range(4):
        size = _randint(g, 2, 4)
        alphabet = torch.randperm(256, generator=g)[:size].tolist()
        pieces = []
        for _ in range(_randint(g, 4, 12)):
            body = [alphabet[_randint(g, 0, size - 1)] for _ in range(_randint(g, 1, 7))]
            pieces.append(bytes(([32] if _randint(g, 0, 2) == 0 else []) + body))
        cases.append((_pieces(*pieces), _randint(g, 1, 10)))
    return cases


def _merge(ids: list[int], pair: tuple[int, int], new_id: int, drop_last: bool = False) -> list[int]:
    """``ids`` with ``pair`` replaced by ``new_id``, left to right, never overlapping. drop_last: the
    slip ``while i < len(ids) - 1``, which loses a last id that no match took."""
    out, i = [], 0
    while i < len(ids) - drop_last:
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _pair_counts(words: list[list[int]]) -> Counter:
    """Every adjacent pair within each piece, counted (overlapping pairs too)."""
    counts: Counter = Counter()
    for ids in words:
        counts.update(zip(ids, ids[1:]))
    return counts


def bpe_merges_reference(pieces, n_merges: int) -> list[tuple[int, int]]:
    """The slow way: recount every pair after each merge. It also takes the pieces as a case
    stores them (built data), so that it can be called on a case directly."""
    words = [list(p) for p in _fresh(pieces)]
    merges = []
    for k in range(n_merges):
        counts = _pair_counts(words)
        if not counts:
            break                                            # no piece holds a pair any more
        pair = min(counts, key=lambda p: (-counts[p], p))    # the most frequent; ties: the smallest
        merges.append(pair)
        words = [_merge(ids, pair, 256 + k) for ids in words]
    return merges


def _overlapping_merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Every position that starts the pair becomes new_id, and an id that ends a match is dropped
    unless it also starts one: [97, 97, 97] with (97, 97) -> [256, 256]."""
    starts = [i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair for i in range(len(ids))]
    out = []
    for i, x in enumerate(ids):
        if starts[i]:
            out.append(new_id)
        elif not (i > 0 and starts[i - 1]):
            out.append(x)
    return out


def _non_overlapping_count(ids: list[int], pair: tuple[int, int]) -> int:
    """How often ``pair`` occurs in ``ids`` without overlap, as str.count counts."""
    n, i = 0, 0
    while i + 1 < len(ids):
        if (ids[i], ids[i + 1]) == pair:
            n, i = n + 1, i + 2
        else:
            i += 1
    return n


def _keep_second_merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """The first id of each match replaced, the second kept (i += 1 after a match):
    [97, 98] with (97, 98) -> [256, 98]."""
    return [new_id if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair else x for i, x in enumerate(ids)]


def _string_merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """d2l's merge_symbols: the ids written as a string, the pair replaced as a substring, so that
    "12 1 2" with (2, 1) becomes "1256 2" (the 2 that ends 12 taken for a token)."""
    text = " ".join(map(str, ids)).replace(f"{pair[0]} {pair[1]}", str(new_id))
    return [int(t) for t in text.split()]


def _padded_string_merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """str.replace on the ids written out with a space on each side, so that "12 1" no longer holds
    " 2 1 ": each match consumes the space the next one needs (" 97 97 97 97 " -> " 256 97 97 ")."""
    text = f" {' '.join(map(str, ids))} ".replace(f" {pair[0]} {pair[1]} ", f" {new_id} ")
    return [int(t) for t in text.split()]


def _first_only_merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Only the first occurrence of ``pair`` in the piece replaced."""
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            return ids[:i] + [new_id] + ids[i + 2:]
    return list(ids)


def _right_to_left_merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """The piece scanned from its end: [97, 97, 97] with (97, 97) -> [97, 256]."""
    return _merge(ids[::-1], pair[::-1], new_id)[::-1]


def _last_appended_merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """``while i < len(ids) - 1`` and then the last id appended whatever happened to it: a pair that
    ends the piece leaves its second id behind ([99, 97, 98] with (97, 98) -> [99, 256, 98])."""
    out = _merge(ids, pair, new_id, drop_last=True)
    return out + ids[-1:]


def _bpe(*, join=False, repeats=True, count="overlapping", merge="right", recount=True, tie="smallest",
         first_id=256, update=True, stale=False, least=1):
    """BPE training with the mistakes named by the keywords; the defaults are right.

    join: the pieces joined into one sequence (pairs counted and merged across them). repeats:
    False counts each distinct piece once. count: "overlapping" (right), "non-overlapping"
    ((97, 97) once in [97, 97, 97]) or "once per piece" (a set of each piece's pairs). (Pairs counted
    over the pieces joined but merged within each are told by _only_across: what such a training
    returns depends on how it stores its merges.) merge: "right" or "overlapping" ([97, 97, 97] -> [256, 256]).
    recount: False counts once and takes the n_merges most frequent pairs. tie: "smallest"
    (right), "largest" or "first" (the first pair counted among the most frequent, as
    Counter.most_common and max(counts, key=counts.get) give). first_id: the first new id. merge may
    also be "keep second" ([97, 98] -> [256, 98]), "string" (d2l's str.replace on the ids joined by
    spaces), "padded string" (the same with a space on each side) or "drop last" (a piece's last id
    lost); update: False leaves the pieces as they were.
    stale: the pairs counted once, then after each merge the merged pair deleted and the new id's
    pairs added, the neighbours' old pairs never taken away. merge may further be "first only",
    "right to left" or "last appended" (the loop stops before the last id, which is then appended
    whatever the loop did with it). least: stop when the most frequent pair occurs fewer times.
    """
    def wrong(pieces, n_merges):
        pieces = list(_fresh(pieces))
        if not repeats:
            pieces = list(dict.fromkeys(pieces))
        words = [list(b"".join(pieces))] if join else [list(p) for p in pieces]

        def counted() -> Counter:
            counts = _pair_counts(words)
            if count == "once per piece":
                counts = Counter(p for ids in words for p in set(zip(ids, ids[1:])))
            if count == "non-overlapping":
                counts = Counter({p: sum(_non_overlapping_count(ids, p) for ids in words) for p in counts})
            return counts

        def best(counts: Counter):
            if tie == "largest":
                return max(counts, key=lambda p: (counts[p], p))
            if tie == "first":
                return max(counts, key=counts.get)
            return min(counts, key=lambda p: (-counts[p], p))

        if not recount:
            counts = counted()
            return sorted(counts, key=lambda p: (-counts[p], p))[:n_merges]
        merges = []
        counts = counted()
        for k in range(n_merges):
            if not stale:
                counts = counted()
            counts = +counts                        # drop the pairs counted down to nothing
            if not counts or max(counts.values()) < least:
                break
            pair = best(counts)
            merges.append(pair)
            step = {"overlapping": _overlapping_merge, "keep second": _keep_second_merge,
                    "string": _string_merge, "padded string": _padded_string_merge,
                    "first only": _first_only_merge, "right to left": _right_to_left_merge,
                    "last appended": _last_appended_merge,
                    "drop last": partial(_merge, drop_last=True)}.get(merge, _merge)
            if update:
                words = [step(ids, pair, first_id + k) for ids in words]
            if stale:
                del counts[pair]
                for ids in words:
                    counts.update(p for p in zip(ids, ids[1:]) if first_id + k in p)
        return merges
    return wrong


BPE_ACROSS = ("pairs never cross from one piece to the next: count (and merge) the adjacent pairs within each "
              "piece. Yours joined the pieces into one sequence, so the last byte of a piece and the first of the "
              "next made a pair.")
BPE_OVERLAP_MERGE = ("merges never overlap: scan each piece left to right and, after replacing a pair, skip both "
                     "of its ids (i += 2), so that [97, 97, 97] with (97, 97) becomes [256, 97]. Yours let the "
                     "middle 97 serve in two merges ([256, 256]).")
BPE_KEEP_SECOND = ("a merge replaces BOTH ids of the pair by the new one: after a match, append 256 + k and skip "
                   "two ids (i += 2). Yours moved on by one (i += 1), so the pair's second id stayed in the "
                   "piece: [97, 98] became [256, 98] instead of [256].")
BPE_NOT_UPDATED = ("your pieces never change: after choosing a pair, replace it in every piece and keep the "
                   "result (words[w] = new_ids, or words = [... for ids in words]); rebinding the loop variable "
                   "(ids = new_ids) changes nothing. So you counted the same bytes again and chose merge 1's pair "
                   "again.")
BPE_OVERLAP_COUNT = ("overlapping pairs count: [97, 97, 97] holds (97, 97) twice, at positions 0-1 and 1-2, so "
                     "count every adjacent pair, zip(ids, ids[1:]). Yours counted it once, skipping as a merge "
                     "does (or as str.count and bytes.count do).")
BPE_NO_RECOUNT = ("count the pairs again after every merge: a merge removes the merged pair and makes new pairs "
                  "with its new id, which later merges may take. Yours counted once and took the n_merges most "
                  "frequent pairs of the bytes.")
BPE_TIE_LARGEST = ("ties go to the SMALLEST pair, as tuples compare: (98, 97) before (100, 99). Yours took the "
                   "largest: use min(counts, key=lambda p: (-counts[p], p)).")
BPE_TIE_FIRST = ("ties go to the smallest pair, not to the first one counted: Counter.most_common and "
                 "max(counts, key=counts.get) return the first of equal counts. Use min(counts, key=lambda p: "
                 "(-counts[p], p)).")
BPE_ID_255 = ("the first merge makes token 256 (ids 0-255 are the bytes, so 255 is taken), the k-th merge 256 + k "
              "for k from 0: yours start at 255.")
BPE_ID_257 = ("the first merge makes token 256, the k-th merge 256 + k for k from 0: yours start at 257 (256 + k "
              "with k counted from 1?).")
BPE_UNWEIGHTED = ("a piece that occurs several times counts that many times: count the pairs of every piece in "
                  "the list, repeats included. Yours counted each distinct piece once (a set or a dict of the "
                  "pieces?).")
BPE_STRING = ("merge token ids, not digits in a string: joining the ids with spaces and calling str.replace (as "
              "d2l's merge_symbols does) also matches across a token boundary. With pieces [12, 1, 2] and the "
              "pair (2, 1), \"12 1 2\".replace(\"2 1\", \"256\") gives \"1256 2\": the 2 that ends 12 was taken for "
              "a token. Scan the list of ints and compare (ids[i], ids[i + 1]) with the pair.")
BPE_PADDED_STRING = ("a space on each side of the pair stops str.replace from matching across a token boundary, but "
                     "each match then uses up the space the next one needs: \" 97 97 97 97 \".replace(\" 97 97 \", "
                     "\" 256 \") gives \" 256 97 97 \", not \" 256 256 \". Scan the list of ints and compare (ids[i], "
                     "ids[i + 1]) with the pair.")
BPE_ONCE_PER_PIECE = ("a pair that occurs twice in a piece counts twice: [97, 98, 97, 98] holds (97, 98) two times. "
                      "Yours counted each pair once per piece (a set of the piece's pairs?): count every adjacent "
                      "pair, counts.update(zip(ids, ids[1:])).")
BPE_COUNT_ACROSS = ("count the pairs within each piece, as you merge them: yours counted over the pieces joined "
                    "together, so the last byte of one piece and the first of the next made a pair that no piece "
                    "holds, and merging it changed nothing.")
BPE_FIRST_ONLY = ("a merge replaces EVERY occurrence of the pair in every piece, left to right: yours replaced only "
                  "the first in each piece (a break after the first match?).")
BPE_RIGHT_TO_LEFT = ("scan each piece left to right: in [97, 97, 97] the pair (97, 97) is taken at positions 0-1, "
                     "giving [256, 97]; yours scanned from the right and made [97, 256].")
BPE_LAST_APPENDED = ("after the loop you append the piece's last id every time, but when the last two ids were just "
                     "merged it is already inside the new token: [99, 97, 98] with (97, 98) must give [99, 256], not "
                     "[99, 256, 98]. Loop while i < len(ids), or append ids[-1] only when the loop stopped at "
                     "i == len(ids) - 1.")
BPE_STOP_AT_ONE = ("keep merging while any pair is left, even one that occurs once: stop only when no piece holds a "
                   "pair (or after n_merges). Yours stopped when the most frequent pair occurred only once.")
BPE_DROP_LAST = ("your merge loses a piece's last id: a loop `while i < len(ids) - 1` stops before the last "
                 "position, so an id that no match took is never appended. Loop while i < len(ids) and test "
                 "i + 1 < len(ids) before reading ids[i + 1].")
BPE_STALE = ("your counts are stale: a merge also removes the pairs its two ids made with their neighbours "
             "((a, x) and (y, b) around x y), and yours kept counting those. Count the pairs again after every "
             "merge (or subtract the pairs of each changed piece before adding its new ones).")
BPE_BYTES_PAIRS = ("your pairs hold bytes: a merge is a pair of token ids, ints such as (97, 98) for b'a' and "
                   "b'b' (a new token, 256 or more, has no single byte).")
BPE_GENERIC = ("start each piece as list(piece), its byte values; for k = 0 … n_merges - 1: count the adjacent "
               "pairs within every piece (overlapping pairs too, repeated pieces as often as they occur), stop if "
               "there are none, take the most frequent pair (ties: the smallest), record it, and replace it in "
               "every piece by 256 + k, left to right and without overlap.")

BPE_MISTAKES = [
    (_bpe(join=True), BPE_ACROSS),
    (_bpe(merge="overlapping"), BPE_OVERLAP_MERGE),
    (_bpe(merge="keep second"), BPE_KEEP_SECOND),
    (_bpe(update=False), BPE_NOT_UPDATED),
    (_bpe(count="non-overlapping"), BPE_OVERLAP_COUNT),
    (_bpe(recount=False), BPE_NO_RECOUNT),
    (_bpe(tie="largest"), BPE_TIE_LARGEST),
    (_bpe(tie="first"), BPE_TIE_FIRST),
    (_bpe(first_id=255), BPE_ID_255),
    (_bpe(first_id=257), BPE_ID_257),
    (_bpe(repeats=False), BPE_UNWEIGHTED),
    (_bpe(merge="string"), BPE_STRING),
    (_bpe(merge="padded string"), BPE_PADDED_STRING),
    (_bpe(count="once per piece"), BPE_ONCE_PER_PIECE),
    (_bpe(merge="first only"), BPE_FIRST_ONLY),
    (_bpe(merge="right to left"), BPE_RIGHT_TO_LEFT),
    (_bpe(merge="last appended"), BPE_LAST_APPENDED),
    (_bpe(least=2), BPE_STOP_AT_ONE),
    (_bpe(merge="drop last"), BPE_DROP_LAST),
    (_bpe(stale=True), BPE_STALE),
]


class _Unread(Exception):
    """An answer that is not a list of pairs of ints; the message says what it is."""


def _token_id(x) -> int:
    if type(x) is int:
        return x
    if (isinstance(x, torch.Tensor) and x.dim() == 0 and not x.dtype.is_floating_point and not x.dtype.is_complex
            and x.dtype != torch.bool):
        return int(x.item())
    if isinstance(x, (bytes, bytearray)) or (isinstance(x, dict) and x.get(_FOREIGN) in ("bytes", "bytearray")):
        raise _Unread(f"wrong output. Hint: {BPE_BYTES_PAIRS}")     # (bytes come back from the sandbox described)
    raise _Unread(f"your pairs hold {describe(x)}: a merge is a pair of two token ids, ints such as (97, 98).")


def _read_pairs(out) -> list[tuple[int, int]]:
    """``out`` as a list of (int, int) tuples, or _Unread saying what it is instead."""
    if out is None:
        raise _Unread("returned None; did you forget the `return` line?")
    if not isinstance(out, (list, tuple)):
        said = f"returned {describe(out)}; return the merged pairs, a list of (a, b) tuples of ints"
        if isinstance(out, dict) and out.get(_FOREIGN) == "dict":
            said += " (list(merges) gives the keys of a dict {pair: new id}, in the order they were added)"
        raise _Unread(f"{said}.")
    pairs = []
    for item in out:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise _Unread(f"your list holds {describe(item)}: each merge is a pair (a, b) of the two token ids "
                          f"merged, e.g. (97, 98).")
        pairs.append((_token_id(item[0]), _token_id(item[1])))
    return pairs


def _same_pairs(case, out, ref) -> bool:
    try:
        return _read_pairs(out) == ref
    except _Unread:
        return False


def _shown(pieces: list[bytes], most: int = 8) -> str:
    shown = ", ".join(repr(p) for p in pieces[:most])
    return f"[{shown}]" if len(pieces) <= most else f"[{shown}, …] ({len(pieces)} pieces)"


def _first_difference(case, pairs: list, ref: list) -> str:
    """Where ``pairs`` parts from the reference's merges on ``case``, said with the counts then."""
    pieces, n_merges = _fresh(case[0]), case[1]
    said = f"for pieces = {_shown(pieces)} and n_merges = {n_merges}"
    j = next((i for i, (a, b) in enumerate(zip(pairs, ref)) if a != b), min(len(pairs), len(ref)))
    words = [list(p) for p in pieces]
    for k, pair in enumerate(ref[:j]):
        words = [_merge(ids, pair, 256 + k) for ids in words]
    counts = _pair_counts(words)
    if j == len(ref):
        if len(ref) == n_merges:
            return f"{said}, you returned {len(pairs)} merges; n_merges = {n_merges} asks for {n_merges}"
        return (f"{said}, you returned {len(pairs)} merges, but after {len(ref)} no piece holds a pair any more: "
                f"stop there")
    want, c = ref[j], counts[ref[j]]
    if j == len(pairs):
        return (f"{said}, you stopped after {len(pairs)} merges, but the pieces still hold pairs: merge {j + 1} is "
                f"{want}, which occurs {_times(c)}")
    got, d = pairs[j], counts.get(pairs[j], 0)
    yours = ("which no piece holds then" if d == 0 else f"which occurs {_times(d)} too, a tie: ties go to the "
             f"smaller pair" if d == c else f"which occurs {_times(d)}")
    return f"{said}, merge {j + 1} is {want}, which occurs {_times(c)}; yours is {got}, {yours}"


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _diagnose_bpe(cases, outputs, refs):
    try:
        read = [_read_pairs(o) for o in outputs]
    except _Unread as unread:
        return str(unread)
    for wrong, hint in BPE_MISTAKES:       # the same mistakes, on pairs returned as lists
        if all(wrong(*(_fresh(a) for a in case)) == pairs for case, pairs in zip(cases, read)):
            return f"wrong output. Hint: {hint}"
    for case, pairs, ref in zip(cases, read, refs):
        if pairs != ref:
            hint = BPE_COUNT_ACROSS if _only_across(case, pairs, ref) else BPE_GENERIC
            return f"{_first_difference(case, pairs, ref)}. Hint: {hint}"
    return None


def _only_across(case, pairs: list, ref: list) -> bool:
    """Is the first pair that parts from the reference held by no piece, but made by the last id of one
    piece and the first of the next (pairs counted over the pieces joined, whatever the merging did)?"""
    j = next((i for i, (a, b) in enumerate(zip(pairs, ref)) if a != b), None)
    if j is None:
        return False
    words = [list(p) for p in _fresh(case[0])]
    for k, pair in enumerate(ref[:j]):
        words = [_merge(ids, pair, 256 + k) for ids in words]
    joined = [i for ids in words for i in ids]
    return _pair_counts(words)[pairs[j]] == 0 and pairs[j] in set(zip(joined, joined[1:]))


register(Exercise(
    name="bpe_merges", number="6.1", function="bpe_merges", chapter=CHAPTER,
    args=("pieces", "n_merges"),
    library_answers=("tinyformer.tokenizers.BPETokenizer", "tinyformer.tokenizers.merge_pair",
                     "tinyformer.tokenizers._pairs"),
    make_cases=_bpe_cases, reference=bpe_merges_reference,
    returns="the merged pairs, in order: a list of (a, b) tuples of ints",
    rtol=0.0, atol=0.0, compare=_same_pairs,
    mistakes=BPE_MISTAKES,
    error_hints=[
        (TypeError, r"'bytes' object does not support item assignment|can't concat list to bytes|"
                    r"can only concatenate list \(not \"bytes\"\) to list",
         "a piece is bytes, which cannot hold a new id (256 or more) nor be changed: start each piece as a list of "
         "its byte values, list(piece), and build a new list when you merge."),
        (ValueError, r"bytes must be in range\(0, 256\)",
         "a merged token's id (256 + k) does not fit in a byte: keep each piece as a list of ints, list(piece), "
         "not as bytes."),
        (TypeError, r"unhashable type: 'list'",
         "a pair must be hashable to be counted: use a tuple, (ids[i], ids[i + 1]) or zip(ids, ids[1:]), not a "
         "list or a slice of the list."),
        (AttributeError, r"'bytes' object has no attribute 'encode'",
         "the pieces are bytes already (the text encoded as UTF-8): list(piece) gives their byte values, with "
         "nothing to encode."),
        (ValueError, r"(max|min)\(\) (arg is an empty sequence|iterable argument is empty)",
         "stop early when no piece holds a pair: the counts are then empty (the pieces are single tokens), so "
         "check `if not counts: break` before taking the most frequent pair."),
        (TypeError, r"'[<>]' not supported between instances of '(str|int)' and '(int|str)'",
         "your pieces hold characters (str) beside the new ids (ints): a piece is bytes, and list(piece) gives "
         "its byte values, ints; do not decode it."),
        (IndexError, r"list index out of range",
         "an index ran past the end of a list: when merging, test i + 1 < len(ids) before reading ids[i + 1]; and "
         "when no piece holds a pair, Counter.most_common(1) is empty, so stop before taking [0]."),
    ],
    diagnose=safe_diagnosis(_diagnose_bpe), diagnose_hints=(BPE_BYTES_PAIRS, BPE_COUNT_ACROSS),
    generic_hint=BPE_GENERIC,
))


# --------------------------------------------------------------------------- 6.2 warm-up and cosine decay


def warmup_cosine_reference(step: int, max_lr: float, warmup: int, total: int, min_lr: float = 0.0) -> float:
    return cosine_lr(step, max_lr, warmup, total, min_lr)


SCHEDULE = (6e-4, 10, 100, 6e-5)       # max_lr, warmup, total, min_lr: nanoGPT's, min_lr = max_lr / 10


def _lr_cases(g):
    """(step, max_lr, warmup, total[, min_lr]), fixed first (max_lr 6e-4, warmup 10, total 100, min_lr
    6e-5 unless said), so that the first failing case never depends on the seed:

    0. step 1, the first step of the warm-up: max_lr / warmup.
    1. step 10 = warmup: max_lr.
    2. step 11, the first step of the decay.
    3. step 55, the middle of the decay: (max_lr + min_lr) / 2.
    4. step 100 = total: min_lr.
    5. step 130, after total: min_lr.
    6. max_lr 3e-3, warmup 20, total 60, min_lr left to its default (0.0): step 5 and step 47.
    7. warmup = 0 (no warm-up), max_lr 1e-3, total 50, min_lr 1e-4: step 1 is already in the decay.
    8. step 95, near the end of the decay: the cosine part, ½ (max_lr - min_lr)(1 + cos), is below
       min_lr there, which tells a floor taken with max() from a cosine that ends at min_lr.
    9. step 2 of the warm-up with min_lr 1.5e-4 above its rate, 1.2e-4: a floor of min_lr laid
       over the whole schedule shows there (in case 0, max_lr / warmup equals min_lr).

    Then four random ones: max_lr 1e-4-1e-2, warmup 0-50, total warmup + 10 to warmup + 400,
    step 1 to total + 30, min_lr 0 or up to max_lr / 5.
    """
    max_lr, warmup, total, min_lr = SCHEDULE
    cases = [(step, max_lr, warmup, total, min_lr) for step in (1, 10, 11, 55, 100, 130)]
    cases += [(5, 3e-3, 20, 60), (47, 3e-3, 20, 60), (1, 1e-3, 0, 50, 1e-4), (95, max_lr, warmup, total, min_lr),
              (2, max_lr, warmup, total, 1.5e-4)]
    for _ in range(4):
        max_lr = 10 ** _uniform(g, -4, -2)
        warmup = _randint(g, 0, 50)
        total = warmup + _randint(g, 10, 400)
        min_lr = 0.0 if _randint(g, 0, 2) == 0 else max_lr * _uniform(g, 0.0, 0.2)
        cases.append((_randint(g, 1, total + 30), max_lr, warmup, total, min_lr))
    return cases


def _lr(*, warm="linear", shift=0, decay_shift=0, progress="after warmup", shape="half cosine", floor="right",
        clamp=True, returns="lr", floored=False):
    """The schedule with the mistakes named by the keywords; the defaults are right.

    warm: "linear" (right), "from 0" (max_lr·(step - 1)/warmup), "none" (max_lr throughout), "sqrt"
    (max_lr·√(step/warmup)) or "nanogpt" (max_lr·(step + 1)/(warmup + 1), nanoGPT's, whose steps count
    from 0). shift: the whole schedule evaluated at step - shift. decay_shift: the
    decay's progress counted from step - decay_shift. progress: "after warmup" (right), "whole run"
    (step / total), "over total" ((step - warmup) / total) or "both minus one" ((step - warmup - 1) /
    (total - warmup - 1)). shape: "half cosine" (right), "full cosine" (cos 2π·progress), "no pi" (cos
    progress), "linear", "noam" (max_lr·√(warmup/step)) or "rising" (1 - cos). floor: "right", "zero"
    (min_lr ignored), "cosine only" (min_lr ignored in the cosine, returned after total), "added"
    (min_lr + ½·max_lr·(1 + cos)) or "max" (max(min_lr, ½·max_lr·(1 + cos))). clamp: min_lr after total.
    returns: "lr" or "factor" (lr / max_lr). floored: max(min_lr, ·) over the whole schedule, the
    warm-up included.
    """
    def wrong(step, max_lr, warmup, total, min_lr=0.0):
        step -= shift
        low = 0.0 if floor in ("zero", "cosine only", "max") else min_lr
        if warmup > 0 and step <= warmup:
            lr = {"linear": max_lr * step / warmup, "from 0": max_lr * (step - 1) / warmup, "none": max_lr,
                  "sqrt": max_lr * math.sqrt(max(step, 0) / warmup),
                  "nanogpt": max_lr * (step + 1) / (warmup + 1)}[warm]
        elif clamp and step >= total:
            lr = min_lr if floor in ("cosine only", "max") else low
        else:
            p = {"after warmup": (step - decay_shift - warmup) / (total - warmup), "whole run": step / total,
                 "over total": (step - warmup) / total,
                 "both minus one": (step - warmup - 1) / max(total - warmup - 1, 1)}[progress]
            if shape == "noam":
                lr = max_lr * math.sqrt(warmup / step) if step > 0 else max_lr
            elif shape == "linear":
                lr = max_lr - (max_lr - low) * p
            else:
                cosine = math.cos(p if shape == "no pi" else (2 if shape == "full cosine" else 1) * math.pi * p)
                cosine = -cosine if shape == "rising" else cosine
                lr = low + 0.5 * (max_lr if floor == "added" else max_lr - low) * (1 + cosine)
                lr = max(min_lr, lr) if floor == "max" else lr
        lr = max(min_lr, lr) if floored else lr
        return lr / max_lr if returns == "factor" else lr
    return wrong


LR_WARM_FROM_0 = ("the warm-up counts steps from 1: step 1 already gets max_lr / warmup and step = warmup gets "
                  "max_lr, so lr = max_lr · step / warmup. Yours is max_lr · (step - 1) / warmup (0 at step 1).")
LR_DECAY_LATE = ("the decay starts right after the warm-up: progress = (step - warmup) / (total - warmup), so step "
                 "warmup + 1 is already below max_lr. Yours counts the decay from step - 1 and keeps max_lr one "
                 "step too long.")
LR_DECAY_LATE_SHORT = ("the decay starts right after the warm-up: progress = (step - warmup) / (total - warmup), "
                       "so step warmup + 1 is already below max_lr. Yours subtracts 1 from both, (step - warmup - "
                       "1) / (total - warmup - 1), which keeps max_lr one step too long and squeezes the decay.")
LR_TORCH_SEQUENTIAL = ("yours runs as torch's SequentialLR of a LinearLR and a CosineAnnealingLR does: the cosine "
                       "gives max_lr on its own first step, one step after the warm-up's last (here step warmup + "
                       "1 is already below max_lr, progress = (step - warmup) / (total - warmup)), and it goes on "
                       "past total, rising again, where this schedule stays at min_lr. Write the formula, or shift "
                       "torch's schedulers by one step and clamp at total.")
LR_SHIFTED = ("your whole schedule runs one step late, as if steps counted from 0: step 1 gets max_lr / warmup, "
              "step = warmup max_lr and step = total min_lr. Use step as it is given, not step - 1.")
LR_NO_WARMUP = ("there is no warm-up in yours: during the first warmup steps the rate grows linearly, "
                "max_lr · step / warmup, from max_lr / warmup at step 1 to max_lr at step = warmup.")
LR_SQRT_WARMUP = ("the warm-up is linear, max_lr · step / warmup: yours grows like max_lr · √(step / warmup), too "
                  "fast at first.")
LR_NANOGPT = ("yours is nanoGPT's warm-up, max_lr · (it + 1) / (warmup + 1), written for steps counted from 0 "
             "(it = 0 is the first). Here steps count from 1: step 1 gets max_lr / warmup and step = warmup "
             "gets max_lr, so lr = max_lr · step / warmup.")
LR_WHOLE_RUN = ("the cosine starts after the warm-up: progress = (step - warmup) / (total - warmup), 0 at the end "
                "of the warm-up and 1 at total. Yours is step / total, so the decay does not start from max_lr.")
LR_NO_MIN = ("the decay ends at min_lr, not at 0: lr = min_lr + ½ (max_lr - min_lr)(1 + cos(π · progress)), and "
             "min_lr after total. Yours ignores min_lr.")
LR_MIN_IN_COSINE = ("the cosine decays to min_lr, not to 0: lr = min_lr + ½ (max_lr - min_lr)(1 + cos(π · "
                    "progress)). Yours returns min_lr after total but leaves it out of the cosine, so the rate "
                    "drops to 0 just before total and jumps back up to min_lr.")
LR_RISING = ("your decay rises: ½ (1 + cos(π · progress)) goes from 1 at progress 0 down to 0 at progress 1; "
             "yours uses 1 - cos (or -cos), which goes from 0 up to 1.")
LR_MIN_ADDED = ("the cosine spans max_lr - min_lr: lr = min_lr + ½ (max_lr - min_lr)(1 + cos(π · progress)). Yours "
                "adds min_lr to ½ max_lr (1 + cos), so the decay starts at max_lr + min_lr.")
LR_NO_PI = ("the cosine's argument is π · progress, so that it falls from cos 0 = 1 to cos π = -1 over the decay. "
            "Yours is cos(progress), without π: it only falls to cos 1 ≈ 0.54, so the rate hardly decays before it "
            "drops to min_lr at total.")
LR_OVER_TOTAL = ("progress counts the decay's steps out of the decay's length: (step - warmup) / (total - warmup), "
                 "0 after the warm-up and 1 at total. Yours divides by total, so the cosine is not finished at total "
                 "and the rate drops to min_lr there all at once.")
LR_MAX_FLOOR = ("min_lr is where the cosine ends, not a floor under a cosine that ends at 0: lr = min_lr + ½ "
                "(max_lr - min_lr)(1 + cos(π · progress)). Yours, max(min_lr, ½ max_lr (1 + cos(π · progress))), "
                "falls faster and lies flat at min_lr before the end of the decay.")
LR_FLOORED = ("min_lr is the floor of the decay, not of the warm-up: the warm-up starts at max_lr / warmup and "
              "climbs from there even when that is below min_lr. Yours applies the floor in the warm-up too, so its "
              "first steps start at min_lr.")
LR_FULL_COSINE = ("half a cosine, cos(π · progress), goes from max_lr down to min_lr once: yours is a full "
                  "period, cos(2π · progress), which comes back up to max_lr at total.")
LR_NO_CLAMP = ("after total the rate stays at min_lr: yours goes on with the cosine past progress 1, so it rises "
               "again. Return min_lr for step >= total.")
LR_NOAM = ("after the warm-up you decay like 1/√step, the Noam schedule (max_lr · √(warmup / step)): this schedule "
           "is half a cosine, from max_lr at step = warmup down to min_lr at step = total.")
LR_LINEAR = ("yours decays linearly from max_lr to min_lr: the decay is half a cosine, min_lr + ½ (max_lr - "
             "min_lr)(1 + cos(π · progress)), flat at both ends.")
LR_FACTOR = ("you returned the multiplier of max_lr (lr / max_lr, what torch's LambdaLR wants): return the "
             "learning rate itself.")
LR_FLOAT32 = ("your rates are float32 numbers, about 7 digits right: torch.tensor(...) of a Python float is "
              "float32, and so is torch.cos of it. Compute with Python floats and math.cos (or dtype=torch.float64).")
LR_GENERIC = ("for step <= warmup: max_lr · step / warmup; for step >= total: min_lr; in between, with progress = "
              "(step - warmup) / (total - warmup): min_lr + ½ (max_lr - min_lr)(1 + cos(π · progress)).")

LR_MISTAKES = [
    (_lr(warm="from 0"), LR_WARM_FROM_0),
    (_lr(decay_shift=1), LR_DECAY_LATE),
    (_lr(progress="both minus one"), LR_DECAY_LATE_SHORT),
    (_lr(decay_shift=1, clamp=False), LR_TORCH_SEQUENTIAL),
    (_lr(shift=1), LR_SHIFTED),
    (_lr(warm="none"), LR_NO_WARMUP),
    (_lr(warm="sqrt"), LR_SQRT_WARMUP),
    (_lr(warm="nanogpt"), LR_NANOGPT),
    (_lr(progress="whole run"), LR_WHOLE_RUN),
    (_lr(progress="over total"), LR_OVER_TOTAL),
    (_lr(floor="max"), LR_MAX_FLOOR),
    (_lr(shape="no pi"), LR_NO_PI),
    (_lr(floored=True), LR_FLOORED),
    (_lr(floor="zero"), LR_NO_MIN),
    (_lr(floor="cosine only"), LR_MIN_IN_COSINE),
    (_lr(shape="rising"), LR_RISING),
    (_lr(floor="added"), LR_MIN_ADDED),
    (_lr(shape="full cosine"), LR_FULL_COSINE),
    (_lr(clamp=False), LR_NO_CLAMP),
    (_lr(shape="noam"), LR_NOAM),
    (_lr(shape="linear"), LR_LINEAR),
    (_lr(returns="factor"), LR_FACTOR),
]


def _float32_slips(outputs, refs) -> bool:
    """Are the wrong rates (at least 3) float32 numbers within 1e-6 of the schedule's? The right
    ones may be Python floats (a warm-up computed without torch, min_lr returned as given)."""
    wrong = [(o, r) for o, r in zip(outputs, refs) if not math.isclose(o, r, rel_tol=1e-9, abs_tol=1e-12)]
    return len(wrong) >= 3 and all(math.isfinite(o) and o != 0 and math.isclose(o, r, rel_tol=1e-6)
                                   and float(torch.tensor(o, dtype=torch.float32)) == o for o, r in wrong)


def _phase(step: int, warmup: int, total: int) -> str:
    if step <= warmup:
        return "during the warm-up"
    return "in the decay" if step < total else "at or after total"


def _diagnose_lr(cases, outputs, refs):
    if _float32_slips(outputs, refs):
        return f"wrong values. Hint: {LR_FLOAT32}"
    for case, out, ref in zip(cases, outputs, refs):
        if not math.isclose(out, ref, rel_tol=1e-9, abs_tol=1e-12):
            step, max_lr, warmup, total, *rest = case
            min_lr = f"min_lr = {rest[0]:.4g}" if rest else "min_lr left to its default"
            return (f"at step {step} (max_lr = {max_lr:.4g}, warmup = {warmup}, total = {total}, {min_lr}), "
                    f"{_phase(step, warmup, total)}, your rate is {out:.10g}; the schedule gives {ref:.10g}. "
                    f"Hint: {LR_GENERIC}")
    return None


register(Exercise(
    name="warmup_cosine", number="6.2", function="warmup_cosine", chapter=CHAPTER,
    args=("step", "max_lr", "warmup", "total", "min_lr"),
    library_answers=("tinyformer.training.cosine_lr", "tinyformer.training.noam_lr",
                     "torch.optim.lr_scheduler.CosineAnnealingLR",
                     "torch.optim.lr_scheduler.CosineAnnealingWarmRestarts",
                     "torch.optim.lr_scheduler.OneCycleLR"),
    make_cases=_lr_cases, reference=warmup_cosine_reference, returns="the learning rate, a float",
    mistakes=LR_MISTAKES,
    error_hints=[
        (ZeroDivisionError, r"division by zero",
         "warmup may be 0, no warm-up at all: then every step from 1 on is in the decay, and step / warmup "
         "must not be computed. Use the warm-up formula only for step <= warmup, with step as given: counted "
         "from 1, it never holds when warmup = 0 (step - 1 would make step 1 look like step 0 <= 0)."),
        (TypeError, r"missing 1 required positional argument: 'min_lr'",
         "min_lr has a default: warmup_cosine(step, max_lr, warmup, total) decays to 0, so write "
         "def warmup_cosine(step, max_lr, warmup, total, min_lr=0.0)."),
    ],
    diagnose=safe_diagnosis(_diagnose_lr), diagnose_hints=(LR_FLOAT32,),
    generic_hint=LR_GENERIC,
))
