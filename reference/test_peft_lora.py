"""Chapter 9's LoRA (tinyformer.lora) against Hugging Face PEFT, the reference implementation, on the
same weights.

One GPT is built; one copy gets tinyformer's adapters (``add_lora``), another is wrapped, unchanged,
by PEFT (``get_peft_model`` with a ``LoraConfig`` of the same targets, rank and alpha). tinyformer's
adapters are given random values (``B`` too, so the update is not zero) and copied into PEFT's; then
the two must agree on what the adapted model computes, on the adapters' gradients, on the merged
weights, on the number of trainable parameters, on which layers the targets name, on the scale
``alpha / r`` (and rsLoRA's ``alpha / √r``), and on the initialisation.

Layouts: tinyformer's ``A`` is ``(d_in, r)`` and ``B`` ``(r, d_out)`` (row vectors, ``x A B``); PEFT keeps
two ``nn.Linear`` layers, whose weights are ``lora_A.weight`` ``(r, d_in)`` = ``Aᵀ`` and ``lora_B.weight``
``(d_out, r)`` = ``Bᵀ``. Everything that knows PEFT's internals is :class:`PeftAdapter` and
:func:`peft_adapters` below (the bridge): a renamed PEFT attribute fails there, in one place.

Measured (PEFT 0.21.2, torch 2.13.0, the pinned numerics of tinyformer.pytest_numerics; the README
quotes these): in float64 the logits, the gradients and the merged weights are bitwise equal (rsLoRA's
logits differ by 2e-16 where alpha·√r / r and alpha / √r round apart). In float32 the merged weights
are bitwise equal, and at r = 8 everything is; at r = 4 the logits differ by up to 1.3e-6 (logits of
size 0.4) and the gradients by up to 7e-6 of each tensor's largest entry, where the two compute the
r-term products with matrices laid out differently. The tolerances below leave a margin of about 10.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from pathlib import Path

import peft
import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from peft.tuners.lora import LoraLayer

from tinyformer import seed_everything
from tinyformer.lora import LoRALinear, add_lora, count_lora_params, lora_layers, merge_lora
from tinyformer.model import GPT, GPTConfig

CONFIG = dict(vocab_size=64, block_size=16, n_layer=2, n_head=2, d_model=32)  # d_ff = 128: up/down not square
QV = ("q_proj", "v_proj")
ALL_SIX = ("q_proj", "k_proj", "v_proj", "o_proj", "ffn.up_proj", "ffn.down_proj")
#: the largest difference allowed, by dtype: in the logits (absolute; they are below 1 here) and in
#: a gradient, relative to its largest entry
LOGITS_TOL = {torch.float64: 1e-12, torch.float32: 1e-5}
GRAD_RTOL = {torch.float64: 1e-10, torch.float32: 1e-4}
DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
TARGETS = pytest.mark.parametrize("targets", [QV, ALL_SIX], ids=["q+v", "all-six"])


# --------------------------------------------------------------------------------------------
# the bridge: all that knows how PEFT stores an adapter
# --------------------------------------------------------------------------------------------


@dataclass
class PeftAdapter:
    """One layer's adapter in PEFT, seen in tinyformer's layout."""

    layer: LoraLayer
    name: str  # PEFT's adapter name ("default")

    @property
    def A(self) -> torch.Tensor:
        """``(d_in, r)``: a view of PEFT's ``lora_A.weight`` ``(r, d_in)``, so writing it writes PEFT's."""
        return self.layer.lora_A[self.name].weight.T

    @property
    def B(self) -> torch.Tensor:
        """``(r, d_out)``: a view of PEFT's ``lora_B.weight`` ``(d_out, r)``."""
        return self.layer.lora_B[self.name].weight.T

    @property
    def A_grad(self) -> torch.Tensor:
        return self.layer.lora_A[self.name].weight.grad.T

    @property
    def B_grad(self) -> torch.Tensor:
        return self.layer.lora_B[self.name].weight.grad.T

    @property
    def scale(self) -> float:
        return self.layer.scaling[self.name]


