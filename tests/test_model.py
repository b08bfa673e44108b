"""tinyformer.model: GPTConfig, GPT, and the closed-form counts of parameters
and training FLOPs, each checked against an independent reference."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from tinyformer.model import GPT, GPTConfig, gpt_param_count, kaplan_estimate, matmul_params, training_flops_per_token

POSITIONS = ["learned", "sinusoidal", "rotary", "none"]


def small(**changes) -> GPTConfig:
    sizes = dict(vocab_size=11, block_size=8, n_layer=2, n_head=2, d_model=8)
    return GPTConfig(**{**sizes, **changes})


def ids(*shape, V=11, seed=0):
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # shared tensors once


# --- configuration ------------------------------------------------------------------------------

def test_config_defaults_and_gpt2_preset():
    c = small()
    assert (c.d_ff, c.positions, c.norm, c.bias, c.tie_weights) == (32, "learned", "pre", True, True)
    assert (c.eps, c.init_std, c.fused_attention) == (1e-5, 0.02, True)
    g = GPTConfig.gpt2()
    assert (g.vocab_size, g.block_size, g.n_layer, g.n_head, g.d_model, g.d_ff) == (
        50257, 1024, 12, 12, 768, 3072)
    assert GPTConfig.gpt2(n_layer=2).n_layer == 2


def test_gpt2_small_has_124_439_808_parameters():
    """Built on the meta device (shapes only, no memory), so it is instant."""
    config = GPTConfig.gpt2()
    with torch.device("meta"):
        model = GPT(config)
    assert n_params(model) == 124_439_808
    assert gpt_param_count(config) == 124_439_808
    untied = GPTConfig.gpt2(tie_weights=False)
    assert gpt_param_count(untied) == 124_439_808 + 50257 * 768


@pytest.mark.parametrize("field, value, error", [
    ("vocab_size", 0, ValueError), ("block_size", 2.0, TypeError), ("n_layer", True, TypeError),
    ("n_head", 3, ValueError), ("d_model", -8, ValueError), ("d_ff", 0, ValueError),
    ("positions", "alibi", ValueError), ("norm", "sandwich", ValueError), ("bias", 1, TypeError),
    ("tie_weights", "yes", TypeError), ("eps", 0, ValueError), ("eps", "1e-5", TypeError),
    ("init_std", -0.1, ValueError), ("init_std", float("nan"), ValueError),
    ("fused_attention", None, TypeError),
])
def test_bad_config_fields_are_named(field, value, error):
    name = "n_head" if field == "n_head" else field   # 8 % 3: names d_model and n_head
    with pytest.raises(error, match=name):
        small(**{field: value})


def test_positions_need_even_widths():
    with pytest.raises(ValueError, match="sinusoidal"):
        small(d_model=7, n_head=1, positions="sinusoidal")
    with pytest.raises(ValueError, match="rotary"):
        small(d_model=6, n_head=2, positions="rotary")      # d_head = 3
    GPT(small(d_model=6, n_head=2, positions="learned"))    # odd d_head is fine here


def test_model_rejects_a_non_config():
    with pytest.raises(TypeError, match="config"):
        GPT(dict(vocab_size=11))


# --- structure ----------------------------------------------------------------------------------

def test_tied_head_is_the_embedding_matrix():
    model = GPT(small())
    assert model.lm_head.weight is model.token_embedding.weight
    assert model.lm_head.weight.data_ptr() == model.token_embedding.weight.data_ptr()
    with torch.no_grad():
        model.token_embedding.weight[3, 0] = 7.0
    assert model.lm_head.weight[3, 0] == 7.0
    untied = GPT(small(tie_weights=False))
    assert untied.lm_head.weight.data_ptr() != untied.token_embedding.weight.data_ptr()
    assert untied.lm_head.bias is None


def test_tied_matrix_gets_gradient_from_both_uses():
    """d loss/dE = the lookup's gradient + the head's: compare with an untied
    copy whose two matrices start equal."""
    torch.manual_seed(0)
    tied = GPT(small(positions="none"))
    untied = GPT(small(positions="none", tie_weights=False))
    state = tied.state_dict()
    untied.load_state_dict({**state, "lm_head.weight": state["token_embedding.weight"].clone()})
    idx = ids(2, 5)
    tied.loss(idx, ids(2, 5, seed=1)).backward()
    untied.loss(idx, ids(2, 5, seed=1)).backward()
    expected = untied.token_embedding.weight.grad + untied.lm_head.weight.grad
    torch.testing.assert_close(tied.token_embedding.weight.grad, expected)


def test_modules_follow_the_config():
    m = GPT(small(positions="learned", n_layer=3, norm="pre"))
    assert isinstance(m.token_embedding, nn.Embedding)
    assert m.position_embedding.weight.shape == (8, 8)
    assert len(m.blocks.blocks) == 3 and not isinstance(m.blocks.ln_f, nn.Identity)
    assert all(b.norm == "pre" and b.attn.fused and b.attn.rotary is None for b in m.blocks.blocks)
    norms = [n for n in m.modules() if type(n).__name__ == "LayerNorm"]
    assert len(norms) == 2 * 3 + 1 and all(n.fused for n in norms)  # fused_attention covers them
    post = GPT(small(norm="post", fused_attention=False, positions="rotary"))
    assert isinstance(post.blocks.ln_f, nn.Identity)
    assert all(b.norm == "post" and not b.attn.fused and b.attn.rotary is not None
               for b in post.blocks.blocks)
    assert not hasattr(post, "position_embedding") and not hasattr(post, "position_table")
    nobias = GPT(small(bias=False, d_ff=12))
    assert all(m.bias is None for m in nobias.modules() if isinstance(m, nn.Linear))
    assert nobias.blocks.blocks[0].ffn.up_proj.out_features == 12
    eps = GPT(small(eps=1e-3))
    assert {m.eps for m in eps.modules() if hasattr(m, "eps")} == {1e-3}


def test_sinusoidal_table_is_the_closed_form():
    m = GPT(small(positions="sinusoidal"))
    t = torch.arange(8, dtype=torch.float64)[:, None]
    i = torch.arange(4, dtype=torch.float64)[None, :]
    angle = t / 10000 ** (2 * i / 8)
    table = torch.empty(8, 8, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = angle.sin(), angle.cos()
    torch.testing.assert_close(m.position_table, table.float())
    assert "position_table" not in m.state_dict()  # a function of the config, not a weight
    # and it is what forward adds: with zero blocks' effect the logits show it
    x = m.token_embedding(ids(1, 8)) + table.float()
    torch.testing.assert_close(m(ids(1, 8)), m.lm_head(m.blocks(x)))


def test_gpt2_initialisation():
    torch.manual_seed(0)
    c = small(n_layer=4, d_model=64, n_head=4, vocab_size=500, block_size=64,
              init_std=0.05, tie_weights=False)
    m = GPT(c)
    for w in (m.token_embedding.weight, m.position_embedding.weight, m.lm_head.weight,
              m.blocks.blocks[0].attn.q_proj.weight, m.blocks.blocks[1].ffn.up_proj.weight):
        assert abs(w.std().item() - 0.05) < 0.005
    scaled = 0.05 / math.sqrt(2 * 4)
    for b in m.blocks.blocks:
        for w in (b.attn.o_proj.weight, b.ffn.down_proj.weight):
            assert abs(w.std().item() - scaled) < 0.1 * scaled
        assert torch.all(b.attn.q_proj.bias == 0) and torch.all(b.ln_1.weight == 1)


# --- parameter and FLOP counts -----------------------------------------------------------------

@pytest.mark.parametrize("positions, tie, bias, norm", list(itertools.product(
    POSITIONS, [True, False], [True, False], ["pre", "post"])))
def test_param_count_matches_the_model(positions, tie, bias, norm):
    for sizes in (dict(), dict(d_model=12, n_head=3, d_ff=20, n_layer=3, vocab_size=7, block_size=5)):
        c = small(positions=positions, tie_weights=tie, bias=bias, norm=norm, **sizes)
        assert gpt_param_count(c) == n_params(GPT(c)), c


def test_kaplan_estimate_is_the_blocks_weight_matrices():
    for L, d in [(2, 8), (3, 16), (12, 768)]:
        c = small(n_layer=L, d_model=d, n_head=2)
        assert kaplan_estimate(c) == 12 * L * d * d
    m = GPT(small(n_layer=3, d_model=16, bias=False))
    weights = sum(mod.weight.numel() for mod in m.blocks.modules() if isinstance(mod, nn.Linear))
    assert kaplan_estimate(m.config) == weights


def _hand_flops_per_token(c: GPTConfig, T: int) -> int:
    """Each matmul of one sequence's forward pass as 2·m·n·k, ×3 for forward
    + backward, per token."""
    d, H, dh = c.d_model, c.n_head, c.d_model // c.n_head
    per_layer = (3 * 2 * T * d * d          # q, k, v projections
                 + H * 2 * T * dh * T       # QKᵀ, each head, all keys
                 + H * 2 * T * T * dh       # weights · V
                 + 2 * T * d * d            # o_proj
                 + 2 * T * d * c.d_ff       # up_proj
                 + 2 * T * c.d_ff * d)      # down_proj
    head = 2 * T * d * c.vocab_size
    return 3 * (c.n_layer * per_layer + head) // T


@pytest.mark.parametrize("tie", [True, False])
def test_training_flops_by_hand(tie):
    c = small(n_layer=3, d_model=12, n_head=3, d_ff=20, vocab_size=7, block_size=6, tie_weights=tie)
    assert training_flops_per_token(c) == _hand_flops_per_token(c, 6)
    assert training_flops_per_token(c, T=4) == _hand_flops_per_token(c, 4)
    assert matmul_params(c) == 3 * (4 * 12 * 12 + 2 * 12 * 20) + 12 * 7


@pytest.mark.parametrize("positions", POSITIONS)
def test_training_flops_match_torch_flop_counter(positions):
    """torch counts every matmul of a real forward + backward (the readable
    attention path, which computes all T×T scores)."""
    c = small(n_layer=2, d_model=16, n_head=4, vocab_size=13, block_size=6,
              positions=positions, fused_attention=False)
    model = GPT(c)
    B, T = 3, 6
    with FlopCounterMode(display=False) as counter:
        model.loss(ids(B, T, V=13), ids(B, T, V=13, seed=1)).backward()
    assert counter.get_total_flops() == training_flops_per_token(c) * B * T


def test_count_helpers_reject_a_non_config():
    for fn in (gpt_param_count, kaplan_estimate, training_flops_per_token):
        with pytest.raises(TypeError, match="config"):
            fn({"n_layer": 2})
    with pytest.raises(ValueError, match="T"):
        training_flops_per_token(small(), T=0)


# --- forward and loss ---------------------------------------------------------------------------

@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_logits_shape_and_causality(positions, norm):
    torch.manual_seed(0)
    m = GPT(small(positions=positions, norm=norm))
    idx = ids(3, 8)
    logits = m(idx)
    assert logits.shape == (3, 8, 11) and logits.dtype == torch.float32
    for t in range(8):
        changed = idx.clone()
        changed[:, t] = (changed[:, t] + 1) % 11
        new = m(changed)
        torch.testing.assert_close(new[:, :t], logits[:, :t], rtol=0, atol=1e-6)
        assert not torch.allclose(new[:, t], logits[:, t])


@pytest.mark.parametrize("positions", POSITIONS)
def test_batch_independence_and_shorter_sequences(positions):
    torch.manual_seed(0)
    m = GPT(small(positions=positions))
    idx = ids(4, 8)
    full = m(idx)
    for b in range(4):
        torch.testing.assert_close(m(idx[b:b + 1]), full[b:b + 1], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m(idx[:, :5]), full[:, :5], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("positions, sees_order", [
    ("none", False), ("learned", True), ("sinusoidal", True), ("rotary", True)])
def test_positions_are_what_tells_order(positions, sees_order):
    """One causal attention layer without positions sees the earlier tokens
    as a set: swapping two of them leaves the last position's logits
    unchanged. (With two layers, the swapped tokens' own contexts differ.)"""
    torch.manual_seed(0)
    m = GPT(small(positions=positions, n_layer=1, init_std=0.5))
    idx = torch.tensor([[1, 2, 3, 4, 5]])
    swapped = torch.tensor([[2, 1, 3, 4, 5]])
    same = torch.allclose(m(idx)[0, -1], m(swapped)[0, -1], atol=1e-5)
    assert same != sees_order


@pytest.mark.parametrize("positions", POSITIONS)
def test_fused_and_readable_models_agree(positions):
    torch.manual_seed(0)
    readable = GPT(small(positions=positions, fused_attention=False)).double()
    fused = GPT(small(positions=positions)).double()
    fused.load_state_dict(readable.state_dict())
    idx, targets = ids(2, 8), ids(2, 8, seed=1)
    for m in (readable, fused):
        m.loss(idx, targets).backward()
    torch.testing.assert_close(fused(idx), readable(idx), rtol=1e-12, atol=1e-12)
    for (name, p), q in zip(readable.named_parameters(), fused.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-10, atol=1e-12, msg=name)


def test_loss_is_the_mean_cross_entropy_by_hand():
    torch.manual_seed(0)
    m = GPT(small())
    idx, targets = ids(2, 6), ids(2, 6, seed=1)
    logits = m(idx).double()
    logp = logits - logits.exp().sum(-1, keepdim=True).log()
    nll = -logp.gather(-1, targets[..., None])[..., 0]           # (B, T)
    torch.testing.assert_close(m.loss(idx, targets).double(), nll.mean(), rtol=1e-5, atol=1e-6)
    ignored = targets.clone()
    ignored[0, :4] = -100
    keep = ignored != -100
    torch.testing.assert_close(m.loss(idx, ignored).double(), nll[keep].mean(), rtol=1e-5, atol=1e-6)
    assert abs(m.loss(idx, targets).item() - math.log(11)) < 0.2  # untrained: about ln V


@pytest.mark.parametrize("make_idx, error, words", [
    (lambda: ids(2, 5).float(), TypeError, ["idx", "integer"]),
    (lambda: ids(2, 5).bool(), TypeError, ["idx", "integer"]),
    (lambda: ids(5), ValueError, ["idx", "(B, T)"]),
    (lambda: ids(1, 2, 5), ValueError, ["idx", "(B, T)"]),
    (lambda: [[1, 2]], ValueError, ["idx"]),
    (lambda: torch.tensor([[1, 11]]), ValueError, ["idx", "vocab_size=11"]),
    (lambda: torch.tensor([[-1, 2]]), ValueError, ["idx", "vocab_size=11"]),
    (lambda: ids(1, 9), ValueError, ["block_size=8"]),
    (lambda: ids(2, 0), ValueError, ["block_size=8"]),
])
def test_bad_idx_is_named(make_idx, error, words):
    m = GPT(small())
    with pytest.raises(error) as info:
        m(make_idx())
    for w in words:
        assert w in str(info.value)


def test_bad_targets_are_named():
    m = GPT(small())
    with pytest.raises(ValueError, match="targets"):
        m.loss(ids(2, 5), ids(2, 4))
    with pytest.raises(TypeError, match="targets"):
        m.loss(ids(2, 5), ids(2, 5).float())
    with pytest.raises(ValueError, match="targets.*vocab_size=11"):
        m.loss(ids(2, 5), torch.full((2, 5), 11))


def test_runs_on_the_device_of_its_input():
    """The meta device stands in for a GPU: nothing may be built on the CPU."""
    for positions in POSITIONS:
        m = GPT(small(positions=positions)).to("meta")
        out = m(torch.zeros(2, 8, dtype=torch.long, device="meta"))
        assert out.device.type == "meta" and out.shape == (2, 8, 11)


def test_deepcopy_keeps_the_tie():
    m = copy.deepcopy(GPT(small()))
    assert m.lm_head.weight is m.token_embedding.weight
