"""Tests for chapter 1's experiment helpers (tinyformer.experiments.ch01): the pronoun batch's
positions against the sentences and the corpus's ground truth, the residual stream against the
model's own modules, and the referent accuracy against models whose logits are rigged. No training
beyond two steps."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from tinyformer.data import PRONOUN_TEMPLATES, words
from tinyformer.experiments import ch01
from tinyformer.model import GPT, GPTConfig

# many tiny kernels (Adam steps, SGD batches, small models): one thread is fastest, and far faster
# on a busy machine
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def vocab() -> list[str]:
    return ch01.vocabulary()


@pytest.fixture(scope="module")
def batch(vocab) -> dict:
    return ch01.pronoun_batch(300, vocab)


def template_of(ws: list[str]):
    """The pronoun template whose fixed words (verb and preposition) the sentence has."""
    for t in PRONOUN_TEMPLATES:
        fixed = words(t[0].format(a="A", b="B", adj="C"))
        if all(f == w for f, w in zip(fixed, ws) if f not in ("a", "b", "c")) and len(fixed) == len(ws) - 5:
            return t
    raise AssertionError(f"no template fits {ws}")


def test_vocabulary_is_sorted_and_covers_the_language(vocab):
    assert vocab == sorted(set(vocab))
    for seed in (0, 1):
        assert set(words(ch01.corpus(3000, seed=seed).text)) <= set(vocab)
    for w in ("it", "means", "the", ".", "speaks", "loves", "spanish", "queen"):
        assert w in vocab
    text = "the king loves tea ."
    assert [vocab[i] for i in ch01.ids_of(text, vocab).tolist()] == words(text)


def test_pronoun_batch_positions_point_at_the_right_words(vocab, batch):
    ids = batch["ids"]
    N, T = ids.shape
    assert N > 80
    for key in ("label", "it", "adjective", "period", "the", "first", "second"):
        assert batch[key].shape == (N,) and batch[key].dtype == torch.long
    rows = torch.arange(N)
    assert (ids[rows, batch["it"]] == vocab.index("it")).all()
    assert (ids[rows, batch["period"]] == vocab.index(".")).all()
    assert (ids[rows, batch["the"]] == vocab.index("the")).all()
    # after "the" comes the antecedent: the first noun when the label is 0, the second when 1
    antecedent = torch.where(batch["label"] == 0, batch["first"], batch["second"])
    assert (ids[rows, batch["the"] + 1] == antecedent).all()
    assert (ids[rows, 1] == batch["first"]).all()
    assert (batch["first"] != batch["second"]).all()
    for n in range(N):
        ws = [vocab[i] for i in ids[n].tolist()]
        length = int(batch["the"][n]) + 3                  # ... the <referent> .
        assert ws[length - 1] == "."
        assert all(w == "." for w in ws[length:])          # padding
        sentence = ws[:length]
        template, firsts, seconds, adj_first, adj_second = template_of(sentence)
        assert vocab[batch["first"][n]] in firsts and vocab[batch["second"][n]] in seconds
        assert sentence[sentence.index("because") + 1] == "it" == sentence[batch["it"][n]]
        # the deciding adjective, from the list of the noun "it" refers to
        adjective = sentence[batch["adjective"][n]]
        assert adjective in (adj_first if batch["label"][n] == 0 else adj_second)
        assert sentence[batch["adjective"][n] - 2:batch["adjective"][n]] == ["was", "too"]
        assert batch["period"][n] == batch["adjective"][n] + 1
        assert sentence[batch["period"][n] + 1:batch["the"][n] + 1] == ["it", "means", "the"]
    assert T == int((batch["the"] + 3).max())
    assert 0.35 < batch["label"].float().mean() < 0.65   # both answers common


def test_pronoun_batch_agrees_with_the_corpus_ground_truth(vocab, batch):
    c = ch01.corpus(300, seed=20_000)
    lines = c.text.split("\n")
    assert len(c.pronouns) == len(batch["ids"])
    for n, p in enumerate(c.pronouns):
        first, second = vocab[batch["first"][n]], vocab[batch["second"][n]]
        named = (first, second)[int(batch["label"][n])]
        other = (second, first)[int(batch["label"][n])]
        assert (named, other) == (p["antecedent"], p["other"])
        assert vocab[batch["ids"][n, batch["adjective"][n]]] == p["adjective"]
        ws = words(lines[p["line"]])
        assert batch["ids"][n, :len(ws)].tolist() == [vocab.index(w) for w in ws]
    # another seed, other sentences
    other = ch01.pronoun_batch(300, vocab, seed=1)
    assert other["ids"].shape != batch["ids"].shape or not torch.equal(other["ids"], batch["ids"])


def test_pronoun_batch_errors(vocab):
    with pytest.raises(ValueError, match="n_sentences"):
        ch01.pronoun_batch(0, vocab)
    with pytest.raises(KeyError):
        ch01.pronoun_batch(50, vocab[:10])


def small_gpt(vocab_size: int, positions: str = "learned") -> GPT:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=vocab_size, block_size=32, n_layer=3, n_head=2, d_model=16,
                          positions=positions))
    with torch.no_grad():                   # make the final norm's parameters matter
        model.blocks.ln_f.weight.normal_()
        model.blocks.ln_f.bias.normal_()
    return model


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "rotary", "none"])
def test_contextual_vectors_are_the_residual_stream(vocab, batch, positions):
    model = small_gpt(len(vocab), positions)
    idx = batch["ids"][:6]
    stream = ch01.contextual_vectors(model, idx)
    B, T = idx.shape
    assert stream.shape == (3 + 1, B, T, 16)
    assert not stream.requires_grad
    # layer 0: the token embedding plus the position vectors added to the stream (none for rotary,
    # whose positions live inside the attention, and for none)
    x0 = model.token_embedding.weight[idx]
    if positions == "learned":
        x0 = x0 + model.position_embedding.weight[:T]
    elif positions == "sinusoidal":
        x0 = x0 + model.position_table[:T]
    assert_close(stream[0], x0)
    # each later layer: the block applied to the one before
    with torch.no_grad():
        for i, block in enumerate(model.blocks.blocks):
            assert_close(stream[i + 1], block(stream[i]))
        # the last layer, through the final norm and the unembedding: the model's logits
        assert_close(model.lm_head(model.blocks.ln_f(stream[-1])), model(idx))


class Rigged(nn.Module):
    """A stand-in for the model: at every position, logit 1 for the word ``pick`` chooses
    (from the row's ids and the batch), 0 for every other word."""

    def __init__(self, batch: dict, vocab_size: int, pick):
        super().__init__()
        self.batch, self.V, self.pick = batch, vocab_size, pick

    def forward(self, idx):
        N, T = idx.shape
        logits = torch.zeros(N, T, self.V)
        for n in range(N):
            logits[n, :, self.pick(n)] = 1.0
        return logits


def test_referent_accuracy_on_rigged_models(vocab, batch):
    b, V = batch, len(vocab)
    antecedent = torch.where(b["label"] == 0, b["first"], b["second"])
    other = torch.where(b["label"] == 0, b["second"], b["first"])
    assert ch01.referent_accuracy(Rigged(b, V, lambda n: int(antecedent[n])), b) == 1.0
    assert ch01.referent_accuracy(Rigged(b, V, lambda n: int(other[n])), b) == 0.0
    # always the first noun: right exactly when the label is 0
    share_first = sum(int(y) == 0 for y in b["label"]) / len(b["label"])
    got = ch01.referent_accuracy(Rigged(b, V, lambda n: int(b["first"][n])), b)
    assert got == pytest.approx(share_first)


def test_referent_accuracy_of_a_real_model_matches_a_loop(vocab, batch):
    model = small_gpt(len(vocab))
    acc = ch01.referent_accuracy(model, batch)
    with torch.no_grad():
        logits = model(batch["ids"])
    hits = 0
    for n in range(len(batch["ids"])):
        at = logits[n, batch["the"][n]]
        second_wins = bool(at[batch["second"][n]] > at[batch["first"][n]])
        hits += int(second_wins) == int(batch["label"][n])
    assert 0.0 <= acc <= 1.0
    assert acc == pytest.approx(hits / len(batch["ids"]))


def test_train_context_model_two_steps(vocab):
    model, got_vocab, history = ch01.train_context_model(n_sentences=300, steps=2, progress=False)
    assert got_vocab == vocab
    c = model.config
    assert (c.vocab_size, c.n_layer, c.n_head, c.d_model, c.block_size) == \
        (len(vocab), ch01.N_LAYER, ch01.N_HEAD, ch01.D_MODEL, ch01.BLOCK_SIZE)
    assert len(history["loss"]) == 2
    loss = ch01.held_out_loss(model, vocab, n_sentences=300)
    # two steps from a small initialisation: still about a uniform guess over the vocabulary
    assert abs(loss - math.log(len(vocab))) < 0.5
