"""Chapter 6's trained GPT, shipped with the library so that later chapters need not retrain it.

Chapters 9 (LoRA) and 10 (the logit lens) start from the model chapter 6 trains in its main run:
a 4-layer GPT on the book's English corpus with a 512-token BPE. Retraining it costs about two
minutes on a laptop's two cores, which would be most of a chapter's budget, twice. So the weights
are stored in the package (``pretrained/english-gpt.pt``, 3.5 MB in float32) beside a JSON record
of everything that made them: the tokenizer, the configuration, the training settings, the
SHA-256 of the file and the validation loss it reached. :func:`english_gpt` checks the SHA-256
before it loads the weights; :func:`train_english_gpt` is the recipe itself, which
``tools/make_pretrained.py`` runs to regenerate the file and a test runs to check that a retrained
model agrees with the stored one. The tokenizer is not stored: training it takes a fifth of a
second and is deterministic (:func:`english_data`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import torch

from tinyformer.data import english_split, pack_documents
from tinyformer.model import GPT, GPTConfig
from tinyformer.tokenizers import BPETokenizer

HERE = Path(__file__).parent / "pretrained"
WEIGHTS = HERE / "english-gpt.pt"
RECORD = HERE / "english-gpt.json"

# chapter 6, "The main run": the tokenizer, the model and the CPU run, exactly as the chapter sets them
VOCAB_SIZE = 512
SPECIAL = ["<|endoftext|>"]
#: The main run's model sizes (:func:`english_config` adds the vocabulary).
CONFIG = dict(block_size=128, n_layer=4, n_head=4, d_model=128)
#: The main run's training settings (:func:`~tinyformer.training.train`'s arguments).
RUN = dict(steps=600, batch_size=16, lr=2e-3, warmup=50, eval_every=100, eval_batches=20, seed=0)


def english_data() -> tuple[BPETokenizer, torch.Tensor, torch.Tensor]:
    """Chapter 6's tokenizer and token streams: ``(bpe, train_ids, val_ids)``, the streams 1-D
    int64 tensors ``(n_tokens,)``.

    The BPE (512 tokens, with ``<|endoftext|>``) is trained on the training split of
    :func:`~tinyformer.data.english_split`; each paragraph is encoded on its own and the paragraphs
    are packed with an end-of-text token after each (:func:`~tinyformer.data.pack_documents`)."""
    train_text, val_text = english_split()
    bpe = BPETokenizer.train(train_text, VOCAB_SIZE, special_tokens=SPECIAL)
    eot = bpe.special_tokens[SPECIAL[0]]
    train_ids = pack_documents([bpe.encode(p) for p in train_text.split("\n")], eot_id=eot)
    val_ids = pack_documents([bpe.encode(p) for p in val_text.split("\n")], eot_id=eot)
    return bpe, train_ids, val_ids


def english_config(bpe: BPETokenizer | None = None) -> GPTConfig:
    """The main run's :class:`~tinyformer.model.GPTConfig` (4 layers, 4 heads, width 128)."""
    return GPTConfig(vocab_size=VOCAB_SIZE if bpe is None else bpe.vocab_size, **CONFIG)


def train_english_gpt(progress: bool = True) -> tuple[GPT, dict]:
    """Train chapter 6's main run from scratch on the CPU (about two minutes on two cores):
    returns ``(model, history)`` (see :func:`~tinyformer.training.train`)."""
    from tinyformer.setup import seed_everything
    from tinyformer.training import train

    bpe, train_ids, val_ids = english_data()
    seed_everything(0)
    model = GPT(english_config(bpe))
    history = train(model, train_ids, val_data=val_ids, progress=progress, **RUN)
    return model, history


def sha256(path) -> str:
    """The SHA-256 of a file's bytes, in hex."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def record() -> dict:
    """The stored record of the shipped weights: tokenizer, configuration, run settings, the
    SHA-256 of ``english-gpt.pt``, the validation loss at the end of training, and how the file
    was made."""
    return json.loads(RECORD.read_text())


def english_gpt(device=None) -> tuple[GPT, BPETokenizer]:
    """Chapter 6's trained model and its tokenizer: ``(model, bpe)``, the model in eval mode on
    ``device`` (default: the CPU). Raises ``RuntimeError`` if the stored file's SHA-256 is not the
    recorded one (a damaged or replaced file)."""
    rec = record()
    if not WEIGHTS.exists():
        raise RuntimeError(f"the pretrained weights are missing: {WEIGHTS} (reinstall tinyformer, or run "
                           f"tools/make_pretrained.py)")
    got = sha256(WEIGHTS)
    if got != rec["sha256"]:
        raise RuntimeError(f"{WEIGHTS.name} has SHA-256 {got[:16]}..., the record says {rec['sha256'][:16]}...: "
                           f"the file is damaged or was replaced; tools/make_pretrained.py regenerates it")
    bpe = english_data()[0]
    config = english_config(bpe)
    if asdict(config) != rec["config"]:
        raise RuntimeError("the library's GPTConfig no longer matches the stored model's; regenerate the "
                           "weights with tools/make_pretrained.py")
    model = GPT(config)
    model.load_state_dict(torch.load(WEIGHTS, map_location="cpu", weights_only=True))
    return model.to(device or "cpu").eval(), bpe


def save_english_gpt(model: GPT, history: dict, note: str) -> dict:
    """Write ``model``'s weights and the record beside them (used by ``tools/make_pretrained.py``)."""
    HERE.mkdir(exist_ok=True)
    torch.save(model.cpu().state_dict(), WEIGHTS)     # tied weights: one storage, saved once
    rec = dict(tokenizer=dict(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL, corpus="english_split()"),
               config=asdict(model.config), run=RUN, sha256=sha256(WEIGHTS),
               bytes=WEIGHTS.stat().st_size, val_loss=history["val_loss"][-1],
               val_step=history["val_step"][-1], torch=torch.__version__, made_by=note)
    RECORD.write_text(json.dumps(rec, indent=1) + "\n")
    return rec


__all__ = ["CONFIG", "RUN", "english_config", "english_data", "english_gpt", "record", "save_english_gpt",
           "sha256", "train_english_gpt"]
