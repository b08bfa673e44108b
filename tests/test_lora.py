"""LoRA (chapter 9) against formulas written out by hand: the layer's output and gradients, the
adapted GPT at step 0, what trains and what stays frozen, merging, the adapter file, bad input."""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.nn as nn

from tinyformer.lora import (
    LoRALinear,
    add_lora,
    count_lora_params,
    load_lora_state_dict,
    lora_layers,
    lora_state_dict,
    merge_lora,
)
from tinyformer.model import GPT, GPTConfig

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
FFN = ("up_proj", "down_proj")


def tiny_gpt(seed: int = 0, **changes) -> GPT:
    torch.manual_seed(seed)
    c = GPTConfig(**{**dict(vocab_size=23, block_size=8, n_layer=2, n_head=2, d_model=16, d_ff=24), **changes})
    return GPT(c).eval()


def tokens(seed: int = 1, B: int = 3, T: int = 8) -> torch.Tensor:
    return torch.randint(0, 23, (B, T), generator=torch.Generator().manual_seed(seed))


def randomise_adapters(model: nn.Module, seed: int = 2, std: float = 0.3) -> None:
    """Give every B a nonzero value, as training would, so that the adapters change the output."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, LoRALinear):
                m.B.copy_(torch.randn(m.B.shape, generator=g, dtype=torch.float64) * std)


def linear_shapes(model: nn.Module, ends: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """(d_in, d_out) of every nn.Linear whose name's last component is in ends, read off the weight."""
    return {name: (m.weight.shape[1], m.weight.shape[0]) for name, m in model.named_modules()
            if isinstance(m, nn.Linear) and name.rsplit(".", 1)[-1] in ends}


# --- the layer ---------------------------------------------------------------------------------


def test_layer_output_is_base_plus_scaled_low_rank_product():
    torch.manual_seed(0)
    d_in, d_out, r, alpha = 5, 7, 3, 6.0
    W = torch.randn(d_out, d_in, dtype=torch.float64)     # nn.Linear's layout: x W^T + b
    b = torch.randn(d_out, dtype=torch.float64)
    A = torch.randn(d_in, r, dtype=torch.float64)
    B = torch.randn(r, d_out, dtype=torch.float64)
    x = torch.randn(2, 4, d_in, dtype=torch.float64)
    base = nn.Linear(d_in, d_out).double()
    layer = LoRALinear(base, r, alpha)
    with torch.no_grad():
        layer.base.weight.copy_(W)
        layer.base.bias.copy_(b)
        layer.A.copy_(A)
        layer.B.copy_(B)
    expected = torch.einsum("...i,oi->...o", x, W) + b + 2.0 * torch.einsum("...i,ir,ro->...o", x, A, B)
    torch.testing.assert_close(layer(x), expected, rtol=1e-12, atol=1e-12)
    assert layer.scale == 2.0 and layer.r == 3 and layer.alpha == 6.0 and layer.base is base


def test_layer_starts_equal_to_its_base_and_frozen():
    torch.manual_seed(0)
    base = nn.Linear(12, 5)
    layer = LoRALinear(base, 4, 8)
    assert layer.A.shape == (12, 4) and layer.B.shape == (4, 5)
    assert torch.count_nonzero(layer.B) == 0
    assert torch.count_nonzero(layer.A) == layer.A.numel()      # A random: else nothing would train
    assert layer.A.abs().max() <= 1 / 12 ** 0.5                  # PEFT's kaiming_uniform(a=√5) bound
    assert not base.weight.requires_grad and not base.bias.requires_grad
    assert layer.A.requires_grad and layer.B.requires_grad
    x = torch.randn(3, 12)
    assert torch.equal(layer(x), base(x))
    assert "r=4" in repr(layer) and "alpha=8" in repr(layer)


