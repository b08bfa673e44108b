"""tinyformer.scaling against hand counts, closed forms and torch's own FLOP counter; the fits
recover known exponents from synthetic data (exact, with noise, with a floor)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from tinyformer.data import (
    FILLER,
    PRONOUN_TEMPLATES,
    RELATION_TEMPLATES,
    RELATIONS,
    synthetic_corpus,
    synthetic_entropy,
    words,
)
from tinyformer.model import GPT, GPTConfig, gpt_param_count
from tinyformer.scaling import (
    PUBLISHED,
    compute_optimal,
    count_params,
    fit_isoflop,
    fit_loss_surface,
    fit_power_law,
    fit_power_law_offset,
    kaplan_params,
    loss_surface,
    training_flops,
)

X = np.array([1e3, 3e3, 1e4, 3e4, 1e5, 3e5, 1e6])


# --------------------------------------------------------------------------- counting


def _hand_count(model: nn.Module, skip_embeddings: bool) -> int:
    """Sum over named_parameters, each tensor once by identity; embeddings by name."""
    seen, total = set(), 0
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            continue
        seen.add(id(p))
        if skip_embeddings and ("token_embedding" in name or "position_embedding" in name):
            continue
        total += p.numel()
    return total


@pytest.mark.parametrize("kw", [
    dict(tie_weights=True), dict(tie_weights=False), dict(positions="rotary"), dict(positions="sinusoidal"),
    dict(bias=False), dict(norm="post"),
])
def test_count_params_matches_a_hand_sum(kw):
    config = GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, d_model=16, **kw)
    model = GPT(config)
    assert count_params(model, non_embedding=False) == _hand_count(model, False) == gpt_param_count(config)
    assert count_params(model) == _hand_count(model, True)
    # tied: the head is the embedding, so leaving out embeddings leaves out the head too
    head = 0 if config.tie_weights else 16 * 50
    emb = 50 * 16 + (16 * 16 if config.positions == "learned" else 0)
    assert count_params(model, non_embedding=False) - count_params(model) == emb
    assert count_params(model) >= head


def test_kaplan_params_is_the_blocks_matrices():
    config = GPTConfig(vocab_size=50, block_size=8, n_layer=3, n_head=4, d_model=32, bias=False)
    model = GPT(config)
    matrices = sum(p.numel() for n, p in model.blocks.named_parameters() if p.dim() == 2)
    assert kaplan_params(3, 32) == matrices == 12 * 3 * 32 ** 2


def test_gpt3_configuration_on_meta():
    config = GPTConfig(vocab_size=50257, block_size=2048, n_layer=96, n_head=96, d_model=12288)
    with torch.device("meta"):
        model = GPT(config)
    n = count_params(model, non_embedding=False)
    assert 174e9 < n < 176e9                                   # "175B"
    assert abs(kaplan_params(96, 12288) - count_params(model)) / count_params(model) < 0.01


def test_count_params_bad_input():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        count_params("gpt")
    with pytest.raises(TypeError, match="non_embedding"):
        count_params(nn.Linear(2, 2), non_embedding="yes")
    with pytest.raises(ValueError, match="n_layer must be at least 1"):
        kaplan_params(0, 8)
    with pytest.raises(TypeError, match="d_model must be an integer"):
        kaplan_params(2, 8.0)


# --------------------------------------------------------------------------- compute


def test_training_flops_against_torch_flop_counter():
    """6·N·D counts the matrix multiplies of a training step: torch's counter on the book's GPT,
    forward and backward, agrees once attention's own QKᵀ and weights·V are added."""
    # attention written out as matrix multiplies (the fused CPU kernel is not counted by torch)
    config = GPTConfig(vocab_size=64, block_size=32, n_layer=2, n_head=2, d_model=32, bias=False,
                       fused_attention=False)
    model = GPT(config)
    B, T = 4, 32
    idx = torch.randint(0, 64, (B, T))
    with FlopCounterMode(display=False) as counter:
        model.loss(idx, idx).backward()
    measured = counter.get_total_flops()
    matmul_N = count_params(model) + 64 * 32                   # the head multiplies; the lookup does not
    attention = 3 * 4 * config.n_layer * config.d_model * T * B * T   # fwd 2·2·d·T per token, x3 with backward
    predicted = training_flops(matmul_N, B * T) + attention
    assert abs(measured - predicted) / measured < 0.02


