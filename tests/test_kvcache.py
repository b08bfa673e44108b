"""The KV cache (chapter 8): cached decoding is exact, holds what it should, and fails clearly."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
import torch.nn.utils.prune as prune

from tinyformer.attention import MultiHeadAttention, repeat_kv
from tinyformer.experiments.ch05 import BigramLM
from tinyformer.kvcache import KVCache, LayerCache, kv_cache_bytes
from tinyformer.model import GPT, GPTConfig, decode_flops, gpt_param_count, matmul_params
from tinyformer.sampling import generate

SCHEMES = ("learned", "sinusoidal", "rotary", "none")


def small(positions="learned", norm="pre", fused=True, n_kv_head=None, block_size=24, seed=0):
    torch.manual_seed(seed)
    c = GPTConfig(vocab_size=50, block_size=block_size, n_layer=2, n_head=4, d_model=32,
                  positions=positions, norm=norm, fused_attention=fused, n_kv_head=n_kv_head)
    return GPT(c).eval()


def cached_logits(model, idx, chunks):
    """Feed idx through a fresh cache in chunks of the given sizes; concatenate the logits."""
    cache = model.new_cache(idx.shape[0])
    out, t = [], 0
    for n in chunks:
        out.append(model(idx[:, t:t + n], cache=cache))
        t += n
    assert t == idx.shape[1] and cache.length == t
    return torch.cat(out, dim=1)


# --- exactness ---------------------------------------------------------------------------------

@pytest.mark.parametrize("positions,norm,fused,n_kv_head",
                         list(itertools.product(SCHEMES, ("pre", "post"), (True, False), (None, 2, 1))))
def test_cached_logits_equal_the_full_forward(positions, norm, fused, n_kv_head):
    model = small(positions, norm, fused, n_kv_head)
    idx = torch.randint(0, 50, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx)
        one_by_one = cached_logits(model, idx, [1] * 20)
        chunked = cached_logits(model, idx, [5, 1, 7, 1, 6])
    torch.testing.assert_close(one_by_one, full, atol=1e-5, rtol=0)
    torch.testing.assert_close(chunked, full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("positions", SCHEMES)
def test_cached_and_uncached_generation_give_the_same_tokens(positions):
    model = small(positions)
    prompt = torch.randint(0, 50, (2, 3), generator=torch.Generator().manual_seed(2))
    for kwargs in ({}, {"top_k": 1}, {"temperature": 0.7, "top_p": 0.9}):
        runs = [generate(model, prompt, 15, use_cache=cache,
                         generator=torch.Generator().manual_seed(3), **kwargs)
                for cache in (False, True)]
        assert torch.equal(runs[0], runs[1]), (positions, kwargs)


@pytest.mark.parametrize("positions", SCHEMES)
def test_generation_past_the_window_still_matches(positions):
    """block_size 24, 3 + 40 tokens: the window slides 19 times; each slide recomputes the cache."""
    model = small(positions)
    prompt = torch.randint(0, 50, (1, 3), generator=torch.Generator().manual_seed(4))
    a, b = (generate(model, prompt, 40, use_cache=c, generator=torch.Generator().manual_seed(5))
            for c in (False, True))
    assert a.shape == (1, 43) and torch.equal(a, b)


def test_a_prompt_longer_than_the_window_is_cropped_as_without_cache():
    model = small()
    prompt = torch.randint(0, 50, (1, 30), generator=torch.Generator().manual_seed(6))
    a, b = (generate(model, prompt, 5, use_cache=c, top_k=1) for c in (False, True))
    assert torch.equal(a, b) and torch.equal(a[:, :30], prompt)


def test_every_step_of_cached_decoding_matches_the_uncached_logits():
    """The logits generate() samples from, step by step, against a fresh full forward."""
    model = small("rotary")
    idx = torch.randint(0, 50, (2, 1), generator=torch.Generator().manual_seed(7))
    cache = model.new_cache(2)
    with torch.no_grad():
        logits = model(idx, cache=cache)[:, -1]
        for _ in range(22):
            torch.testing.assert_close(logits, model(idx)[:, -1], atol=1e-5, rtol=0)
            nxt = logits.argmax(-1, keepdim=True)
            idx = torch.cat([idx, nxt], dim=1)
            logits = model(nxt, cache=cache)[:, -1]


def test_the_cache_holds_each_layers_keys_and_values():
    """Against an independent computation: k_proj/v_proj of each block's normalised input, rotated."""
    model = small("rotary")
    idx = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(8))
    cache = model.new_cache(2)
    with torch.no_grad():
        model(idx, cache=cache)
        x = model.token_embedding(idx)
        _, stream = model.blocks(x, return_stream=True)
        for i, block in enumerate(model.blocks.blocks):
            h = block.ln_1(stream[i])                                   # pre-norm input
            k = block.attn.k_proj(h).view(2, 9, 4, 8).transpose(1, 2)
            v = block.attn.v_proj(h).view(2, 9, 4, 8).transpose(1, 2)
            torch.testing.assert_close(cache[i].k[:, :, :9], block.attn.rotary(k), atol=1e-6, rtol=0)
            torch.testing.assert_close(cache[i].v[:, :, :9], v, atol=1e-6, rtol=0)
            assert cache[i].length == 9


