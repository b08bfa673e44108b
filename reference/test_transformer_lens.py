"""Chapter 10's interpretability tools (tinyformer.interp) against TransformerLens, the reference
library whose hook names they borrow, on the same weights.

One small GPT is built (random weights; biases and layer norms moved away from their init, as after
training; tied embeddings, and once untied); its weights are written out in TransformerLens's own
per-head layout and loaded into a TransformerLens model of the same shape. The two must then agree
on the logits; on every activation ``tinyformer.interp.run_with_cache`` records, at the same hook
name; on the attention patterns; on zero and mean ablation of heads (tinyformer's ``ablate_heads``
against TransformerLens's ``run_with_hooks`` on ``hook_z``); on the logit lens; and on the induction
and previous-token scores of the patterns.

TransformerLens 4 removed ``HookedTransformer``; a model built from a config by hand is now
``TransformerBridge.boot_native(TransformerBridgeConfig(...))``, a "TL-native" GPT-2-style
transformer (pre-norm LayerNorm, learned positions, split Q/K/V, exact GELU for ``act_fn="gelu"``,
as tinyformer's ``nn.GELU()``), wrapped in the hook points. Weights in HookedTransformer's layout
(``W_Q`` ``(n_heads, d_model, d_head)``, ``W_O`` ``(n_heads, d_head, d_model)``, ``W_in``
``(d_model, d_mlp)``, ``W_U`` ``(d_model, d_vocab)``, ...) go in through TransformerLens's own
converter, ``convert_tl_checkpoint``. Everything that knows where TransformerLens keeps these is
:func:`transformer_lens_api` (imports) and :func:`tl_weights` / :func:`tl_model` (the bridge) below:
a moved module fails ``test_transformer_lens_offers_what_the_bridge_uses``, in one place, and the
other tests skip.

Two differences of TransformerLens 4.3 the tests compare around (the README says so too):

- ``hook_pos_embed`` is ``(B, T, d_model)`` there, ``(T, d_model)`` in tinyformer (the same rows,
  broadcast over the batch).
- ``ln1/ln2/ln_final.hook_normalized`` is the normalised vector *before* the gain and bias in
  TransformerLens 4 (its ``x / hook_scale``); tinyformer's is the layer norm's output, after them,
  which is what HookedTransformer's ``LayerNorm`` hooked (TransformerLens 3, weights not folded) and
  what TransformerLens 4 calls ``ln1.hook_out``. Compared with ``hook_out``; the relation between
  the two is asserted.

``ActivationCache.accumulated_resid(apply_ln=True)`` in 4.3 applies the real ``ln_final`` to every
entry with statistics recomputed from that entry (for the full stack it passes
``recompute_ln=True``), which is what tinyformer's ``logit_lens`` does; the older semantics, one
cached scale (the last layer's) for every entry, agree with it only at the last entry, as a test
shows.

Measured (TransformerLens 4.3.0, torch 2.13.0, the pinned numerics of tinyformer.pytest_numerics;
the README quotes these), tied and untied alike: in float64 the logits differ by at most 2e-16 (logits
of size 0.4), the ablated logits by 2e-16, the logit lens by 4e-16, the patterns by 6e-17, every
cached activation by 1.3e-15 (a layer norm's output, of size 3), the induction and previous-token
scores by 3e-17; in float32 the logits by 9e-8, the patterns by 6e-8 and the activations by 5e-7.
The float64 tolerance, 1e-12, is PEFT's file's; the float32 ones leave a margin of 10 or more.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from tinyformer import interp
from tinyformer.model import GPT, GPTConfig

CONFIG = dict(vocab_size=50, block_size=16, n_layer=2, n_head=4, d_model=32)  # d_head 8, d_ff 128
#: the largest absolute difference allowed, by dtype: logits (about 0.4 in size), and any activation
#: (the stream grows to about 3, a layer norm's output to about 4)
LOGITS_TOL = {torch.float64: 1e-12, torch.float32: 1e-6}
ACT_TOL = {torch.float64: 1e-12, torch.float32: 1e-5}
TIES = pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])


# --------------------------------------------------------------------------------------------
# the bridge: all that knows TransformerLens's modules and layouts
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransformerLensAPI:
    TransformerBridge: Any
    TransformerBridgeConfig: Any
    convert_tl_checkpoint: Any


@functools.cache
def transformer_lens_api() -> TransformerLensAPI:
    """The three things the bridge uses, imported here alone. TransformerLens 4 moved its model
    classes once (HookedTransformer -> TransformerBridge); if it moves these, this names what."""
    where = {
        "TransformerBridge": "transformer_lens",
        "TransformerBridgeConfig": "transformer_lens",
        "convert_tl_checkpoint": "transformer_lens.utilities.tl_checkpoint_conversion",
    }
    found = {}
    for name, module in where.items():
        try:
            found[name] = getattr(__import__(module, fromlist=[name]), name)
        except (ImportError, AttributeError) as e:
            raise ImportError(f"TransformerLens {importlib.metadata.version('transformer-lens')} has no "
                              f"{module}.{name} ({e}); update transformer_lens_api() in {Path(__file__).name}"
                              ) from e
    if not hasattr(found["TransformerBridge"], "boot_native"):
        raise ImportError("TransformerBridge.boot_native is gone (it builds a model from a config by hand); "
                          f"update tl_model() in {Path(__file__).name}")
    return TransformerLensAPI(**found)


@pytest.fixture(scope="module")
def tl_api():
    try:
        return transformer_lens_api()
    except ImportError as e:
        pytest.skip(f"TransformerLens's API moved: see test_transformer_lens_offers_what_the_bridge_uses ({e})")


def tl_weights(gpt: GPT) -> dict[str, torch.Tensor]:
    """tinyformer's weights in HookedTransformer's layout, one line per matrix. tinyformer keeps
    ``nn.Linear`` weights ``(out, in)``, heads side by side along ``out`` (q, k, v) or ``in`` (o);
    TransformerLens keeps row-vector maps with the head first. The LM head has no bias: ``b_U = 0``;
    tied embeddings are one matrix in tinyformer, ``W_U = W_Eᵀ`` here."""
    c = gpt.config
    H, dh, d = c.n_head, c.d_head, c.d_model
    sd = {"embed.W_E": gpt.token_embedding.weight,                               # (d_vocab, d_model)
          "pos_embed.W_pos": gpt.position_embedding.weight}                      # (n_ctx, d_model)
    for layer, block in enumerate(gpt.blocks.blocks):
        a, p = block.attn, f"blocks.{layer}."
        sd[p + "ln1.w"], sd[p + "ln1.b"] = block.ln_1.weight, block.ln_1.bias
        for n in ("Q", "K", "V"):
            lin = getattr(a, f"{n.lower()}_proj")
            sd[p + f"attn.W_{n}"] = lin.weight.T.reshape(d, H, dh).permute(1, 0, 2)  # (H, d_model, d_head)
            sd[p + f"attn.b_{n}"] = lin.bias.reshape(H, dh)                        # (H, d_head)
        sd[p + "attn.W_O"] = a.o_proj.weight.T.reshape(H, dh, d)                   # (H, d_head, d_model)
        sd[p + "attn.b_O"] = a.o_proj.bias
        sd[p + "ln2.w"], sd[p + "ln2.b"] = block.ln_2.weight, block.ln_2.bias
        sd[p + "mlp.W_in"], sd[p + "mlp.b_in"] = block.ffn.up_proj.weight.T, block.ffn.up_proj.bias
        sd[p + "mlp.W_out"], sd[p + "mlp.b_out"] = block.ffn.down_proj.weight.T, block.ffn.down_proj.bias
    sd["ln_final.w"], sd["ln_final.b"] = gpt.blocks.ln_f.weight, gpt.blocks.ln_f.bias
    sd["unembed.W_U"] = gpt.lm_head.weight.T                                      # (d_model, d_vocab)
    sd["unembed.b_U"] = torch.zeros(c.vocab_size, dtype=gpt.lm_head.weight.dtype)
    return {k: v.detach().clone() for k, v in sd.items()}


def tl_config(api, gpt: GPT):
    c = gpt.config
    assert c.positions == "learned" and c.norm == "pre" and c.bias and c.n_kv_head == c.n_head
    dtype = gpt.token_embedding.weight.dtype
    return api.TransformerBridgeConfig(
        d_model=c.d_model, d_head=c.d_head, n_layers=c.n_layer, n_ctx=c.block_size, n_heads=c.n_head,
        d_vocab=c.vocab_size, d_mlp=c.d_ff, act_fn="gelu", eps=c.eps, normalization_type="LN",
        positional_embedding_type="standard", dtype=dtype)


def tl_model(api, gpt: GPT):
    """A TransformerLens model computing what ``gpt`` computes: every parameter loaded, strictly."""
    cfg = tl_config(api, gpt)
    model = api.TransformerBridge.boot_native(cfg, dtype=cfg.dtype)
    result = model.load_state_dict(api.convert_tl_checkpoint(tl_weights(gpt), cfg), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    return model.eval()  # boot_native returns it in training mode; the logit lens refuses that


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def small_gpt(dtype: torch.dtype = torch.float64, tie: bool = True, seed: int = 0) -> GPT:
    """As tests/test_interp.py's: random weights, biases and norms not at their init."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**CONFIG, tie_weights=tie)).to(dtype).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:                # ln_1, ln_2, ln_f: gain and bias
                p.add_(0.1 * torch.randn_like(p))
    return model