def test_training_flops_bad_input():
    assert training_flops(10, 3) == 180.0
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="n_params must be a positive finite number"):
            training_flops(bad, 3)
    with pytest.raises(TypeError, match="n_tokens must be a number"):
        training_flops(3, "many")


# --------------------------------------------------------------------------- fits


def test_fit_power_law_exact_and_noisy():
    a, alpha = fit_power_law(X, 7.0 * X ** -0.25)
    assert a == pytest.approx(7.0, rel=1e-9) and alpha == pytest.approx(0.25, rel=1e-9)
    rng = np.random.default_rng(0)
    a, alpha = fit_power_law(X, 7.0 * X ** -0.25 * np.exp(0.01 * rng.standard_normal(X.size)))
    assert alpha == pytest.approx(0.25, abs=0.01) and a == pytest.approx(7.0, rel=0.1)


def test_fit_power_law_offset_recovers_the_floor():
    E, a, alpha = fit_power_law_offset(X, 0.9 + 5.0 * X ** -0.3)
    assert (E, a, alpha) == pytest.approx((0.9, 5.0, 0.3), rel=1e-6)
    # a plain power law fitted to the same points bends: its exponent comes out far too small
    assert fit_power_law(X, 0.9 + 5.0 * X ** -0.3)[1] < 0.2
    rng = np.random.default_rng(1)
    noisy = (0.9 + 5.0 * X ** -0.3) * np.exp(0.01 * rng.standard_normal(X.size))
    E, a, alpha = fit_power_law_offset(X, noisy)
    assert E == pytest.approx(0.9, abs=0.05) and alpha == pytest.approx(0.3, abs=0.08)


def test_fit_power_law_offset_without_a_floor_finds_zero():
    E, a, alpha = fit_power_law_offset(X, 2.0 * X ** -0.5)
    assert E == pytest.approx(0.0, abs=1e-9) and alpha == pytest.approx(0.5, rel=1e-6)


def test_fit_loss_surface_recovers_its_constants():
    true = {"E": 1.0, "A": 30.0, "B": 50.0, "alpha": 0.4, "beta": 0.3}
    N = np.repeat([1e4, 3e4, 1e5, 3e5], 3)
    D = np.tile([1e5, 1e6, 1e7], 4)
    fit = fit_loss_surface(N, D, loss_surface(N, D, true))
    for k, v in true.items():
        assert fit[k] == pytest.approx(v, rel=1e-4), k


@pytest.mark.parametrize(("call", "exc", "match"), [
    (lambda: fit_power_law([1, 2], [1]), ValueError, "same number of values"),
    (lambda: fit_power_law([1], [1]), ValueError, "at least 2 points"),
    (lambda: fit_power_law([1, 2], [1, -1]), ValueError, "every y must be a positive"),
    (lambda: fit_power_law([0, 2], [1, 1]), ValueError, "every x must be a positive"),
    (lambda: fit_power_law([2, 2], [1, 3]), ValueError, "two different values"),
    (lambda: fit_power_law_offset([1, 2], [3, 2]), ValueError, "at least 3 points"),
    (lambda: fit_loss_surface([1, 2, 3, 4], [1, 2, 3, 4], [4, 3, 2, 1]), ValueError, "at least 5 points"),
    (lambda: loss_surface(1e9, 1e10, "kaplan"), ValueError, "fit must be one of"),
    (lambda: compute_optimal(-1.0), ValueError, "C must be a positive"),
    (lambda: fit_isoflop([1e3, 1e4], [2.0, 1.5]), ValueError, "at least 3 points"),
    (lambda: fit_isoflop([1e3, 1e3, 1e4], [2.0, 2.1, 1.5]), ValueError, "three different sizes"),
    (lambda: fit_isoflop([1e3, 1e4, 1e5], [1.5, 2.0, 1.5]), ValueError, "opens downward"),
    (lambda: fit_isoflop([1e3, 0, 1e5], [1.5, 2.0, 1.5]), ValueError, "every x must be a positive"),
])
def test_fit_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_fit_isoflop_finds_the_vertex():
    """An exact parabola in ln N gives back its vertex; on noisy points the vertex is the lowest
    point of the least-squares parabola, found here by a search over a fine grid of sizes."""
    N = np.array([1e3, 2e3, 5e3, 1e4, 3e4, 1e5])
    u = np.log(N)
    L = 0.07 * (u - math.log(7e3)) ** 2 + 1.4
    N_opt, (c2, c1, c0) = fit_isoflop(N.tolist(), L.tolist())
    assert N_opt == pytest.approx(7e3, rel=1e-9) and c2 == pytest.approx(0.07, rel=1e-9)
    noisy = L * np.array([1.01, 0.99, 1.02, 0.98, 1.0, 1.01])
    N_opt, coef = fit_isoflop(N, noisy)
    A = np.stack([u ** 2, u, np.ones_like(u)], axis=1)          # the normal equations, by hand
    c = np.linalg.solve(A.T @ A, A.T @ noisy)
    assert coef == pytest.approx(tuple(c), rel=1e-8)
    grid = np.logspace(3, 5, 200001)
    assert N_opt == pytest.approx(grid[np.argmin(np.polyval(c, np.log(grid)))], rel=1e-4)