def test_one_cached_query_matches_torch_attention_over_the_whole_sequence():
    """The new token's attention output equals the last row of torch's causal attention."""
    torch.manual_seed(9)
    attn = MultiHeadAttention(16, 2, fused=False).eval()
    x = torch.randn(1, 6, 16)
    layer = KVCache(1, 1, 2, 8, 10)[0]
    with torch.no_grad():
        attn(x[:, :5], cache=layer)
        got = attn(x[:, 5:], cache=layer)
        q, k, v = (p(x).view(1, 6, 2, 8).transpose(1, 2) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)[:, :, -1:]
        ref = attn.o_proj(ref.transpose(1, 2).reshape(1, 1, 16))
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=0)


def test_cached_weights_for_several_new_queries_are_causal():
    torch.manual_seed(10)
    attn = MultiHeadAttention(16, 2).eval()
    layer = KVCache(1, 1, 2, 8, 10)[0]
    with torch.no_grad():
        attn(torch.randn(1, 4, 16), cache=layer)
        _, w = attn(torch.randn(1, 3, 16), cache=layer, return_weights=True)
    assert w.shape == (1, 2, 3, 7)
    allowed = torch.ones(7, 7, dtype=torch.bool).tril()[4:]              # queries at 4, 5, 6
    assert torch.all(w[..., ~allowed] == 0) and torch.all(w[..., allowed] > 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 2, 3))


def test_gradients_flow_through_a_cached_forward():
    """One chunk: the same gradient as the full forward. Later chunks: earlier positions are
    constants, so only the gradient through the new positions' keys and values is lost."""
    model = small("rotary").train()
    W = model.blocks.blocks[0].attn.q_proj.weight
    idx = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(11))
    g_full = torch.autograd.grad(model(idx).logsumexp(-1).sum(), W)[0]
    g_one = torch.autograd.grad(cached_logits(model, idx, [8]).logsumexp(-1).sum(), W)[0]
    assert g_full.abs().sum() > 0
    torch.testing.assert_close(g_one, g_full, atol=1e-5, rtol=1e-4)
    logits = cached_logits(model, idx, [3, 1, 4])
    torch.testing.assert_close(logits, model(idx), atol=1e-5, rtol=0)
    g_chunks = torch.autograd.grad(logits.logsumexp(-1).sum(), W)[0]
    assert torch.isfinite(g_chunks).all() and g_chunks.abs().sum() > 0
    cache = model.new_cache(2)
    model(idx[:, :4], cache=cache)
    assert not cache.k.requires_grad          # the storage never joins a graph


def test_weights_changed_between_sequences_are_picked_up():
    """The stacked q/k/v weights are rebuilt when a new sequence starts."""
    model = small()
    idx = torch.randint(0, 50, (1, 6), generator=torch.Generator().manual_seed(12))
    with torch.no_grad():
        cached_logits(model, idx, [1] * 6)
        for p in model.parameters():
            p.mul_(1.5)
        torch.testing.assert_close(cached_logits(model, idx, [1] * 6), model(idx), atol=1e-5, rtol=0)
        cache = model.new_cache(1)
        model(idx, cache=cache)
        cache.clear()
        torch.testing.assert_close(model(idx, cache=cache), model(idx), atol=1e-5, rtol=0)


