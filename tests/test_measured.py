"""Measurements stored with the library (tinyformer/measured/*.json): what the chapters read must
be what the scripts in tools/ make."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from tinyformer import measured
from tinyformer.data import get_batch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import cpu_warmup_ch06  # noqa: E402


def test_the_stored_warmup_runs_have_every_arm_and_seed_the_chapter_reads():
    stored = measured("cpu-ch06-warmup")
    for arm in cpu_warmup_ch06.ARMS:
        for seed in (0, 1, 2):
            r = stored["runs"][f"{arm}/seed{seed}"]
            assert len(r["loss"]) == len(r["grad_norm"]) == 300
            assert r["spread_step"] == list(range(1, 300, 10)) and len(r["spread"]) == 30
            assert all(math.isfinite(v) for v in r["loss"] + r["spread"])
    for clip in ("clip1", "noclip"):
        for seed in (0, 1, 2):
            r = stored["runs"][f"main-{clip}/seed{seed}"]
            assert r["val_step"][-1] == 600 and len(r["loss"]) == 600


def test_a_stored_warmup_run_starts_as_a_fresh_run_of_the_script_does():
    bpe, train_ids, val_ids = cpu_warmup_ch06.corpus()
    xv, _ = get_batch(val_ids, 16, 64, torch.Generator().manual_seed(0))
    fresh = cpu_warmup_ch06.warmup_run("post", 1, bpe, train_ids, xv, steps=12)
    stored = measured("cpu-ch06-warmup")["runs"]["post/seed1"]
    # other thread counts change the last bits, not the first five digits
    assert all(math.isclose(a, b, rel_tol=1e-4) for a, b in zip(fresh["loss"], stored["loss"][:12]))
    assert fresh["spread_step"] == [1, 11]
    assert all(math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-5)
               for a, b in zip(fresh["spread"], stored["spread"][:2]))


def test_the_swapped_rate_arms_change_only_the_first_steps():
    from tinyformer import training
    original = training.cosine_lr
    with cpu_warmup_ch06._first_steps_at((30, 3e-4)):
        # train's cosine with no warm-up and min_lr = lr is the constant lr
        rates = [training.cosine_lr(s, 1e-3, 0, 300, 1e-3) for s in (1, 30, 31, 300)]
    assert rates == [3e-4, 3e-4, 1e-3, 1e-3]
    assert training.cosine_lr is original
    with cpu_warmup_ch06._first_steps_at(None):
        assert training.cosine_lr is original


# --------------------------------------------------------------------------- chapter 9's adaptation runs

import cpu_lora_ch09  # noqa: E402


def test_the_stored_adaptation_runs_have_every_arm_and_seed_the_chapter_reads():
    stored = measured("cpu-ch09-lora")
    assert set(stored["arms"]) == set(cpu_lora_ch09.ARMS)
    for arm, settings in cpu_lora_ch09.ARMS.items():
        assert stored["arms"][arm]["lr"] == settings["lr"]
        for seed in (0, 1, 2):
            r = stored["runs"][f"{arm}/seed{seed}"]
            assert r["eval_step"] == [0, 25, 50, 75, 100, 125, 150] and len(r["loss"]) == 150
            assert len(r["new"]) == len(r["english"]) == 7
            assert all(math.isfinite(v) for v in r["loss"] + r["new"] + r["english"])
            assert r["optimizer_bytes"] == 8 * r["trainable"]
            assert ("spectra" in r) == ("targets" not in settings and settings.get("unfreeze") != "rest")
        default = None if settings.get("targets") else "all"
        assert stored["arms"][arm]["unfreeze"] == settings.get("unfreeze", default)


@pytest.mark.parametrize("arm, seed", [("all-r8", 1), ("all-r8-rest", 2)])
def test_a_stored_adaptation_run_starts_as_a_fresh_run_of_the_script_does(arm, seed):
    from tinyformer.experiments.ch09 import finetune
    from tinyformer.pretrained import english_gpt

    base, bpe = english_gpt()
    new_train, _ = cpu_lora_ch09.domain_data(bpe)
    stored = measured("cpu-ch09-lora")["runs"][f"{arm}/seed{seed}"]
    torch.manual_seed(seed)
    fresh = finetune(base, new_train, steps=10, seed=seed, **cpu_lora_ch09.ARMS[arm])
    # the warm-up's 10 steps do not depend on the run's length; other thread counts change the last bits
    assert all(math.isclose(a, b, rel_tol=1e-4) for a, b in zip(fresh["loss"], stored["loss"][:10]))
    assert fresh["trainable"] == stored["trainable"]
