"""tinyformer.interp against independent computations: patterns from the weights by hand, ablation as
zeroed columns of W_O, the lens's last layer as the model's output, the induction score of a circuit
wired by hand."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tinyformer import interp
from tinyformer.model import GPT, GPTConfig


def small_gpt(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = dict(vocab_size=50, block_size=16, n_layer=2, n_head=4, d_model=32)
    model = GPT(GPTConfig(**{**cfg, **kw})).eval()
    with torch.no_grad():                              # trained-looking: biases and norms not at their init
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def idx_for(model, B=3, T=12, seed=1):
    return torch.randint(model.config.vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))


def no_hooks_left(model):
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_run_with_cache_leaves_the_output_alone_and_records_every_point_with_its_shape():
    model, idx = small_gpt(), idx_for(small_gpt())
    logits, cache = interp.run_with_cache(model, idx)
    with torch.no_grad():
        assert torch.equal(logits, model(idx))
    assert sorted(cache) == sorted(interp.hook_names(model))
    B, T, d, H = 3, 12, 32, 4
    assert cache["hook_embed"].shape == (B, T, d) and cache["hook_pos_embed"].shape == (T, d)
    for layer in range(2):
        c = {k.split(f"blocks.{layer}.")[1]: v for k, v in cache.items() if k.startswith(f"blocks.{layer}.")}
        assert c["attn.hook_pattern"].shape == (B, H, T, T)
        for name in ("attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z"):
            assert c[name].shape == (B, T, H, d // H)
        # the stream adds up: resid_mid = resid_pre + attn_out, resid_post = resid_mid + mlp_out
        assert torch.equal(c["hook_resid_mid"], c["hook_resid_pre"] + c["hook_attn_out"])
        assert torch.equal(c["hook_resid_post"], c["hook_resid_mid"] + c["hook_mlp_out"])
    assert torch.equal(cache["blocks.1.hook_resid_pre"], cache["blocks.0.hook_resid_post"])
    assert torch.equal(cache["blocks.0.hook_resid_pre"], cache["hook_embed"] + cache["hook_pos_embed"])
    assert no_hooks_left(model)


def test_patterns_equal_softmax_of_the_scaled_scores_computed_by_hand():
    model = small_gpt()
    idx = idx_for(model)
    patterns = interp.attention_patterns(model, idx)
    assert patterns.shape == (2, 3, 4, 12, 12)
    _, cache = interp.run_with_cache(model, idx)
    T, H, dh = 12, 4, 8
    for layer, block in enumerate(model.blocks.blocks):
        x = cache[f"blocks.{layer}.ln1.hook_normalized"]
        a = block.attn
        q = (x @ a.q_proj.weight.T + a.q_proj.bias).view(3, T, H, dh).transpose(1, 2)
        k = (x @ a.k_proj.weight.T + a.k_proj.bias).view(3, T, H, dh).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
        scores = scores.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
        assert torch.allclose(patterns[layer], torch.softmax(scores, dim=-1), atol=1e-6)
        # and the pattern times v is each head's output, as the model computed it
        v = cache[f"blocks.{layer}.attn.hook_v"].transpose(1, 2)
        z = (patterns[layer] @ v).transpose(1, 2)
        assert torch.allclose(z, cache[f"blocks.{layer}.attn.hook_z"], atol=1e-6)
    assert torch.allclose(patterns.sum(-1), torch.ones(2, 3, 4, 12), atol=1e-6)
    assert patterns.triu(1).abs().max() == 0


def test_patterns_of_a_fused_and_of_a_grouped_query_model():
    for kw in (dict(fused_attention=True), dict(fused_attention=False), dict(n_kv_head=2)):
        model = small_gpt(**kw)
        idx = idx_for(model)
        patterns = interp.attention_patterns(model, idx)
        _, cache = interp.run_with_cache(model, idx)
        for layer in range(2):
            v = cache[f"blocks.{layer}.attn.hook_v"].transpose(1, 2)           # (B, H_kv, T, dh)
            v = v.repeat_interleave(4 // v.shape[1], dim=1)
            z = (patterns[layer] @ v).transpose(1, 2)
            assert torch.allclose(z, cache[f"blocks.{layer}.attn.hook_z"], atol=1e-5), kw


def test_a_hook_may_replace_an_activation_and_is_removed_afterwards():
    model = small_gpt()
    idx = idx_for(model)
    silenced = copy.deepcopy(model)
    with torch.no_grad():
        silenced.blocks.blocks[0].attn.o_proj.weight.zero_()
        silenced.blocks.blocks[0].attn.o_proj.bias.zero_()
        want = silenced(idx)
        with interp.hooks(model, {"blocks.0.hook_attn_out": lambda x, name: torch.zeros_like(x)}):
            got = model(idx)
    assert torch.allclose(got, want, atol=1e-6)
    assert no_hooks_left(model)
    with pytest.raises(RuntimeError), interp.hooks(model, {"blocks.1.hook_mlp_out": lambda x, n: None}):
        raise RuntimeError("interrupted")
    assert no_hooks_left(model)


def test_bad_hooks_are_named():
    model = small_gpt()
    idx = idx_for(model)
    with pytest.raises(ValueError, match="unknown hook name"):
        with interp.hooks(model, {"blocks.7.hook_resid_pre": print}):
            pass
    with pytest.raises(ValueError, match="must return None or a tensor of shape"):
        with torch.no_grad(), interp.hooks(model, {"hook_embed": lambda x, n: x[:, :1]}):
            model(idx)
    with pytest.raises(ValueError, match="read only"):
        with torch.no_grad(), interp.hooks(model, {"blocks.0.attn.hook_pattern": lambda x, n: x * 0}):
            model(idx)
    with pytest.raises(ValueError, match="idx must be a"):
        interp.attention_patterns(model, torch.zeros(3, 4))
    with pytest.raises(TypeError, match="tinyformer GPT"):
        interp.logit_lens(torch.nn.Linear(2, 2), idx)
    with pytest.raises(ValueError, match="pre-norm"):
        interp.attention_patterns(small_gpt(norm="post"), idx)
    assert no_hooks_left(model)


def test_ablating_no_head_changes_nothing_and_a_head_is_its_columns_of_W_O_zeroed():
    model = small_gpt()
    idx = idx_for(model)
    before = copy.deepcopy(model.state_dict())
    with torch.no_grad():
        plain = model(idx)
        with interp.ablate_heads(model, []):
            assert torch.equal(model(idx), plain)
        with interp.ablate_heads(model, [(1, 2), (0, 0)]):
            ablated = model(idx)
        by_hand = copy.deepcopy(model)
        by_hand.blocks.blocks[1].attn.o_proj.weight[:, 16:24] = 0     # head 2 of layer 1: columns 2*8 .. 3*8
        by_hand.blocks.blocks[0].attn.o_proj.weight[:, 0:8] = 0
        assert torch.allclose(ablated, by_hand(idx), atol=1e-6)
        assert not torch.allclose(ablated, plain, atol=1e-3)
        assert torch.equal(model(idx), plain)
    assert no_hooks_left(model)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_mean_ablation_puts_the_head_mean_through_W_O():
    model = small_gpt()
    idx = idx_for(model)
    means = interp.head_means(model, idx)
    assert means.shape == (2, 4, 8)
    _, cache = interp.run_with_cache(model, idx)
    assert torch.allclose(means[0, 3], cache["blocks.0.attn.hook_z"][:, :, 3].mean(dim=(0, 1)))
    with torch.no_grad():
        with interp.ablate_heads(model, [(0, 3)], means=means):
            got = model(idx)
        by_hand = copy.deepcopy(model)
        o = by_hand.blocks.blocks[0].attn.o_proj
        o.bias += o.weight[:, 24:32] @ means[0, 3]                       # a constant where the head wrote
        o.weight[:, 24:32] = 0
        assert torch.allclose(got, by_hand(idx), atol=1e-5)
    for bad in ([(2, 0)], [(0, 4)], [0]):
        with pytest.raises(ValueError, match="heads must be"):
            with interp.ablate_heads(model, bad):
                pass
    with pytest.raises(ValueError, match="means must have shape"):
        with interp.ablate_heads(model, [(0, 0)], means=means[0]):
            pass


def test_the_lens_last_layer_is_the_model_output_and_its_first_reads_the_embeddings():
    model = small_gpt()
    idx = idx_for(model)
    lens = interp.logit_lens(model, idx)
    assert lens.shape == (3, 3, 12, 50)
    with torch.no_grad():
        assert torch.allclose(lens[-1], model(idx), atol=1e-5)
        embedded = model.token_embedding(idx) + model.position_embedding(12)
        assert torch.allclose(lens[0], model.lm_head(model.blocks.ln_f(embedded)), atol=1e-5)


def test_scores_of_patterns_with_known_answers():
    T, P = 12, 5
    perfect = torch.zeros(1, 1, T, T)
    for t in range(T):
        perfect[0, 0, t, t - P + 1 if t >= P else 0] = 1.0
    assert interp.induction_score(perfect, P).item() == pytest.approx(1.0)
    prev = torch.zeros(1, 1, T, T)
    prev[0, 0, 0, 0] = 1.0
    for t in range(1, T):
        prev[0, 0, t, t - 1] = 1.0
    assert interp.previous_token_score(prev).item() == pytest.approx(1.0)
    assert interp.induction_score(prev, P).item() == pytest.approx(0.0)
    uniform = torch.ones(T, T).tril()
    uniform = (uniform / uniform.sum(-1, keepdim=True)).expand(2, 3, T, T)       # (B, H, T, T)
    closed_form = sum(1 / (t + 1) for t in range(P, T)) / (T - P)     # the key t - P + 1 is one of t + 1
    assert torch.allclose(interp.induction_score(uniform, P), torch.full((3,), closed_form))
    for bad in (0, T, 2.0, True):
        with pytest.raises((ValueError, TypeError), match="period"):
            interp.induction_score(perfect, bad)
    with pytest.raises(ValueError, match="patterns must be"):
        interp.previous_token_score(torch.zeros(3, 4))


def induction_circuit(V=10, P=8):
    """A two-layer attention-only GPT wired by hand: head 0.0 copies the previous token into a
    subspace of its own, head 1.0 attends from the current token to the position whose previous
    token it is. The stream: token one-hot | previous-token one-hot | position one-hot | two
    dimensions that keep every vector's mean at zero (so the layer norms only rescale it)."""
    T = 2 * P
    TOK, PREV, POS, DUMP, DUMP2 = 0, V, 2 * V, 2 * V + T, 2 * V + T + 1
    d = 2 * V + T + 2
    model = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=2, n_head=1, d_model=d)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for block in model.blocks.blocks:
            block.ln_1.weight.fill_(1.0)
            block.ln_2.weight.fill_(1.0)
        model.token_embedding.weight[:, TOK:TOK + V] = torch.eye(V)
        model.token_embedding.weight[:, DUMP] = -2.0                   # token + position - 2 = 0
        model.position_embedding.weight[:, POS:POS + T] = torch.eye(T)
        sharp = 40.0 * d                                               # makes the softmax a hard choice
        a0 = model.blocks.blocks[0].attn                               # previous-token head
        for t in range(1, T):
            a0.q_proj.weight[POS + t, POS + t] = sharp                 # the query at t looks for ...
            a0.k_proj.weight[POS + t, POS + t - 1] = 1.0               # ... the key of position t - 1
        for tok in range(V):
            a0.v_proj.weight[PREV + tok, TOK + tok] = 1.0              # and copies its token
            a0.v_proj.weight[DUMP2, TOK + tok] = -1.0                  # (keeping the mean at zero)
        a0.o_proj.weight.copy_(torch.eye(d) * math.sqrt(6 / d))        # undo ln_1's 1/std
        a1 = model.blocks.blocks[1].attn                               # induction head
        for tok in range(V):
            a1.q_proj.weight[tok, TOK + tok] = sharp                   # the current token ...
            a1.k_proj.weight[tok, PREV + tok] = 1.0                    # ... matches a previous token
    return model


def test_the_induction_score_is_high_for_a_circuit_wired_by_hand_and_low_for_a_random_model():
    V, P = 10, 8
    model = induction_circuit(V, P)
    g = torch.Generator().manual_seed(0)
    spans = torch.stack([torch.randperm(V, generator=g)[:P] for _ in range(4)])   # no token twice in a span
    idx = spans.repeat(1, 2)                                                       # (4, 16)
    patterns = interp.attention_patterns(model, idx)
    assert interp.previous_token_score(patterns[0]).item() > 0.99
    score = interp.induction_score(patterns, P)                                    # (2, 1)
    assert score[1, 0] > 0.9 and score[0, 0] < 0.1
    random_model = small_gpt(vocab_size=V, block_size=2 * P)
    assert interp.induction_score(interp.attention_patterns(random_model, idx), P).max() < 0.3


def test_repeated_tokens():
    idx = interp.repeated_tokens(50, 7, batch=3, generator=torch.Generator().manual_seed(0))
    assert idx.shape == (3, 14) and torch.equal(idx[:, :7], idx[:, 7:])
    assert idx.max() < 50
    with pytest.raises(ValueError, match="period"):
        interp.repeated_tokens(50, 0)
