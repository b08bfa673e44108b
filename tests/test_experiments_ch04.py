"""Tests for Chapter 4's experiment scaffolding (tinyformer.experiments.ch04): the model that differs only in
its position scheme, its loss and per-position accuracy, and the reversal task. References are
written out here (plain-Python tables, loops, torch's cross-entropy on hand-picked logits), never
outputs of the code under test."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from tinyformer.experiments.ch04 import (
    POSITION_SCHEMES,
    PositionLM,
    accuracy_by_position,
    reverse_batch,
    token_loss,
)
from tinyformer.experiments.toy import lookback_batch, train

META = torch.device("meta")


def model(positions="learned", vocab_size=11, d_model=16, n_layer=2, n_heads=2, max_len=12, **kw):
    torch.manual_seed(0)
    return PositionLM(vocab_size, d_model, n_layer, n_heads, positions=positions, max_len=max_len,
                      **kw).double()


def ids(B=3, T=7, vocab_size=11, seed=1) -> torch.Tensor:
    return torch.randint(0, vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))


def table_by_hand(scheme, T, d, m):
    """The absolute table a scheme adds, written out in plain Python."""
    if scheme == "sinusoidal":
        rows = [[(math.sin if j % 2 == 0 else math.cos)(t / 10000 ** ((j - j % 2) / d)) for j in range(d)]
                for t in range(T)]
        return torch.tensor(rows, dtype=torch.float64)
    if scheme == "binary":
        rows = [[float(format(t, "b").zfill(d)[::-1][j]) for j in range(d)] for t in range(T)]
        return torch.tensor(rows, dtype=torch.float64)
    if scheme == "learned":
        return m.pos.weight[:T]
    return torch.zeros(T, d, dtype=torch.float64)


# --------------------------------------------------------------------------------------------
# PositionLM
# --------------------------------------------------------------------------------------------


def test_schemes_are_the_five_of_the_chapter():
    assert POSITION_SCHEMES == ("none", "learned", "sinusoidal", "binary", "rotary")


@pytest.mark.parametrize("scheme", POSITION_SCHEMES)
def test_forward_is_embedding_plus_table_then_stack_then_head(scheme):
    m = model(scheme)
    idx = ids()
    expected_input = m.tok(idx) + table_by_hand(scheme, idx.shape[1], 16, m)
    with torch.no_grad():
        expected = m.head(m.stack(expected_input))
        assert_close(m(idx), expected)
    assert m(idx).shape == (3, 7, 11)


@pytest.mark.parametrize("scheme", POSITION_SCHEMES)
def test_only_the_learned_scheme_has_a_table_of_parameters(scheme):
    m = model(scheme)
    assert (m.pos is not None) == (scheme == "learned")
    rotary = [blk.attn.rotary is not None for blk in m.stack.blocks]
    assert rotary == [scheme == "rotary"] * 2
    assert (m.position_table(5) is None) == (scheme in ("none", "rotary"))


def test_under_one_seed_every_scheme_starts_from_the_same_shared_weights():
    """The schemes differ only in positions: embedding, blocks and head start identical."""
    states = []
    for scheme in POSITION_SCHEMES:
        torch.manual_seed(3)
        states.append(PositionLM(11, 16, 2, 2, positions=scheme).state_dict())
    for state in states[1:]:
        shared = [k for k in state if not k.startswith("pos.")]
        assert set(shared) == set(states[0])
        assert all(torch.equal(state[k], states[0][k]) for k in shared)


def test_position_table_offset_gives_later_rows():
    for scheme in ("learned", "sinusoidal", "binary"):
        m = model(scheme)
        assert_close(m.position_table(3, offset=4).double(), m.position_table(7)[4:].double())


@pytest.mark.parametrize("scheme", POSITION_SCHEMES)
def test_causal_the_future_never_changes_the_past(scheme):
    m = model(scheme)
    idx = ids(T=8)
    changed = idx.clone()
    changed[:, 5:] = (changed[:, 5:] + 3) % 11
    with torch.no_grad():
        assert_close(m(idx)[:, :5], m(changed)[:, :5])
        assert not torch.allclose(m(idx)[:, 5:], m(changed)[:, 5:])


@pytest.mark.parametrize("scheme", POSITION_SCHEMES)
def test_order_reaches_the_last_position_only_with_positions(scheme):
    """A one-block model without positions cannot tell a shuffled prefix at the last position;
    every scheme with positions can."""
    m = model(scheme, n_layer=1)
    idx = torch.tensor([[1, 2, 3, 4, 5, 6]])
    shuffled = torch.tensor([[4, 2, 5, 1, 3, 6]])  # same set, same last token
    with torch.no_grad():
        last, last_shuffled = m(idx)[0, -1], m(shuffled)[0, -1]
    if scheme == "none":
        assert_close(last, last_shuffled)
    else:
        assert (last - last_shuffled).abs().max() > 1e-4


def test_bidirectional_model_without_positions_is_permutation_equivariant():
    m = model("none", causal=False)
    idx = ids(T=6)
    perm = torch.tensor([2, 0, 5, 1, 4, 3])
    with torch.no_grad():
        assert_close(m(idx[:, perm]), m(idx)[:, perm])


def test_learned_model_rejects_sequences_past_max_len():
    m = model("learned", max_len=5)
    with pytest.raises(ValueError, match="max_len=5"):
        m(ids(T=6))
    model("rotary", max_len=5)(ids(T=9))  # no maximum for the others
    model("sinusoidal", max_len=5)(ids(T=9))


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"positions": "absolute"}, ValueError, "positions must be one of"),
    ({"positions": "learned", "max_len": 0}, ValueError, "max_len"),
    ({"vocab_size": 0}, ValueError, "vocab_size"),
    ({"d_model": 15, "positions": "sinusoidal"}, ValueError, "d_model"),
])
def test_bad_construction(kwargs, error, match):
    args = {"vocab_size": 11, "d_model": 16, "n_layer": 1, "n_heads": 1, **kwargs}
    with pytest.raises(error, match=match):
        PositionLM(**args)(ids())


def test_bad_input():
    m = model()
    with pytest.raises(ValueError, match="idx"):
        m(torch.zeros(7, dtype=torch.long))
    with pytest.raises(TypeError, match="idx"):
        m(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="vocab_size=11"):
        m(torch.tensor([[0, 11]]))
    with pytest.raises(ValueError, match="vocab_size=11"):
        m(torch.tensor([[-1, 2]]))


@pytest.mark.parametrize("scheme", POSITION_SCHEMES)
def test_runs_on_the_device_of_its_parameters(scheme):
    with torch.device(META):
        m = PositionLM(11, 16, 1, 2, positions=scheme, max_len=8)
    out = m(torch.zeros(2, 5, dtype=torch.long, device=META))
    assert out.device == META and out.shape == (2, 5, 11)


# --------------------------------------------------------------------------------------------
# token_loss and accuracy_by_position
# --------------------------------------------------------------------------------------------


class FixedLogits(torch.nn.Module):
    """Returns the logits it was given, whatever the input (B, T)."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, idx):
        return self.logits