def test_gradients_of_A_and_B_match_the_formula_by_hand():
    """L = Σ G ⊙ y gives ∂L/∂A = s·xᵀ(G Bᵀ) and ∂L/∂B = s·(xA)ᵀ G; and gradcheck in float64."""
    torch.manual_seed(0)
    d_in, d_out, r, alpha = 4, 3, 2, 3.0
    layer = LoRALinear(nn.Linear(d_in, d_out).double(), r, alpha)
    with torch.no_grad():
        layer.B.normal_()
    x = torch.randn(6, d_in, dtype=torch.float64)
    G = torch.randn(6, d_out, dtype=torch.float64)
    (layer(x) * G).sum().backward()
    s, A, B = alpha / r, layer.A.detach(), layer.B.detach()
    torch.testing.assert_close(layer.A.grad, s * x.T @ (G @ B.T), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer.B.grad, s * (x @ A).T @ G, rtol=1e-12, atol=1e-12)

    def f(A, B):
        return torch.func.functional_call(layer, {"A": A, "B": B}, (x,))

    assert torch.autograd.gradcheck(f, (A.clone().requires_grad_(), B.clone().requires_grad_()))


def test_merge_folds_the_update_into_the_weight_and_unmerge_takes_it_out():
    torch.manual_seed(0)
    layer = LoRALinear(nn.Linear(6, 4), 2, 4.0)
    with torch.no_grad():
        layer.B.normal_()
    W0 = layer.base.weight.clone()
    x = torch.randn(5, 6)
    before = layer(x)
    layer.merge()
    assert layer.merged
    torch.testing.assert_close(layer.base.weight, W0 + 2.0 * (layer.A @ layer.B).T.detach())
    torch.testing.assert_close(layer(x), before, rtol=0, atol=1e-5)
    torch.testing.assert_close(layer(x), layer.base(x))          # the adapter is skipped
    with pytest.raises(ValueError, match="merged already"):        # a second merge would add it twice
        layer.merge()
    torch.testing.assert_close(layer.base.weight, W0 + 2.0 * (layer.A @ layer.B).T.detach())
    layer.unmerge()
    with pytest.raises(ValueError, match="not merged"):
        layer.unmerge()
    assert not layer.merged
    torch.testing.assert_close(layer.base.weight, W0, rtol=0, atol=1e-6)
    torch.testing.assert_close(layer(x), before, rtol=0, atol=1e-5)


