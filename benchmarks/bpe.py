"""The book's byte-level BPE against Hugging Face `tokenizers`, trained and run on the same 1 MB.

    python benchmarks/bpe.py [--quick] [--out PATH]

Issue 11: training tinyformer's BPETokenizer on 1 MB of text to a 1,000-token vocabulary takes
at most 10 s on the course's 2-core CPU, and encoding 1 MB at most 2 s. Hugging Face's
`tokenizers` (Rust) trains a byte-level BPE of the same vocabulary on the same text, in the same
run, for comparison: times, their ratio, and compression (tokens per byte of UTF-8) of both.

The text needs no download: CPython's documentation topics (``pydoc_data``), then the
standard library's Python sources in sorted order, until 1,000,000 characters; the same on every
machine with the same Python. Method: each tokenizer is trained once (training is deterministic
and long enough to time once); encoding is timed as the best of three runs, each on a fresh
tokenizer loaded from its file, so that no cache from training helps.
Writes benchmarks/results/bpe.md (or ``--out``) and prints the table.
"""

from __future__ import annotations

import argparse
import sysconfig
import tempfile
import time
from pathlib import Path

from train_throughput import load_average  # the same report of the machine's load

from tinyformer.tokenizers import BPETokenizer

SIZE, VOCAB = 1_000_000, 1000
TARGETS = {"train": 10.0, "encode": 2.0}   # seconds, for ours
RESULTS = Path(__file__).resolve().parent / "results" / "bpe.md"


def corpus(n_chars: int) -> str:
    """pydoc_data's topics, then the standard library's sources, cut at n_chars characters."""
    from pydoc_data import topics

    parts = [topics.topics[k] for k in sorted(topics.topics)]
    total = sum(map(len, parts))
    lib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(lib.glob("*.py")):
        if total >= n_chars:
            break
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        total += len(text)
    return "\n".join(parts)[:n_chars]


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def ours(text: str, vocab: int, folder: Path) -> dict:
    t_train, tok = timed(lambda: BPETokenizer.train(text, vocab))
    tok.save(folder / "ours.json")
    encodes = []
    for _ in range(3):
        fresh = BPETokenizer.load(folder / "ours.json")
        encodes.append(timed(lambda t=fresh: t.encode(text)))
    t_encode, ids = min(encodes, key=lambda e: e[0])
    assert fresh.decode(ids) == text
    return dict(train=t_train, encode=t_encode, tokens=len(ids), vocab=tok.vocab_size)


def hugging_face(text: str, vocab: int, folder: Path) -> dict:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t_train, _ = timed(lambda: tok.train_from_iterator([text], trainer))
    tok.save(str(folder / "hf.json"))
    encodes = []
    for _ in range(3):
        fresh = Tokenizer.from_file(str(folder / "hf.json"))
        encodes.append(timed(lambda t=fresh: t.encode(text).ids))
    t_encode, ids = min(encodes, key=lambda e: e[0])
    return dict(train=t_train, encode=t_encode, tokens=len(ids), vocab=tok.get_vocab_size())


def table(text: str, rows: dict, quick: bool, load: str) -> tuple[str, bool]:
    n_bytes = len(text.encode("utf-8", "surrogatepass"))
    a, b = rows["tinyformer BPETokenizer"], rows.get("Hugging Face tokenizers")
    ok = a["train"] <= TARGETS["train"] and a["encode"] <= TARGETS["encode"]
    lines = [
        f"Byte-level BPE on {len(text):,} characters ({n_bytes:,} bytes) to a {VOCAB:,}-token "
        f"vocabulary{', --quick (not a measurement)' if quick else ''}. Load average: {load}.",
        "",
        "| tokenizer | vocabulary | train (s) | encode (s) | tokens | tokens per byte |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['vocab']:,} | {r['train']:.2f} | {r['encode']:.2f} | "
                     f"{r['tokens']:,} | {r['tokens'] / n_bytes:.3f} |")
    lines += ["", f"Ours: train {a['train']:.2f} s (target ≤ {TARGETS['train']:.0f} s), encode "
              f"{a['encode']:.2f} s (target ≤ {TARGETS['encode']:.0f} s) → {'pass' if ok else 'FAIL'}."]
    if b is not None:
        lines.append(f"Ours / Hugging Face: train {a['train'] / b['train']:.1f}×, encode "
                     f"{a['encode'] / b['encode']:.1f}× the time; tokens {a['tokens'] / b['tokens']:.3f}×.")
    return "\n".join(lines) + "\n", ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="50,000 characters (a smoke test)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    start_load = load_average()
    text = corpus(50_000 if a.quick else SIZE)
    with tempfile.TemporaryDirectory() as tmp:
        rows = {"tinyformer BPETokenizer": ours(text, VOCAB, Path(tmp))}
        try:
            rows["Hugging Face tokenizers"] = hugging_face(text, VOCAB, Path(tmp))
        except ImportError:
            print("Hugging Face tokenizers is not installed: only ours is measured")
    out, ok = table(text, rows, a.quick, f"{start_load} at start, {load_average()} at end")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(out, encoding="utf-8")
    print(out, end="")
    return 0 if ok or a.quick else 1


if __name__ == "__main__":
    raise SystemExit(main())
