"""The book's skip-gram against gensim's Word2Vec, trained on the same million words.

    python benchmarks/skipgram.py [--quick] [--out PATH]

Issue 23: tinyformer's ``train_skipgram`` trains on one million tokens in at most 60 s on the
course's 2-core CPU, and within 3x of gensim's time on the same corpus and settings. Both train
in the same run on chapter 1's synthetic language (the first 1,000,000 words of
``tinyformer.experiments.ch01.corpus``), with the same settings: 50 dimensions, a window of 5
on each side (gensim's ``shrink_windows=False``), 5 negatives from the unigram^0.75
distribution, no subsampling of frequent words, 5 epochs, a rate falling linearly from 0.025;
gensim on one worker thread (``workers=1``, reproducible), ours on the pinned two threads. Also
scored: each one's 3CosAdd accuracy on the language's three relations, beside the
nearest-neighbour baseline. Writes benchmarks/results/skipgram.md (or ``--out``) and prints the
table. gensim is optional (``pip install gensim``); without it, only ours is measured.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from train_throughput import load_average  # the same report of the machine's load

from tinyformer.data import RELATIONS, words
from tinyformer.embeddings import WordVectors, analogy_accuracy, train_skipgram
from tinyformer.experiments import ch01

SIZE = 1_000_000
TARGET_SECONDS, TARGET_RATIO = 60.0, 3.0
SETTINGS = dict(dim=50, window=5, negatives=5, epochs=5, lr=0.025)
RESULTS = Path(__file__).resolve().parent / "results" / "skipgram.md"


def corpus(n_words: int) -> list[str]:
    """The first n_words words of chapter 1's language."""
    sentences, tokens = max(n_words // 10, 100), []
    while len(tokens) < n_words:
        tokens = words(ch01.corpus(sentences, seed=0).text)
        sentences *= 2
    return tokens[:n_words]


def scores(wv: WordVectors) -> dict:
    return {name: (analogy_accuracy(wv, pairs), analogy_accuracy(wv, pairs, "nearest"))
            for name, pairs in RELATIONS.items()}


def ours(tokens: list[str]) -> dict:
    start = time.perf_counter()
    wv, _, _ = train_skipgram(tokens, batch_size=512, seed=0, progress=False, **SETTINGS)
    return dict(seconds=time.perf_counter() - start, scores=scores(wv))


def gensim(tokens: list[str]) -> dict:
    from gensim.models import Word2Vec

    chunks = [tokens[i:i + 10_000] for i in range(0, len(tokens), 10_000)]   # its longest sentence
    s = SETTINGS
    start = time.perf_counter()
    model = Word2Vec(chunks, vector_size=s["dim"], window=s["window"], negative=s["negatives"],
                     epochs=s["epochs"], alpha=s["lr"], sg=1, min_count=1, sample=0, workers=1,
                     seed=0, shrink_windows=False)
    seconds = time.perf_counter() - start
    wv = WordVectors(list(model.wv.index_to_key), torch.tensor(model.wv.vectors))
    return dict(seconds=seconds, scores=scores(wv))


def table(n: int, rows: dict, quick: bool, load: str) -> tuple[str, bool]:
    a, b = rows["tinyformer train_skipgram"], rows.get("gensim Word2Vec")
    ratio = a["seconds"] / b["seconds"] if b is not None else None
    ok = a["seconds"] <= TARGET_SECONDS and (ratio is None or ratio <= TARGET_RATIO)
    names = list(RELATIONS)
    lines = [
        f"Skip-gram with negative sampling on {n:,} words of chapter 1's language"
        f"{', --quick (not a measurement)' if quick else ''}. Load average: {load}.",
        "",
        "| implementation | seconds | " + " | ".join(f"{r} (baseline)" for r in names) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in names) + " |",
    ]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['seconds']:.1f} | " + " | ".join(
            f"{r['scores'][k][0]:.0%} ({r['scores'][k][1]:.0%})" for k in names) + " |")
    lines += ["", f"Ours: {a['seconds']:.1f} s (target ≤ {TARGET_SECONDS:.0f} s)"
              + (f", {ratio:.2f}× gensim's time (target ≤ {TARGET_RATIO:.0f}×)" if ratio else "")
              + f" → {'pass' if ok else 'FAIL'}."]
    return "\n".join(lines) + "\n", ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="50,000 words (a smoke test)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    start_load = load_average()
    tokens = corpus(50_000 if a.quick else SIZE)
    rows = {"tinyformer train_skipgram": ours(tokens)}
    try:
        rows["gensim Word2Vec"] = gensim(tokens)
    except ImportError:
        print("gensim is not installed (pip install gensim): only ours is measured")
    out, ok = table(len(tokens), rows, a.quick, f"{start_load} at start, {load_average()} at end")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(out, encoding="utf-8")
    print(out, end="")
    return 0 if ok or a.quick else 1


if __name__ == "__main__":
    raise SystemExit(main())