def test_weights_changed_mid_sequence_are_picked_up_at_the_next_step():
    """The stacked copy is keyed by the weights' versions: an in-place change after a step (an optimizer
    step, load_state_dict) is used by the next step's projections, not the stale copy."""
    torch.manual_seed(21)
    attn = MultiHeadAttention(16, 2)
    cache = LayerCache(torch.zeros(1, 2, 10, 8), torch.zeros(1, 2, 10, 8))
    x = torch.randn(1, 3, 16, generator=torch.Generator().manual_seed(22))
    with torch.no_grad():
        attn(x[:, :1], cache=cache)                      # the stacked copy is made and kept
        attn.q_proj.weight.add_(0.5)                     # changed in place
        attn.v_proj.load_state_dict({"weight": 2 * attn.v_proj.weight, "bias": attn.v_proj.bias})
        q, k, v = cache._project(attn, x[:, 1:2], 1)
        for got, lin in zip((q, k, v), (attn.q_proj, attn.k_proj, attn.v_proj)):
            torch.testing.assert_close(got, lin(x[:, 1:2]).view(1, 1, 2, 8).transpose(1, 2))


def test_a_prefill_with_gradients_after_a_training_step_does_not_revive_a_stale_copy():
    """No-grad decoding keeps a stacked copy; a training step changes the weights; a prefill with
    gradients on (which builds its own stack and keeps none) then no-grad steps: those steps must use
    the new weights, as the uncached model does."""
    model = small()
    idx = torch.randint(0, 50, (1, 6), generator=torch.Generator().manual_seed(25))
    with torch.no_grad():
        cached_logits(model, idx, [1] * 6)                  # leaves a stacked copy in every layer
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model(idx).square().mean().backward()
    opt.step()                                              # the weights change in place
    cache = model.new_cache(1)
    model(idx[:, :3], cache=cache)                          # prefill with gradients on
    with torch.no_grad():
        steps = torch.cat([model(idx[:, i:i + 1], cache=cache) for i in range(3, 6)], dim=1)
        torch.testing.assert_close(steps, model(idx)[:, 3:], atol=1e-5, rtol=0)


def test_a_change_through_data_is_seen_by_a_new_cache():
    """An edit through p.data bumps no version counter; the stacked copy lives in the cache, so the
    next sequence's new cache starts from the edited weights."""
    model = small()
    idx = torch.randint(0, 50, (1, 6), generator=torch.Generator().manual_seed(26))
    with torch.no_grad():
        cached_logits(model, idx, [1] * 6)                  # a stacked copy in every layer
        for p in model.parameters():
            p.data.add_(0.05)                               # no version bump
        torch.testing.assert_close(cached_logits(model, idx, [2, 1, 3]), model(idx), atol=1e-4, rtol=0)


def test_a_model_built_under_inference_mode_decodes_with_the_cache():
    """Inference tensors have no version counter: the cached path must not ask for one."""
    with torch.inference_mode():
        torch.manual_seed(27)
        model = small()
        idx = torch.randint(0, 50, (1, 6), generator=torch.Generator().manual_seed(28))
        torch.testing.assert_close(cached_logits(model, idx, [3, 1, 1, 1]), model(idx), atol=1e-5, rtol=0)
        out = [generate(model, idx[:, :2], 4, use_cache=c, generator=torch.Generator().manual_seed(5))
               for c in (True, False)]
        assert torch.equal(*out)


@pytest.mark.parametrize("hook", ["forward", "pre", "prune"])
def test_a_projection_with_hooks_is_called(hook):
    """A hook (or pruning, a pre-hook) on a projection changes what it computes: the cached path runs it."""
    torch.manual_seed(29)
    attn = MultiHeadAttention(16, 2)
    if hook == "forward":
        attn.k_proj.register_forward_hook(lambda m, args, out: 2 * out)
    elif hook == "pre":
        attn.v_proj.register_forward_pre_hook(lambda m, args: (args[0] + 1,))
    else:
        prune.l1_unstructured(attn.q_proj, "weight", amount=0.5)
    x = torch.randn(1, 5, 16, generator=torch.Generator().manual_seed(30))
    cache = LayerCache(torch.zeros(1, 2, 8, 8), torch.zeros(1, 2, 8, 8))
    with torch.no_grad():
        steps = torch.cat([attn(x[:, i:i + 1], cache=cache) for i in range(5)], dim=1)
        torch.testing.assert_close(steps, attn(x), atol=1e-5, rtol=0)


