"""Tests for Chapter 5's experiment scaffolding (tinyformer.experiments.ch05): the count-based word
model that stands in for a trained network while the chapter studies decoding (BigramLM), and the
profile of a training step by kind of work (step_part, STEP_PARTS, profile_step). References are
written here: collections.Counter over adjacent pairs, the smoothed log-probability in closed form
with ``math.log``, a greedy path read off the counts by hand, and op names taken from a real
torch.profiler run of the library's GPT."""

from __future__ import annotations

import math
import random
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from tinyformer.experiments.ch05 import STEP_PARTS, BigramLM, profile_step, step_part
from tinyformer.sampling import generate, greedy

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
PARTS = [part for part, _ in STEP_PARTS] + ["other"]


def random_ids(n=300, V=7, seed=0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(V) for _ in range(n)]


def table_by_hand(ids: list[int], V: int, alpha: float) -> list[list[float]]:
    """log((count(a b) + alpha) / (count(a ·) + V alpha)), from a Counter of adjacent pairs."""
    pairs = Counter(zip(ids[:-1], ids[1:]))
    rows = Counter(ids[:-1])
    return [[math.log((pairs[a, b] + alpha) / (rows[a] + V * alpha)) for b in range(V)]
            for a in range(V)]


# --------------------------------------------------------------------------------------------
# BigramLM
# --------------------------------------------------------------------------------------------


def test_counts_are_a_counter_of_adjacent_pairs():
    ids = random_ids()
    m = BigramLM(torch.tensor(ids), 7)
    pairs = Counter(zip(ids[:-1], ids[1:]))
    assert m.counts.shape == (7, 7)
    for a in range(7):
        for b in range(7):
            assert m.counts[a, b].item() == pairs[a, b], (a, b)
    assert m.counts.sum().item() == len(ids) - 1


@pytest.mark.parametrize("alpha", [0.01, 1e-3, 1, 2.5])
def test_log_probs_closed_form(alpha):
    ids = random_ids(seed=1)
    ids = [i for i in ids if i != 6]          # token 6 never occurs: its row is alpha only
    m = BigramLM(torch.tensor(ids), 7, alpha=alpha)
    expected = torch.tensor(table_by_hand(ids, 7, alpha), dtype=torch.float64)
    assert_close(m.log_probs.double(), expected, rtol=1e-5, atol=1e-6)
    assert_close(m.log_probs[6].double(), torch.full((7,), -math.log(7), dtype=torch.float64))
    assert_close(m.log_probs.exp().sum(1), torch.ones(7))   # float32 tolerance


def test_numpy_alpha_is_a_number():
    ids = torch.tensor(random_ids(50))
    assert_close(BigramLM(ids, 7, alpha=np.float64(0.5)).log_probs, BigramLM(ids, 7, 0.5).log_probs)
    assert_close(BigramLM(ids, 7, alpha=np.float32(0.5)).log_probs, BigramLM(ids, 7, 0.5).log_probs)


def test_state_is_buffers_not_parameters():
    m = BigramLM(torch.tensor([0, 1, 2, 0]), 3)
    assert list(m.parameters()) == []
    assert set(m.state_dict()) == {"counts", "log_probs"}


def test_forward_looks_up_one_row_per_token():
    ids = random_ids(seed=2)
    m = BigramLM(torch.tensor(ids), 7, alpha=0.1)
    table = table_by_hand(ids, 7, 0.1)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 7, (3, 5), generator=g)
    out = m(idx)
    assert out.shape == (3, 5, 7)
    for b in range(3):
        for t in range(5):
            assert_close(out[b, t].double(), torch.tensor(table[idx[b, t]], dtype=torch.float64),
                         rtol=1e-5, atol=1e-6)
    assert torch.equal(m(idx.int()), out)             # any integer dtype


