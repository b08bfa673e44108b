"""Training (chapter 6): schedules against their closed forms, batches and packing, a loss that
falls, and a run stopped and resumed that ends with bitwise the same weights."""

from __future__ import annotations

import math

import pytest
import torch

from tinyformer.data import english_split, english_text, get_batch, pack_documents
from tinyformer.model import GPT, GPTConfig
from tinyformer.training import cosine_lr, estimate_loss, noam_lr, train


def tiny(seed=0, **changes):
    torch.manual_seed(seed)
    sizes = dict(vocab_size=20, block_size=16, n_layer=2, n_head=2, d_model=16)
    return GPT(GPTConfig(**{**sizes, **changes}))


STREAM = torch.arange(400) % 17  # a periodic stream: easy to learn


# --- schedules -------------------------------------------------------------------------------------

def test_noam_lr_is_the_papers_formula():
    for step in (1, 10, 399, 400, 401, 10_000):
        want = 512 ** -0.5 * min(step ** -0.5, step * 400 ** -1.5)
        assert noam_lr(step, 512, 400) == pytest.approx(want, rel=1e-12)
    peak = max(range(1, 2000), key=lambda s: noam_lr(s, 512, 400))
    assert peak == 400
    with pytest.raises(ValueError, match="step"):
        noam_lr(0, 512, 400)


