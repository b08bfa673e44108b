"""Chapter 7's laboratory: the word-level data, one run's bookkeeping (tokens, parameters, compute)
and a sweep that resumes from its JSON file instead of training a finished run again."""

from __future__ import annotations

import json

import pytest
import torch

from tinyformer.data import words
from tinyformer.experiments import ch07
from tinyformer.model import GPT
from tinyformer.scaling import count_params


@pytest.fixture(scope="module")
def data():
    return ch07.word_data(n_train=300, n_val=50)


def test_word_data_is_one_token_per_word(data):
    train_ids, val_ids, vocab = data
    assert vocab == sorted(set(vocab)) and "." in vocab and "it" in vocab
    assert train_ids.dtype == torch.int64 and int(train_ids.max()) < len(vocab)
    from tinyformer.data import synthetic_corpus
    assert [vocab[i] for i in train_ids[:30]] == words(synthetic_corpus(300, seed=0).text)[:30]
    assert len(val_ids) == len(words(synthetic_corpus(50, seed=10_000).text))


def test_run_reports_what_it_trained(data):
    train_ids, val_ids, vocab = data
    tokens = 3 * ch07.BATCH_SIZE * ch07.BLOCK_SIZE + 5          # rounded down to 3 whole steps
    r = ch07.run(8, tokens, train_ids, val_ids, len(vocab), seed=3)
    model = GPT(ch07.config_for(8, len(vocab)))
    assert r["steps"] == 3 and r["D"] == 3 * ch07.BATCH_SIZE * ch07.BLOCK_SIZE
    assert r["N"] == count_params(model) and r["N_total"] == count_params(model, non_embedding=False)
    assert r["C"] == 6 * r["N"] * r["D"] and r["loss"] > 0
    assert ch07.run(8, tokens, train_ids, val_ids, len(vocab), seed=3)["loss"] == r["loss"]   # reproducible
    with pytest.raises(ValueError, match="tokens must be at least 768"):
        ch07.run(8, 100, train_ids, val_ids, len(vocab))


def test_sweep_resumes_from_its_file(data, tmp_path, monkeypatch):
    train_ids, val_ids, vocab = data
    path = tmp_path / "sweep.json"
    tokens = ch07.BATCH_SIZE * ch07.BLOCK_SIZE
    first = ch07.sweep([(8, tokens, 0), (12, tokens, 0)], train_ids, val_ids, len(vocab), path=path, progress=False)
    assert [r["d_model"] for r in json.loads(path.read_text())] == [8, 12]
    calls = []
    real = ch07.run
    monkeypatch.setattr(ch07, "run", lambda *a, **k: calls.append(a[:2]) or real(*a, **k))
    again = ch07.sweep([(8, tokens, 0), (12, tokens, 0), (16, tokens, 0)], train_ids, val_ids, len(vocab),
                       path=path, progress=False)
    assert calls == [(16, tokens)]                              # only the new run was trained
    assert again[:2] == first and len(json.loads(path.read_text())) == 3