def test_greedy_follows_the_argmax_of_the_counts():
    """0 is always followed by 1; 1 by 2 twice and by 3 once; 2 by 0; 3 ends the text, so its row
    is alpha only and the argmax is the lowest index, 0."""
    ids = [0, 1, 2, 0, 1, 2, 0, 1, 3]
    m = BigramLM(torch.tensor(ids), 4)
    pairs = Counter(zip(ids[:-1], ids[1:]))

    def next_by_hand(a):
        return max(range(4), key=lambda b: (pairs[a, b], -b))

    for start in range(4):
        path = [start]
        for _ in range(7):
            path.append(next_by_hand(path[-1]))
        prompt = torch.tensor([[start]])
        assert generate(m, prompt, 7, top_k=1)[0].tolist() == path
        assert greedy(m, prompt, 7)[0].tolist() == path
    assert greedy(m, torch.tensor([[0]]), 6)[0].tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert greedy(m, torch.tensor([[3]]), 4)[0].tolist() == [3, 0, 1, 2, 0]


def test_block_size_is_one_and_cropping_changes_nothing():
    """generate reads block_size and feeds only the last token; without the attribute it feeds
    the whole context. The samples are identical either way."""
    ids = torch.tensor(random_ids(seed=3))
    cropped, whole = BigramLM(ids, 7), BigramLM(ids, 7)
    assert cropped.block_size == 1
    del whole.block_size
    assert not hasattr(whole, "block_size")

    lengths = {"cropped": [], "whole": []}
    cropped.register_forward_pre_hook(lambda mod, args: lengths["cropped"].append(args[0].shape[1]))
    whole.register_forward_pre_hook(lambda mod, args: lengths["whole"].append(args[0].shape[1]))

    prompt = torch.tensor([[0, 3, 5], [6, 6, 1]])
    a = generate(cropped, prompt, 25, temperature=0.9, top_p=0.95,
                 generator=torch.Generator().manual_seed(11))
    b = generate(whole, prompt, 25, temperature=0.9, top_p=0.95,
                 generator=torch.Generator().manual_seed(11))
    assert a.shape == (2, 28)
    assert torch.equal(a, b)
    assert lengths["cropped"] == [1] * 25
    assert lengths["whole"] == list(range(3, 28))


@pytest.mark.parametrize(("ids", "kwargs", "error", "name"), [
    (torch.tensor([0, 1, 7]), {}, ValueError, "ids"),                  # out of range
    (torch.tensor([0, -1, 2]), {}, ValueError, "ids"),
    (torch.tensor([3]), {}, ValueError, "ids"),                        # fewer than 2
    (torch.tensor([], dtype=torch.long), {}, ValueError, "ids"),
    (torch.tensor([[0, 1], [1, 0]]), {}, ValueError, "ids"),           # 2-D
    (torch.tensor([[0], [1]]), {}, ValueError, "ids"),
    (torch.tensor(2), {}, ValueError, "ids"),                          # 0-D
    ([0, 1, 2], {}, ValueError, "ids"),
    (torch.tensor([0.0, 1.0]), {}, TypeError, "ids"),                  # float
    (torch.tensor([True, False]), {}, TypeError, "ids"),
    (torch.tensor([0, 1]), {"alpha": 0}, ValueError, "alpha"),
    (torch.tensor([0, 1]), {"alpha": -0.5}, ValueError, "alpha"),
    (torch.tensor([0, 1]), {"alpha": float("nan")}, ValueError, "alpha"),
    (torch.tensor([0, 1]), {"alpha": float("inf")}, ValueError, "alpha"),
    (torch.tensor([0, 1]), {"alpha": "0.1"}, TypeError, "alpha"),
    (torch.tensor([0, 1]), {"alpha": True}, TypeError, "alpha"),
    (torch.tensor([0, 1]), {"vocab_size": 1}, ValueError, "vocab_size"),
    (torch.tensor([0, 1]), {"vocab_size": 2.0}, TypeError, "vocab_size"),
])
def test_bigram_bad_input(ids, kwargs, error, name):
    kwargs = {"vocab_size": 7, **kwargs}
    with pytest.raises(error, match=rf"\b{name}\b"):
        BigramLM(ids, **kwargs)


@pytest.mark.parametrize(("idx", "error"), [
    (torch.tensor([0, 1]), ValueError),              # 1-D
    (torch.tensor([[[0]]]), ValueError),             # 3-D
    (torch.tensor([[0.0, 1.0]]), TypeError),
    (torch.tensor([[0, 3]]), ValueError),            # id == vocab_size
    (torch.tensor([[-1, 0]]), ValueError),           # would wrap round to the last row
    ([[0, 1]], ValueError),
])
def test_bigram_forward_bad_idx(idx, error):
    m = BigramLM(torch.tensor([0, 1, 2, 0]), 3)
    with pytest.raises(error, match=r"\bidx\b"):
        m(idx)