def test_compute_optimal_is_the_minimum_along_the_budget():
    """The closed form against a brute-force search along D = C/(6N)."""
    for fit in PUBLISHED:
        C = 5.76e23                                          # Chinchilla's budget
        N, D = compute_optimal(C, fit)
        assert 6 * N * D == pytest.approx(C, rel=1e-12)
        grid = np.logspace(9, 12, 30001)
        best = grid[np.argmin(loss_surface(grid, C / (6 * grid), fit))]
        assert N == pytest.approx(best, rel=1e-3)


# --------------------------------------------------------------------------- the language's floor


def _log_prob(sentence: str) -> float:
    """log P(sentence) under the grammar, read back from the words (a parser written here)."""
    w = sentence.split()
    mix = dict(zip(("pronoun", "relation", "repeat", "filler"), (0.4, 0.3, 0.2, 0.1)))
    if w[0] == "remember":
        n = (len(w) - 4) // 2
        return math.log(mix["repeat"] / 4) - n * math.log(len(FILLER))
    for name, template in RELATION_TEMPLATES.items():
        head = template.split("{")[0].split()
        if w[:len(head)] == head and len(w) == len(template.split()):
            return math.log(mix["relation"] / 3 / len(RELATIONS[name]))
    for template, firsts, seconds, adj_a, adj_b in PRONOUN_TEMPLATES:
        t = template.split()
        if len(t) == len(w) and all(x == y for x, y in zip(t, w) if "{" not in x):
            a, b, adj = w[t.index("{a}")], w[t.index("{b}")], w[t.index("{adj}")]
            assert a in firsts and b in seconds
            adjs = adj_a if adj in adj_a else adj_b
            return math.log(mix["pronoun"] / 3 / len(firsts) / len(seconds) / 2 / len(adjs))
    n = len(w) - 1
    return math.log(mix["filler"] / 6) - n * math.log(len(FILLER))


def test_synthetic_entropy_against_sampled_sentences():
    """The closed form against a Monte Carlo estimate: the mean of -log P over 20,000 sampled
    sentences, and the mean number of tokens, each within four standard errors."""
    lines = synthetic_corpus(20_000, seed=5).text.split("\n")
    nll = np.array([-_log_prob(s) for s in lines])
    n_tokens = np.array([len(words(s)) for s in lines])
    h = synthetic_entropy()
    assert abs(nll.mean() - h["nats_per_sentence"]) < 4 * nll.std() / math.sqrt(len(lines))
    assert abs(n_tokens.mean() - h["tokens_per_sentence"]) < 4 * n_tokens.std() / math.sqrt(len(lines))
    assert h["nats_per_token"] == pytest.approx(h["nats_per_sentence"] / h["tokens_per_sentence"])


def test_synthetic_entropy_follows_the_mix():
    only_relations = synthetic_entropy((0, 1, 0, 0))
    expected = (math.log(3) + sum(math.log(len(p)) for p in RELATIONS.values()) / 3)
    assert only_relations["nats_per_sentence"] == pytest.approx(expected)
    with pytest.raises(ValueError, match="mix must be 4"):
        synthetic_entropy((1, 1))

