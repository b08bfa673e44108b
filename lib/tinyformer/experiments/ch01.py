"""Chapter 1 (static vs contextual embeddings): the running example's data, model and probes.

The chapter's language is :func:`~tinyformer.data.synthetic_corpus` with both of its options on
(:data:`LANGUAGE`): relation pairs that share contexts instead of sentences, and pronoun sentences
followed by ``it means the <antecedent> .``, so that predicting the next word requires knowing
what "it" refers to. :func:`train_context_model` trains a small word-level GPT on it (chapter 6's
``train``); :func:`pronoun_batch` lays out held-out pronoun sentences with the positions the
chapter probes; :func:`contextual_vectors` reads the residual stream at every layer. Chapters 2 and
10 come back to this model.
"""

from __future__ import annotations

import torch

from tinyformer.data import synthetic_corpus, words
from tinyformer.model import GPT, GPTConfig
from tinyformer.training import estimate_loss, train
from tinyformer.validation import check_int

#: The options of :func:`~tinyformer.data.synthetic_corpus` that make the chapter's language.
LANGUAGE = dict(relation_style="context", referent_clause=True)
#: The contextual model: four blocks of width 64 reading 32 words at a time.
N_LAYER, N_HEAD, D_MODEL, BLOCK_SIZE, BATCH_SIZE = 4, 4, 64, 32, 32


def corpus(n_sentences: int, seed: int = 0):
    """``n_sentences`` of the chapter's language (:data:`LANGUAGE`)."""
    return synthetic_corpus(n_sentences, seed=seed, **LANGUAGE)


def vocabulary() -> list[str]:
    """Every word the language can produce, sorted: the same ids for every corpus drawn from it
    (found by drawing a large corpus, so a small one never shifts an id)."""
    return sorted(set(words(corpus(20_000, seed=12_345).text)))


def ids_of(text: str, vocab: list[str]) -> torch.Tensor:
    """The token ids of ``text``'s words."""
    index = {w: i for i, w in enumerate(vocab)}
    return torch.tensor([index[w] for w in words(text)])


def train_context_model(n_sentences: int = 30_000, steps: int = 1500, seed: int = 0,
                        lr: float = 3e-3, device=None, progress: bool = True):
    """A GPT of :data:`N_LAYER` blocks of width :data:`D_MODEL`, trained for ``steps`` steps of
    :data:`BATCH_SIZE` windows of :data:`BLOCK_SIZE` words on ``n_sentences`` sentences of the
    language (a cosine schedule, no weight decay). Returns ``(model, vocab, history)``."""
    vocab = vocabulary()
    data = ids_of(corpus(check_int("n_sentences", n_sentences), seed=seed).text, vocab)
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=len(vocab), block_size=BLOCK_SIZE, n_layer=N_LAYER,
                          n_head=N_HEAD, d_model=D_MODEL))
    if device is not None:
        model = model.to(device)
    history = train(model, data, steps=check_int("steps", steps), batch_size=BATCH_SIZE, lr=lr,
                    warmup=max(steps // 20, 1), weight_decay=0.0, eval_every=steps,
                    eval_batches=1, seed=seed, progress=progress, amp=False)
    return model, vocab, history


def held_out_loss(model, vocab, n_sentences: int = 2_000, seed: int = 10_000) -> float:
    """The model's loss in nats per word on sentences it never trained on."""
    data = ids_of(corpus(n_sentences, seed=seed).text, vocab)
    return estimate_loss(model, data, batch_size=64, block_size=BLOCK_SIZE, n_batches=20)


def pronoun_batch(n_sentences: int, vocab: list[str], seed: int = 20_000) -> dict:
    """The pronoun sentences among ``n_sentences`` held-out sentences, each on its own row from
    position 0 (padded at the end with "." ids, which a causal model never reads back). Returns
    ``{"ids" (N, T), "label" (N,): 0 when "it" is the first noun, 1 when the second,
    "it", "adjective", "period", "the" (N,): the position of "it", of the deciding adjective,
    of the period that ends the first clause and of "the" before the named referent (where the
    next word is the referent), "first", "second" (N,): the ids of the two nouns}``."""
    c = corpus(check_int("n_sentences", n_sentences), seed=seed)
    lines = c.text.split("\n")
    index = {w: i for i, w in enumerate(vocab)}
    rows, out = [], {k: [] for k in ("label", "it", "adjective", "period", "the", "first",
                                      "second")}
    for p in c.pronouns:
        ws = words(lines[p["line"]])
        rows.append([index[w] for w in ws])
        it = ws.index("it")
        nouns = [ws[1], ws[it - 2]]            # "the <a> ... the <b> because it"
        out["label"].append(nouns.index(p["antecedent"]))
        out["it"].append(it)
        out["adjective"].append(it + 3)        # it was too <adjective>
        out["period"].append(it + 4)
        out["the"].append(len(ws) - 3)         # ... it means the <referent> .
        out["first"].append(index[nouns[0]])
        out["second"].append(index[nouns[1]])
    if not rows:
        raise ValueError(f"no pronoun sentence among n_sentences={n_sentences}: draw more")
    T = max(map(len, rows))
    ids = torch.full((len(rows), T), index["."])
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
    return {"ids": ids, **{k: torch.tensor(v) for k, v in out.items()}}


@torch.no_grad()
def contextual_vectors(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    """The residual stream of ``model`` on ``idx`` (B, T): the token and position embeddings,
    then each block's output, stacked: (n_layer + 1, B, T, d_model)."""
    model.eval()
    x = model.token_embedding(idx)
    if model.config.positions == "learned":
        x = x + model.position_embedding(idx.shape[1], 0)
    elif model.config.positions == "sinusoidal":
        x = x + model.position_table[:idx.shape[1]]
    _, stream = model.blocks(x, return_stream=True)
    return torch.stack(stream)


@torch.no_grad()
def referent_accuracy(model: GPT, batch: dict) -> float:
    """How often the model, after "... it means the", gives the antecedent a higher logit than
    the other noun (a guess scores 50%; a tie counts as the first noun)."""
    logits = model(batch["ids"])                                   # (N, T, V)
    rows = torch.arange(len(batch["ids"]))
    at = logits[rows, batch["the"]]                                # (N, V)
    first, second = at[rows, batch["first"]], at[rows, batch["second"]]
    picked = (second > first).long()                               # 1: the second noun
    return float((picked == batch["label"]).float().mean())
