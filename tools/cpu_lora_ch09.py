"""Chapter 9's adaptation experiment over seeds and settings, on the CPU.

    set -a; . lib/tinyformer/numerics.env; set +a
    python tools/cpu_lora_ch09.py [--seeds 0 1 2]

Chapter 6's English GPT (tinyformer.pretrained) is adapted to the synthetic language for 150
steps, by full fine-tuning at three learning rates and by LoRA: on all six linear maps of every
block at ranks 1 to 64 (alpha 8, PEFT's default, so a scale of 8/r), at three learning rates for
rank 8, on the attention maps only, on q and v only, on the feed-forward maps only, and with
rsLoRA's scale (alpha/sqrt(r)) at ranks 16 and 64. Then, to take apart the gap between LoRA and
full fine-tuning: full fine-tuning at 3e-3, only the 24 weight matrices of the blocks (at full
rank), only the embeddings, biases and norms, and LoRA at ranks 1 and 8 with those trainable too
(at rank 8 also with them at 1e-3); and the attention maps at rank 10, as many parameters as the
feed-forward maps at rank 8. Twenty-five runs a seed, about 14 minutes of two cores: more than a chapter may spend. This
script writes lib/tinyformer/measured/cpu-ch09-lora.json, which the chapter reads; the chapter
re-runs two arms of seed 0 itself, and tests/test_measured.py checks that this file agrees with
fresh runs of two arms.

Per run: the new-domain and English losses every 25 steps (5 fixed batches each), the training
loss of every step, the trainable parameters and the seconds per step (on a shared machine:
indicative only; benchmarks/lora_step.py measures the ratios). For full fine-tuning, per weight
matrix, the share of the update's energy in its top 1, 4, 8, 16 and 64 singular directions.
Results are written after every run; a re-run skips the runs already in the file.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import time
from datetime import date
from pathlib import Path

from tinyformer import seed_everything
from tinyformer.experiments.ch09 import ALL_SIX, ATTENTION, domain_data, energy_in_top, finetune, update_spectrum
from tinyformer.pretrained import english_data, english_gpt
from tinyformer.setup import _num_threads

OUT = Path(__file__).resolve().parents[1] / "lib" / "tinyformer" / "measured" / "cpu-ch09-lora.json"
QV = ("q_proj", "v_proj")
FFN = ("up_proj", "down_proj")
# name: finetune() keywords (targets None: full fine-tuning)
ARMS = {
    "full-lr1e-3": dict(lr=1e-3),
    "full-lr3e-4": dict(lr=3e-4),
    "full-lr1e-4": dict(lr=1e-4),
    **{f"all-r{r}": dict(targets=ALL_SIX, r=r, alpha=8.0, lr=1e-2) for r in (1, 2, 4, 8, 16, 64)},
    "all-r8-lr3e-3": dict(targets=ALL_SIX, r=8, alpha=8.0, lr=3e-3),
    "all-r8-lr3e-2": dict(targets=ALL_SIX, r=8, alpha=8.0, lr=3e-2),
    "attn-r8": dict(targets=ATTENTION, r=8, alpha=8.0, lr=1e-2),
    "qv-r8": dict(targets=QV, r=8, alpha=8.0, lr=1e-2),
    "ffn-r8": dict(targets=FFN, r=8, alpha=8.0, lr=1e-2),
    "all-r16-rs": dict(targets=ALL_SIX, r=16, alpha=8.0 * math.sqrt(16), lr=1e-2),
    "all-r64-rs": dict(targets=ALL_SIX, r=64, alpha=8.0 * math.sqrt(64), lr=1e-2),
    # what the gap to full fine-tuning is made of: the rate, the weight matrices
    # at full rank, or the parameters LoRA leaves frozen (embeddings, biases, norms)
    "full-lr3e-3": dict(lr=3e-3),
    "proj-lr1e-3": dict(unfreeze="proj", lr=1e-3),
    "proj-lr3e-3": dict(unfreeze="proj", lr=3e-3),
    "rest-lr1e-3": dict(unfreeze="rest", lr=1e-3),
    "rest-lr1e-2": dict(unfreeze="rest", lr=1e-2),
    "all-r8-rest": dict(targets=ALL_SIX, r=8, alpha=8.0, unfreeze="rest", lr=1e-2),
    "all-r1-rest": dict(targets=ALL_SIX, r=1, alpha=8.0, unfreeze="rest", lr=1e-2),
    # the same with those parameters at full fine-tuning's rate; attention at as many parameters as ffn-r8
    "all-r8-rest-lr1e-3": dict(targets=ALL_SIX, r=8, alpha=8.0, unfreeze="rest", lr=1e-2, unfreeze_lr=1e-3),
    "attn-r10": dict(targets=ATTENTION, r=10, alpha=10.0, lr=1e-2),
}
KS = (1, 4, 8, 16, 64)


def spectra(base, model) -> dict:
    before = dict(base.named_parameters())
    out = {}
    for name, p in model.named_parameters():
        if p.dim() == 2 and name.endswith("proj.weight"):
            s = update_spectrum(before[name], p)
            out[name] = dict(top={k: round(energy_in_top(s, k), 4) for k in KS},
                             relative_norm=round(float(s.norm() / before[name].detach().norm()), 4))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(ARMS))
    args = ap.parse_args()
    data = json.loads(OUT.read_text()) if OUT.exists() else {"runs": {}}
    base, bpe = english_gpt()
    _, _, english_val = english_data()
    new_train, new_val = domain_data(bpe)
    evals = {"new": new_val, "english": english_val}
    for seed in args.seeds:
        for arm in args.arms:
            key = f"{arm}/seed{seed}"
            if key in data["runs"]:
                continue
            seed_everything(seed)
            start = time.perf_counter()
            o = finetune(base, new_train, evals=evals, seed=seed, **ARMS[arm])
            run = {k: o[k] for k in ("trainable", "optimizer_bytes", "eval_step")}
            run.update(new=[round(v, 5) for v in o["new"]], english=[round(v, 5) for v in o["english"]],
                       loss=[round(v, 5) for v in o["loss"]], seconds_per_step=round(o["seconds_per_step"], 4))
            if "targets" not in ARMS[arm] and ARMS[arm].get("unfreeze") != "rest":
                run["spectra"] = spectra(base, o["model"])
            data["runs"][key] = run
            data["arms"] = {k: {**v, "targets": list(v.get("targets") or []),
                                "unfreeze": v.get("unfreeze", None if v.get("targets") else "all")}
                            for k, v in ARMS.items()}
            data["provenance"] = dict(script="tools/cpu_lora_ch09.py", date=str(date.today()),
                                      cpu=platform.machine(), threads=_num_threads(),
                                      steps=150, batch_size=16, block_size=128, eval_every=25, eval_batches=5)
            OUT.write_text(json.dumps(data, indent=1) + "\n")
            print(f"{key}: new {run['new'][-1]:.3f}, english {run['english'][-1]:.3f}, "
                  f"{run['trainable']:,} trainable, {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
