"""Chapter 10's experiment scaffolding: the repeated-span task, the baselines the chapter computes
by hand, and the path-by-path removal of a head, each against a computation written out here."""

import math

import pytest
import torch
import torch.nn.functional as F

from tinyformer import interp
from tinyformer.experiments import ch10


def test_span_batch_repeats_a_span_and_hides_only_the_unpredictable_targets():
    x, y, L = ch10.span_batch(torch.Generator().manual_seed(0), batch_size=50)
    assert x.shape == y.shape == (50, ch10.BLOCK) and L.min() >= 4 and L.max() <= 12
    for row in range(50):
        n = int(L[row])
        seq = torch.cat([x[row], y[row, -1:]])
        assert torch.equal(seq[n:], seq[:-n])                            # period n
        for t in range(ch10.BLOCK):
            assert y[row, t] == (-100 if t + 1 < n else seq[t + 1])


def test_bag_of_context_loss_matches_a_loop():
    x, y, _ = ch10.span_batch(torch.Generator().manual_seed(1), batch_size=4)
    total, n = 0.0, 0
    for b in range(4):
        for t in range(ch10.BLOCK):
            if y[b, t] == -100:
                continue
            seen = x[b, :t + 1].tolist()
            total -= math.log(seen.count(int(y[b, t])) / len(seen))
            n += 1
    assert ch10.bag_of_context_loss(x, y) == pytest.approx(total / n, rel=1e-5)


def test_attention_only_model_adds_nothing_from_its_feed_forward_networks():
    model = ch10.attention_only(2, seed=0)
    idx = ch10.probe()[:2]
    _, cache = interp.run_with_cache(model, idx, ["blocks.0.hook_mlp_out", "blocks.1.hook_mlp_out"])
    assert all(v.abs().max() == 0 for v in cache.values())


def test_loss_by_position_and_the_probe_scores_agree_with_cross_entropy_and_the_patterns():
    model = ch10.attention_only(1, seed=0).eval()
    idx = ch10.probe()[:8]
    with torch.no_grad():
        logits = model(idx)
    ref = torch.stack([F.cross_entropy(logits[:, t], idx[:, t + 1]) for t in range(idx.shape[1] - 1)])
    got = ch10.loss_by_position(model, idx)
    torch.testing.assert_close(got, ref)
    P = ch10.PROBE_PERIOD
    scores = ch10.probe_scores(model, idx, P)
    assert scores["first"] == pytest.approx(float(ref[:P - 1].mean()), abs=1e-6)
    assert scores["second"] == pytest.approx(float(ref[P - 1:].mean()), abs=1e-6)
    patterns = interp.attention_patterns(model, idx)[0]                 # (B, H, T, T), one layer
    itself = torch.stack([patterns[:, :, t, t] for t in range(idx.shape[1])]).mean(dim=(0, 1))
    torch.testing.assert_close(scores["itself"][0], itself)


@pytest.fixture(scope="module")
def trained():
    return ch10.train_induction(2, steps=30, seed=0, every=10, progress=False)


def test_train_induction_records_scores_on_the_probe(trained):
    model, hist = trained
    assert len(hist["loss"]) == 30 and hist["step"] == [0, 10, 20, 30]
    assert hist["induction"].shape == hist["previous"].shape == (4, 2, ch10.N_HEAD)
    assert not model.training
    final = ch10.probe_scores(model, ch10.probe(), ch10.PROBE_PERIOD)
    torch.testing.assert_close(final["induction"], hist["induction"][-1])


def test_removing_no_head_from_any_path_changes_nothing(trained):
    model, _ = trained
    idx = ch10.probe()[:4]
    with torch.no_grad():
        clean = model(idx)
    for path in ch10.PATHS:
        logits, patterns = ch10.path_removed(model, idx, [], path)
        torch.testing.assert_close(logits, clean, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="path"):
        ch10.path_removed(model, idx, [0], "mlp")


def test_each_path_removes_the_head_from_that_reader_only(trained):
    model, _ = trained
    idx = ch10.probe()[:4]
    clean_patterns = interp.attention_patterns(model, idx)
    # values: block 1's patterns are untouched, its output is not
    logits_v, patterns_v = ch10.path_removed(model, idx, [1], "values")
    torch.testing.assert_close(patterns_v, clean_patterns)
    # keys: block 1's patterns are those computed from the ablated stream's keys, written out here
    _, cache = interp.run_with_cache(model, idx, ["blocks.1.attn.hook_q"])
    with interp.ablate_heads(model, [(0, 1)]):
        _, ab = interp.run_with_cache(model, idx, ["blocks.1.attn.hook_k"])
    q = cache["blocks.1.attn.hook_q"].transpose(1, 2)                   # (B, H, T, d_head)
    k = ab["blocks.1.attn.hook_k"].transpose(1, 2)
    T = idx.shape[1]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    _, patterns_k = ch10.path_removed(model, idx, [1], "keys")
    torch.testing.assert_close(patterns_k[1], scores.softmax(-1), atol=1e-6, rtol=0)
    torch.testing.assert_close(patterns_k[0], clean_patterns[0])
    # direct: the head's term z_h W_O^h is taken out of the final stream and nowhere else
    _, c = interp.run_with_cache(model, idx, ["blocks.0.attn.hook_z", "blocks.1.hook_resid_post"])
    d_head = model.blocks.blocks[0].attn.d_head
    W_O = model.blocks.blocks[0].attn.o_proj.weight[:, d_head:2 * d_head]    # head 1's columns
    term = c["blocks.0.attn.hook_z"][:, :, 1] @ W_O.T
    with torch.no_grad():
        want = model.lm_head(model.blocks.ln_f(c["blocks.1.hook_resid_post"] - term))
    logits_d, patterns_d = ch10.path_removed(model, idx, [1], "direct")
    torch.testing.assert_close(logits_d, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(patterns_d, clean_patterns)


def test_ablation_losses_leaves_the_model_unchanged(trained):
    model, _ = trained
    x, y, _ = ch10.span_batch(torch.Generator().manual_seed(3), 8)
    before = ch10.task_loss(model, x, y)
    out = ch10.ablation_losses(model, x, y, {"none": [], "0.0": [(0, 0)]})
    assert out["none"] == before and out["0.0"] != before and ch10.task_loss(model, x, y) == before


def test_induction_over_periods_is_the_lowest_score_over_the_probes(trained):
    model, _ = trained
    got = ch10.induction_over_periods(model, periods=(5, 8), batch=4)
    want = []
    for period in (5, 8):
        idx = interp.repeated_tokens(ch10.VOCAB, period, batch=4,
                                     generator=torch.Generator().manual_seed(ch10.PROBE_SEED + period))
        want.append(interp.induction_score(interp.attention_patterns(model, idx), period))
    torch.testing.assert_close(got, torch.minimum(want[0], want[1]))