@CUDA
def test_bigram_on_cuda():
    ids = random_ids(seed=4)
    m = BigramLM(torch.tensor(ids, device="cuda"), 7, alpha=0.1)
    assert m.counts.device.type == "cuda"
    assert_close(m.log_probs.cpu().double(), torch.tensor(table_by_hand(ids, 7, 0.1), dtype=torch.float64),
                 rtol=1e-5, atol=1e-6)
    out = generate(m, torch.tensor([[0]], device="cuda"), 5, top_k=1)
    assert out.device.type == "cuda"
    assert torch.equal(out.cpu(), greedy(BigramLM(torch.tensor(ids), 7, alpha=0.1), torch.tensor([[0]]), 5))


# --------------------------------------------------------------------------------------------
# step_part, STEP_PARTS
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "part"), [
    ("aten::addmm", "matrix multiplies"),
    ("aten::mm", "matrix multiplies"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention"),
    ("aten::bmm", "attention"),
    ("aten::_softmax", "attention"),
    ("aten::_softmax_backward_data", "attention"),
    ("aten::native_layer_norm", "layer norm"),
    ("aten::native_layer_norm_backward", "layer norm"),
    ("aten::gelu", "GELU"),
    ("aten::gelu_backward", "GELU"),
    ("aten::embedding", "embeddings"),
    ("aten::embedding_dense_backward", "embeddings"),
    ("aten::_fused_adamw_", "optimizer"),
    ("aten::_foreach_add_", "optimizer"),
    ("Optimizer.step#AdamW.step", "optimizer"),
    ("aten::nll_loss_forward", "cross-entropy"),
    ("aten::nll_loss_backward", "cross-entropy"),
    ("aten::_log_softmax", "cross-entropy"),
    ("aten::log_softmax", "cross-entropy"),
    ("aten::_log_softmax_backward_data", "cross-entropy"),
    ("aten::add_", "other"),
    ("aten::copy_", "other"),
    ("aten::view", "other"),
    ("", "other"),
])
def test_step_part(op, part):
    assert step_part(op) == part


def test_step_parts_are_distinct_and_no_pattern_is_shadowed():
    """The first matching pattern wins, so a pattern contained in a later part's pattern would
    take that part's ops (as "_softmax" in attention would take "log_softmax" from
    cross-entropy if attention came first)."""
    names = [part for part, _ in STEP_PARTS]
    assert len(set(names)) == len(names) and "other" not in names
    for i, (part, patterns) in enumerate(STEP_PARTS):
        for later, later_patterns in STEP_PARTS[i + 1:]:
            for p in patterns:
                for q in later_patterns:
                    assert p not in q, f"{part!r} pattern {p!r} shadows {later!r} pattern {q!r}"
    for part, patterns in STEP_PARTS:               # and each part's own patterns reach it
        for p in patterns:
            assert step_part(p) == part, p