def peft_adapters(model: peft.PeftModel) -> dict[str, PeftAdapter]:
    """Every adapter PEFT put into ``model``, keyed by its layer's name in the wrapped GPT, which is
    how ``tinyformer.lora.lora_layers`` names tinyformer's (``blocks.blocks.0.attn.q_proj``)."""
    prefix = "base_model.model."  # PeftModel.base_model (a LoraModel) .model (the GPT)
    found = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            assert name.startswith(prefix), f"PEFT's module names no longer start with {prefix!r}: {name}"
            [adapter] = module.active_adapters
            found[name.removeprefix(prefix)] = PeftAdapter(module, adapter)
    assert found, "no LoraLayer in the PEFT model"
    return found


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def base_gpt(dtype: torch.dtype = torch.float64, seed: int = 0) -> GPT:
    seed_everything(seed)
    return GPT(GPTConfig(**CONFIG)).to(dtype).eval()


def peft_config(targets, r: int, alpha: float, **changes) -> LoraConfig:
    return LoraConfig(r=r, lora_alpha=alpha, target_modules=list(targets), lora_dropout=0.0,
                      init_lora_weights=True, **changes)


@torch.no_grad()
def randomise(model, seed: int) -> None:
    """Random A and B (B ~ N(0, 0.3²) is not zero, as after training), drawn in float64."""
    g = torch.Generator().manual_seed(seed)
    for layer in lora_layers(model).values():
        for p, std in ((layer.A, 1 / math.sqrt(layer.in_features)), (layer.B, 0.3)):
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * std)


@torch.no_grad()
def copy_adapters(tiny, ref: peft.PeftModel) -> None:
    """tinyformer's A and B into PEFT's adapters (the same layers must be adapted in both)."""
    ours, theirs = lora_layers(tiny), peft_adapters(ref)
    assert sorted(ours) == sorted(theirs)
    for name, layer in ours.items():
        theirs[name].A.copy_(layer.A)
        theirs[name].B.copy_(layer.B)


def adapted_pair(targets, r: int = 4, alpha: float = 8.0, dtype: torch.dtype = torch.float64, *,
                 tiny_alpha: float | None = None, seed: int = 0, **peft_changes):
    """(base GPT, tinyformer-adapted copy, PEFT-wrapped copy), with the same random adapters."""
    base = base_gpt(dtype, seed)
    tiny = add_lora(copy.deepcopy(base), targets, r, alpha if tiny_alpha is None else tiny_alpha)
    ref = get_peft_model(copy.deepcopy(base), peft_config(targets, r, alpha, **peft_changes))
    randomise(tiny, seed + 1)
    copy_adapters(tiny, ref)
    return base, tiny, ref


def batch(seed: int = 2, B: int = 3):
    g = torch.Generator().manual_seed(seed)
    T, V = CONFIG["block_size"], CONFIG["vocab_size"]
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


def loss(model, idx, targets) -> torch.Tensor:
    return F.cross_entropy(model(idx).flatten(0, 1), targets.flatten())


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


# --------------------------------------------------------------------------------------------
# the tests
# --------------------------------------------------------------------------------------------


def test_the_installed_peft_is_the_pinned_one():
    """The tolerances were measured with the version reference/requirements.txt pins."""
    pins = (Path(__file__).parent / "requirements.txt").read_text()
    assert peft.__version__ == re.search(r"^peft==(\S+)$", pins, re.M)[1]


@pytest.mark.parametrize("targets", [QV, ("attn.q_proj",), ("up_proj", "ffn.down_proj"), ALL_SIX, ("o_proj",)],
                         ids=["q+v", "attn.q", "up+down", "all-six", "o"])
def test_the_targets_name_the_same_layers(targets):
    """A target matches a layer whose qualified name is it or ends with "." + it, in both."""
    base = base_gpt()
    tiny = add_lora(copy.deepcopy(base), targets, 4, 8.0)
    ref = get_peft_model(copy.deepcopy(base), peft_config(targets, 4, 8.0))
    assert sorted(lora_layers(tiny)) == sorted(peft_adapters(ref))
    assert len(lora_layers(tiny)) == CONFIG["n_layer"] * len(targets)  # one layer per block and target