@functools.cache
def pair(tl_api, dtype=torch.float64, tie=True) -> tuple[GPT, object]:
    """The GPT and its TransformerLens copy, built once per dtype and tie for the whole module: no
    test changes either (the last test checks that the hooks left the GPT as it was)."""
    gpt = small_gpt(dtype, tie)
    return gpt, tl_model(tl_api, gpt)


def tokens(B: int = 3, T: int = 13, seed: int = 1) -> torch.Tensor:
    return torch.randint(CONFIG["vocab_size"], (B, T), generator=torch.Generator().manual_seed(seed))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


def tl_name(name: str) -> str:
    """The TransformerLens 4 hook holding what tinyformer records at ``name`` (see the docstring)."""
    return re.sub(r"hook_normalized$", "hook_out", name)


# --------------------------------------------------------------------------------------------
# the tests
# --------------------------------------------------------------------------------------------


def test_transformer_lens_offers_what_the_bridge_uses():
    transformer_lens_api()


def test_the_installed_transformer_lens_is_the_pinned_one():
    """The tolerances and the hook semantics above were measured with the pinned version."""
    pins = (Path(__file__).parent / "requirements.txt").read_text()
    assert importlib.metadata.version("transformer-lens") == re.search(r"^transformer-lens==(\S+)$", pins, re.M)[1]


