"""Tests for chapter 2's model (tinyformer.experiments.ch02.OneLayerAttention) and the shared toy
scaffolding it is trained with (tinyformer.experiments.toy): shapes, order, causality, training, errors,
devices. References are explicit loops and torch's own functions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from tinyformer.attention import MultiHeadAttention, causal_mask
from tinyformer.experiments.ch02 import OneLayerAttention
from tinyformer.experiments.toy import lookback_batch, next_token_loss, random_tokens, train

META = torch.device("meta")


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(4321)


def small_model(causal=True, **kw) -> OneLayerAttention:
    torch.manual_seed(0)
    return OneLayerAttention(vocab_size=8, block_size=6, d_model=16, causal=causal, **kw)


# --------------------------------------------------------------------------------------------
# OneLayerAttention
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n_heads", "n_outputs", "T"), [(1, 1, 6), (2, 3, 4), (4, 2, 1)])
def test_shapes(gen, n_heads, n_outputs, T):
    m = small_model(n_heads=n_heads, n_outputs=n_outputs)
    idx = torch.randint(0, 8, (3, T), generator=gen)
    logits, weights = m(idx)
    assert logits.shape == (3, T, n_outputs, 8)
    assert weights.shape == (3, n_heads, T, T)
    assert isinstance(m.attn, MultiHeadAttention)
    assert m.pos.num_embeddings == 6


def test_forward_matches_its_definition(gen):
    """Token + position embedding, attention, read-out of (h + attention(h)): rebuilt by hand."""
    m = small_model(n_heads=2, n_outputs=2)
    idx = torch.randint(0, 8, (2, 5), generator=gen)
    h = m.tok.weight[idx] + m.pos.weight[:5]
    a = m.attn(h)
    expected = (h + a) @ m.readout.weight.T + m.readout.bias
    logits, _ = m(idx)
    assert_close(logits, expected.view(2, 5, 2, 8))


def test_position_embedding_makes_order_matter():
    """Self-attention alone is permutation-equivariant; with positions, reordering a sequence
    changes more than the order of the outputs."""
    m = small_model(causal=False)
    idx = torch.tensor([[1, 2, 3, 4, 5]])
    perm = torch.tensor([4, 2, 0, 3, 1])
    logits, _ = m(idx)
    logits_perm, _ = m(idx[:, perm])
    assert not torch.allclose(logits_perm, logits[:, perm], atol=1e-4)
    with torch.no_grad():
        m.pos.weight.zero_()  # without positions the same check passes: equivariance
    logits, _ = m(idx)
    logits_perm, _ = m(idx[:, perm])
    assert_close(logits_perm, logits[:, perm])


@pytest.mark.parametrize("t", [0, 2, 5])
def test_causal_model_never_looks_ahead(gen, t):
    m = small_model(causal=True, n_heads=2)
    idx = torch.randint(0, 8, (4, 6), generator=gen)
    changed = idx.clone()
    changed[:, t] = (idx[:, t] + 1 + torch.randint(0, 7, (4,), generator=gen)) % 8  # a different token
    logits, weights = m(idx)
    logits2, _ = m(changed)
    assert torch.equal(logits[:, :t], logits2[:, :t])  # earlier positions: bit for bit the same
    assert not torch.allclose(logits[:, t], logits2[:, t])
    assert torch.all(weights[..., ~causal_mask(6)] == 0)


def test_non_causal_model_looks_ahead(gen):
    m = small_model(causal=False)
    idx = torch.randint(0, 8, (4, 6), generator=gen)
    changed = idx.clone()
    changed[:, -1] = (idx[:, -1] + 1) % 8
    assert not torch.allclose(m(idx)[0][:, 0], m(changed)[0][:, 0])


def test_mask_and_scale_reach_the_attention(gen):
    m = small_model(n_heads=2, scale=1.0)
    assert m.attn.scale == 1.0 and m.attn.causal
    idx = torch.randint(0, 8, (2, 6), generator=gen)
    keep = torch.tensor([[True] * 6, [False, False] + [True] * 4])[:, None, None, :]
    _, weights = m(idx, mask=keep)
    assert torch.all(weights[1, :, :, :2] == 0)  # no query looks at the two pads
    assert torch.all(weights[1, :, :2] == 0)  # and the pad queries, which see nothing, get zeros
    assert torch.isfinite(weights).all()


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def test_random_tokens(gen):
    inputs, targets = random_tokens(gen, 5, 7, 9)
    assert inputs.shape == (5, 9) and targets.shape == (5, 9, 1)
    assert inputs.dtype == targets.dtype == torch.long
    assert torch.equal(inputs[:, 1:], targets[:, :-1, 0])  # targets are the inputs shifted by one
    assert inputs.min() >= 0 and inputs.max() < 7
    again = random_tokens(torch.Generator().manual_seed(4321), 5, 7, 9)
    assert torch.equal(again[0], inputs) and torch.equal(again[1], targets)


def test_random_tokens_are_roughly_uniform():
    inputs, _ = random_tokens(torch.Generator().manual_seed(0), 400, 4, 50)
    freq = torch.bincount(inputs.flatten(), minlength=4).double() / inputs.numel()
    assert_close(freq, torch.full((4,), 0.25, dtype=torch.float64), atol=0.01, rtol=0)


@pytest.mark.parametrize("offsets", [(1, 3), (2,), (1, 2, 4), (7,)])
def test_lookback_batch_by_loop(gen, offsets):
    B, vocab_size, T = 3, 5, 6
    idx, targets = lookback_batch(gen, B, vocab_size, T, offsets=offsets)
    assert idx.shape == (B, T) and targets.shape == (B, T, len(offsets))
    for b in range(B):
        for i in range(T):
            for n, back in enumerate(offsets):
                want = int(idx[b, i - back]) if i - back >= 0 else -100
                assert int(targets[b, i, n]) == want


# --------------------------------------------------------------------------------------------
# Loss and training
# --------------------------------------------------------------------------------------------


def test_next_token_loss_ignores_minus_100(gen):
    m = small_model(n_outputs=2)
    idx, targets = lookback_batch(gen, 4, 8, 6, offsets=(1, 3))
    loss = next_token_loss(m, idx, targets)
    logits, _ = m(idx)
    terms = [  # mean of -log p(target) over the positions that have a target
        -F.log_softmax(logits[b, i, n], -1)[targets[b, i, n]]
        for b in range(4) for i in range(6) for n in range(2) if targets[b, i, n] != -100
    ]
    assert len(terms) == 4 * (5 + 3)
    assert_close(loss, torch.stack(terms).mean())


def test_next_token_loss_at_uniform_is_ln_vocab(gen):
    m = small_model()
    with torch.no_grad():
        m.readout.weight.zero_()
        m.readout.bias.zero_()
    inputs, targets = random_tokens(gen, 3, 8, 6)
    assert_close(next_token_loss(m, inputs, targets), torch.tensor(math.log(8)))


def test_train_lowers_the_lookback_loss(one_thread):
    torch.manual_seed(0)
    m = OneLayerAttention(vocab_size=8, block_size=8, d_model=16, n_heads=2, n_outputs=2)
    losses = train(m, lambda g: lookback_batch(g, 16, 8, 8), steps=60, lr=3e-2)
    assert len(losses) == 60 and all(math.isfinite(v) for v in losses)
    assert losses[0] > 0.8 * math.log(8)  # starts near a uniform guess
    assert sum(losses[-5:]) / 5 < 0.25 * losses[0]


def test_train_is_reproducible_and_uses_the_seed(one_thread):
    def run(seed):
        torch.manual_seed(0)
        m = small_model()
        return train(m, lambda g: random_tokens(g, 4, 8, 6), steps=3, seed=seed)

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_train_progress_bar(capsys, one_thread):
    m = small_model()
    losses = train(m, lambda g: random_tokens(g, 4, 8, 6), steps=2, progress=True)
    assert len(losses) == 2
    assert "2/2" in capsys.readouterr().err  # tqdm writes to stderr outside notebooks


# --------------------------------------------------------------------------------------------
# Bad inputs
# --------------------------------------------------------------------------------------------

_m = OneLayerAttention(8, 6, d_model=16)
_ids = torch.zeros(2, 4, dtype=torch.long)

BAD_CALLS = {
    "idx-1d": (lambda: _m(torch.zeros(4, dtype=torch.long)), ValueError, r"^idx must be a 2-D"),
    "idx-list": (lambda: _m([[1, 2]]), ValueError, r"^idx\b"),
    "idx-float": (lambda: _m(torch.zeros(2, 4)), TypeError, r"^idx must hold integer"),
    "idx-too-long": (lambda: _m(torch.zeros(2, 7, dtype=torch.long)), ValueError, r"block_size=6"),
    "idx-empty": (lambda: _m(torch.zeros(2, 0, dtype=torch.long)), ValueError, r"^idx\b"),
    "idx-id-too-big": (lambda: _m(torch.tensor([[0, 8]])), ValueError, r"vocab_size=8"),
    "idx-id-negative": (lambda: _m(torch.tensor([[-1, 2]])), ValueError, r"vocab_size=8"),
    "vocab_size-0": (lambda: OneLayerAttention(0, 6), ValueError, r"^vocab_size must be at least 1"),
    "block_size-float": (lambda: OneLayerAttention(8, 6.0), TypeError, r"^block_size must be an integer"),
    "n_heads-indivisible": (lambda: OneLayerAttention(8, 6, d_model=16, n_heads=3), ValueError, r"n_heads"),
    "targets-shape": (lambda: next_token_loss(_m, _ids, torch.zeros(2, 4, dtype=torch.long)), ValueError,
                      r"^targets must have shape \(B, T, n_outputs\)"),
    "targets-float": (lambda: next_token_loss(_m, _ids, torch.zeros(2, 4, 1)), TypeError, r"^targets\b"),
    "steps-float": (lambda: train(_m, None, 2.5), TypeError, r"^steps\b"),
    "lr-0": (lambda: train(_m, None, 1, lr=0), ValueError, r"^lr\b"),
    "batch_size-0": (lambda: random_tokens(torch.Generator(), 0, 8, 6), ValueError, r"^batch_size\b"),
    "offsets-0": (lambda: lookback_batch(torch.Generator(), 2, 8, 6, offsets=(1, 0)), ValueError, r"offset"),
    "offsets-empty": (lambda: lookback_batch(torch.Generator(), 2, 8, 6, offsets=()), ValueError, r"offsets"),
}


@pytest.mark.parametrize(("call", "exc", "pattern"), BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_inputs_raise_clear_errors(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_numpy_integers_are_accepted(gen):
    m = OneLayerAttention(np.int64(8), np.int64(6), d_model=np.int32(16), n_heads=np.int64(2))
    idx, targets = lookback_batch(gen, np.int64(2), np.int64(8), np.int64(6), offsets=(np.int64(1),))
    assert m(idx)[0].shape == (2, 6, 1, 8)
    assert targets.shape == (2, 6, 1)


# --------------------------------------------------------------------------------------------
# Devices: positions and masks are built on the input's device (see test_attention.py for why
# the `meta` device catches a tensor built on the CPU).
# --------------------------------------------------------------------------------------------


class OneDevice(TorchDispatchMode):
    """Raise when an operation mixes tensors of two devices. Meta kernels are lenient about some
    arguments (an embedding looks up CPU indices in a meta table without complaint, where a GPU
    table would fail), so the device tests watch every operation. A 0-d CPU tensor may mix with
    any device, as in torch."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaves = tree_leaves((args, kwargs))
        devices = {t.device for t in leaves if isinstance(t, torch.Tensor) and t.dim() > 0}
        if len(devices) > 1:
            raise RuntimeError(f"{func} mixes devices {sorted(map(str, devices))}")
        return func(*args, **kwargs)


def test_one_device_catches_cpu_positions():
    """The premise of the test below: CPU positions in a meta embedding go unnoticed by meta
    itself, but not under OneDevice."""
    table = torch.nn.Embedding(6, 4).to(META)
    assert table(torch.arange(3)).device == META
    with OneDevice(), pytest.raises(RuntimeError, match="mixes devices"):
        table(torch.arange(3))


@pytest.mark.parametrize("causal", [True, False])
def test_one_layer_attention_on_meta(causal):
    m = OneLayerAttention(8, 6, d_model=16, n_heads=2, n_outputs=2, causal=causal).to(META)
    idx = torch.zeros(3, 5, dtype=torch.long, device=META)
    with OneDevice():
        logits, weights = m(idx)
        loss = next_token_loss(m, idx, torch.zeros(3, 5, 2, dtype=torch.long, device=META))
    assert (logits.device, weights.device, loss.device) == (META, META, META)
    assert logits.shape == (3, 5, 2, 8) and weights.shape == (3, 2, 5, 5)
