"""Measurements stored with the library (tinyformer/measured/*.json): what the chapters read must
be what the scripts in tools/ make."""

from __future__ import annotations

import math
import sys

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
