"""Chapter 6's checks: every solution passes, every stub is 'not implemented yet', every registered
mistake is caught by its own hint whatever the seed, and wrong answers written here, the way a
learner would write them, fail with the hint that names their slip. These generic tests are written
once, in tests/exercise_suite.py; the ``globals().update(SUITE...)`` lines below take in (and name)
those this chapter runs.

The solutions and wrong answers below are written independently of ``tinyformer.course.ch06``: BPE
training with a Counter, a while loop and lists of byte values (and, as learners write it, with
bytes, str.count, Counter.most_common, sets of pieces); the schedule with math.cos (and with numpy,
torch in float64, torch in float32). The references are checked against the library's
BPETokenizer.train (on the pieces its own split pattern makes of a text, merges compared pair for
pair), against merge_pair, against cosine_lr and against numbers worked out by hand. The chapter
notebook (book/06-training.ipynb) is optional here: the tests that read it are skipped while it
does not exist.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections import Counter

import exercise_suite
import numpy as np
import pytest
import torch
from exercise_suite import SEEDS, verdict_for

from tinyformer import checks
from tinyformer.course import ch06, engine
from tinyformer.tokenizers import SPLIT_PATTERN, BPETokenizer, merge_pair
from tinyformer.training import cosine_lr

from conftest import BOOK, define

CHAPTER = ["bpe_merges", "warmup_cosine"]
DRILLS: list[str] = []
ALL = CHAPTER + DRILLS
NOTEBOOK = BOOK / "06-training.ipynb"

# --------------------------------------------------------------------------- solutions (exercise cells)

SOLUTIONS = {
    "bpe_merges": '''\
from collections import Counter


def bpe_merges(pieces, n_merges):
    """Byte-pair encoding, the slow way. pieces: a list of bytes (a piece
    may repeat). n_merges times: count the adjacent pairs within each
    piece, merge the most frequent (ties: the smallest pair) into the new
    token 256 + k. Returns the merged pairs, in order, as tuples."""
    # BEGIN SOLUTION
    words = [list(piece) for piece in pieces]       # byte values, 0-255
    merges = []
    for k in range(n_merges):
        counts = Counter()
        for ids in words:
            counts.update(zip(ids, ids[1:]))        # overlapping pairs too
        if not counts:
            break                                   # no pair left
        pair = min(counts, key=lambda p: (-counts[p], p))
        merges.append(pair)
        for w, ids in enumerate(words):             # left to right
            out, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                    out.append(256 + k)
                    i += 2                          # never overlapping
                else:
                    out.append(ids[i])
                    i += 1
            words[w] = out
    return merges
    # END SOLUTION
''',
    "warmup_cosine": '''\
import math


def warmup_cosine(step, max_lr, warmup, total, min_lr=0.0):
    """The learning rate at step (counted from 1): a linear warm-up to
    max_lr at step = warmup, then half a cosine down to min_lr at
    step = total, and min_lr after."""
    # BEGIN SOLUTION
    if step <= warmup:
        return max_lr * step / warmup
    if step >= total:
        return min_lr
    progress = (step - warmup) / (total - warmup)       # 0 ... 1
    cosine = 0.5 * (1 + math.cos(math.pi * progress))   # 1 ... 0
    return min_lr + (max_lr - min_lr) * cosine
    # END SOLUTION
''',
}

SUITE = exercise_suite.Chapter(CHAPTER, DRILLS, SOLUTIONS, NOTEBOOK)
solution = SUITE.solution


# --------------------------------------------------------------------------- 6.1, as learners write it


def merged(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if ids[i:i + 2] == list(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def merged_with_overlaps(ids, pair, new_id):
    """A position that starts the pair becomes the new id; one that only ends it is dropped."""
    out = []
    for i in range(len(ids)):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
        elif i > 0 and (ids[i - 1], ids[i]) == pair:
            continue
        else:
            out.append(ids[i])
    return out


def merged_without_skipping(ids, pair, new_id):
    """The first id of each match replaced, the second kept: [97, 98] -> [256, 98]."""
    return [new_id if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair else x for i, x in enumerate(ids)]


def count_without_overlap(ids, pair):
    """As str.count counts: (97, 97) once in [97, 97, 97]."""
    n = i = 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == pair:
            n, i = n + 1, i + 2
        else:
            i += 1
    return n


def merged_first_only(ids, pair, new_id):
    """Replaces the first occurrence, then stops looking."""
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            return ids[:i] + [new_id] + ids[i + 2:]
    return ids


def merged_from_the_right(ids, pair, new_id):
    out, i = [], len(ids) - 1
    while i >= 0:
        if i > 0 and (ids[i - 1], ids[i]) == pair:
            out.insert(0, new_id)
            i -= 2
        else:
            out.insert(0, ids[i])
            i -= 1
    return out


def learner_bpe(*, words="each", count="zip", pick="min", merge=merged, first=256, recount=True, stop=True,
                short=0, returned="tuples", least=1, store="dict"):
    """A learner's BPE training, with the slip chosen by the keywords.

    words: "each" (right: one list per piece), "joined" (one list of all the pieces' bytes), "set"
    (each distinct piece once, through a set), "dict" (through dict.fromkeys). count: "zip" (right)
    or "no overlap". pick: "min" (right: min over (-count, pair)), "max" (max over (count, pair)),
    "most_common" (Counter.most_common(1)), "get" (max(counts, key=counts.get)), "last" (the last
    counted of equal counts), "sorted" (sorted
    by (-count, pair), [0], without a check for no pair). merge: the merging function. first: the
    first new id. recount: False counts once and takes the n_merges most frequent pairs. stop:
    False forgets to stop when no pair is left. short: merges left out of the loop. returned:
    "tuples", "lists", "bytes" (each pair as the two tokens' bytes), "floats", "dict" ({pair: id}),
    "ids" (the new ids), "words" (the merged pieces). count may also be "set" (each piece's pairs
    through a set) or "joined" (the pairs of all the pieces laid end to end, merged within each).
    least: stop when the best pair occurs fewer times. store: "dict" ({pair: id}, so a pair chosen
    twice is kept once) or "list".
    """
    def bpe_merges(pieces, n_merges):
        if words == "joined":
            lists = [[b for piece in pieces for b in piece]]
        elif words == "set":
            lists = [list(piece) for piece in set(pieces)]
        elif words == "dict":
            lists = [list(piece) for piece in dict.fromkeys(pieces)]
        else:
            lists = [list(piece) for piece in pieces]
        vocab = {i: bytes([i]) for i in range(256)}

        def counted():
            counts = Counter()
            for ids in lists:
                counts.update(set(zip(ids, ids[1:])) if count == "set" else zip(ids, ids[1:]))
            if count == "joined":
                flat = [b for ids in lists for b in ids]
                counts = Counter(zip(flat, flat[1:]))
            if count == "no overlap":                     # as str.count counts, piece by piece
                counts = Counter({p: sum(count_without_overlap(ids, p) for ids in lists) for p in counts})
            return counts

        merges = [] if store == "list" else {}
        if not recount:
            counts = counted()
            ranked = sorted(counts, key=lambda p: (-counts[p], p))
            merges = {p: first + k for k, p in enumerate(ranked[:n_merges])}
        else:
            for k in range(n_merges - short):
                counts = counted()
                if stop and (not counts or max(counts.values()) < least):
                    break
                if pick == "min":
                    pair = min(counts, key=lambda p: (-counts[p], p))
                elif pick == "max":
                    pair = max(counts, key=lambda p: (counts[p], p))
                elif pick == "most_common":
                    pair = counts.most_common(1)[0][0]
                elif pick == "get":
                    pair = max(counts, key=counts.get)
                elif pick == "last":
                    pair = sorted(counts, key=counts.get)[-1]
                else:
                    pair = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
                new_id = first + k
                if store == "list":
                    merges.append(pair)
                else:
                    merges[pair] = new_id
                vocab[new_id] = vocab[pair[0]] + vocab[pair[1]]
                lists = [merge(ids, pair, new_id) for ids in lists]
        if returned == "dict":
            return merges
        if returned == "ids":
            return list(merges.values())
        if returned == "words":
            return lists
        convert = {"tuples": tuple, "lists": list, "bytes": lambda p: (vocab[p[0]], vocab[p[1]]),
                   "floats": lambda p: (float(p[0]), float(p[1]))}[returned]
        return [convert(p) for p in merges]
    return bpe_merges


def bpe_in_place_on_bytes(pieces, n_merges):
    """Merges into the pieces themselves, which are bytes."""
    words = list(pieces)
    out = []
    for k in range(n_merges):
        counts = Counter(p for w in words for p in zip(w, w[1:]))
        pair = min(counts, key=lambda p: (-counts[p], p))
        out.append(pair)
        for w in words:
            for i in range(len(w) - 1):
                if (w[i], w[i + 1]) == pair:
                    w[i] = 256 + k
    return out


def bpe_spliced_bytes(pieces, n_merges):
    """Splices the new id into the bytes: ids[:i] + [new] + ids[i + 2:]."""
    words = list(pieces)
    out = []
    for k in range(n_merges):
        counts = Counter(p for w in words for p in zip(w, w[1:]))
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        out.append(pair)
        for j, w in enumerate(words):
            i = 0
            while i < len(w) - 1:
                if (w[i], w[i + 1]) == pair:
                    w = w[:i] + [256 + k] + w[i + 2:]
                i += 1
            words[j] = w
    return out


def bpe_back_to_bytes(pieces, n_merges):
    """Keeps the pieces as bytes: bytes(new ids) after each merge."""
    words = list(pieces)
    out = []
    for k in range(n_merges):
        counts = Counter(p for w in words for p in zip(w, w[1:]))
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        out.append(pair)
        words = [bytes(merged(list(w), pair, 256 + k)) for w in words]
    return out


def bpe_list_slices(pieces, n_merges):
    """Counts the slices ids[i:i + 2], which are lists."""
    words = [list(p) for p in pieces]
    counts = Counter()
    for w in words:
        for i in range(len(w) - 1):
            counts[w[i:i + 2]] += 1
    return list(counts)[:n_merges]


def bpe_pieces_never_updated(pieces, n_merges):
    """Rebinds the loop variable (ids = ...), so the pieces never change."""
    words = [list(p) for p in pieces]
    out = []
    for k in range(n_merges):
        counts = Counter(p for w in words for p in zip(w, w[1:]))
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        out.append(pair)
        for ids in words:
            ids = merged(ids, pair, 256 + k)  # noqa: F841 (the slip: a new name, not the piece)
    return out


def bpe_string_replace(pieces, n_merges):
    """d2l's merge_symbols: symbols joined by spaces, the pair replaced with str.replace."""
    words = [" ".join(str(b) for b in p) for p in pieces]
    out = []
    for k in range(n_merges):
        counts = Counter()
        for w in words:
            ids = w.split()
            counts.update(zip(ids, ids[1:]))
        if not counts:
            break
        a, b = min(counts, key=lambda p: (-counts[p], int(p[0]), int(p[1])))
        out.append((int(a), int(b)))
        words = [w.replace(f"{a} {b}", str(256 + k)) for w in words]
    return out


def bpe_padded_string_replace(pieces, n_merges):
    """d2l's string merge, with spaces around the pair so that "12 1" cannot match "2 1"."""
    words = [" " + " ".join(str(b) for b in p) + " " for p in pieces]
    out = []
    for k in range(n_merges):
        counts = Counter()
        for w in words:
            ids = [int(t) for t in w.split()]
            counts.update(zip(ids, ids[1:]))
        if not counts:
            break
        a, b = min(counts, key=lambda p: (-counts[p], p))
        out.append((a, b))
        words = [w.replace(f" {a} {b} ", f" {256 + k} ") for w in words]
    return out


def bpe_on_characters(pieces, n_merges):
    """Decodes each piece and merges its characters."""
    words = [list(p.decode("utf-8", errors="replace")) for p in pieces]
    out = []
    for k in range(n_merges):
        counts = Counter(p for w in words for p in zip(w, w[1:]))
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        out.append(pair)
        words = [merged(w, pair, 256 + k) for w in words]
    return out


def merged_dropping_the_last(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def bpe_counts_updated_by_hand(pieces, n_merges):
    """Counts once; after a merge deletes the pair and adds the new token's pairs, but never
    takes away the pairs the merged ids made with their neighbours."""
    words = [list(p) for p in pieces]
    counts = Counter()
    for w in words:
        counts.update(zip(w, w[1:]))
    out = []
    for k in range(n_merges):
        counts = Counter({p: c for p, c in counts.items() if c > 0})
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        out.append(pair)
        del counts[pair]
        new = 256 + k
        words = [merged(w, pair, new) for w in words]
        for w in words:
            for p in zip(w, w[1:]):
                if new in p:
                    counts[p] += 1
    return out


def bpe_encodes_the_pieces(pieces, n_merges):
    """Takes the pieces for str."""
    return learner_bpe()([p.encode("utf-8") for p in pieces], n_merges)


BPE_WRONG = [
    (learner_bpe(words="joined"), "pairs never cross from one piece to the next"),
    (learner_bpe(merge=merged_with_overlaps), "merges never overlap"),
    (learner_bpe(count="no overlap"), "overlapping pairs count: [97, 97, 97] holds (97, 97) twice"),
    (learner_bpe(recount=False), "count the pairs again after every merge"),
    (learner_bpe(pick="max"), "ties go to the SMALLEST pair"),
    (learner_bpe(pick="max", returned="lists"), "ties go to the SMALLEST pair"),
    (learner_bpe(pick="most_common"), "ties go to the smallest pair, not to the first one counted"),
    (learner_bpe(pick="get"), "ties go to the smallest pair, not to the first one counted"),
    (learner_bpe(first=255), "the first merge makes token 256 (ids 0-255 are the bytes"),
    (learner_bpe(first=257), "the first merge makes token 256, the k-th merge 256 + k for k from 0: yours start at "
                             "257"),
    (learner_bpe(words="set"), "a piece that occurs several times counts that many times"),
    (learner_bpe(words="dict", returned="lists"), "a piece that occurs several times counts that many times"),
    (learner_bpe(returned="bytes"), "your pairs hold bytes"),
    (bpe_in_place_on_bytes, "'bytes' object does not support item assignment. Hint: a piece is bytes"),
    (bpe_spliced_bytes, "can't concat list to bytes. Hint: a piece is bytes"),
    (bpe_back_to_bytes, "a merged token's id (256 + k) does not fit in a byte"),
    (bpe_list_slices, "a pair must be hashable to be counted"),
    (bpe_encodes_the_pieces, "the pieces are bytes already"),
    (bpe_string_replace, "merge token ids, not digits in a string"),
    (bpe_padded_string_replace, "a space on each side of the pair stops str.replace"),
    (learner_bpe(merge=merged_first_only, store="list"), "a merge replaces EVERY occurrence of the pair"),
    (learner_bpe(merge=merged_from_the_right), "scan each piece left to right"),
    (learner_bpe(merge=lambda ids, pair, new_id: merged_dropping_the_last(ids, pair, new_id) + ids[-1:]),
     "after the loop you append the piece's last id every time"),
    (learner_bpe(least=2), "keep merging while any pair is left, even one that occurs once"),
    (learner_bpe(count="set"), "a pair that occurs twice in a piece counts twice"),
    (learner_bpe(count="joined"), "count the pairs within each piece, as you merge them"),
    (bpe_on_characters, "Hint: your pieces hold characters (str) beside the new ids (ints)"),
    (learner_bpe(merge=merged_dropping_the_last), "your merge loses a piece's last id"),
    (bpe_counts_updated_by_hand, "your counts are stale"),
    (learner_bpe(stop=False), "your function raised ValueError: min() arg is an empty sequence. Hint: stop early "
                              "when no piece holds a pair"),
    (learner_bpe(pick="sorted", stop=False), "raised IndexError: list index out of range. Hint: an index ran past "
                                             "the end of a list"),
    (learner_bpe(merge=merged_without_skipping), "a merge replaces BOTH ids of the pair by the new one"),
    (bpe_pieces_never_updated, "your pieces never change: after choosing a pair"),
    (learner_bpe(pick="last"), "for pieces = [b'abc', b'abc', b'bd', b'abc'] and n_merges = 3, merge 1 is (97, 98), "
                               "which occurs 3 times; yours is (98, 99), which occurs 3 times too, a tie: ties go to "
                               "the smaller pair. Hint: start each piece"),
    (learner_bpe(short=1), "and n_merges = 4, you stopped after 3 merges, but the pieces still hold pairs: merge 4 "
                           "is (256, 256), which occurs once. Hint: start each piece as list(piece)"),
    (learner_bpe(pick="most_common", words="dict"),
     "merge 2 is (97, 98), which occurs 5 times; yours is (256, 97), which occurs 2 times. Hint: start each piece"),
    (learner_bpe(returned="floats"), "your pairs hold a float: a merge is a pair of two token ids"),
    (learner_bpe(returned="dict"), "returned a dict; return the merged pairs, a list of (a, b) tuples of ints "
                                   "(list(merges) gives the keys"),
    (learner_bpe(returned="ids"), "your list holds an int: each merge is a pair (a, b)"),
    (learner_bpe(returned="words"), "your list holds a list of 1 item: each merge is a pair (a, b)"),
    (lambda pieces, n_merges: None, "returned None; did you forget the `return` line?"),
    (lambda pieces, n_merges: torch.tensor(learner_bpe()(pieces, n_merges)),
     "returned a tensor of shape (4, 2); return the merged pairs"),
]


# --------------------------------------------------------------------------- 6.2, as learners write it


def learner_lr(*, warm="linear", progress="after warmup", floor="min_lr", clamp=">=", period=1, decay="cosine",
               zero_based=False, late=0, returned="lr"):
    """A learner's schedule, with the slip chosen by the keywords.

    warm: "linear" (right), "minus one" (max_lr·(step - 1)/warmup), "none" (max_lr throughout),
    "sqrt" (max_lr·√(step/warmup)), "ratio first" (step / warmup computed first, which divides by
    warmup = 0). progress: "after warmup" (right) or "whole run" (step / total). floor: "min_lr"
    (right), "zero" (min_lr ignored), "added" (min_lr + ½·max_lr·(1 + cos)). clamp: ">=" or ">"
    (right), None (no clamp). period: 1 (right: cos(π·progress)), 2, or 1 / π (cos progress, π
    forgotten). progress may also be "over total" ((step - warmup) / total) or "both minus one"
    ((step - warmup - 1) / (total - warmup - 1)); floor "max" (max(min_lr, ½·max_lr·(1 + cos))).
    decay: "cosine" (right), "linear", "noam" (max_lr·√(warmup/step)). zero_based: the step turned
    into t = step - 1 first. late: the decay's progress from step - late. returned: "lr" or "factor" (lr / max_lr).
    """
    def warmup_cosine(step, max_lr, warmup, total, min_lr=0.0):
        t = step - 1 if zero_based else step
        low = 0.0 if floor in ("zero", "cosine only", "max") else min_lr
        if warm == "ratio first":
            ramp = t / warmup
            if ramp <= 1:
                return max_lr * ramp
        elif (t < warmup) if zero_based else (t <= warmup):
            lr = {"linear": max_lr * t / warmup, "minus one": max_lr * (t - 1) / warmup, "none": max_lr,
                  "sqrt": max_lr * math.sqrt(t / warmup)}[warm]
            return lr / max_lr if returned == "factor" else lr
        if clamp == ">=" and t >= total or clamp == ">" and t > total:
            lr = min_lr if floor in ("cosine only", "max") else low
        else:
            if progress == "after warmup":
                p = (t - late - warmup) / (total - warmup)
            elif progress == "over total":
                p = (t - warmup) / total
            elif progress == "both minus one":
                p = (t - warmup - 1) / (total - warmup - 1)
            else:
                p = t / total
            if decay == "linear":
                lr = max_lr + (low - max_lr) * p
            elif decay == "noam":
                lr = max_lr * (warmup / t) ** 0.5
            elif decay == "one minus":
                lr = low + 0.5 * (max_lr - low) * (1 - math.cos(math.pi * p))
            elif floor == "added":
                lr = min_lr + 0.5 * max_lr * (1 + math.cos(period * math.pi * p))
            elif floor == "max":
                lr = max(min_lr, 0.5 * max_lr * (1 + math.cos(period * math.pi * p)))
            else:
                lr = low + 0.5 * (max_lr - low) * (1 + math.cos(period * math.pi * p))
        return lr / max_lr if returned == "factor" else lr
    return warmup_cosine


def lr_floored(step, max_lr, warmup, total, min_lr=0.0):
    """The schedule, then a floor of min_lr over everything."""
    return max(min_lr, learner_lr()(step, max_lr, warmup, total, min_lr))


def lr_torch_sequential(step, max_lr, warmup, total, min_lr=0.0):
    """torch's schedulers, stepped to `step`: a LinearLR warm-up, then CosineAnnealingLR."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=max_lr)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=min_lr)
    if warmup > 0:
        warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / warmup, total_iters=warmup - 1)
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cosine], milestones=[warmup])
    else:
        sched = cosine
    for _ in range(step - 1):
        opt.step()
        sched.step()
    return opt.param_groups[0]["lr"]


def lr_float32(step, max_lr, warmup, total, min_lr=0.0):
    """The decay with torch tensors, float32 by default."""
    if step <= warmup:
        return max_lr * step / warmup
    if step >= total:
        return min_lr
    progress = torch.tensor((step - warmup) / (total - warmup))
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + torch.cos(math.pi * progress))


def lr_nanogpt(step, max_lr, warmup, total, min_lr=0.0):
    """nanoGPT's get_lr, copied with it = step."""
    if step < warmup:
        return max_lr * (step + 1) / (warmup + 1)
    if step > total:
        return min_lr
    ratio = (step - warmup) / (total - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (max_lr - min_lr)


def lr_no_default(step, max_lr, warmup, total, min_lr):
    return learner_lr()(step, max_lr, warmup, total, min_lr)


LR_WRONG = [
    (learner_lr(warm="minus one"), "the warm-up counts steps from 1"),
    (learner_lr(late=1), "the decay starts right after the warm-up: progress = (step - warmup) / (total - warmup), "
                         "so step warmup + 1 is already below max_lr. Yours counts"),
    (learner_lr(progress="both minus one"), "Yours subtracts 1 from both"),
    (lr_torch_sequential, "yours runs as torch's SequentialLR of a LinearLR and a CosineAnnealingLR does"),
    (learner_lr(period=1 / math.pi), "the cosine's argument is π · progress"),
    (learner_lr(progress="over total"), "progress counts the decay's steps out of the decay's length"),
    (learner_lr(floor="max"), "min_lr is where the cosine ends, not a floor"),
    (lr_floored, "min_lr is the floor of the decay, not of the warm-up"),
    (learner_lr(zero_based=True), "your whole schedule runs one step late"),
    (learner_lr(warm="none"), "there is no warm-up in yours"),
    (learner_lr(warm="sqrt"), "the warm-up is linear, max_lr · step / warmup: yours grows like"),
    (learner_lr(progress="whole run"), "the cosine starts after the warm-up"),
    (learner_lr(floor="zero"), "the decay ends at min_lr, not at 0"),
    (learner_lr(floor="added"), "the cosine spans max_lr - min_lr"),
    (learner_lr(floor="cosine only"), "the cosine decays to min_lr, not to 0"),
    (learner_lr(decay="one minus"), "your decay rises"),
    (learner_lr(period=2), "half a cosine, cos(π · progress), goes from max_lr down to min_lr once"),
    (learner_lr(clamp=None), "after total the rate stays at min_lr"),
    (learner_lr(decay="noam"), "the Noam schedule"),
    (learner_lr(decay="linear"), "yours decays linearly from max_lr to min_lr"),
    (learner_lr(returned="factor"), "you returned the multiplier of max_lr"),
    (lr_nanogpt, "yours is nanoGPT's warm-up"),
    (lr_float32, "your rates are float32 numbers, about 7 digits right"),
    (learner_lr(warm="ratio first"), "raised ZeroDivisionError: division by zero. Hint: warmup may be 0, no warm-up"),
    (lr_no_default, "Hint: min_lr has a default"),
    (learner_lr(warm="minus one", floor="zero"),
     "at step 1 (max_lr = 0.0006, warmup = 10, total = 100, min_lr = 6e-05), during the warm-up, your rate is 0; "
     "the schedule gives 6e-05. Hint: for step <= warmup"),
    (learner_lr(late=1, clamp=">"),
     "at step 11 (max_lr = 0.0006, warmup = 10, total = 100, min_lr = 6e-05), in the decay, your rate is 0.0006; "
     "the schedule gives 0.0005998355233"),
    (lambda *a: str(learner_lr()(*a)), "returned a str; return the learning rate, a float"),
    (lambda *a: torch.tensor([learner_lr()(*a)]), "returned a tensor of shape (1,); return the learning rate"),
    (lambda *a: None, "returned None; return the learning rate, a float"),
]

WRONG = [("bpe_merges", fn, phrase) for fn, phrase in BPE_WRONG] + \
        [("warmup_cosine", fn, phrase) for fn, phrase in LR_WRONG]


# What a check must refuse without raising: the odd answers of every chapter, and this chapter's own.
BAD = {
    **exercise_suite.odd_answers((3, 2)),
    "float": lambda *a: 7.5,
    "nan-float": lambda *a: math.nan,
    "inf-float": lambda *a: math.inf,
    "numpy-float": lambda *a: np.float64(1.0),
    "pairs-of-three": lambda *a: [(1, 2, 3)],
    "pair-of-tensors": lambda *a: [torch.tensor([97, 98])] * 4,
    "pairs-of-nan": lambda *a: [(math.nan, math.nan)] * 4,
    "pairs-of-bools": lambda *a: [(True, False)] * 4,
    "pairs-of-none": lambda *a: [(None, None)] * 4,
    "nested": lambda *a: [[(97, 98)]],
    "generator": lambda *a: (p for p in [(97, 98)]),
    "set": lambda *a: {(97, 98)},
    "bytes": lambda *a: b"ab",
    "meta": lambda *a: torch.empty(4, 2, device="meta"),
}


# --------------------------------------------------------------------------- the generic tests

# Written once, in tests/exercise_suite.py (its docstring says what each checks); chapter 6 runs these.
globals().update(
    # test_solution_passes, test_solution_passes_for_every_seed, test_solution_code_fits_the_page (79 columns),
    # test_stub_is_not_implemented
    SUITE.solution_tests(page_width=79)
    # test_the_chapter_has_a_cell_for_every_checked_exercise, test_chapter_solution_passes_for_every_seed (skipped
    # while book/06-training.ipynb does not exist)
    | SUITE.notebook_tests()
    # test_nearly_right_fails (6.2's rates times 1 + 1e-4 or 1e-7 fail; 6.1's pairs are judged exactly, below)
    | SUITE.nearly_right_tests(["warmup_cosine"])
    # test_every_registered_mistake_is_caught_by_its_own_hint,
    # test_the_cases_tell_every_mistake_from_the_reference_and_the_others (the outputs are lists and numbers,
    # compared exactly; apart_by is for tensors)
    | SUITE.registered_mistake_tests(apart_by=1e-3)
    # the fixture wrong_verdicts; test_wrong_answer_gets_its_hint_whatever_the_seed (each answer of WRONG),
    # test_every_registered_hint_is_earned_by_a_wrong_answer, test_wrong_answers_get_different_verdicts
    | SUITE.wrong_answer_tests(WRONG)
    # test_any_wrong_answer_fails_without_raising (each answer of BAD), test_another_device_is_named,
    # test_the_diagnoses_never_raise
    | SUITE.odd_answer_tests(BAD) | SUITE.meta_device_tests() | SUITE.diagnosis_tests()
    # test_seed_changes_the_inputs (no tensors: 6.1's pieces are stored as a list of bytes, built afresh for
    # every call), test_cases_travel_to_the_sandbox_and_back (these answers too)
    | SUITE.case_tests()
    | SUITE.travel_tests([BAD["tuple"], BAD["ndarray"], BAD["float"], BAD["meta"], learner_bpe(pick="max"),
                          learner_bpe(returned="lists"), learner_bpe(returned="bytes"), learner_lr(floor="zero")])
    # test_every_hint_is_written_once
    | SUITE.hint_tests()
)


# --------------------------------------------------------------------------- the registry


def test_chapter_six_registry():
    SUITE.assert_registry(numbers=["6.1", "6.2"])
    assert checks.EXERCISES["bpe_merges"].args == ("pieces", "n_merges")
    assert checks.EXERCISES["warmup_cosine"].args == ("step", "max_lr", "warmup", "total", "min_lr")


def test_the_library_answers_name_functions():
    for name in ALL:
        keys = engine.library_answer_keys(checks.EXERCISES[name])
        named = {dotted for *_, dotted in keys["code"]}
        assert all(any(n == a or n.startswith(a + ".") for n in named) for a in checks.EXERCISES[name].library_answers)
    named = {d for *_, d in engine.library_answer_keys(checks.EXERCISES["bpe_merges"])["code"]}
    assert {"tinyformer.tokenizers.BPETokenizer.__init__", "tinyformer.tokenizers.BPETokenizer.encode",
            "tinyformer.tokenizers.merge_pair"} <= named


def test_a_schedule_that_calls_an_unfinished_exercise_is_told_so(capsys):
    def warmup_cosine(step, max_lr, warmup, total, min_lr=0.0):
        raise NotImplementedError("bpe_merges is not implemented yet")

    exercise_suite.assert_it_calls_an_unfinished(checks.check_warmup_cosine(warmup_cosine), "bpe_merges", "6.1")
    capsys.readouterr()


# --------------------------------------------------------------------------- other right answers pass


def bpe_with_strings(pieces, n_merges):
    """Pairs found by scanning, merged by rebuilding each piece; pairs returned as lists in a tuple."""
    words = [[b for b in piece] for piece in pieces]
    merges = []
    for k in range(n_merges):
        counts = {}
        for w in words:
            for i in range(len(w) - 1):
                counts[(w[i], w[i + 1])] = counts.get((w[i], w[i + 1]), 0) + 1
        if not counts:
            break
        best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        merges.append(list(best))
        words = [merged(w, best, 256 + k) for w in words]
    return tuple(merges)


def bpe_weighted_counter(pieces, n_merges):
    """Each distinct piece once, weighted by how often it occurs (as BPETokenizer.train counts)."""
    freq = Counter(pieces)
    words = {piece: list(piece) for piece in freq}
    merges = []
    for k in range(n_merges):
        counts = Counter()
        for piece, ids in words.items():
            for pair in zip(ids, ids[1:]):
                counts[pair] += freq[piece]
        if not counts:
            break
        top = max(counts.values())
        pair = min(p for p, c in counts.items() if c == top)
        merges.append(pair)
        words = {piece: merged(ids, pair, 256 + k) for piece, ids in words.items()}
    return merges


def bpe_numpy_ids(pieces, n_merges):
    return [(np.int64(a), np.int64(b)) for a, b in solution("bpe_merges")(pieces, n_merges)]


def bpe_tensor_ids(pieces, n_merges):
    return [(torch.tensor(a), torch.tensor(b)) for a, b in solution("bpe_merges")(pieces, n_merges)]


def bpe_changes_its_input(pieces, n_merges):
    """Turns the pieces into lists in place (the caller's list changes; every call gets a fresh one)."""
    for i, piece in enumerate(pieces):
        pieces[i] = list(piece)
    out = solution("bpe_merges")([bytes(p) for p in pieces], n_merges)
    pieces.clear()
    return out


@pytest.mark.parametrize("right", [learner_bpe(), learner_bpe(returned="lists"), bpe_with_strings, bpe_weighted_counter,
                                   bpe_numpy_ids, bpe_tensor_ids, bpe_changes_its_input])
def test_other_right_trainings_pass(right):
    for seed in SEEDS:
        verdict = verdict_for("bpe_merges", right, seed)
        assert verdict.passed, (seed, verdict.message)


def lr_numpy(step, max_lr, warmup, total, min_lr=0.0):
    """np.float64 throughout, the warm-up as np.interp."""
    if step <= warmup:
        return np.interp(step, [0, warmup], [0.0, max_lr])
    progress = np.clip((step - warmup) / (total - warmup), 0.0, 1.0)
    return min_lr + (max_lr - min_lr) * np.cos(np.pi * progress / 2) ** 2


def lr_tensor64(step, max_lr, warmup, total, min_lr=0.0):
    """A 0-d float64 tensor."""
    if step < warmup:
        return torch.tensor(max_lr * step / warmup, dtype=torch.float64)
    progress = torch.tensor(min(1.0, (step - warmup) / (total - warmup)), dtype=torch.float64)
    return min_lr + (max_lr - min_lr) * (1 + torch.cos(torch.pi * progress)) / 2


@pytest.mark.parametrize("right", [learner_lr(), learner_lr(clamp=">"), lr_numpy, lr_tensor64,
                                   lambda step, max_lr, warmup, total, min_lr=0.0: cosine_lr(step, max_lr, warmup,
                                                                                             total, min_lr)])
def test_other_right_schedules_pass(right):
    for seed in SEEDS:
        verdict = verdict_for("warmup_cosine", right, seed)
        assert verdict.passed, (seed, verdict.message)


def test_the_pairs_are_judged_exactly(capsys):
    right = solution("bpe_merges")
    for wrong in (lambda *a: right(*a)[:-1] if right(*a) else [(0, 0)], lambda *a: right(*a) + [(97, 98)],
                  lambda *a: [(b, a) for a, b in right(*a)], lambda *a: list(reversed(right(*a))),
                  lambda *a: [(float(a), b) for a, b in right(*a)], lambda *a: [(a, b, 0) for a, b in right(*a)]):
        verdict = checks.check_bpe_merges(wrong)
        assert not verdict and verdict.status == checks.FAIL, verdict.message
        assert "could not judge" not in verdict.message
    capsys.readouterr()


def test_a_training_that_goes_on_after_the_pairs_run_out_is_told_to_stop():
    ex = checks.EXERCISES["bpe_merges"]
    cases = checks.cases_for(ex, 0)
    refs = [ex.reference(*c) for c in cases]
    outputs = [r + [(0, 0)] if i == 5 else r for i, r in enumerate(refs)]
    said = ex.diagnose(cases, outputs, refs)
    assert said.startswith("for pieces = [b' hello', b' hi', b' hello', b' ha'] and n_merges = 20, you returned 8 "
                           "merges, but after 7 no piece holds a pair any more: stop there"), said
    outputs = [r + [(0, 0)] if i == 0 else r for i, r in enumerate(refs)]
    assert "n_merges = 4, you returned 5 merges; n_merges = 4 asks for 4" in ex.diagnose(cases, outputs, refs)


# --------------------------------------------------------------------------- the cases


def pieces_of(case) -> list[bytes]:
    return engine._fresh(case[0])


def test_the_bpe_cases_are_built_to_expose_the_mistakes():
    ex = checks.EXERCISES["bpe_merges"]
    for seed in SEEDS:
        cases = checks.cases_for(ex, seed)
        assert all(type(p) is bytes for c in cases for p in pieces_of(c))
        assert all(type(c[1]) is int and c[1] >= 0 for c in cases)
        refs = [ex.reference(*c) for c in cases]
        # 0: (97, 97) is the most frequent pair only when overlapping pairs count; its merge must not overlap
        counts = Counter(p for w in pieces_of(cases[0]) for p in zip(w, w[1:]))
        no_overlap = {p: sum(exercise_count(w, p) for w in pieces_of(cases[0])) for p in counts}
        assert refs[0][0] == (97, 97) and counts[(97, 97)] > counts[(97, 98)] > no_overlap[(97, 97)]
        assert refs[0][2] == (256, 97)
        # 1: across the pieces, (97, 98) would be the most frequent pair; within them it occurs once
        joined = list(b"".join(pieces_of(cases[1])))
        across = Counter(zip(joined, joined[1:]))
        assert max(across, key=lambda p: (across[p], -p[0], -p[1])) == (97, 98) != refs[1][0]
        # 2: the second merge uses the first one's token: only a recount finds it
        assert refs[2][:2] == [(97, 98), (256, 99)]
        # 3: a tie of three pairs, the first counted neither the smallest nor the largest
        counts = Counter(p for w in pieces_of(cases[3]) for p in zip(w, w[1:]))
        assert len(set(counts.values())) == 1 and list(counts)[0] not in (min(counts), max(counts))
        assert refs[3] == sorted(counts)
        # 4: no merge; 5: the pieces run out of pairs before n_merges
        assert cases[4][1] == 0 and refs[4] == []
        assert len(refs[5]) == 7 < cases[5][1]
        # 6: str.replace on the ids written out matches "2 1" inside "12 1 2"; the pairs do not
        assert refs[6] == [(2, 1), (1, 2), (12, 257)]
        assert bpe_string_replace(pieces_of(cases[6]), 3) == [(2, 1), (1256, 2)]
        # 7: "abab" holds (97, 98) twice; a set of its pairs counts it once, and (98, 97) wins
        assert refs[7] == [(97, 98), (256, 256)] and learner_bpe(count="set")(pieces_of(cases[7]), 2)[0] == (98, 97)
        assert bpe_padded_string_replace(pieces_of(cases[7]), 2) == [(97, 98), (97, 98)]
        for case in cases[8:]:
            pieces = pieces_of(case)
            assert 4 <= len(pieces) <= 12 and 1 <= case[1] <= 10
            assert 2 <= len(set(b for p in pieces for b in p) - {32}) <= 4 or len(set(b"".join(pieces))) <= 5


def exercise_count(ids, pair):
    return count_without_overlap(list(ids), pair)


def test_the_schedule_cases():
    ex = checks.EXERCISES["warmup_cosine"]
    for seed in SEEDS:
        cases = checks.cases_for(ex, seed)
        assert cases[:6] == [(step, 6e-4, 10, 100, 6e-5) for step in (1, 10, 11, 55, 100, 130)]
        assert any(len(c) == 4 for c in cases) and all(len(c) in (4, 5) for c in cases)
        assert any(c[2] == 0 for c in cases[:9])                                   # no warm-up
        for step, max_lr, warmup, total, *rest in cases:
            assert type(step) is int and type(warmup) is int and type(total) is int
            assert step >= 1 and 0 <= warmup < total and isinstance(max_lr, float)
            assert all(isinstance(m, float) and 0 <= m < max_lr for m in rest)


# --------------------------------------------------------------------------- the grader's honesty flags


@pytest.mark.parametrize("name", ALL)
def test_honest_solutions_are_not_flagged(name):
    rec, verdict = exercise_suite.harvest(name, solution(name))
    assert rec["flags"] == [] and rec["tampering"] == [], rec["flags"]
    assert verdict.status == checks.PASS, verdict.message


LIBRARY_ANSWERS = [
    ("bpe_merges", """
        from collections import Counter
        from tinyformer.tokenizers import merge_pair

        def bpe_merges(pieces, n_merges):
            words, merges = [list(p) for p in pieces], []
            for k in range(n_merges):
                counts = Counter(p for w in words for p in zip(w, w[1:]))
                if not counts:
                    break
                pair = min(counts, key=lambda p: (-counts[p], p))
                merges.append(pair)
                words = [merge_pair(w, pair, 256 + k) for w in words]
            return merges
        """, "tinyformer.tokenizers.merge_pair", checks.PASS),
    ("bpe_merges", """
        from tinyformer.tokenizers import BPETokenizer

        def bpe_merges(pieces, n_merges):
            text = b"".join(pieces).decode("utf-8", errors="replace")
            return list(BPETokenizer.train(text, 256 + n_merges).merges)
        """, "tinyformer.tokenizers.BPETokenizer.__init__", None),     # train builds a BPETokenizer
    ("warmup_cosine", """
        from tinyformer.training import cosine_lr

        def warmup_cosine(step, max_lr, warmup, total, min_lr=0.0):
            return cosine_lr(step, max_lr, warmup, total, min_lr)
        """, "tinyformer.training.cosine_lr", checks.PASS),
    ("warmup_cosine", """
        import math
        from tinyformer import training

        def warmup_cosine(step, max_lr, warmup, total, min_lr=0.0):
            if step <= warmup:   # the Noam warm-up, scaled to max_lr
                return max_lr * training.noam_lr(step, 64, warmup) / training.noam_lr(warmup, 64, warmup)
            if step >= total:
                return min_lr
            return min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * (step - warmup) / (total - warmup))) / 2
        """, "tinyformer.training.noam_lr", checks.PASS),
]


@pytest.mark.parametrize("k", range(len(LIBRARY_ANSWERS)), ids=[f"{n}-{c}" for n, _, c, _ in LIBRARY_ANSWERS])
def test_the_library_answer_is_flagged(k):
    name, source, caught, status = LIBRARY_ANSWERS[k]
    fn = define(textwrap.dedent(source), checks.EXERCISES[name].function)
    rec, verdict = exercise_suite.harvest(name, fn)
    assert caught in rec["flags"], rec["flags"]
    if verdict.passed:          # the in-book check names the call too
        exercise_suite.in_book_refuses(name, fn, rec["flags"])
    if status is not None:     # its outputs are right: the flag alone takes the credit
        assert verdict.status == status, verdict.message


# --------------------------------------------------------------------------- the grader, end to end


def test_the_grader_judges_chapter_six_in_its_sandbox(tmp_path):
    """6.1's pieces are built afresh in the sandbox from the bytes the cases carry."""
    first_counted = SOLUTIONS["bpe_merges"].replace("min(counts, key=lambda p: (-counts[p], p))",
                                                    "counts.most_common(1)[0][0]")
    assert first_counted != SOLUTIONS["bpe_merges"]
    rows = SUITE.graded(tmp_path, {"bpe_merges": first_counted, "warmup_cosine": SOLUTIONS["warmup_cosine"]})
    assert list(rows) == CHAPTER
    assert rows["bpe_merges"][0] == checks.FAIL and ch06.BPE_TIE_FIRST in rows["bpe_merges"][1], rows
    assert rows["warmup_cosine"][0] == checks.PASS, rows


# --------------------------------------------------------------------------- 6.1's reference


def library_merges(text: str, n_merges: int) -> list[tuple[int, int]]:
    return list(BPETokenizer.train(text, 256 + n_merges).merges)


def split(text: str) -> list[bytes]:
    return [piece.encode("utf-8") for piece in re.findall(SPLIT_PATTERN, text)]


TEXTS = [
    "the cat sat on the mat; the cat ate the rat. " * 3,
    "aaa aaaa aa a aaaaaaa ab ab ba",
    "low lower lowest newer newest wider " * 2,
    "naïve café, déjà vu: ünïcödé — 東京 東京 2024 2024!!",
    "hello",
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("n_merges", [0, 1, 5, 30, 200])
def test_bpe_reference_is_what_the_library_trains(text, n_merges):
    """BPETokenizer.train splits the text with SPLIT_PATTERN, counts each distinct piece weighted by how often it
    occurs, updates its counts incrementally and stops when no pair is left: the same merges, in the same order."""
    assert ch06.bpe_merges_reference(split(text), n_merges) == library_merges(text, n_merges)


def test_bpe_reference_is_what_the_library_trains_on_random_texts():
    g = torch.Generator().manual_seed(6)
    for _ in range(20):
        alphabet = "ab c.é"
        text = "".join(alphabet[i] for i in torch.randint(0, len(alphabet), (60,), generator=g).tolist())
        n = int(torch.randint(1, 40, (1,), generator=g))
        assert ch06.bpe_merges_reference(split(text), n) == library_merges(text, n), text


def test_bpe_reference_merges_as_merge_pair_does():
    """Its merges, applied in order with merge_pair, leave the pieces that BPETokenizer encodes them into (for the
    pieces it can take as text), and no pair is left when it stopped early."""
    for seed in SEEDS:
        for pieces, n_merges in checks.cases_for(checks.EXERCISES["bpe_merges"], seed):
            pieces = engine._fresh(pieces)
            merges = ch06.bpe_merges_reference(pieces, n_merges)
            words = [list(p) for p in pieces]
            for k, pair in enumerate(merges):
                assert [ch06._merge(w, pair, 256 + k) for w in words] == [merge_pair(w, pair, 256 + k) for w in words]
                words = [merge_pair(w, pair, 256 + k) for w in words]
            tok = BPETokenizer(merges)
            ascii_pieces = [(p, w) for p, w in zip(pieces, words) if p.isascii()]
            assert [tok._encode_piece(p.decode("ascii")) for p, _ in ascii_pieces] == [w for _, w in ascii_pieces]
            if len(merges) < n_merges:
                assert all(len(w) == 1 for w in words)


def test_bpe_reference_by_hand():
    ref = ch06.bpe_merges_reference
    assert ref([b"aaa"], 5) == [(97, 97), (256, 97)]                  # [256, 97], then one token
    assert ref([b"aaaa"], 5) == [(97, 97), (256, 256)]
    assert ref([b"ab", b"ab", b"ba"], 1) == [(97, 98)]
    assert ref([b"b", b"a"], 3) == []                                   # single bytes: no pair at all
    assert ref([b"abab", b"ab"], 0) == []
    assert ref([b"zy", b"ba"], 2) == [(98, 97), (122, 121)]            # a tie: the smaller pair first
    assert ch06.bpe_merges_reference(checks.cases_for(checks.EXERCISES["bpe_merges"], 0)[0][0], 4) == \
        [(97, 97), (97, 98), (256, 97), (256, 256)]


def test_bpe_reference_takes_a_case_as_stored_and_leaves_it_alone():
    case = checks.cases_for(checks.EXERCISES["bpe_merges"], 1)[2]
    stored = [bytes(p) for p in case[0]["pieces"]]
    assert ch06.bpe_merges_reference(*case) == ch06.bpe_merges_reference(engine._fresh(case[0]), case[1])
    assert case[0]["pieces"] == stored


# --------------------------------------------------------------------------- 6.2's reference


def test_schedule_reference_is_cosine_lr_and_the_solution():
    ex = checks.EXERCISES["warmup_cosine"]
    for seed in SEEDS:
        for case in checks.cases_for(ex, seed):
            ref = ch06.warmup_cosine_reference(*case)
            assert type(ref) is float
            assert ref == cosine_lr(*case)
            assert math.isclose(ref, solution("warmup_cosine")(*case), rel_tol=1e-12, abs_tol=1e-18)


def test_schedule_reference_by_hand():
    ref = ch06.warmup_cosine_reference
    assert math.isclose(ref(1, 6e-4, 10, 100, 6e-5), 6e-5)                 # max_lr / warmup
    assert ref(10, 6e-4, 10, 100, 6e-5) == 6e-4                            # the peak
    assert math.isclose(ref(55, 6e-4, 10, 100, 6e-5), 3.3e-4)              # halfway: the mean
    assert ref(100, 6e-4, 10, 100, 6e-5) == ref(10_000, 6e-4, 10, 100, 6e-5) == 6e-5
    assert ref(100, 6e-4, 10, 100) == 0.0
    assert math.isclose(ref(1, 1e-3, 0, 50, 1e-4), 1e-4 + 0.45e-3 * (1 + math.cos(math.pi / 50)))


def test_schedule_reference_without_warm_up_never_divides_by_zero():
    """cosine_lr with warmup = 0: step >= 1 > warmup, so the warm-up branch (the division by warmup) never runs."""
    rates = [ch06.warmup_cosine_reference(step, 1e-3, 0, 20, 1e-4) for step in range(1, 25)]
    assert rates[0] < 1e-3 and all(a > b for a, b in zip(rates[:19], rates[1:20])) and rates[19:] == [1e-4] * 5


def test_schedule_reference_is_continuous_and_decreasing_after_the_warm_up():
    ref = ch06.warmup_cosine_reference
    rates = [ref(step, 3e-3, 20, 200, 3e-4) for step in range(1, 260)]
    assert all(b > a for a, b in zip(rates[:19], rates[1:20]))             # up during the warm-up
    assert all(b < a for a, b in zip(rates[19:199], rates[20:200]))        # down during the decay
    assert max(abs(b - a) for a, b in zip(rates, rates[1:])) <= 3e-3 / 20 + 1e-15
