"""Chapter 9's scaffolding: the new domain, the fine-tuning run, the update's spectrum, the traffic count."""

from __future__ import annotations

import torch

from tinyformer.experiments import ch09
from tinyformer.model import GPT, GPTConfig
from tinyformer.tokenizers import BPETokenizer


def test_traffic_counts_each_operation_and_the_bytes_it_reads_and_writes():
    a, b = torch.ones(10), torch.ones(10)
    ops, nbytes = ch09.traffic(lambda: a + b)
    assert (ops, nbytes) == (1, 3 * 40)                      # two float32 inputs, one output
    ops, nbytes = ch09.traffic(lambda: torch.ones(4, 8, dtype=torch.float64) @ torch.ones(8, 2, dtype=torch.float64))
    assert ops == 3 and nbytes == 8 * (32 + 16 + 8) + 8 * (32 + 16)     # two ones(), then mm


def test_energy_and_spectrum_of_a_known_low_rank_update():
    u, v = torch.randn(6, 1), torch.randn(1, 5)
    s = ch09.update_spectrum(torch.zeros(6, 5), u @ v)      # rank 1
    assert ch09.energy_in_top(s, 1) > 1 - 1e-6
    s = ch09.update_spectrum(torch.zeros(4, 4), torch.eye(4))
    assert abs(ch09.energy_in_top(s, 1) - 0.25) < 1e-6 and abs(ch09.energy_in_top(s, 4) - 1) < 1e-6


def test_finetune_leaves_the_base_alone_and_trains_what_it_says():
    bpe = BPETokenizer.train("the cow did not cross the road because it was too tired .\n" * 20, 300,
                             special_tokens=["<|endoftext|>"])
    train_ids, val_ids = ch09.domain_data(bpe, n_train=60, n_val=20)
    base = GPT(GPTConfig(vocab_size=bpe.vocab_size, block_size=16, n_layer=1, n_head=2, d_model=16))
    before = {k: v.clone() for k, v in base.state_dict().items()}
    full = ch09.finetune(base, train_ids, steps=3, batch_size=2, block_size=16, evals={"v": val_ids},
                         eval_every=2, eval_batches=1)
    lora = ch09.finetune(base, train_ids, targets=ch09.ALL_SIX, r=2, alpha=2.0, steps=3, batch_size=2,
                         block_size=16)
    assert all(torch.equal(before[k], v) for k, v in base.state_dict().items())
    assert full["trainable"] == sum(p.numel() for p in base.parameters())
    assert lora["trainable"] == 1 * 2 * (4 * (16 + 16) + 2 * (16 + 64))
    assert full["optimizer_bytes"] == 8 * full["trainable"]
    assert full["eval_step"] == [0, 2, 3] and len(full["v"]) == 3 and len(full["loss"]) == 3


def test_traffic_counts_no_bytes_for_a_view():
    x = torch.ones(4, 8)
    assert ch09.traffic(lambda: x.T) == (1, 0)
    assert ch09.traffic(lambda: x.T.contiguous())[1] > 0


def test_finetune_unfreeze_trains_the_chosen_base_weights_and_nothing_else():
    bpe = BPETokenizer.train("the cow did not cross the road because it was too tired .\n" * 20, 300,
                             special_tokens=["<|endoftext|>"])
    train_ids, _ = ch09.domain_data(bpe, n_train=60, n_val=20)
    base = GPT(GPTConfig(vocab_size=bpe.vocab_size, block_size=16, n_layer=1, n_head=2, d_model=16))
    before = dict(base.named_parameters())
    matrices = {k for k in before if k.endswith("proj.weight")}
    assert len(matrices) == 6                               # one block: q, k, v, o, up, down
    kw = dict(steps=2, batch_size=2, block_size=16)

    def changed(model):
        return {k for k, v in model.named_parameters() if not torch.equal(v, before[k.replace(".base", "")])}

    proj = ch09.finetune(base, train_ids, unfreeze="proj", **kw)
    assert changed(proj["model"]) == matrices
    assert proj["trainable"] == sum(before[k].numel() for k in matrices)
    rest = ch09.finetune(base, train_ids, unfreeze="rest", **kw)
    assert changed(rest["model"]) == set(before) - matrices
    assert proj["trainable"] + rest["trainable"] == sum(p.numel() for p in base.parameters())
    both = ch09.finetune(base, train_ids, targets=ch09.ALL_SIX, r=2, alpha=2.0, unfreeze="rest", **kw)
    trained = {k for k, p in both["model"].named_parameters() if p.requires_grad}
    assert {k for k in trained if k.endswith((".A", ".B"))} and all(
        k.endswith((".A", ".B")) or not k.endswith("proj.base.weight") for k in trained)
    assert both["trainable"] == rest["trainable"] + 1 * 2 * (4 * (16 + 16) + 2 * (16 + 64))
    for bad in (dict(unfreeze="proj", targets=ch09.ALL_SIX), dict(unfreeze="everything")):
        try:
            ch09.finetune(base, train_ids, **kw, **bad)
        except ValueError as e:
            assert "unfreeze" in str(e)
        else:
            raise AssertionError(f"{bad} was accepted")


def test_finetune_unfreeze_lr_sets_the_base_weights_own_rate():
    bpe = BPETokenizer.train("the cow did not cross the road because it was too tired .\n" * 20, 300,
                             special_tokens=["<|endoftext|>"])
    train_ids, _ = ch09.domain_data(bpe, n_train=60, n_val=20)
    base = GPT(GPTConfig(vocab_size=bpe.vocab_size, block_size=16, n_layer=1, n_head=2, d_model=16))
    out = ch09.finetune(base, train_ids, targets=ch09.ALL_SIX, r=2, alpha=2.0, unfreeze="rest", unfreeze_lr=0.0,
                        steps=3, batch_size=2, block_size=16)
    before = dict(base.named_parameters())
    for name, p in out["model"].named_parameters():
        if name.endswith((".A", ".B")):
            continue
        assert torch.equal(p, before[name.replace(".base", "")]), name        # a rate of 0: unchanged
    assert any(not torch.equal(m.B, torch.zeros_like(m.B)) for m in ch09.lora_layers(out["model"]).values())
