"""Tests for tinyformer.sampling (decoding).

References are written here: top-k as plain ``torch.topk`` masking and as a sort by
``(-logit, index)`` in plain Python, top-p as a loop over sorted probabilities computed with
``math.exp``, the sampling distribution as a closed form (softmax of ``logits / T`` restricted to
the kept tokens and renormalised), greedy decoding as a by-hand argmax loop. The models are small
fakes whose logits are fixed or depend on the context in a known way; one extra test uses the real
GPT when ``tinyformer.model`` exists.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn
from torch.testing import assert_close

from tinyformer.sampling import (
    apply_temperature,
    generate,
    greedy,
    next_token_distribution,
    top_k_filter,
    top_p_filter,
)

NEG_INF = float("-inf")
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


# --------------------------------------------------------------------------------------------
# Fake models
# --------------------------------------------------------------------------------------------


class FixedLogits(nn.Module):
    """Returns the same logits ``(V,)`` at every position of every row; records each call."""

    def __init__(self, logits, block_size=None):
        super().__init__()
        self.register_buffer("logits", torch.as_tensor(logits, dtype=torch.float64))
        if block_size is not None:
            self.block_size = block_size
        self.calls: list[torch.Tensor] = []
        self.modes: list[bool] = []
        self.grad_enabled: list[bool] = []

    def forward(self, idx):
        self.calls.append(idx.clone())
        self.modes.append(self.training)
        self.grad_enabled.append(torch.is_grad_enabled())
        B, T = idx.shape
        return self.logits.to(idx.device).expand(B, T, -1).clone()   # (B, T, V)


class TableModel(nn.Module):
    """Logits at position t depend on the token there, the one before it and t itself:
    ``W[idx[t]] + U[idx[t-1]] + P[t]``, so greedy paths differ between prompts and steps."""

    def __init__(self, V=11, max_len=64, seed=0, dtype=torch.float64):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.W = nn.Parameter(torch.randn(V, V, generator=g, dtype=dtype))
        self.U = nn.Parameter(torch.randn(V, V, generator=g, dtype=dtype))
        self.P = nn.Parameter(torch.randn(max_len, V, generator=g, dtype=dtype))

    def forward(self, idx):
        idx = idx.long()
        prev = torch.cat((idx[:, :1], idx[:, :-1]), dim=1)
        T = idx.shape[1]
        return self.W[idx] + self.U[prev] + self.P[:T]                # (B, T, V)


class Config:
    def __init__(self, block_size):
        self.block_size = block_size


# --------------------------------------------------------------------------------------------
# Independent references
# --------------------------------------------------------------------------------------------


def rank_order(row: list[float]) -> list[int]:
    """Indices from most to least likely, ties broken by the lower index."""
    return sorted(range(len(row)), key=lambda i: (-row[i], i))


def softmax_list(row: list[float]) -> list[float]:
    finite = [x for x in row if x != NEG_INF]
    m = max(finite)
    e = [math.exp(x - m) if x != NEG_INF else 0.0 for x in row]
    s = sum(e)
    return [x / s for x in e]


def ref_top_k_kept(row: list[float], k: int) -> set[int]:
    return set(rank_order(row)[:k])


def ref_top_p_kept(row: list[float], p: float) -> set[int]:
    """Walk the tokens from most likely down, adding each, until the mass reaches p."""
    probs = softmax_list(row)
    kept, mass = set(), 0.0
    for i in rank_order(row):
        if probs[i] == 0.0:
            break
        kept.add(i)
        mass += probs[i]
        if mass >= p:
            break
    return kept


def ref_distribution(logits: list[float], T=1.0, k=None, p=None) -> list[float]:
    """softmax(logits / T), restricted to the top-k, renormalised, restricted to the nucleus,
    renormalised."""
    scaled = [x / T for x in logits]
    if k is not None:
        keep = ref_top_k_kept(scaled, k)
        scaled = [x if i in keep else NEG_INF for i, x in enumerate(scaled)]
    if p is not None:
        keep = ref_top_p_kept(scaled, p)
        scaled = [x if i in keep else NEG_INF for i, x in enumerate(scaled)]
    return softmax_list(scaled)


def kept_set(filtered_row: torch.Tensor) -> set[int]:
    return {i for i, x in enumerate(filtered_row.tolist()) if x != NEG_INF}


def ref_greedy(model, idx, n, block_size=None):
    """By-hand greedy loop: the model sees the whole batch (as in generate, so the logits are
    bit-identical), and each row takes the first index of its maximum, found in plain Python."""
    out = idx.tolist()
    for _ in range(n):
        ctx = [r if block_size is None else r[-block_size:] for r in out]
        with torch.no_grad():
            last = model(torch.tensor(ctx, dtype=idx.dtype))[:, -1].tolist()
        for r, row in zip(out, last, strict=True):
            r.append(max(range(len(row)), key=lambda i, row=row: (row[i], -i)))
    return torch.tensor(out, dtype=idx.dtype)


# --------------------------------------------------------------------------------------------
# apply_temperature, top_k_filter
# --------------------------------------------------------------------------------------------


def test_apply_temperature_divides():
    x = torch.tensor([[1.0, -2.0, 3.5]])
    for T in (0.25, 1, 3.0):
        assert_close(apply_temperature(x, T), torch.tensor([[1.0 / T, -2.0 / T, 3.5 / T]]))


def test_top_k_matches_topk_masking():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(7, 13, generator=g, dtype=torch.float64)
    for k in (1, 2, 5, 12):
        kth = torch.topk(logits, k, dim=-1).values[:, -1:]          # (B, 1), no ties here
        expected = torch.where(logits >= kth, logits, torch.full_like(logits, NEG_INF))
        assert_close(top_k_filter(logits, k), expected, rtol=0, atol=0)


def test_top_k_leading_dims_and_large_k():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 3, 9, generator=g)
    out = top_k_filter(logits, 4)
    assert out.shape == logits.shape
    for row, orow in zip(logits.reshape(-1, 9), out.reshape(-1, 9), strict=True):
        assert kept_set(orow) == ref_top_k_kept(row.tolist(), 4)
        assert_close(orow[orow != NEG_INF], row[orow != NEG_INF], rtol=0, atol=0)
    for k in (9, 10, 1000):                                          # k >= V: nothing removed
        assert_close(top_k_filter(logits, k), logits, rtol=0, atol=0)
    assert not torch.isinf(top_k_filter(logits, 4)).all(-1).any()


def test_top_k_ties_keep_exactly_k_lowest_indices():
    logits = torch.tensor([[1.0, 3.0, 3.0, 3.0, 0.0, 3.0],
                           [2.0, 2.0, 2.0, 2.0, 2.0, 2.0]])
    out = top_k_filter(logits, 2)
    assert kept_set(out[0]) == {1, 2}
    assert kept_set(out[1]) == {0, 1}
    assert kept_set(top_k_filter(logits, 4)[0]) == {1, 2, 3, 5}
    assert kept_set(top_k_filter(logits, 5)[0]) == {0, 1, 2, 3, 5}


def test_top_k_does_not_modify_input():
    x = torch.tensor([[0.0, 1.0, 2.0]])
    top_k_filter(x, 1)
    top_p_filter(x, 0.1)
    assert_close(x, torch.tensor([[0.0, 1.0, 2.0]]))


# --------------------------------------------------------------------------------------------
# top_p_filter
# --------------------------------------------------------------------------------------------


def test_top_p_matches_plain_loop_on_random_logits():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(40, 17, generator=g, dtype=torch.float64) * 2
    for p in (0.05, 0.3, 0.5, 0.77, 0.9, 0.99, 1.0):
        out = top_p_filter(logits, p)
        for row, orow in zip(logits, out, strict=True):
            assert kept_set(orow) == ref_top_p_kept(row.tolist(), p), p
            kept = orow != NEG_INF
            assert_close(orow[kept], row[kept], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("p", "kept_ranks"), [
    (0.1, {0}), (0.5, {0}), (0.5000001, {0, 1}), (0.75, {0, 1}), (0.7500001, {0, 1, 2}),
    (0.875, {0, 1, 2}), (0.8750001, {0, 1, 2, 3}), (1.0, {0, 1, 2, 3}),
])
def test_top_p_reaches_means_cumulative_at_least_p(dtype, p, kept_ranks):
    # exactly representable probabilities, placed out of order so the filter must unsort; the
    # largest logit is 0, so the softmax's shift by the maximum is exact and so are the sums
    probs = [0.5, 0.25, 0.125, 0.125]
    where = [2, 0, 1, 3]       # rank r sits at index where[r]; the tied pair in index order
    logits = torch.empty(4, dtype=dtype)
    for r, i in enumerate(where):
        logits[i] = math.log(probs[r] / probs[0])
    assert_close(logits.softmax(-1)[where], torch.tensor(probs, dtype=dtype), rtol=0, atol=0)
    out = top_p_filter(logits[None], p)[0]
    assert kept_set(out) == {where[r] for r in kept_ranks}


def test_top_p_crossing_token_included_and_top_token_always_kept():
    logits = torch.tensor([[math.log(0.2), math.log(0.5), math.log(0.3)]], dtype=torch.float64)
    assert kept_set(top_p_filter(logits, 0.6)[0]) == {1, 2}      # 0.5 < 0.6 <= 0.8
    assert kept_set(top_p_filter(logits, 0.81)[0]) == {0, 1, 2}
    assert kept_set(top_p_filter(logits, 1e-9)[0]) == {1}
    peaked = torch.tensor([[0.0, 30.0, 0.0]])
    assert kept_set(top_p_filter(peaked, 0.999)[0]) == {1}


def test_top_p_ties_lowest_index_first():
    uniform = torch.zeros(1, 4)
    assert kept_set(top_p_filter(uniform, 0.5)[0]) == {0, 1}
    assert kept_set(top_p_filter(uniform, 0.3)[0]) == {0, 1}
    assert kept_set(top_p_filter(uniform, 0.2)[0]) == {0}
    two_top = torch.tensor([[0.0, 1.0, 1.0, 0.0]])
    assert kept_set(top_p_filter(two_top, 0.1)[0]) == {1}
    assert kept_set(top_p_filter(two_top, 0.5)[0]) == {1, 2}


def test_top_p_one_keeps_everything_and_respects_minus_inf():
    logits = torch.tensor([[10.0, 10.0, -30.0, -60.0]])                # tail below float32's ulp
    assert_close(top_p_filter(logits, 1.0), logits, rtol=0, atol=0)
    pre = torch.tensor([[1.0, NEG_INF, 0.5, NEG_INF, 0.0]], dtype=torch.float64)
    for p in (0.3, 0.6, 0.9, 1.0):
        assert kept_set(top_p_filter(pre, p)[0]) == ref_top_p_kept(pre[0].tolist(), p)
    assert kept_set(top_p_filter(torch.tensor([[2.0]]), 0.5)[0]) == {0}  # V = 1


def test_top_p_leading_dims():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(2, 3, 8, generator=g, dtype=torch.float64)
    out = top_p_filter(logits, 0.6)
    for row, orow in zip(logits.reshape(-1, 8), out.reshape(-1, 8), strict=True):
        assert kept_set(orow) == ref_top_p_kept(row.tolist(), 0.6)


# --------------------------------------------------------------------------------------------
# next_token_distribution: the closed form
# --------------------------------------------------------------------------------------------

LOGITS6 = [1.2, -0.3, 0.8, 2.0, -1.5, 0.1]
SETTINGS = [  # (temperature, top_k, top_p)
    (1.0, None, None), (0.5, None, None), (2.5, None, None), (1.0, 3, None), (1.0, None, 0.7),
    (0.6, None, 0.8), (2.0, 4, None), (1.5, 5, 0.75), (0.7, 2, 0.99), (1.0, 6, 1.0),
]


@pytest.mark.parametrize(("T", "k", "p"), SETTINGS)
def test_distribution_closed_form(T, k, p):
    logits = torch.tensor([LOGITS6, LOGITS6[::-1]], dtype=torch.float64)
    probs = next_token_distribution(logits, temperature=T, top_k=k, top_p=p)
    assert probs.shape == (2, 6)
    for row, prow in zip(logits.tolist(), probs, strict=True):
        assert_close(prow, torch.tensor(ref_distribution(row, T, k, p), dtype=torch.float64))
    assert_close(probs.sum(-1), torch.ones(2, dtype=torch.float64))


def test_temperature_comes_before_top_p():
    # p = [0.5, 0.3, 0.2]; at T = 0.5 the head sharpens to ~0.66 > 0.6, so only token 0 is left.
    # Filtering first would keep {0, 1}.
    logits = torch.tensor([[math.log(0.5), math.log(0.3), math.log(0.2)]], dtype=torch.float64)
    probs = next_token_distribution(logits, temperature=0.5, top_p=0.6)
    assert_close(probs, torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64))
    probs = next_token_distribution(logits, temperature=2.0, top_p=0.45)  # flatter: needs 2
    assert (probs[0] > 0).tolist() == [True, True, False]


# --------------------------------------------------------------------------------------------
# generate: empirical frequencies against the closed form
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("T", "k", "p"), SETTINGS[:8])
def test_sampled_frequencies_match_closed_form(T, k, p):
    model = FixedLogits(LOGITS6)
    B, steps = 5000, 4                                               # 20,000 tokens
    gen = torch.Generator().manual_seed(1000 + SETTINGS.index((T, k, p)))
    out = generate(model, torch.zeros(B, 1, dtype=torch.long), steps,
                   temperature=T, top_k=k, top_p=p, generator=gen)
    tokens = out[:, 1:].reshape(-1)
    N = tokens.numel()
    counts = torch.bincount(tokens, minlength=6).tolist()
    for v, q in enumerate(ref_distribution(LOGITS6, T, k, p)):
        if q == 0.0:
            assert counts[v] == 0, (v, counts)
        else:
            se = math.sqrt(q * (1 - q) / N)
            assert abs(counts[v] / N - q) <= 5 * se + 1e-12, (v, counts[v] / N, q)


def test_seeded_generator_draws_by_multinomial():
    """With the same seed, generate draws what torch.multinomial draws from the exact
    distribution: the sampling goes through the generator the caller passed."""
    model = FixedLogits(LOGITS6)
    idx = torch.zeros(3, 1, dtype=torch.long)
    out = generate(model, idx, 6, temperature=1.3, top_k=5, generator=torch.Generator().manual_seed(9))
    probs = torch.tensor([ref_distribution(LOGITS6, 1.3, 5, None)] * 3, dtype=torch.float64)
    g = torch.Generator().manual_seed(9)
    expected = torch.cat([torch.multinomial(probs, 1, generator=g) for _ in range(6)], dim=1)
    assert torch.equal(out[:, 1:], expected)


# --------------------------------------------------------------------------------------------
# Greedy
# --------------------------------------------------------------------------------------------


def test_greedy_is_argmax_and_top_k_1():
    model = TableModel()
    g = torch.Generator().manual_seed(5)
    idx = torch.randint(0, 11, (4, 3), generator=g)
    expected = ref_greedy(model, idx, 25)
    assert torch.equal(greedy(model, idx, 25), expected)
    for seed in (0, 1, 2):
        out = generate(model, idx, 25, top_k=1, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(out, expected)
    # temperature and top-p cannot change a greedy choice
    assert torch.equal(generate(model, idx, 25, top_k=1, temperature=5.0, top_p=0.3), expected)


def test_greedy_ties_pick_lowest_index():
    model = FixedLogits([0.0, 2.0, 1.0, 2.0])
    out = generate(model, torch.zeros(2, 1, dtype=torch.long), 5, top_k=1)
    assert out[:, 1:].eq(1).all()


def test_greedy_consumes_no_randomness():
    model = TableModel()
    idx = torch.zeros(2, 2, dtype=torch.long)
    gen = torch.Generator().manual_seed(11)
    state = gen.get_state()
    generate(model, idx, 10, top_k=1, generator=gen)
    assert torch.equal(gen.get_state(), state)
    torch.manual_seed(0)
    global_state = torch.get_rng_state()
    greedy(model, idx, 10)
    assert torch.equal(torch.get_rng_state(), global_state)


def test_tiny_temperature_approaches_greedy():
    model = TableModel()
    g = torch.Generator().manual_seed(6)
    idx = torch.randint(0, 11, (3, 2), generator=g)
    out = generate(model, idx, 20, temperature=1e-6, generator=torch.Generator().manual_seed(0))
    expected = ref_greedy(model, idx, 20)
    # the claim holds only if no step had a near-tie among the two best logits
    assert torch.equal(out, expected)


def test_greedy_batch_rows_independent():
    model = TableModel()
    g = torch.Generator().manual_seed(7)
    idx = torch.randint(0, 11, (5, 4), generator=g)
    together = greedy(model, idx, 12)
    for b in range(5):
        assert torch.equal(together[b:b + 1], greedy(model, idx[b:b + 1], 12))


# --------------------------------------------------------------------------------------------
# Reproducibility
# --------------------------------------------------------------------------------------------


def test_same_seed_same_output_different_seed_different():
    model = FixedLogits([0.0] * 50)                                  # uniform: high entropy
    idx = torch.zeros(2, 1, dtype=torch.long)

    def run(seed):
        return generate(model, idx, 30, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))


def test_global_rng_untouched_with_generator():
    model = FixedLogits(LOGITS6)
    idx = torch.zeros(4, 1, dtype=torch.long)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    generate(model, idx, 10, top_p=0.9, generator=torch.Generator().manual_seed(1))
    assert torch.equal(torch.get_rng_state(), state)


def test_without_generator_uses_global_rng():
    model = FixedLogits([0.0] * 50)
    idx = torch.zeros(2, 1, dtype=torch.long)
    torch.manual_seed(5)
    a = generate(model, idx, 20)
    torch.manual_seed(5)
    assert torch.equal(generate(model, idx, 20), a)


# --------------------------------------------------------------------------------------------
# Length, cropping, prompt
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_length_and_prompt_kept(n):
    model = FixedLogits(LOGITS6)
    idx = torch.tensor([[3, 1, 4], [1, 5, 2]])
    out = generate(model, idx, n, generator=torch.Generator().manual_seed(0))
    assert out.shape == (2, 3 + n)
    assert torch.equal(out[:, :3], idx)
    assert len(model.calls) == n
    assert ((out >= 0) & (out < 6)).all()


def test_max_new_tokens_zero_returns_prompt():
    model = FixedLogits(LOGITS6)
    idx = torch.tensor([[1, 2]], dtype=torch.int32)
    out = generate(model, idx, 0)
    assert torch.equal(out, idx) and out.dtype == torch.int32
    assert model.calls == []


def test_cropping_to_block_size_from_config():
    model = FixedLogits(LOGITS6)
    model.config = Config(block_size=5)
    model.block_size = 100                                           # config wins
    idx = torch.tensor([[0, 1, 2]])
    out = generate(model, idx, 10, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 13)
    assert [c.shape[1] for c in model.calls] == [3, 4, 5, 5, 5, 5, 5, 5, 5, 5]
    for step, ctx in enumerate(model.calls):                         # the LAST tokens are fed
        end = 3 + step
        assert torch.equal(ctx, out[:, max(0, end - 5):end])


def test_cropping_with_block_size_attribute_and_none():
    model = FixedLogits(LOGITS6, block_size=2)
    generate(model, torch.tensor([[0, 1, 2, 3]]), 3)
    assert [c.shape[1] for c in model.calls] == [2, 2, 2]
    free = FixedLogits(LOGITS6)
    generate(free, torch.tensor([[0, 1, 2, 3]]), 3)
    assert [c.shape[1] for c in free.calls] == [4, 5, 6]


def test_greedy_with_cropping_matches_reference():
    model = TableModel(max_len=6)
    model.block_size = 6
    idx = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert torch.equal(greedy(model, idx, 15), ref_greedy(model, idx, 15, block_size=6))


# --------------------------------------------------------------------------------------------
# Mode, gradients, dtype, device
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("training", [True, False])
def test_mode_restored_and_eval_inside(training):
    model = FixedLogits(LOGITS6)
    model.train(training)
    generate(model, torch.zeros(1, 1, dtype=torch.long), 3)
    assert model.modes == [False, False, False]
    assert model.training is training


class Boom(FixedLogits):
    def forward(self, idx):
        super().forward(idx)
        raise RuntimeError("boom")


def test_mode_restored_on_error():
    model = Boom(LOGITS6)
    model.train()
    with pytest.raises(RuntimeError, match="boom"):
        generate(model, torch.zeros(1, 1, dtype=torch.long), 3)
    assert model.training is True
    assert model.modes == [False]


def test_no_grad():
    model = TableModel()
    assert torch.is_grad_enabled()
    out = generate(model, torch.zeros(1, 2, dtype=torch.long), 4, top_p=0.9)
    assert not out.requires_grad
    rec = FixedLogits(LOGITS6)
    generate(rec, torch.zeros(1, 1, dtype=torch.long), 2)
    assert rec.grad_enabled == [False, False]
    assert torch.is_grad_enabled()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16])
def test_dtype_preserved(dtype):
    model = FixedLogits(LOGITS6)
    idx = torch.tensor([[1, 2]], dtype=dtype)
    out = generate(model, idx, 3, generator=torch.Generator().manual_seed(0))
    assert out.dtype == dtype and out.device == idx.device


@CUDA
def test_cuda_device_preserved():
    model = TableModel().cuda()
    idx = torch.tensor([[1, 2]], device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    out = generate(model, idx, 4, top_k=5, generator=gen)
    assert out.device == idx.device and out.dtype == idx.dtype
    assert torch.equal(greedy(model, idx, 4).cpu(), greedy(model.cpu(), idx.cpu(), 4))


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------

GOOD = torch.zeros(1, 2, dtype=torch.long)


@pytest.mark.parametrize(("kwargs", "error", "name"), [
    ({"temperature": 0}, ValueError, "temperature"),
    ({"temperature": -1.0}, ValueError, "temperature"),
    ({"temperature": float("nan")}, ValueError, "temperature"),
    ({"temperature": float("inf")}, ValueError, "temperature"),
    ({"temperature": True}, TypeError, "temperature"),
    ({"temperature": "1"}, TypeError, "temperature"),
    ({"temperature": None}, TypeError, "temperature"),
    ({"top_p": 0}, ValueError, "top_p"),
    ({"top_p": 0.0}, ValueError, "top_p"),
    ({"top_p": 1.5}, ValueError, "top_p"),
    ({"top_p": -0.1}, ValueError, "top_p"),
    ({"top_p": float("nan")}, ValueError, "top_p"),
    ({"top_p": True}, TypeError, "top_p"),
    ({"top_p": "0.9"}, TypeError, "top_p"),
    ({"top_k": 0}, ValueError, "top_k"),
    ({"top_k": -3}, ValueError, "top_k"),
    ({"top_k": 2.0}, TypeError, "top_k"),
    ({"top_k": True}, TypeError, "top_k"),
    ({"max_new_tokens": -1}, ValueError, "max_new_tokens"),
    ({"max_new_tokens": 2.5}, TypeError, "max_new_tokens"),
    ({"max_new_tokens": True}, TypeError, "max_new_tokens"),
    ({"use_cache": 1}, TypeError, "use_cache"),
    ({"use_cache": "yes"}, TypeError, "use_cache"),
    ({"generator": 0}, TypeError, "generator"),
    ({"idx": torch.zeros(2, dtype=torch.long)}, ValueError, "idx"),
    ({"idx": torch.zeros(1, 2, 3, dtype=torch.long)}, ValueError, "idx"),
    ({"idx": torch.zeros(1, 0, dtype=torch.long)}, ValueError, "idx"),
    ({"idx": torch.zeros(0, 3, dtype=torch.long)}, ValueError, "idx"),
    ({"idx": torch.zeros(1, 2)}, TypeError, "idx"),
    ({"idx": torch.zeros(1, 2, dtype=torch.bool)}, TypeError, "idx"),
    ({"idx": [[1, 2]]}, TypeError, "idx"),
    ({"idx": np.zeros((1, 2), dtype=np.int64)}, TypeError, "idx"),
])
def test_generate_bad_input(kwargs, error, name):
    model = FixedLogits(LOGITS6)
    args = {"idx": GOOD, "max_new_tokens": 2, **kwargs}
    with pytest.raises(error, match=name):
        generate(model, **args)
    if "max_new_tokens" not in kwargs:                               # even when nothing is made
        with pytest.raises(error, match=name):
            generate(model, **{**args, "max_new_tokens": 0})
    assert model.calls == []                                         # checked before any work


def test_generator_device_mismatch():
    model = FixedLogits(LOGITS6)
    idx = torch.zeros(1, 2, dtype=torch.long, device="meta")
    with pytest.raises(ValueError, match="generator"):
        generate(model, idx, 2, generator=torch.Generator())
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="generator"):
            generate(model, GOOD, 2, generator=torch.Generator(device="cuda"))


def test_model_must_be_module_and_return_logits():
    with pytest.raises(TypeError, match="model"):
        generate(lambda idx: idx, GOOD, 1)

    class Flat(nn.Module):
        def forward(self, idx):
            return torch.zeros(idx.shape[0], 6)                      # (B, V): no T axis

    with pytest.raises(ValueError, match="model"):
        generate(Flat(), GOOD, 1)


@pytest.mark.parametrize(("fn", "kwargs", "error", "name"), [
    (apply_temperature, {"temperature": 0.0}, ValueError, "temperature"),
    (apply_temperature, {"temperature": False}, TypeError, "temperature"),
    (top_k_filter, {"k": 0}, ValueError, "k"),
    (top_k_filter, {"k": 1.0}, TypeError, "k"),
    (top_k_filter, {"k": True}, TypeError, "k"),
    (top_p_filter, {"p": 0.0}, ValueError, "p"),
    (top_p_filter, {"p": 1.01}, ValueError, "p"),
    (top_p_filter, {"p": True}, TypeError, "p"),
    (next_token_distribution, {"temperature": -2.0}, ValueError, "temperature"),
    (next_token_distribution, {"top_k": 0}, ValueError, "top_k"),
    (next_token_distribution, {"top_p": 2.0}, ValueError, "top_p"),
])
def test_filter_bad_input(fn, kwargs, error, name):
    with pytest.raises(error, match=rf"\b{name}\b"):
        fn(torch.zeros(1, 4), **kwargs)


def test_filters_reject_non_float_logits():
    for fn, arg in ((apply_temperature, 1.0), (top_k_filter, 1), (top_p_filter, 0.5)):
        with pytest.raises(TypeError, match="logits"):
            fn(torch.zeros(1, 4, dtype=torch.long), arg)
        with pytest.raises(TypeError, match="logits"):
            fn([[0.0, 1.0]], arg)


# --------------------------------------------------------------------------------------------
# The real GPT (only once tinyformer.model exists)
# --------------------------------------------------------------------------------------------


def test_with_tiny_gpt():
    model_mod = pytest.importorskip("tinyformer.model")
    torch.manual_seed(0)
    config = model_mod.GPTConfig(vocab_size=17, block_size=8, n_layer=1, n_head=2, d_model=16)
    model = model_mod.GPT(config)
    model.train()
    idx = torch.tensor([[1, 2, 3], [4, 5, 6]])
    out = generate(model, idx, 12, top_k=1)                          # runs past block_size
    assert out.shape == (2, 15) and torch.equal(out[:, :3], idx)
    assert model.training
    model.eval()
    assert torch.equal(out, ref_greedy(model, idx, 12, block_size=8))
    sampled = generate(model, idx, 12, top_p=0.9, temperature=0.8,
                       generator=torch.Generator().manual_seed(0))
    assert ((sampled >= 0) & (sampled < 17)).all()


def test_decoding_settings_are_generates_and_are_restored():
    """One thread and no oneDNN for a small cached step, oneDNN off only for an uncached one or a
    wide model; everything restored after, even after an error."""
    from tinyformer.model import GPT, GPTConfig
    from tinyformer.sampling import decoding_settings

    small = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, d_model=16))
    wide = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, d_model=384))
    idx = torch.zeros(1, 1, dtype=torch.long)
    threads, mkldnn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    torch.set_num_threads(2)
    try:
        for model, cached, one in ((small, True, True), (small, False, False), (wide, True, False)):
            with decoding_settings(model, idx, cached):
                assert torch.backends.mkldnn.enabled is False
                assert torch.get_num_threads() == (1 if one else 2)
            assert torch.get_num_threads() == 2 and torch.backends.mkldnn.enabled == mkldnn
        with pytest.raises(RuntimeError), decoding_settings(small, idx, True):
            raise RuntimeError("inside")
        assert torch.get_num_threads() == 2 and torch.backends.mkldnn.enabled == mkldnn
    finally:
        torch.set_num_threads(threads)


# --------------------------------------------------------------------------------------------
# eos_id: stopping at an end-of-text token
# --------------------------------------------------------------------------------------------


def _eos_model(seed=0):
    from tinyformer.model import GPT, GPTConfig
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, d_model=16, init_std=0.5))


def _plain_loop(model, idx, n, temperature, gen, eos_id=None):
    """An independent reference: the textbook loop, finished rows overwritten with eos_id."""
    finished = torch.zeros(idx.shape[0], dtype=torch.bool)
    for _ in range(n):
        with torch.no_grad():
            logits = model(idx[:, -model.config.block_size:])[:, -1] / temperature
        nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)[:, 0]
        if eos_id is not None:
            nxt = torch.where(finished, torch.full_like(nxt, eos_id), nxt)
            finished |= nxt == eos_id
        idx = torch.cat((idx, nxt[:, None]), 1)
        if eos_id is not None and finished.all():
            break
    return idx


@pytest.mark.parametrize("use_cache", [True, False])
def test_eos_rows_finish_pad_and_stop(use_cache):
    model, eos = _eos_model(), 3
    idx = torch.tensor([[3, 1, 2], [4, 5, 6], [7, 8, 9], [1, 1, 1]])  # row 0's prompt holds eos
    out = generate(model, idx, 30, temperature=2.0, use_cache=use_cache,
                   generator=torch.Generator().manual_seed(1), eos_id=eos)
    ref = _plain_loop(model, idx, 30, 2.0, torch.Generator().manual_seed(1), eos)
    assert torch.equal(out, ref)
    new = out[:, 3:]
    assert out.shape[1] < 3 + 30 and (new == eos).any(1).all()  # every row finished, early
    for row in new:  # after its first eos a row writes nothing else
        first = int((row == eos).nonzero()[0])
        assert (row[first:] == eos).all()
    first_eos = [int((row == eos).nonzero()[0]) for row in new]
    assert len(set(first_eos)) > 1  # rows finished at different steps


def test_eos_keeps_the_random_draws_of_the_rows_that_run_on():
    model, idx = _eos_model(), torch.randint(0, 11, (4, 3), generator=torch.Generator().manual_seed(5))
    plain = generate(model, idx, 12, temperature=2.0, generator=torch.Generator().manual_seed(1))
    stopped = generate(model, idx, 12, temperature=2.0, generator=torch.Generator().manual_seed(1), eos_id=3)
    for row_p, row_s in zip(plain[:, 3:], stopped[:, 3:]):
        hits = (row_s == 3).nonzero()
        until = int(hits[0]) + 1 if len(hits) else len(row_s)
        assert torch.equal(row_p[:until], row_s[:until])


def test_eos_in_the_prompt_does_not_finish_a_row():
    model = _eos_model()
    idx = torch.full((1, 4), 3)
    out = generate(model, idx, 5, top_k=1, eos_id=3)
    greedy_plain = generate(model, idx, 5, top_k=1)
    first = greedy_plain[0, 4:]
    hits = (first == 3).nonzero()
    until = int(hits[0]) + 1 if len(hits) else 5
    assert torch.equal(out[0, 4:4 + until], first[:until])


def test_eos_none_changes_nothing():
    model, idx = _eos_model(), torch.randint(0, 11, (2, 3), generator=torch.Generator().manual_seed(2))
    a = generate(model, idx, 10, generator=torch.Generator().manual_seed(0))
    b = generate(model, idx, 10, generator=torch.Generator().manual_seed(0), eos_id=None)
    assert torch.equal(a, b) and a.shape == (2, 13)


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (11, ValueError), (2.5, TypeError), (True, TypeError)])
def test_eos_id_checked(bad, error):
    with pytest.raises(error, match="eos_id"):
        generate(_eos_model(), torch.zeros(1, 2, dtype=torch.long), 3, eos_id=bad)
