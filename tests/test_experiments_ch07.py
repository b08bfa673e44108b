"""Chapter 7's laboratory: the word-level data, one run's bookkeeping (tokens, parameters, compute)
and a sweep that resumes from its JSON file instead of training a finished run again."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

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
    assert r["C"] == 6 * r["N"] * r["D"] and r["loss"] > 0 and r["lr"] == 1e-2
    assert r["C_full"] == ch07.flops_per_token(8, len(vocab)) * r["D"] > r["C"]
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


@pytest.mark.parametrize("d_model", [6, 16])
def test_flops_per_token_is_what_torch_counts(d_model):
    """One training step's FLOPs, counted by torch with attention written out as products, per token."""
    V = 50
    config = ch07.config_for(d_model, V)
    config.fused_attention = False
    model = GPT(config)
    idx = torch.randint(0, V, (2, ch07.BLOCK_SIZE))
    with FlopCounterMode(display=False) as counter:
        model.loss(idx, idx).backward()
    assert counter.get_total_flops() == ch07.flops_per_token(d_model, V) * idx.numel()
    assert ch07.flops_per_token(d_model, V) > 6 * count_params(model)   # the head and attention


def _entropy(p):
    return -sum(q * math.log(q) for q in p if q > 0)


def test_window_floor_on_streams_whose_answer_is_known():
    g = torch.Generator().manual_seed(0)
    # independent tokens: every prediction pays the same entropy, whatever it sees
    p = torch.tensor([0.5, 0.25, 0.125, 0.125])
    iid = torch.multinomial(p, 200_000, replacement=True, generator=g)
    H = _entropy(p.tolist())
    assert ch07.window_floor(iid, H, block_size=8) == pytest.approx(H, abs=2e-3)
    # pairs (a, a) with a uniform over 4 (at a random phase): the entropy rate is log(4)/2; a
    # window's first prediction, from one token, cannot know whether that token opens a pair
    a = torch.randint(0, 4, (50_000,), generator=g)
    pairs = a.repeat_interleave(2)[1:]
    rate = math.log(4) / 2
    # from one token x: half the time x opens a pair and the next is x, else it is uniform over 4,
    # so the next token is x with probability 5/8 and each other with 1/8
    first = _entropy([5 / 8, 1 / 8, 1 / 8, 1 / 8])
    # the one-token context pays `first`; from two tokens on, the plug-in bound is the rate
    expected = (first + 7 * rate) / 8
    assert ch07.window_floor(pairs, rate, block_size=8, orders=1) == pytest.approx(expected, abs=1e-3)
    assert ch07.window_floor(pairs, rate, block_size=8, orders=0) == pytest.approx(rate)


def test_window_floor_rejects_bad_input():
    ids = torch.arange(10) % 3
    with pytest.raises(ValueError, match="orders must be below block_size=4"):
        ch07.window_floor(ids, 1.0, block_size=4, orders=4)
    with pytest.raises(ValueError, match="entropy_rate must be a non-negative number"):
        ch07.window_floor(ids, -1.0)
    with pytest.raises(ValueError, match="ids must hold at least"):
        ch07.window_floor(ids[:3], 1.0)


def test_gpu_sweep_script_runs_its_check_on_the_cpu(tmp_path, monkeypatch):
    """tools/gpu_sweep_ch07.py's recording path, with two tiny runs on the CPU: the file it writes
    holds the recipe and runs identical to ch07.run's."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import gpu_sweep_ch07 as script

    out = tmp_path / "check-ch07.json"
    record = script.sweep((8,), (2,), (0, 1), torch.device("cpu"), out, n_train=300, n_val=50)
    assert json.loads(out.read_text()) == record and not out.with_suffix(".runs.json").exists()
    assert record["recipe"]["dtype"] == "float32" and [r["seed"] for r in record["runs"]] == [0, 1]
    train_ids, val_ids, vocab = ch07.word_data(n_train=300, n_val=50)
    again = ch07.run(8, 2 * ch07.BATCH_SIZE * ch07.BLOCK_SIZE, train_ids, val_ids, len(vocab), seed=1)
    assert record["runs"][1]["loss"] == again["loss"] and record["runs"][1]["steps"] == 2
    assert script.main(["--check"]) == 0