def test_token_loss_is_the_mean_cross_entropy_over_real_targets():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 5, generator=g, dtype=torch.float64)
    targets = torch.tensor([[-100, 1, 4, 0], [2, -100, -100, 3]])
    total, count = 0.0, 0
    for b in range(2):
        for t in range(4):
            y = int(targets[b, t])
            if y == -100:
                continue
            row = logits[b, t].tolist()
            total += math.log(sum(math.exp(v) for v in row)) - row[y]
            count += 1
    loss = token_loss(FixedLogits(logits), torch.zeros(2, 4, dtype=torch.long), targets)
    assert math.isclose(loss.item(), total / count, rel_tol=1e-12)


def test_token_loss_rejects_targets_of_the_wrong_shape():
    m = model()
    with pytest.raises(ValueError, match="targets"):
        token_loss(m, ids(T=7), torch.zeros(3, 6, dtype=torch.long))
    with pytest.raises(TypeError, match="targets"):
        token_loss(m, ids(T=7), torch.zeros(3, 7))


def test_accuracy_by_position_counts_per_position():
    logits = torch.zeros(3, 3, 4)
    best = torch.tensor([[0, 1, 2], [0, 3, 2], [1, 1, 2]])  # the argmax at each (b, t)
    logits.scatter_(-1, best[..., None], 1.0)
    targets = torch.tensor([[0, 1, -100], [1, 3, -100], [1, 2, -100]])
    acc = accuracy_by_position(FixedLogits(logits), torch.zeros(3, 3, dtype=torch.long), targets)
    assert acc[0].item() == pytest.approx(2 / 3)  # right at b = 0 and 2
    assert acc[1].item() == pytest.approx(2 / 3)  # right at b = 0 and 1
    assert math.isnan(acc[2].item())  # no target at all
    assert acc.shape == (3,)


# --------------------------------------------------------------------------------------------
# reverse_batch
# --------------------------------------------------------------------------------------------