def test_an_interrupted_step_leaves_the_cache_as_it_was():
    """An error in the middle of a cached step (here in the last block, after the first blocks appended)
    must not leave the cache advanced: the next step gives the full pass's logits."""
    model = small()
    idx = torch.randint(0, 50, (1, 6), generator=torch.Generator().manual_seed(31))
    cache = model.new_cache(1)
    with torch.no_grad():
        model(idx[:, :4], cache=cache)
        hook = model.blocks.blocks[-1].register_forward_pre_hook(lambda m, args: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            model(idx[:, 4:5], cache=cache)
        hook.remove()
        assert [layer.length for layer in cache] == [4] * len(cache)
        step = model(idx[:, 4:5], cache=cache)
        torch.testing.assert_close(step, model(idx[:, :5])[:, 4:], atol=1e-5, rtol=0)


class _Wrapped(torch.nn.Module):
    """A projection with an extra low-rank term, as chapter 9's LoRA wraps one: no .weight of its own."""

    def __init__(self, base, rank=2):
        super().__init__()
        self.base = base
        self.A = torch.nn.Parameter(torch.randn(base.in_features, rank) * 0.5)
        self.B = torch.nn.Parameter(torch.randn(rank, base.out_features) * 0.5)

    def forward(self, x):
        return self.base(x) + x @ self.A @ self.B


def test_a_wrapped_projection_is_called_not_bypassed():
    """Cached decoding through a layer whose q/k/v projections are wrapped equals the uncached layer."""
    torch.manual_seed(23)
    attn = MultiHeadAttention(16, 2)
    for name in ("q_proj", "k_proj", "v_proj"):
        setattr(attn, name, _Wrapped(getattr(attn, name)))
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(24))
    cache = LayerCache(torch.zeros(2, 2, 8, 8), torch.zeros(2, 2, 8, 8))
    with torch.no_grad():
        steps = torch.cat([attn(x[:, i:i + 1], cache=cache) for i in range(5)], dim=1)
        torch.testing.assert_close(steps, attn(x), atol=1e-5, rtol=0)


# --- grouped-query attention ----------------------------------------------------------------------

def test_grouped_query_attention_equals_attention_with_repeated_key_value_weights():
    """A GQA layer is an ordinary layer whose key/value heads are copies: build that one by hand."""
    torch.manual_seed(13)
    gqa = MultiHeadAttention(32, 4, n_kv_heads=2)
    full = MultiHeadAttention(32, 4)
    with torch.no_grad():
        for name in ("q_proj", "o_proj"):
            getattr(full, name).load_state_dict(getattr(gqa, name).state_dict())
        for name in ("k_proj", "v_proj"):
            src = getattr(gqa, name)                        # (2·8, 32): kv head j = rows 8j … 8j+7
            W = src.weight.view(2, 8, 32).repeat_interleave(2, dim=0).reshape(32, 32)
            b = src.bias.view(2, 8).repeat_interleave(2, dim=0).reshape(32)
            getattr(full, name).weight.copy_(W)
            getattr(full, name).bias.copy_(b)
    x = torch.randn(2, 7, 32)
    torch.testing.assert_close(gqa(x), full(x), atol=1e-6, rtol=0)
    assert gqa.k_proj.weight.shape == (16, 32)


def test_repeat_kv_gives_query_head_h_the_key_head_h_over_group():
    t = torch.arange(2).view(1, 2, 1, 1).float().expand(1, 2, 3, 4)     # head j holds the value j
    r = repeat_kv(t, 6)
    assert r.shape == (1, 6, 3, 4)
    assert r[0, :, 0, 0].tolist() == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
def test_parameter_counts_and_cache_size_with_fewer_key_value_heads(n_kv_head):
    c = GPTConfig(vocab_size=50, block_size=24, n_layer=2, n_head=4, d_model=32, n_kv_head=n_kv_head)
    model = GPT(c)
    assert gpt_param_count(c) == sum(p.numel() for p in model.parameters())
    d_kv = n_kv_head * 8
    assert matmul_params(c) == 2 * (2 * 32 * 32 + 2 * 32 * d_kv + 2 * 32 * 128) + 32 * 50
    cache = model.new_cache(3)
    assert cache.k.shape == (2, 3, n_kv_head, 24, 8)


