"""Chapter 6's main run at several sizes on a GPU: time and validation loss.

    python tools/gpu_sizes.py [--out PATH] [NAME ...]      (on a machine with a CUDA GPU)

Trains the chapter's GPT on the chapter's corpus (BPE with 512 tokens, every
tenth paragraph held out) at each size below, with the chapter's schedule
(AdamW, 50 warm-up steps, cosine decay; bf16 autocast, as train() does on a
GPU), and writes lib/tinyformer/measured/h100-ch06.json: per run the time, tokens per
second, the validation loss every steps/20 steps, the best and the last, and
the training loss at the end. The chapter plots that file; CI never runs this
(it has no GPU). Seconds include the validation passes and, with compile, the
compilation.
"""
from __future__ import annotations

import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

import torch

from tinyformer import seed_everything
from tinyformer.data import english_split, pack_documents
from tinyformer.model import GPT, GPTConfig
from tinyformer.tokenizers import BPETokenizer
from tinyformer.training import train

OUT = Path(__file__).resolve().parents[1] / "lib" / "tinyformer" / "measured" / "h100-ch06.json"
KEYS = ["n_layer", "n_head", "d_model", "block_size", "batch_size", "steps",
        "lr", "compile"]
RUNS = {  # name: the KEYS
    "cpu-size": (4, 4, 128, 128, 16, 600, 2e-3, False),
    "gpu-branch-b64-400": (4, 4, 128, 128, 64, 400, 2e-3, False),
    "gpu-branch-b64-400-compile": (4, 4, 128, 128, 64, 400, 2e-3, True),
    "cpu-size-b64-600": (4, 4, 128, 128, 64, 600, 2e-3, False),
    "cpu-size-b64-1500": (4, 4, 128, 128, 64, 1500, 2e-3, False),
    "4x256-b32-400": (4, 4, 256, 256, 32, 400, 1e-3, False),
    "4x256-b32-600": (4, 4, 256, 256, 32, 600, 1e-3, False),
    "4x256-b32-1000": (4, 4, 256, 256, 32, 1000, 1e-3, False),
    "6x256-b32-1000": (6, 8, 256, 256, 32, 1000, 1e-3, False),
    "6x384-b64-250": (6, 6, 384, 256, 64, 250, 1e-3, False),
    "6x384-b64-1000": (6, 6, 384, 256, 64, 1000, 1e-3, False),
    "6x384-b64-1000-compile": (6, 6, 384, 256, 64, 1000, 1e-3, True),
    "6x384-b64-3000": (6, 6, 384, 256, 64, 3000, 2e-3, False),
}


def corpus():
    train_text, val_text = english_split()
    bpe = BPETokenizer.train(train_text, 512, special_tokens=["<|endoftext|>"])
    eot = bpe.special_tokens["<|endoftext|>"]

    def ids(text):
        return pack_documents([bpe.encode(p) for p in text.split("\n")], eot_id=eot)

    return bpe, ids(train_text), ids(val_text)


def measure(name, bpe, train_ids, val_ids) -> dict:
    run = dict(zip(KEYS, RUNS[name]))
    seed_everything(0)
    config = GPTConfig(vocab_size=bpe.vocab_size, block_size=run["block_size"],
                       n_layer=run["n_layer"], n_head=run["n_head"],
                       d_model=run["d_model"])
    model = GPT(config).cuda()
    torch.cuda.synchronize()
    start = time.perf_counter()
    h = train(model, train_ids, steps=run["steps"], batch_size=run["batch_size"],
              lr=run["lr"], warmup=50, val_data=val_ids,
              eval_every=max(50, run["steps"] // 20), eval_batches=20,
              progress=False, compile=run["compile"])
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    val = h["val_loss"]
    best = min(range(len(val)), key=val.__getitem__)
    tokens = run["steps"] * run["batch_size"] * run["block_size"]
    return {"name": name, **run,
            "params": sum(p.numel() for p in model.parameters()),
            "seconds": round(seconds, 1), "tokens_per_s": round(tokens / seconds),
            "val_last": round(val[-1], 3), "val_best": round(val[best], 3),
            "best_step": h["val_step"][best],
            "train_last20": round(sum(h["loss"][-20:]) / 20, 3),
            "epochs": round(tokens / len(train_ids), 1),
            "curve": [(s, round(v, 3)) for s, v in zip(h["val_step"], val)]}


def main(names: list[str], out: Path = OUT) -> None:
    if not torch.cuda.is_available():
        sys.exit("tools/gpu_sizes.py measures GPU runs: no CUDA GPU here")
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        sys.exit(f"unknown runs {unknown}; choose from {sorted(RUNS)}")
    bpe, train_ids, val_ids = corpus()
    doc = {"what": "chapter 6's main run at several sizes on the chapter's corpus "
                   "(BPE-512, every 10th paragraph held out), AdamW, cosine decay, 50 "
                   "warm-up steps, bf16 autocast; seconds include validation every "
                   "steps/20 (20 batches) and, with compile, the compilation",
           "made_by": "tools/gpu_sizes.py", "date": date.today().isoformat(),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "python": platform.python_version(),
           "train_tokens": len(train_ids), "val_tokens": len(val_ids), "runs": []}
    out.parent.mkdir(exist_ok=True)
    for name in names or RUNS:
        doc["runs"].append(measure(name, bpe, train_ids, val_ids))
        print(json.dumps({k: v for k, v in doc["runs"][-1].items() if k != "curve"}),
              flush=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")   # after every run: nothing lost
    print(f"wrote {out}")


if __name__ == "__main__":
    args = sys.argv[1:]
    path = OUT
    if args[:1] == ["--out"]:
        path, args = Path(args[1]), args[2:]
    main(args, path)