def test_reverse_batch_is_tokens_separator_reversed_tokens():
    g = torch.Generator().manual_seed(3)
    inputs, targets = reverse_batch(g, 5, 9, 4)
    assert inputs.shape == targets.shape == (5, 8)
    for b in range(5):
        x = inputs[b, :4].tolist()
        assert all(1 <= v < 9 for v in x)
        sequence = x + [0] + x[::-1]  # the whole sequence, separator 0
        assert inputs[b].tolist() == sequence[:-1]
        assert targets[b].tolist() == [-100] * 4 + sequence[5:]
        for m in range(4, 8):  # the input at m predicts x_{2n-1-m}
            assert targets[b, m] == x[2 * 4 - 1 - m]


def test_reverse_batch_is_reproducible_and_checked():
    a = reverse_batch(torch.Generator().manual_seed(1), 4, 7, 3)
    b = reverse_batch(torch.Generator().manual_seed(1), 4, 7, 3)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    with pytest.raises(ValueError, match="vocab_size"):
        reverse_batch(torch.Generator(), 4, 1, 3)
    with pytest.raises(ValueError, match="n"):
        reverse_batch(torch.Generator(), 4, 7, 0)


# --------------------------------------------------------------------------------------------
# training, end to end
# --------------------------------------------------------------------------------------------


def test_a_position_model_learns_look_back(one_thread):
    torch.manual_seed(0)
    m = PositionLM(8, 16, 1, 2, positions="learned", max_len=8)

    def batch(gen):
        idx, tg = lookback_batch(gen, 32, 8, 8, offsets=(1,))
        return idx, tg[..., 0]

    losses = train(m, batch, steps=120, lr=1e-2, loss_fn=token_loss)
    assert losses[-1] < 0.5 * losses[0]
    idx, tg = batch(torch.Generator().manual_seed(9))
    assert accuracy_by_position(m, idx, tg)[1:].mean() > 0.5
    assert F.cross_entropy(m(idx).flatten(0, 1), tg.flatten(), ignore_index=-100) < 1.0


# --------------------------------------------------------------------------------------------
# ALiBi
# --------------------------------------------------------------------------------------------


def test_alibi_model_starts_from_the_shared_weights_and_uses_the_papers_slopes_by_default():
    torch.manual_seed(3)
    none = PositionLM(11, 16, 2, 2, positions="none").state_dict()
    torch.manual_seed(3)
    m = PositionLM(11, 16, 2, 2, positions="alibi")
    state = m.state_dict()
    renamed = {k.replace(".attn.attn.", ".attn."): v for k, v in state.items() if not k.endswith("slopes")}
    assert set(renamed) == set(none) and all(torch.equal(renamed[k], none[k]) for k in none)
    for block in m.stack.blocks:
        assert block.attn.slopes.tolist() == [1 / 16, 1 / 256]


def test_alibi_model_scores_by_hand():
    """One ALiBi layer, written out: softmax(q kᵀ/√d_head - slope·(m - n), causal) v, per head."""
    torch.manual_seed(0)
    m = PositionLM(11, 8, 1, 2, positions="alibi", slopes=(0.5, 2.0)).double()
    idx = ids(B=2, T=5)
    block = m.stack.blocks[0]
    a = block.attn.attn
    x = block.ln_1(m.tok(idx))
    q, k, v = (p(x).view(2, 5, 2, 4).transpose(1, 2) for p in (a.q_proj, a.k_proj, a.v_proj))
    heads = []
    for h, slope in enumerate((0.5, 2.0)):
        scores = q[:, h] @ k[:, h].transpose(-1, -2) / 2.0
        scores = scores - slope * torch.tensor([[max(i - j, 0) for j in range(5)] for i in range(5)])
        scores = scores.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), -math.inf)
        heads.append(torch.softmax(scores, -1) @ v[:, h])
    expected = a.o_proj(torch.cat(heads, -1))
    assert_close(block.attn(x), expected)


def test_alibi_model_is_causal_and_runs_past_any_length():
    m = model("alibi", max_len=4)
    idx = ids(B=2, T=20)
    out = m(idx)
    changed = idx.clone()
    changed[:, 12:] = (changed[:, 12:] + 1) % 11
    assert_close(m(changed)[:, :12], out[:, :12])


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"positions": "rotary", "slopes": (0.5, 0.25)}, "slopes is for positions='alibi'"),
    ({"positions": "alibi", "slopes": (0.5,)}, "one number per head"),
])
def test_alibi_bad_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PositionLM(11, 16, 1, 2, **kwargs)


def test_alibi_layer_refuses_a_mask_or_a_cache():
    m = model("alibi")
    x = torch.zeros(1, 3, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match="no mask and no cache"):
        m.stack.blocks[0].attn(x, torch.ones(3, 3, dtype=torch.bool))