def test_cosine_lr_warms_up_then_decays_to_the_floor():
    assert cosine_lr(1, 1.0, 10, 110) == pytest.approx(0.1)
    assert cosine_lr(10, 1.0, 10, 110) == pytest.approx(1.0)
    assert cosine_lr(60, 1.0, 10, 110, 0.1) == pytest.approx(0.55)   # half way: the mean
    assert cosine_lr(110, 1.0, 10, 110, 0.1) == pytest.approx(0.1)
    assert cosine_lr(500, 1.0, 10, 110, 0.1) == 0.1
    lrs = [cosine_lr(s, 1.0, 10, 110) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


# --- data ------------------------------------------------------------------------------------------

def test_get_batch_targets_are_the_inputs_shifted_by_one():
    data = torch.arange(100)
    x, y = get_batch(data, 8, 10, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 10) and x.dtype == torch.long
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(y[:, -1], x[:, -1] + 1)
    x2, _ = get_batch(data, 8, 10, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)
    assert int(x.max()) < 99 and int(y.max()) <= 99
    with pytest.raises(ValueError, match="block_size=100 needs at least 101 tokens"):
        get_batch(data, 2, 100)
    with pytest.raises(TypeError, match="integer token ids"):
        get_batch(torch.rand(50), 2, 4)


def test_pack_documents_separates_documents_with_end_of_text():
    stream = pack_documents([[1, 2, 3], torch.tensor([4, 5])], eot_id=0)
    assert stream.tolist() == [1, 2, 3, 0, 4, 5, 0]
    windows = pack_documents([[1, 2, 3], [4, 5], [6, 7, 8, 9]], eot_id=0, block_size=4)
    assert windows.tolist() == [[1, 2, 3, 0, 4], [4, 5, 0, 6, 7]]
    with pytest.raises(ValueError, match="too few for one window"):
        pack_documents([[1]], eot_id=0, block_size=8)
    with pytest.raises(ValueError, match="non-empty list"):
        pack_documents([], eot_id=0)


def test_the_corpus_is_the_shipped_file_on_every_python():
    import hashlib
    import platform

    from tinyformer import data

    text = english_text()
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == data.ENGLISH_SHA256
    assert 190_000 < len(text) < 210_000 and "\r" not in text
    if platform.python_version() == "3.11.7":      # the release the file was extracted from
        assert data.english_text_from_pydoc() == text


def test_english_split_is_deterministic_and_disjoint():
    train_text, val_text = english_split()
    paragraphs = english_text().split("\n")
    assert train_text.count("\n") + val_text.count("\n") + 2 == len(paragraphs)
    assert 0.08 < len(val_text) / (len(train_text) + len(val_text)) < 0.12
    assert english_split() == (train_text, val_text)
    assert val_text.split("\n") == paragraphs[9::10]


# --- training --------------------------------------------------------------------------------------

def test_training_lowers_the_loss_and_records_history():
    model = tiny()
    before = estimate_loss(model, STREAM, 8, 16)
    hist = train(model, STREAM, steps=60, batch_size=8, lr=1e-2, warmup=5, val_data=STREAM,
                 eval_every=20, progress=False)
    assert len(hist["loss"]) == 60 and hist["val_step"] == [20, 40, 60]
    assert hist["val_loss"][-1] < 0.5 * before
    assert hist["lr"][4] == pytest.approx(1e-2) and hist["lr"][-1] == pytest.approx(1e-3)
    assert model.training


def test_a_stopped_run_resumes_to_bitwise_the_same_weights(tmp_path):
    kwargs = dict(steps=24, batch_size=4, lr=5e-3, warmup=4, val_data=STREAM, eval_every=6,
                  progress=False)
    straight = tiny()
    train(straight, STREAM, **kwargs)

    calls = {"n": 0}

    def interrupted_loss(m, x, y):
        calls["n"] += m.training       # training batches only, not validation ones
        if calls["n"] == 11:           # during step 11: steps 1-10 are done
            raise KeyboardInterrupt
        return m.loss(x, y)

    path = tmp_path / "run.pt"
    with pytest.raises(KeyboardInterrupt):
        train(tiny(), STREAM, checkpoint=path, loss_fn=interrupted_loss, **kwargs)
    assert torch.load(path, weights_only=False)["step"] == 10
    resumed = tiny(seed=99)            # a fresh process: other initial weights
    hist = train(resumed, STREAM, checkpoint=path, **kwargs)
    assert hist["step"] == list(range(1, 25))
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_checkpoint_from_another_configuration_is_refused(tmp_path):
    path = tmp_path / "run.pt"
    train(tiny(), STREAM, steps=2, batch_size=2, checkpoint=path, progress=False)
    with pytest.raises(ValueError, match="does not fit this model.*d_model=16 \\(now 32\\)"):
        train(tiny(d_model=32), STREAM, steps=4, batch_size=2, checkpoint=path, progress=False)


def test_noam_and_adam_run():
    hist = train(tiny(), STREAM, steps=5, batch_size=2, schedule="noam", optimizer="adam", warmup=2,
                 lr=1.0, progress=False)
    assert hist["lr"][1] == pytest.approx(noam_lr(2, 16, 2))
    assert all(math.isfinite(v) for v in hist["loss"])


def test_bad_training_input_gets_clear_errors():
    with pytest.raises(ValueError, match="fewer than block_size"):
        train(tiny(), torch.arange(10), steps=1, batch_size=1, progress=False)
    with pytest.raises(ValueError, match="schedule must be"):
        train(tiny(), STREAM, steps=1, batch_size=1, schedule="linear", progress=False)
    with pytest.raises(ValueError, match="steps"):
        train(tiny(), STREAM, steps=0, batch_size=1, progress=False)


# --- public corpora --------------------------------------------------------------------------------

def test_load_corpus_verifies_and_reads_through_pooch(tmp_path, monkeypatch):
    import pooch

    from tinyformer import data
    seen = {}

    def fake_retrieve(url, known_hash, path, fname, progressbar):
        seen.update(url=url, known_hash=known_hash, path=path, fname=fname)
        (tmp_path / fname).write_text("First Citizen:\nBefore we proceed", encoding="utf-8")
        return str(tmp_path / fname)

    monkeypatch.setattr(pooch, "retrieve", fake_retrieve)
    text = data.load_corpus("tiny-shakespeare", cache_dir=tmp_path)
    assert text.startswith("First Citizen") and seen["known_hash"].startswith("sha256:")
    assert seen["url"].endswith("tinyshakespeare/input.txt") and seen["path"] == tmp_path


def test_load_corpus_errors_name_the_problem(monkeypatch):
    import pooch

    from tinyformer import data
    with pytest.raises(ValueError, match="unknown corpus 'shakespeare'.*tiny-shakespeare"):
        data.load_corpus("shakespeare")

    def offline(*args, **kwargs):
        raise OSError("Temporary failure in name resolution")

    monkeypatch.setattr(pooch, "retrieve", offline)
    with pytest.raises(ConnectionError, match="Are you offline"):
        data.load_corpus("tiny-shakespeare")


def test_bfloat16_autocast_runs_when_asked():
    hist = train(tiny(), STREAM, steps=3, batch_size=2, amp=True, progress=False)
    assert all(math.isfinite(v) for v in hist["loss"])


def test_plot_history_draws_training_and_validation_curves():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tinyformer.viz import plot_history
    hist = {"step": list(range(1, 51)), "loss": [5 - 0.05 * s for s in range(1, 51)],
            "val_step": [25, 50], "val_loss": [4.0, 3.0]}
    ax = plot_history(hist, smooth=10, label="run")
    lines = ax.get_lines()
    assert len(lines) == 2 and len(lines[0].get_xdata()) == 41       # a running mean of 10
    assert list(lines[1].get_xdata()) == [25, 50]
    assert lines[0].get_ydata()[0] == pytest.approx(sum(5 - 0.05 * s for s in range(1, 11)) / 10)
    plt.close("all")
    with pytest.raises(ValueError, match="history must be"):
        plot_history({"loss": []})


# torch's inductor imports torch.jit code that warns of its own deprecation,
# and dynamo warns of reading .grad while it traces: torch's, not ours
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_compiled_training_matches_eager_and_keeps_plain_names(tmp_path):
    # torch.compile fuses the forward pass; it must train the same weights
    # (to rounding) and leave checkpoints loadable by an uncompiled model
    eager = train(tiny(), STREAM, steps=3, batch_size=2, progress=False)
    model = tiny()
    ckpt = tmp_path / "run.pt"
    compiled = train(model, STREAM, steps=3, batch_size=2, progress=False,
                     compile=True, checkpoint=ckpt)
    assert compiled["loss"] == pytest.approx(eager["loss"], rel=1e-4)
    names = torch.load(ckpt, weights_only=False)["model"].keys()
    assert set(names) == set(model.state_dict())
    assert not any("_orig_mod" in n for n in names)


def test_history_records_the_gradient_norm_before_clipping():
    # step 1's batch, drawn again, and its gradient computed by hand
    model = tiny()
    x, y = get_batch(STREAM, 4, model.config.block_size, torch.Generator().manual_seed(0))
    ref = tiny()
    ref.loss(x, y).backward()
    by_hand = torch.cat([p.grad.flatten() for p in ref.parameters()]).norm().item()
    free = train(model, STREAM, steps=1, batch_size=4, clip=None, progress=False)
    clipped = train(tiny(), STREAM, steps=1, batch_size=4, clip=by_hand / 10,
                    progress=False)
    assert free["grad_norm"] == pytest.approx([by_hand], rel=1e-5)
    assert clipped["grad_norm"] == pytest.approx([by_hand], rel=1e-5)


@pytest.mark.parametrize("kwargs, word", [(dict(compile="yes"), "compile"),
                                          (dict(amp="bf16"), "amp")])
def test_switches_must_be_booleans(kwargs, word):
    with pytest.raises(TypeError, match=word):
        train(tiny(), STREAM, steps=1, batch_size=2, progress=False, **kwargs)


def test_resuming_with_other_settings_is_refused(tmp_path):
    ckpt = tmp_path / "run.pt"
    train(tiny(), STREAM, steps=4, batch_size=2, checkpoint=ckpt, progress=False)
    with pytest.raises(ValueError, match=r"other settings: steps=4 \(now 8\)"):
        train(tiny(), STREAM, steps=8, batch_size=2, checkpoint=ckpt, progress=False)
    with pytest.raises(ValueError, match=r"lr=0.001 \(now 0.002\).*new checkpoint path"):
        train(tiny(), STREAM, steps=4, batch_size=2, lr=2e-3, checkpoint=ckpt,
              progress=False)


def test_a_diverged_run_stops_with_a_clear_error():
    def exploding(m, x, y):
        return m.loss(x, y) * float("inf")

    with pytest.raises(FloatingPointError, match="not finite at step 1.*Lower lr"):
        train(tiny(), STREAM, steps=3, batch_size=2, loss_fn=exploding, progress=False)


def test_adam_adds_weight_decay_to_the_gradient_of_the_matrices():
    """optimizer="adam" with weight_decay: torch's Adam with the L2 term on the matrices only, as
    AdamW's decay acts on them; 0.0 is plain Adam."""
    def by_hand(weight_decay):
        model = tiny()
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.Adam([{"params": decay, "weight_decay": weight_decay},
                                {"params": rest, "weight_decay": 0.0}], lr=1e-2, betas=(0.9, 0.95))
        gen = torch.Generator().manual_seed(0)
        torch.manual_seed(0)
        for _ in range(3):
            x, y = get_batch(STREAM, 4, 16, gen)
            opt.zero_grad()
            model.loss(x, y).backward()
            opt.step()
        return model

    runs = {}
    for wd in (0.0, 0.5):
        runs[wd] = tiny()
        train(runs[wd], STREAM, steps=3, batch_size=4, lr=1e-2, schedule="constant", optimizer="adam",
              weight_decay=wd, clip=None, progress=False)
        for (name, a), b in zip(runs[wd].state_dict().items(), by_hand(wd).state_dict().values()):
            assert torch.allclose(a, b, rtol=0, atol=1e-6), (wd, name)
    changed = {n for (n, a), b in zip(runs[0.0].state_dict().items(), runs[0.5].state_dict().values())
               if not torch.equal(a, b)}
    assert any(n.endswith("weight") for n in changed)


def test_an_interrupt_during_validation_leaves_no_hole_in_the_history(tmp_path):
    kwargs = dict(steps=12, batch_size=4, lr=5e-3, warmup=2, val_data=STREAM, eval_every=4,
                  progress=False)
    straight = tiny()
    expected = train(straight, STREAM, **kwargs)
    calls = {"n": 0}

    def interrupted_loss(m, x, y):
        calls["n"] += not m.training
        if calls["n"] == 13:           # the third validation batch of step 8's validation
            raise KeyboardInterrupt
        return m.loss(x, y)

    path = tmp_path / "run.pt"
    with pytest.raises(KeyboardInterrupt):
        train(tiny(), STREAM, checkpoint=path, loss_fn=interrupted_loss, **kwargs)
    saved = torch.load(path, weights_only=False)
    assert saved["step"] == 8 and saved["history"]["val_step"] == [4] and len(saved["history"]["val_loss"]) == 1
    hist = train(tiny(seed=99), STREAM, checkpoint=path, **kwargs)
    assert hist["val_step"] == expected["val_step"] == [4, 8, 12]
    assert hist["val_loss"] == pytest.approx(expected["val_loss"], abs=0)
    assert hist["step"] == expected["step"]