def test_a_target_that_matches_no_layer_is_refused_by_both():
    base = base_gpt()
    with pytest.raises(ValueError, match="match no nn.Linear"):
        add_lora(copy.deepcopy(base), "proj", 4, 8.0)      # "proj" is not a whole name component
    with pytest.raises(ValueError, match="not found"):
        get_peft_model(copy.deepcopy(base), peft_config(["proj"], 4, 8.0))


@TARGETS
def test_both_start_as_the_base_model(targets):
    """At initialisation B = 0 in both, so both adapted models compute the base model exactly; A is
    uniform in ±1/√d_in in both (PEFT's kaiming_uniform_(a=√5) on its (r, d_in) weight)."""
    base = base_gpt()
    tiny = add_lora(copy.deepcopy(base), targets, 4, 8.0)
    ref = get_peft_model(copy.deepcopy(base), peft_config(targets, 4, 8.0))
    idx, _ = batch()
    with torch.no_grad():
        want = base(idx)
        assert torch.equal(tiny(idx), want) and torch.equal(ref(idx), want)
    for name, layer in lora_layers(tiny).items():
        theirs = peft_adapters(ref)[name]
        bound = 1 / math.sqrt(layer.in_features)
        for A in (layer.A, theirs.A):
            assert A.abs().max() <= bound and A.abs().max() > 0.8 * bound  # r·d_in >= 128 draws
            assert A.abs().mean().item() == pytest.approx(bound / 2, rel=0.2)  # |U(-b, b)| has mean b/2
        assert not layer.B.any() and not theirs.B.any()


@DTYPES
@TARGETS
@pytest.mark.parametrize(("r", "alpha"), [(4, 8.0), (8, 4.0)], ids=["r4-alpha8", "r8-alpha4"])
def test_logits_agree(targets, dtype, r, alpha):
    base, tiny, ref = adapted_pair(targets, r, alpha, dtype)
    idx, _ = batch()
    with torch.no_grad():
        ours, theirs = tiny(idx), ref(idx)
        assert max_diff(ours, base(idx)) > 0.1     # the adapters change the output: not a trivial match
    assert ours.dtype == theirs.dtype == dtype
    assert max_diff(ours, theirs) <= LOGITS_TOL[dtype]


@DTYPES
@TARGETS
@pytest.mark.parametrize(("r", "alpha"), [(4, 8.0), (8, 4.0)], ids=["r4-alpha8", "r8-alpha4"])
def test_gradients_of_A_and_B_agree(targets, dtype, r, alpha):
    """The same loss, backpropagated through both: tinyformer's A.grad and B.grad equal PEFT's
    lora_A.weight.grad and lora_B.weight.grad, transposed; nothing else gets a gradient."""
    _, tiny, ref = adapted_pair(targets, r, alpha, dtype)
    idx, targets_ = batch()
    loss(tiny, idx, targets_).backward()
    loss(ref, idx, targets_).backward()
    theirs = peft_adapters(ref)
    for name, layer in lora_layers(tiny).items():
        for ours, their in ((layer.A.grad, theirs[name].A_grad), (layer.B.grad, theirs[name].B_grad)):
            largest = ours.abs().max().item()
            assert largest > 1e-5, name  # a gradient worth comparing
            assert max_diff(ours, their) <= GRAD_RTOL[dtype] * largest, name
    for model in (tiny, ref):
        assert all(p.grad is None for p in model.parameters() if not p.requires_grad)