def tiny_gpt_step():
    from tinyformer.model import GPT, GPTConfig

    torch.manual_seed(0)
    config = GPTConfig(vocab_size=65, block_size=32, n_layer=2, n_head=2, d_model=32)
    model = GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(65, (4, 32), generator=g)
    y = torch.randint(65, (4, 32), generator=g)

    def step():
        loss = model.loss(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


@pytest.fixture(scope="module")
def gpt_profile():
    """Self time (µs) of every op in a training step of a tiny GPT with fused AdamW: the least of
    five steps profiled one by one. An op's time is wall-clock, so on a busy machine the step in
    which the process lost its core credits the wait to whatever op was running (a view's backward
    once took 24%); the least over five steps is the op's own cost."""
    from torch.profiler import ProfilerActivity, profile

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    runs = []
    try:
        step = tiny_gpt_step()
        step()
        for _ in range(5):
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                step()
            runs.append({e.key: e.self_cpu_time_total for e in prof.key_averages()})
    finally:
        torch.set_num_threads(threads)
    return {op: min(run.get(op, 0) for run in runs) for op in set().union(*runs)}


def test_real_op_names_of_a_gpt_step_map_to_their_parts(gpt_profile):
    expected = {
        "aten::mm": "matrix multiplies",
        "aten::addmm": "matrix multiplies",
        "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward": "attention",
        "aten::native_layer_norm": "layer norm",
        "aten::native_layer_norm_backward": "layer norm",
        "aten::gelu": "GELU",
        "aten::gelu_backward": "GELU",
        "aten::embedding_dense_backward": "embeddings",
        "aten::_fused_adamw_": "optimizer",
        "aten::_log_softmax": "cross-entropy",
        "aten::_log_softmax_backward_data": "cross-entropy",
        "aten::nll_loss_forward": "cross-entropy",
        "aten::nll_loss_backward": "cross-entropy",
    }
    missing = set(expected) - set(gpt_profile)
    assert not missing, f"ops not seen in a training step: {sorted(missing)}"
    for op, part in expected.items():
        assert step_part(op) == part, op
    # every part of the step is seen, with some time
    seen = Counter()
    for op, us in gpt_profile.items():
        seen[step_part(op)] += us
    assert all(seen[part] > 0 for part in PARTS), seen


def test_every_compute_op_of_a_gpt_step_has_a_part(gpt_profile):
    """By name, not by time (self times swing tenfold on a shared CPU): every op of a real step that
    does the work of a counted part (a product, attention, a norm, GELU, the loss, the optimizer)
    is filed under that part, never under 'other'."""
    work = ("mm", "attention", "layer_norm", "gelu", "softmax", "nll_loss", "adam", "embedding")
    compute = [op for op in gpt_profile  # ATen's ops, not autograd's wrappers around them
               if op.startswith("aten::") and any(w in op.lower() for w in work)]
    assert len(compute) >= 10, compute
    assert [op for op in compute if step_part(op) == "other"] == []


# --------------------------------------------------------------------------------------------
# profile_step
# --------------------------------------------------------------------------------------------


def test_profile_step_parts_and_call_count(one_thread):
    a = torch.randn(64, 64)
    calls = []

    def step():
        calls.append(1)
        torch.nn.functional.gelu(a @ a).sum()

    for repeats in (1, 3):
        calls.clear()
        profile = profile_step(step, repeats=repeats)
        assert len(calls) == repeats + 1
        assert list(profile) == PARTS
        assert all(isinstance(v, float) and v >= 0 for v in profile.values())
        assert sum(profile.values()) > 0
        assert profile["matrix multiplies"] > 0 and profile["GELU"] > 0


def test_profile_step_sums_self_time_by_part_per_call(monkeypatch):
    """With a fake profiler: self times (µs) summed by part, in ms, divided by ``repeats``; the
    first call runs before profiling starts."""
    import torch.profiler

    calls = []
    seen_at_enter = []
    events = [SimpleNamespace(key="aten::mm", self_cpu_time_total=3000.0),
              SimpleNamespace(key="aten::addmm", self_cpu_time_total=1000.0),
              SimpleNamespace(key="aten::gelu", self_cpu_time_total=600.0),
              SimpleNamespace(key="aten::_log_softmax", self_cpu_time_total=200.0),
              SimpleNamespace(key="aten::add_", self_cpu_time_total=400.0)]

    class FakeProfile:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            seen_at_enter.append(len(calls))
            return self

        def __exit__(self, *exc):
            return False

        def key_averages(self):
            return events

    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    profile = profile_step(lambda: calls.append(1), repeats=4)
    assert seen_at_enter == [1] and len(calls) == 5
    expected = dict.fromkeys(PARTS, 0.0)
    expected.update({"matrix multiplies": 1.0, "GELU": 0.15, "cross-entropy": 0.05, "other": 0.1})
    assert profile == pytest.approx(expected)


@pytest.mark.parametrize(("repeats", "error"), [(0, ValueError), (-1, ValueError), (2.0, TypeError),
                                                (True, TypeError)])
def test_profile_step_bad_repeats(repeats, error):
    calls = []
    with pytest.raises(error, match="repeats"):
        profile_step(lambda: calls.append(1), repeats=repeats)
    assert calls == []