@TIES
def test_transformer_lens_reads_the_weights_back_head_by_head(tl_api, tie):
    """Its own accessors (W_Q (n_layer, n_heads, d_model, d_head), W_O (n_layer, n_heads, d_head,
    d_model), ...) against tinyformer's weights sliced by hand: head h of q_proj is rows h·d_head to
    (h+1)·d_head of its weight, head h of o_proj the same columns of its weight."""
    gpt, tl = pair(tl_api, tie=tie)
    dh = gpt.config.d_head
    for layer, block in enumerate(gpt.blocks.blocks):
        a = block.attn
        for h in range(CONFIG["n_head"]):
            rows = slice(h * dh, (h + 1) * dh)
            for n in ("Q", "K", "V"):
                lin = getattr(a, f"{n.lower()}_proj")
                assert torch.equal(getattr(tl, f"W_{n}")[layer, h], lin.weight[rows].T), (layer, h, n)
                assert torch.equal(getattr(tl, f"b_{n}")[layer, h], lin.bias[rows]), (layer, h, n)
            assert torch.equal(tl.W_O[layer, h], a.o_proj.weight[:, rows].T), (layer, h)
        assert torch.equal(tl.b_O[layer], a.o_proj.bias)
        assert torch.equal(tl.W_in[layer], block.ffn.up_proj.weight.T)
        assert torch.equal(tl.W_out[layer], block.ffn.down_proj.weight.T)
        assert torch.equal(tl.b_in[layer], block.ffn.up_proj.bias)
        assert torch.equal(tl.b_out[layer], block.ffn.down_proj.bias)
    assert torch.equal(tl.W_E, gpt.token_embedding.weight) and torch.equal(tl.W_pos, gpt.position_embedding.weight)
    assert torch.equal(tl.W_U, gpt.lm_head.weight.T) and not tl.b_U.any()
    assert torch.equal(tl.W_U, tl.W_E.T) == tie


@DTYPES
@TIES
@pytest.mark.parametrize("T", [1, 13, 16])
def test_logits_agree(tl_api, dtype, tie, T):
    gpt, tl = pair(tl_api, dtype, tie)
    idx = tokens(T=T)
    with torch.no_grad():
        ours, theirs = gpt(idx), tl(idx)
    assert ours.dtype == theirs.dtype == dtype
    assert max_diff(ours, theirs) <= LOGITS_TOL[dtype]