@DTYPES
@TARGETS
def test_merged_weights_are_bitwise_equal(targets, dtype):
    """tinyformer's merge_lora against PEFT's merge_and_unload: two plain GPTs with the same keys and
    bitwise the same weights (each merged entry is the same r-term dot product, scaled alike)."""
    base, tiny, ref = adapted_pair(targets, dtype=dtype)
    idx, _ = batch()
    with torch.no_grad():
        adapted = tiny(idx)
    changed = {f"{name}.weight" for name in lora_layers(tiny)}
    ours, theirs = merge_lora(tiny).state_dict(), ref.merge_and_unload().state_dict()
    assert list(ours) == list(theirs) == list(base.state_dict())
    for key, weight in base.state_dict().items():  # the adapted layers' weights moved, nothing else
        assert torch.equal(ours[key], weight) == (key not in changed), key
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), (key, max_diff(ours[key], theirs[key]))
    with torch.no_grad():  # and the merged model computes what the adapted one did
        assert max_diff(tiny(idx), adapted) <= LOGITS_TOL[dtype]


@TARGETS
@pytest.mark.parametrize("r", [1, 4, 16])
def test_trainable_parameter_counts_agree(targets, r):
    """count_lora_params against PEFT's get_nb_trainable_parameters (what print_trainable_parameters
    prints); and in both, the adapters are the only trainable parameters."""
    base = base_gpt()
    tiny = add_lora(copy.deepcopy(base), targets, r, 8.0)
    ref = get_peft_model(copy.deepcopy(base), peft_config(targets, r, 8.0))
    trainable, total = ref.get_nb_trainable_parameters()
    assert count_lora_params(tiny) == trainable
    assert sum(p.numel() for p in tiny.parameters() if p.requires_grad) == trainable
    assert total == sum(p.numel() for p in base.parameters()) + trainable  # tied lm_head counted once
    widths = {"q": 32 + 32, "k": 32 + 32, "v": 32 + 32, "o": 32 + 32, "ffn.up": 32 + 128, "ffn.down": 128 + 32}
    assert trainable == CONFIG["n_layer"] * r * sum(widths[t.removesuffix("_proj")] for t in targets)


@pytest.mark.parametrize(("r", "alpha"), [(2, 1.0), (4, 8.0), (8, 4.0), (16, 32.0), (3, 7.5)])
def test_the_scale_is_alpha_over_r(r, alpha):
    _, tiny, ref = adapted_pair(QV, r, alpha)
    theirs = peft_adapters(ref)
    for name, layer in lora_layers(tiny).items():
        assert layer.scale == theirs[name].scale == alpha / r
    idx, _ = batch()
    with torch.no_grad():
        assert max_diff(tiny(idx), ref(idx)) <= LOGITS_TOL[torch.float64]


@pytest.mark.parametrize(("r", "alpha"), [(4, 8.0), (8, 4.0), (16, 2.0)])
def test_rslora_is_alpha_times_sqrt_r(r, alpha):
    """PEFT's use_rslora=True scales by alpha/√r (Kalajdzievski, 2023), which is tinyformer's alpha/r with
    alpha' = alpha·√r: the scales agree to rounding and so do the logits."""
    _, tiny, ref = adapted_pair(QV, r, alpha, tiny_alpha=alpha * math.sqrt(r), use_rslora=True)
    theirs = peft_adapters(ref)
    for name, layer in lora_layers(tiny).items():
        assert theirs[name].scale == alpha / math.sqrt(r)
        assert layer.scale == pytest.approx(theirs[name].scale, rel=1e-15, abs=0)
    idx, _ = batch()
    with torch.no_grad():
        assert max_diff(tiny(idx), ref(idx)) <= LOGITS_TOL[torch.float64]


def test_the_adapters_are_tinyformers_layers():
    """The bridge compares like with like: tinyformer's adapters are LoRALinear, PEFT's wrap the same
    nn.Linear shapes."""
    _, tiny, ref = adapted_pair(ALL_SIX)
    theirs = peft_adapters(ref)
    for name, layer in lora_layers(tiny).items():
        assert isinstance(layer, LoRALinear)
        assert theirs[name].A.shape == layer.A.shape == (layer.in_features, 4)
        assert theirs[name].B.shape == layer.B.shape == (4, layer.out_features)
        assert torch.equal(theirs[name].layer.get_base_layer().weight, layer.base.weight)