def test_n_kv_head_must_divide_n_head():
    with pytest.raises(ValueError, match="n_kv_heads"):
        GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=4, d_model=16, n_kv_head=3)
    with pytest.raises(ValueError, match="n_kv_heads"):
        MultiHeadAttention(16, 4, n_kv_heads=8)


# --- memory ----------------------------------------------------------------------------------------

def test_kv_cache_bytes_is_the_closed_form():
    assert kv_cache_bytes(32, 32, 128, 4096, 2) == 2 * 32 * 32 * 128 * 4096 * 2 == 2 ** 31
    assert kv_cache_bytes(80, 8, 128, 4096, 2, batch_size=4) == 4 * 2 * 80 * 8 * 128 * 4096 * 2
    with pytest.raises(ValueError, match="T"):
        kv_cache_bytes(1, 1, 1, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_nbytes_counts_the_tensors_actually_held(dtype):
    model = small(n_kv_head=2).to(dtype)
    cache = model.new_cache(3)
    assert cache.k.dtype == dtype
    idx = torch.randint(0, 50, (3, 11))
    with torch.no_grad():
        model(idx, cache=cache)
    size = torch.tensor([], dtype=dtype).element_size()
    held = sum(layer.k[:, :, :layer.length].numel() + layer.v[:, :, :layer.length].numel()
               for layer in cache.layers) * size
    assert cache.nbytes() == held == kv_cache_bytes(2, 2, 8, 11, size, batch_size=3)
    assert cache.nbytes(allocated=True) == cache.k.nbytes + cache.v.nbytes


def test_decode_flops_closed_forms():
    c = GPTConfig(vocab_size=65, block_size=320, n_layer=4, n_head=4, d_model=128)
    N = matmul_params(c)
    assert decode_flops(c, 1, cached=True) == decode_flops(c, 1, cached=False) == 2 * N + 4 * 4 * 128
    assert decode_flops(c, 100, cached=True) == 2 * N + 4 * 4 * 128 * 100
    assert decode_flops(c, 100, cached=False) == 2 * N * 100 + 4 * 4 * 128 * 100 ** 2
    # summed over a generation: the cached total grows linearly in the weight term, the uncached one
    # quadratically
    n = 256
    cached = sum(decode_flops(c, t, cached=True) for t in range(1, n + 1))
    uncached = sum(decode_flops(c, t, cached=False) for t in range(1, n + 1))
    assert cached == 2 * N * n + 4 * 4 * 128 * n * (n + 1) // 2
    assert uncached > 100 * cached
    with pytest.raises(TypeError, match="cached"):
        decode_flops(c, 3, cached=1)


# --- generate() ------------------------------------------------------------------------------------

def test_generate_returns_an_ordinary_tensor_and_restores_settings():
    model = small().train()
    threads, mkldnn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    out = generate(model, torch.zeros(1, 1, dtype=torch.long), 5)
    assert not out.is_inference() and model.training
    assert torch.get_num_threads() == threads and torch.backends.mkldnn.enabled == mkldnn
    model(out[:, :-1]).sum().backward()          # usable in training
    assert model.token_embedding.weight.grad is not None


def test_generate_keeps_the_prompt_dtype_and_handles_zero_new_tokens():
    model = small()
    prompt = torch.tensor([[1, 2, 3]], dtype=torch.int32)
    out = generate(model, prompt, 4, use_cache=True)
    assert out.dtype == torch.int32 and out.shape == (1, 7)
    assert torch.equal(generate(model, prompt, 0, use_cache=True), prompt)


def test_use_cache_on_a_model_without_a_cache_recomputes():
    model = BigramLM(torch.tensor([1, 2, 3, 1, 4, 5, 6, 1, 2]), vocab_size=7)
    prompt = torch.tensor([[1]])
    a, b = (generate(model, prompt, 6, use_cache=c, generator=torch.Generator().manual_seed(0))
            for c in (False, True))
    assert torch.equal(a, b)


# --- bad input ------------------------------------------------------------------------------------

def test_a_full_cache_says_so():
    model = small(block_size=8)
    cache = model.new_cache(1)
    with torch.no_grad():
        model(torch.zeros(1, 6, dtype=torch.long), cache=cache)
        with pytest.raises(ValueError, match="after the 6 the cache holds"):
            model(torch.zeros(1, 3, dtype=torch.long), cache=cache)
        model(torch.zeros(1, 2, dtype=torch.long), cache=cache)
    layer = cache[0]
    with pytest.raises(ValueError, match="cache is full.*max_len=8"):
        layer.append(torch.zeros(1, 4, 1, 8), torch.zeros(1, 4, 1, 8))


def test_a_cache_that_does_not_fit_the_model_or_input_is_refused():
    model = small()
    idx = torch.zeros(2, 1, dtype=torch.long)
    with pytest.raises(TypeError, match="KVCache"):
        model(idx, cache=[None, None])
    with pytest.raises(ValueError, match="batch, n_kv_heads, d_head"):
        model(idx, cache=model.new_cache(3))
    with pytest.raises(ValueError, match="batch, n_kv_heads, d_head"):
        model(idx, cache=small(n_kv_head=2).new_cache(2))
    with pytest.raises(ValueError, match="3 layers"):
        model(idx, cache=KVCache(3, 2, 4, 8, 24))
    with pytest.raises(ValueError, match="float64"):
        model(idx, cache=model.new_cache(2, dtype=torch.float64))


def test_mask_or_context_with_a_cache_is_refused():
    attn = MultiHeadAttention(16, 2)
    layer = KVCache(1, 1, 2, 8, 10)[0]
    x = torch.randn(1, 2, 16)
    with pytest.raises(ValueError, match="causal self-attention only"):
        attn(x, torch.ones(2, 2, dtype=torch.bool), cache=layer)
    with pytest.raises(ValueError, match="causal self-attention only"):
        MultiHeadAttention(16, 2, causal=False)(x, cache=layer)
    with pytest.raises(ValueError, match=r"\(B, T, d_model\)"):
        attn(torch.randn(2, 1, 2, 16), cache=layer)


def test_kvcache_arguments_are_checked():
    with pytest.raises(ValueError, match="max_len"):
        KVCache(1, 1, 1, 8, 0)
    with pytest.raises(TypeError, match="dtype"):
        KVCache(1, 1, 1, 8, 4, dtype=torch.int64)
    cache = KVCache(2, 1, 1, 8, 4)
    assert len(cache) == 2 and isinstance(cache[1], LayerCache)
    assert "length=0" in repr(cache) and cache.max_len == 4 and cache.batch_size == 1


def test_memory_example_of_a_7b_model_matches_the_arithmetic():
    """Llama-2-7B-like: 32 layers, 32 heads of 128, 4096 tokens, 16-bit: 2 GiB per sequence."""
    assert kv_cache_bytes(32, 32, 128, 4096, 2) / 2 ** 30 == 2.0
    assert math.isclose(kv_cache_bytes(80, 8, 128, 4096, 2) / 2 ** 30, 1.25)


def test_logits_skips_the_checks_but_computes_forward():
    model = small("rotary")
    idx = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(14))
    with torch.no_grad():
        torch.testing.assert_close(model.logits(idx), model(idx), atol=0, rtol=0)
        a, b = model.new_cache(2), model.new_cache(2)
        torch.testing.assert_close(model.logits(idx, cache=a), model(idx, cache=b), atol=0, rtol=0)
    with pytest.raises(ValueError, match="vocab_size"):
        model(torch.full((1, 2), 50))


def test_a_model_can_be_copied_after_a_cached_forward_with_gradients():
    import copy
    model = small().train()
    idx = torch.randint(0, 50, (1, 5), generator=torch.Generator().manual_seed(15))
    cached_logits(model, idx, [2, 3]).sum().backward()
    twin = copy.deepcopy(model)
    with torch.no_grad():
        torch.testing.assert_close(cached_logits(twin.eval(), idx, [5]), model.eval()(idx), atol=1e-5, rtol=0)


@pytest.mark.parametrize("fused", [True, False])
def test_grouped_query_decoding_reads_the_cache_without_copying_it(fused):
    """The cached step with one key/value head runs no repeat_interleave (the cache is not copied)."""
    from tinyformer.experiments.ch08 import count_ops
    model = small(n_kv_head=1, fused=fused)
    cache = model.new_cache(1)
    with torch.no_grad():
        model(torch.zeros(1, 4, dtype=torch.long), cache=cache)
        ops = count_ops(lambda: model(torch.zeros(1, 1, dtype=torch.long), cache=cache))
    assert "aten.repeat_interleave" not in ops and sum(ops.values()) > 0
