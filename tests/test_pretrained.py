"""The trained English GPT shipped with the library (tinyformer.pretrained): the file is the one its
record describes, it loads as chapter 6's main-run model, and a retrained model agrees with it."""

from __future__ import annotations

import shutil
from dataclasses import asdict

import pytest
import torch

from tinyformer import pretrained
from tinyformer.data import get_batch
from tinyformer.model import GPT
from tinyformer.training import estimate_loss


@pytest.fixture(scope="module")
def shipped():
    return pretrained.english_gpt()


def test_the_record_describes_chapter_6s_main_run():
    rec = pretrained.record()
    assert rec["config"] == asdict(pretrained.english_config())
    assert (rec["config"]["n_layer"], rec["config"]["n_head"], rec["config"]["d_model"]) == (4, 4, 128)
    assert rec["run"] == pretrained.RUN and rec["val_step"] == pretrained.RUN["steps"]
    assert rec["bytes"] == pretrained.WEIGHTS.stat().st_size
    assert rec["sha256"] == pretrained.sha256(pretrained.WEIGHTS)


def test_the_shipped_model_loads_in_eval_mode_with_its_tokenizer(shipped):
    model, bpe = shipped
    assert isinstance(model, GPT) and not model.training and bpe.vocab_size == 512
    assert model.lm_head.weight is model.token_embedding.weight          # tied, as trained
    n = sum(p.numel() for p in model.parameters())
    assert 4 * n < pretrained.WEIGHTS.stat().st_size < 4 * n + 100_000    # float32, stored once
    assert bpe.decode(bpe.encode("The model reads English.")) == "The model reads English."


def test_the_shipped_model_reaches_the_recorded_validation_loss(shipped):
    model, _ = shipped
    _, _, val_ids = pretrained.english_data()
    rec = pretrained.record()
    got = estimate_loss(model, val_ids, pretrained.RUN["batch_size"], pretrained.CONFIG["block_size"],
                        pretrained.RUN["eval_batches"])
    assert got == pytest.approx(rec["val_loss"], abs=1e-4)
    unigram = torch.bincount(val_ids, minlength=512).float() / len(val_ids)
    entropy = float(-(unigram[unigram > 0] * unigram[unigram > 0].log()).sum())
    assert got < entropy - 1.5                                               # it learned more than frequencies


def test_a_damaged_file_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "english-gpt.pt"
    shutil.copy(pretrained.WEIGHTS, bad)
    data = bytearray(bad.read_bytes())
    data[-100] ^= 1
    bad.write_bytes(bytes(data))
    monkeypatch.setattr(pretrained, "WEIGHTS", bad)
    with pytest.raises(RuntimeError, match="SHA-256"):
        pretrained.english_gpt()
    monkeypatch.setattr(pretrained, "WEIGHTS", tmp_path / "missing.pt")
    with pytest.raises(RuntimeError, match="missing"):
        pretrained.english_gpt()


def test_retraining_from_the_recipe_agrees_with_the_shipped_model(shipped):
    # the recipe run again (about three minutes on one core): other thread counts add the sums in
    # another order, so the weights differ in their last bits and drift apart over 600 steps; what
    # must agree is the model's quality and its predictions
    model, _ = shipped
    fresh, history = pretrained.train_english_gpt(progress=False)
    assert history["val_loss"][-1] == pytest.approx(pretrained.record()["val_loss"], abs=0.03)
    _, _, val_ids = pretrained.english_data()
    x, _ = get_batch(val_ids, 8, 128, torch.Generator().manual_seed(7))
    with torch.no_grad():
        p, q = model(x).log_softmax(-1), fresh.eval()(x).log_softmax(-1)
    kl = float((p.exp() * (p - q)).sum(-1).mean())                          # nats per position
    agree = float((p.argmax(-1) == q.argmax(-1)).float().mean())
    assert kl < 0.1 and agree > 0.8, (kl, agree)