@DTYPES
@TIES
def test_every_hook_point_agrees(tl_api, dtype, tie):
    """run_with_cache in both, compared name by name: hook_embed, hook_pos_embed, and per block
    resid_pre/mid/post, ln1/ln2, q/k/v/z (B, T, n_heads, d_head), pattern (B, n_heads, T, T),
    attn_out, mlp_out; then ln_final."""
    gpt, tl = pair(tl_api, dtype, tie)
    idx = tokens()
    ours_logits, ours = interp.run_with_cache(gpt, idx)
    theirs_logits, theirs = tl.run_with_cache(idx)
    assert max_diff(ours_logits, theirs_logits) <= LOGITS_TOL[dtype]
    assert len(ours) == 2 + 12 * CONFIG["n_layer"] + 1
    for name, ours_act in ours.items():
        theirs_act = theirs[tl_name(name)]
        if name == "hook_pos_embed":                         # tinyformer (T, d), TransformerLens (B, T, d)
            assert ours_act.shape == (13, 32) and theirs_act.shape == (3, 13, 32)
            ours_act = ours_act.expand_as(theirs_act)
        assert ours_act.dtype == dtype, name
        assert max_diff(ours_act, theirs_act) <= ACT_TOL[dtype], name


def test_hook_normalized_is_before_the_gain_and_bias_in_transformer_lens(tl_api):
    """The one name whose meaning differs (see the docstring): TransformerLens 4's hook_normalized
    times the gain plus the bias is tinyformer's hook_normalized."""
    gpt, tl = pair(tl_api)
    idx = tokens()
    _, ours = interp.run_with_cache(gpt, idx)
    _, theirs = tl.run_with_cache(idx)
    norms = {f"blocks.{layer}.ln{i}": getattr(gpt.blocks.blocks[layer], f"ln_{i}")
             for layer in range(CONFIG["n_layer"]) for i in (1, 2)} | {"ln_final": gpt.blocks.ln_f}
    for prefix, ln in norms.items():
        name = f"{prefix}.hook_normalized"
        assert max_diff(ours[name], theirs[name]) > 0.1, name     # not the same thing
        with torch.no_grad():
            assert max_diff(ours[name], theirs[name] * ln.weight + ln.bias) <= ACT_TOL[torch.float64], name


@TIES
def test_attention_patterns_agree(tl_api, tie):
    gpt, tl = pair(tl_api, tie=tie)
    idx = tokens()
    ours = interp.attention_patterns(gpt, idx)                    # (n_layer, B, n_heads, T, T)
    _, cache = tl.run_with_cache(idx)
    theirs = torch.stack([cache[f"blocks.{layer}.attn.hook_pattern"] for layer in range(CONFIG["n_layer"])])
    assert ours.shape == (2, 3, 4, 13, 13)
    assert max_diff(ours, theirs) <= ACT_TOL[torch.float64]