def test_merge_lora_of_a_lone_layer_returns_its_merged_base():
    torch.manual_seed(0)
    layer = LoRALinear(nn.Linear(4, 3), 2, 2)
    with torch.no_grad():
        layer.B.normal_()
    x = torch.randn(2, 4)
    before = layer(x)
    plain = merge_lora(layer)
    assert type(plain) is nn.Linear and plain is layer.base
    torch.testing.assert_close(plain(x), before, rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_layer_follows_the_base_dtype_and_device(dtype):
    layer = LoRALinear(nn.Linear(8, 3).to(dtype), 2, 2)
    assert layer.A.dtype == layer.B.dtype == dtype
    assert layer(torch.randn(4, 8, dtype=dtype)).dtype == dtype
    meta = LoRALinear(nn.Linear(8, 3, device="meta"), 2, 2)
    assert meta.A.device.type == meta.B.device.type == "meta"


# --- the adapted GPT ---------------------------------------------------------------------------


@pytest.mark.parametrize("targets", ["q_proj", ["q_proj", "v_proj"], list(ATTN + FFN) + ["lm_head"]])
def test_adapted_gpt_equals_the_base_at_step_0(targets):
    base = tiny_gpt()
    model = add_lora(copy.deepcopy(base), targets, r=4, alpha=8)
    idx = tokens()
    assert torch.equal(model(idx), base(idx))


@pytest.mark.parametrize("targets,ends", [
    ("q_proj", ("q_proj",)), (["q_proj", "v_proj"], ("q_proj", "v_proj")), (ATTN + FFN, ATTN + FFN)])
def test_trainable_parameters_are_exactly_the_adapters(targets, ends):
    base = tiny_gpt(n_kv_head=1)              # k_proj, v_proj 16 -> 8: d_in != d_out
    shapes = linear_shapes(base, ends)
    r = 3
    model = add_lora(copy.deepcopy(base), targets, r=r, alpha=6)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == {f"{name}.{p}" for name in shapes for p in "AB"}
    expected = sum(r * (d_in + d_out) for d_in, d_out in shapes.values())
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == expected == count_lora_params(model)
    assert set(lora_layers(model)) == set(shapes)


def test_hand_count_for_q_and_v_of_a_two_layer_model():
    """2 layers × (q_proj 16→16 and v_proj 16→16) × r·(16 + 16) with r = 4: 512 parameters."""
    model = add_lora(tiny_gpt(), ["q_proj", "v_proj"], r=4, alpha=4)
    assert count_lora_params(model) == 512


def test_training_changes_only_the_adapters():
    base = tiny_gpt()
    model = add_lora(copy.deepcopy(base), ["q_proj", "v_proj", "down_proj"], r=2, alpha=4).train()
    frozen = {name: p.detach().clone() for name, p in model.named_parameters() if not p.requires_grad}
    adapters = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    idx, targets = tokens(1), tokens(2)
    for _ in range(3):
        opt.zero_grad()
        model.loss(idx, targets).backward()
        opt.step()
    for name, p in model.named_parameters():
        if name in frozen:
            assert torch.equal(p, frozen[name]), name
            assert p.grad is None, name                        # frozen: no gradient computed at all
        else:
            assert not torch.equal(p, adapters[name]), name
    assert not torch.equal(model.eval()(idx), base(idx))


def test_merge_lora_gives_a_plain_gpt_with_the_same_outputs():
    base = tiny_gpt()
    keys = list(base.state_dict())
    model = add_lora(copy.deepcopy(base), list(ATTN + FFN), r=3, alpha=6)
    randomise_adapters(model)
    idx = tokens()
    adapted = model(idx)
    assert not torch.allclose(adapted, base(idx), atol=1e-3)    # the adapters do change the output
    merged = merge_lora(model)
    assert merged is model
    assert not any(isinstance(m, LoRALinear) for m in merged.modules())
    assert all(type(m.attn.q_proj) is nn.Linear and type(m.ffn.up_proj) is nn.Linear for m in merged.blocks.blocks)
    assert list(merged.state_dict()) == keys
    torch.testing.assert_close(merged(idx), adapted, rtol=0, atol=1e-5)


def test_merged_weight_is_base_plus_the_update_by_hand():
    base = tiny_gpt()
    model = add_lora(copy.deepcopy(base), "o_proj", r=2, alpha=3)
    randomise_adapters(model)
    layer = model.blocks.blocks[1].attn.o_proj
    expected = base.blocks.blocks[1].attn.o_proj.weight + 1.5 * (layer.A @ layer.B).T.detach()
    merge_lora(model)
    torch.testing.assert_close(model.blocks.blocks[1].attn.o_proj.weight, expected)


def test_merging_a_tied_lm_head_is_refused_and_an_untied_one_works():
    tied = add_lora(tiny_gpt(), ["q_proj", "lm_head"], r=2, alpha=2)
    randomise_adapters(tied)
    with pytest.raises(ValueError, match="token_embedding.weight"):
        merge_lora(tied)
    assert len(lora_layers(tied)) == 3                          # nothing was changed
    untied = add_lora(tiny_gpt(tie_weights=False), ["q_proj", "lm_head"], r=2, alpha=2)
    randomise_adapters(untied)
    idx = tokens()
    before = untied(idx)
    torch.testing.assert_close(merge_lora(untied)(idx), before, rtol=0, atol=1e-5)


def test_cached_decoding_uses_the_adapters():
    base = tiny_gpt()
    model = add_lora(copy.deepcopy(base), ["q_proj", "k_proj", "v_proj", "o_proj"], r=2, alpha=4)
    randomise_adapters(model)
    idx = tokens(B=2)
    cache = model.new_cache(2)
    with torch.no_grad():
        cached = torch.cat([model(idx[:, :5], cache=cache)] + [model(idx[:, t:t + 1], cache=cache)
                                                              for t in range(5, 8)], dim=1)
        full = model(idx)
    torch.testing.assert_close(cached, full, rtol=0, atol=1e-5)
    assert not torch.allclose(full, base(idx), atol=1e-3)


# --- which layers --------------------------------------------------------------------------------


def test_targets_match_whole_name_components():
    model = add_lora(tiny_gpt(), "attn.q_proj", r=2, alpha=2)
    assert set(lora_layers(model)) == {"blocks.blocks.0.attn.q_proj", "blocks.blocks.1.attn.q_proj"}
    with pytest.raises(ValueError, match="targets") as err:
        add_lora(tiny_gpt(), "proj", r=2, alpha=2)             # a suffix of a name, not a component
    for end in ATTN + FFN + ("lm_head",):
        assert end in str(err.value)


def test_adding_twice_keeps_the_first_adapters_trainable():
    model = add_lora(tiny_gpt(), "q_proj", r=2, alpha=2)
    with pytest.raises(ValueError, match="already"):
        add_lora(model, "q_proj", r=2, alpha=2)
    add_lora(model, "v_proj", r=2, alpha=2)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == {f"blocks.blocks.{i}.attn.{n}.{p}" for i in range(2) for n in ("q_proj", "v_proj")
                         for p in "AB"}


# --- the adapter file ----------------------------------------------------------------------------


def test_lora_state_dict_holds_only_the_adapters_and_round_trips():
    base = tiny_gpt()
    model = add_lora(copy.deepcopy(base), ["q_proj", "up_proj"], r=3, alpha=6)
    randomise_adapters(model)
    state = lora_state_dict(model)
    layers = [f"blocks.blocks.{i}.{n}" for i in range(2) for n in ("attn.q_proj", "ffn.up_proj")]
    assert set(state) == {f"{name}.{p}" for name in layers for p in "AB"}
    assert set(state) <= set(model.state_dict())
    assert state["blocks.blocks.0.ffn.up_proj.A"].shape == (16, 3)
    assert state["blocks.blocks.0.ffn.up_proj.B"].shape == (3, 24)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    fresh = add_lora(copy.deepcopy(base), ["q_proj", "up_proj"], r=3, alpha=6)
    load_lora_state_dict(fresh, torch.load(buffer, weights_only=True))
    idx = tokens()
    assert torch.equal(fresh(idx), model(idx))
    assert not torch.equal(fresh(idx), base(idx))


def test_lora_state_dict_is_a_copy():
    model = add_lora(tiny_gpt(), "q_proj", r=2, alpha=2)
    state = lora_state_dict(model)
    randomise_adapters(model)
    assert torch.count_nonzero(state["blocks.blocks.0.attn.q_proj.B"]) == 0


def test_loading_into_other_targets_or_rank_fails_clearly():
    state = lora_state_dict(add_lora(tiny_gpt(), ["q_proj", "v_proj"], r=3, alpha=6))
    other_targets = add_lora(tiny_gpt(), ["q_proj", "k_proj"], r=3, alpha=6)
    with pytest.raises(ValueError, match="missing.*k_proj.*v_proj"):
        load_lora_state_dict(other_targets, state)
    other_rank = add_lora(tiny_gpt(), ["q_proj", "v_proj"], r=2, alpha=6)
    before = lora_state_dict(other_rank)
    with pytest.raises(ValueError, match=r"shape \(16, 3\).*\(16, 2\).*rank"):
        load_lora_state_dict(other_rank, state)
    after = lora_state_dict(other_rank)                        # checked before anything was copied
    assert all(torch.equal(before[k], after[k]) for k in before)
    with pytest.raises(ValueError, match="add_lora"):
        load_lora_state_dict(tiny_gpt(), state)
    with pytest.raises(TypeError, match="state"):
        load_lora_state_dict(other_targets, [1, 2])


def test_loading_into_merged_adapters_is_refused():
    model = add_lora(tiny_gpt(), "q_proj", r=2, alpha=2)
    state = lora_state_dict(model)
    model.blocks.blocks[0].attn.q_proj.merge()
    with pytest.raises(ValueError, match="unmerge"):
        load_lora_state_dict(model, state)


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("r,error", [(0, ValueError), (-1, ValueError), (2.0, TypeError), (True, TypeError),
                                     ("4", TypeError)])
def test_bad_rank_names_r(r, error):
    model = tiny_gpt()
    with pytest.raises(error, match=r"\br must be"):
        add_lora(model, "q_proj", r=r, alpha=2)
    with pytest.raises(error, match=r"\br must be"):
        LoRALinear(nn.Linear(4, 4), r, 2)
    assert all(p.requires_grad for p in model.parameters())    # a refused call changes nothing


@pytest.mark.parametrize("alpha,error", [(0, ValueError), (-1.0, ValueError), (float("nan"), ValueError),
                                         ("2", TypeError), (None, TypeError)])
def test_bad_alpha_names_alpha(alpha, error):
    with pytest.raises(error, match="alpha"):
        add_lora(tiny_gpt(), "q_proj", r=2, alpha=alpha)


def test_targets_matching_nothing_name_targets_and_list_the_layers():
    model = tiny_gpt()
    with pytest.raises(ValueError, match=r"targets \['query'\] match no nn.Linear") as err:
        add_lora(model, "query", r=2, alpha=2)
    assert "q_proj" in str(err.value) and "down_proj" in str(err.value)
    assert all(p.requires_grad for p in model.parameters())
    assert not lora_layers(model)


@pytest.mark.parametrize("targets,error", [(5, TypeError), ([], ValueError), ([""], ValueError),
                                           (["q_proj", 3], TypeError)])
def test_malformed_targets_name_targets(targets, error):
    with pytest.raises(error, match="targets"):
        add_lora(tiny_gpt(), targets, r=2, alpha=2)


def test_non_modules_are_refused():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        add_lora({"q_proj": nn.Linear(2, 2)}, "q_proj", r=2, alpha=2)
    for fn in (merge_lora, lora_state_dict, count_lora_params):
        with pytest.raises(TypeError, match="model"):
            fn("a model")
    with pytest.raises(TypeError, match="model"):
        load_lora_state_dict(None, {})
    with pytest.raises(TypeError, match="base must be a torch.nn.Linear"):
        LoRALinear(nn.Conv1d(2, 2, 1), 2, 2)
    with pytest.raises(ValueError, match="no LoRA adapters"):
        lora_state_dict(tiny_gpt())


def test_merging_a_model_twice_is_refused_clearly():
    model = add_lora(tiny_gpt(), ["q_proj", "v_proj"], r=2, alpha=4)
    randomise_adapters(model)
    idx = tokens(B=2)
    with torch.no_grad():
        before = model(idx)
        merge_lora(model)
        with pytest.raises(ValueError, match="no LoRA adapters to merge"):
            merge_lora(model)
        torch.testing.assert_close(model(idx), before, rtol=0, atol=1e-5)   # the failed call changed nothing


def test_merge_lora_accepts_layers_merged_by_hand():
    model = add_lora(tiny_gpt(), ["q_proj"], r=2, alpha=4)
    randomise_adapters(model)
    idx = tokens(B=2)
    with torch.no_grad():
        before = model(idx)
        next(iter(lora_layers(model).values())).merge()
        merge_lora(model)
        torch.testing.assert_close(model(idx), before, rtol=0, atol=1e-5)
    assert not lora_layers(model)