def tl_ablated(tl, idx, heads, mean: bool):
    """TransformerLens's way: a hook on hook_z (B, T, n_heads, d_head) that writes zero, or the head's
    mean over the batch and positions of a clean run (computed from TransformerLens's own cache)."""
    _, clean = tl.run_with_cache(idx)

    def ablate(layer):
        def fn(z, hook):
            z = z.clone()
            for ablated_layer, head in heads:
                if ablated_layer == layer:
                    z[:, :, head, :] = clean[hook.name][:, :, head, :].mean(dim=(0, 1)) if mean else 0.0
            return z
        return fn
    names = sorted({layer for layer, _ in heads})
    return tl.run_with_hooks(idx, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", ablate(layer)) for layer in names])


@TIES
@pytest.mark.parametrize("mean", [False, True], ids=["zero", "mean"])
@pytest.mark.parametrize("heads", [[(1, 2)], [(0, 0), (1, 3)], [(0, 0), (0, 3), (1, 1)]],
                         ids=["1.2", "0.0+1.3", "0.0+0.3+1.1"])
def test_ablating_heads_agrees(tl_api, tie, mean, heads):
    gpt, tl = pair(tl_api, tie=tie)
    idx = tokens()
    means = interp.head_means(gpt, idx) if mean else None
    with torch.no_grad():
        plain = gpt(idx)
        with interp.ablate_heads(gpt, heads, means):
            ours = gpt(idx)
    theirs = tl_ablated(tl, idx, heads, mean)
    assert max_diff(ours, plain) > 1e-3                            # the ablation changes the output
    assert max_diff(ours, theirs) <= LOGITS_TOL[torch.float64]


def test_head_means_are_the_mean_of_hook_z(tl_api):
    gpt, tl = pair(tl_api)
    idx = tokens()
    _, cache = tl.run_with_cache(idx)
    theirs = torch.stack([cache[f"blocks.{layer}.attn.hook_z"].mean(dim=(0, 1))
                          for layer in range(CONFIG["n_layer"])])
    assert max_diff(interp.head_means(gpt, idx), theirs) <= ACT_TOL[torch.float64]


@TIES
def test_the_logit_lens_agrees(tl_api, tie):
    """tinyformer's logit_lens (ln_f then the LM head on resid_pre of block 0 and every resid_post)
    against accumulated_resid(apply_ln=True) @ W_U + b_U, and against TransformerLens's one-call
    ActivationCache.logit_lens (every position, the whole vocabulary)."""
    gpt, tl = pair(tl_api, tie=tie)
    idx = tokens()
    ours = interp.logit_lens(gpt, idx)                             # (n_layer + 1, B, T, V)
    _, cache = tl.run_with_cache(idx)
    stack, labels = cache.accumulated_resid(apply_ln=True, return_labels=True)
    assert labels == ["0_pre", "1_pre", "final_post"]
    assert max_diff(ours, stack @ tl.W_U + tl.b_U) <= LOGITS_TOL[torch.float64]
    lens = cache.logit_lens(positions=None)
    assert lens.labels == labels and lens.readout.return_type == "logits"
    assert max_diff(ours, lens.readout.values) <= LOGITS_TOL[torch.float64]
    with torch.no_grad():
        assert max_diff(ours[-1], gpt(idx)) <= LOGITS_TOL[torch.float64]


def test_the_cached_scale_lens_agrees_only_at_the_last_entry(tl_api):
    """apply_ln_to_stack(recompute_ln=False), the older semantics of accumulated_resid(apply_ln=True):
    every entry centred and divided by ln_final's cached scale, the one of the last resid_post. With
    ln_final's gain and bias put back it is tinyformer's normalised lens stream at the last entry
    only."""
    gpt, tl = pair(tl_api)
    idx = tokens()
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.hook_resid_post" for layer in range(CONFIG["n_layer"])]
    _, stream = interp.run_with_cache(gpt, idx, names)
    with torch.no_grad():
        ours = torch.stack([gpt.blocks.ln_f(stream[n]) for n in names])
    _, cache = tl.run_with_cache(idx)
    cached = cache.apply_ln_to_stack(cache.accumulated_resid(apply_ln=False), recompute_ln=False)
    theirs = cached * tl.ln_final.w + tl.ln_final.b
    assert max_diff(ours[-1], theirs[-1]) <= ACT_TOL[torch.float64]
    assert all(max_diff(ours[i], theirs[i]) > 0.1 for i in range(CONFIG["n_layer"]))


@TIES
def test_induction_and_previous_token_scores_agree(tl_api, tie):
    """The scores of tinyformer's patterns and of TransformerLens's, on a repeated random sequence."""
    gpt, tl = pair(tl_api, tie=tie)
    idx = interp.repeated_tokens(CONFIG["vocab_size"], 6, batch=4, generator=torch.Generator().manual_seed(3))
    ours = interp.attention_patterns(gpt, idx)
    _, cache = tl.run_with_cache(idx)
    theirs = torch.stack([cache[f"blocks.{layer}.attn.hook_pattern"] for layer in range(CONFIG["n_layer"])])
    for score in (lambda p: interp.induction_score(p, 6), interp.previous_token_score):
        a, b = score(ours), score(theirs)
        assert a.shape == (2, 4) and a.abs().max() > 0.01
        assert max_diff(a, b) <= ACT_TOL[torch.float64]


def test_the_models_are_left_as_they_were(tl_api):
    """The tools remove their hooks: the GPT's weights and hooks are unchanged after all of them."""
    gpt, tl = pair(tl_api)
    before = copy.deepcopy(gpt.state_dict())
    idx = tokens()
    interp.run_with_cache(gpt, idx)
    interp.logit_lens(gpt, idx)
    with interp.ablate_heads(gpt, [(0, 0)], interp.head_means(gpt, idx)):
        pass
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in gpt.modules())
    assert all(torch.equal(v, gpt.state_dict()[k]) for k, v in before.items())
    with torch.no_grad():
        assert max_diff(gpt(idx), tl(idx)) <= LOGITS_TOL[torch.float64]
