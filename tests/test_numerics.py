"""The pinned numerics (tinyformer/numerics.env): every run that makes or checks stored outputs
has them, and with them a training run gives the same bits whatever code path the processor
would otherwise take."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jupytext
import nbformat
import pytest
import torch

from tinyformer import setup
from tinyformer.course import grade as course_grade

from conftest import ROOT

# A training run that touches every library the numerics pin: MKL (the matrix products), ATen's
# vectorised kernels (softmax, layer norm, the fused attention, Adam), oneDNN (GELU); it prints
# the SHA-256 of the trained weights.
TRAIN = textwrap.dedent("""
    import hashlib, torch, tinyformer
    from tinyformer.model import GPT, GPTConfig
    digest = hashlib.sha256()
    for fused, positions, norm in ((True, "learned", "pre"), (False, "rotary", "post")):
        tinyformer.seed_everything(0)
        model = GPT(GPTConfig(vocab_size=97, block_size=32, n_layer=2, n_head=4, d_model=64,
                              positions=positions, norm=norm, fused_attention=fused))
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        batches = torch.Generator().manual_seed(1)
        for _ in range(15):
            x = torch.randint(0, 97, (8, 32), generator=batches)
            loss = torch.nn.functional.cross_entropy(model(x)[:, :-1].reshape(-1, 97), x[:, 1:].reshape(-1))
            opt.zero_grad(); loss.backward(); opt.step()
        for p in model.parameters():
            digest.update(p.detach().numpy().tobytes())
    print(torch.backends.cpu.get_cpu_capability(), torch.get_num_threads(), digest.hexdigest())
""")


def _train(env: dict, prefix: tuple = ()) -> tuple[str, str, str]:
    """(capability, threads, weights' digest) of TRAIN run in a new process with ``env``."""
    out = subprocess.run([*prefix, sys.executable, "-c", TRAIN], env=env, capture_output=True, text=True,
                         timeout=900, check=True)
    return tuple(out.stdout.split())


def test_the_settings_are_read_from_one_file():
    text = (ROOT / "lib" / "tinyformer" / "numerics.env").read_text()
    assert setup.parse_env(text) == setup.PINNED_NUMERICS
    assert setup.PINNED_NUMERICS["ATEN_CPU_CAPABILITY"] == "avx2" and setup.PINNED_NUMERICS["MKL_CBWR"] == "COMPATIBLE"
    assert setup.PINNED_NUMERICS["MKL_VML_DEBUG_CPU_TYPE"] == "3"
    assert setup.PINNED_NUMERICS["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert setup.NUM_THREADS >= 1 and int(setup.PINNED_NUMERICS["TINYFORMER_NUM_THREADS"]) == 2
    env = setup.pinned_env({"PATH": "/bin", "MKL_CBWR": "AUTO"})
    assert env["PATH"] == "/bin" and env["MKL_CBWR"] == "COMPATIBLE"
    assert setup.parse_env("# comment\n\nA_B=1  # why\n") == {"A_B": "1"}
    for bad in ("lowercase=1", "NOVALUE=", "JUSTANAME", "=1"):
        with pytest.raises(ValueError, match="line 1: expected VAR=value"):
            setup.parse_env(bad)


def test_pytest_runs_with_the_pinned_numerics():
    """The plugin in pyproject's addopts pinned this process before torch computed anything, so
    nbval's kernels, which inherit the environment, are pinned too."""
    for name in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_VML_DEBUG_CPU_TYPE", "ONEDNN_MAX_CPU_ISA"):
        assert os.environ[name] == setup.PINNED_NUMERICS[name]
    if torch.backends.cpu.get_cpu_capability().startswith("AVX"):
        assert setup.numerics_pinned() or os.environ.get("PYTEST_XDIST_WORKER")  # workers run 1 thread
        assert torch.backends.cpu.get_cpu_capability() == "AVX2"


def test_make_execute_and_the_grader_start_kernels_with_them(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tools"))
    import nb as nbtool

    for name in setup.PINNED_NUMERICS:
        monkeypatch.delenv(name, raising=False)  # as when tools/nb.py runs outside make
    md = tmp_path / "99-probe.md"
    names = sorted(setup.PINNED_NUMERICS)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        f"import os, torch\nprint({{k: os.environ.get(k) for k in {names!r}}}, "
        "torch.backends.cpu.get_cpu_capability())")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    jupytext.write(nb, md, fmt="md:myst")
    nbtool.execute(md, timeout=600)
    printed = nbformat.read(md.with_suffix(".ipynb"), as_version=4).cells[0].outputs[0]["text"]
    assert str(dict(sorted(setup.PINNED_NUMERICS.items()))) in printed
    if torch.backends.cpu.get_cpu_capability().startswith("AVX"):
        assert printed.strip().endswith("AVX2")
    env = course_grade._sandbox_env(tmp_path, "token", 1, False)
    pinned = {k: v for k, v in setup.PINNED_NUMERICS.items() if not k.endswith("NUM_THREADS")}
    assert pinned.items() <= env.items()
    assert env["TINYFORMER_NUM_THREADS"] == env["OMP_NUM_THREADS"] == "1"  # the grader shares out the cores


AVX2 = pytest.mark.skipif(not torch.backends.cpu.get_cpu_capability().startswith("AVX"),
                          reason="an x86-64 CPU with AVX2")
INTEL = "GenuineIntel" in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else False


@AVX2
def test_a_training_run_gives_the_same_bits_on_any_code_path():
    """Pinned, the weights after training do not change when the processor's own choices are
    pushed elsewhere: MKL held below what the hardware has (as on a processor without AVX-512),
    one core instead of two. Unpinned, this machine's defaults give other weights, which is what
    made stored outputs differ between machines. About 20 s."""
    pinned = setup.pinned_env()  # two threads, as in make execute, also in a pytest-xdist worker
    reference = _train(pinned)
    assert reference[:2] == ("AVX2", "2")
    assert _train({**pinned, "MKL_ENABLE_INSTRUCTIONS": "AVX2"}) == reference
    if shutil.which("taskset"):
        assert _train(pinned, ("taskset", "-c", "0")) == reference
    # each setting matters: leave one out, or move it, and the bits change. Without the vector-maths
    # setting MKL runs its generic kernels (on every vendor, under MKL_CBWR=COMPATIBLE), whose
    # square root is not correctly rounded: this also checks that MKL still reads the variable
    unset_vml = {k: v for k, v in pinned.items() if k != "MKL_VML_DEBUG_CPU_TYPE"}
    assert _train(unset_vml)[2] != reference[2]
    assert _train({**pinned, "ONEDNN_MAX_CPU_ISA": "SSE41"})[2] != reference[2]
    assert _train({**pinned, "ATEN_CPU_CAPABILITY": "default"})[2] != reference[2]
    assert _train({**pinned, "TINYFORMER_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})[2] != reference[2]
    if INTEL:  # MKL honours its other branches on Intel processors only
        assert _train({**pinned, "MKL_CBWR": "AVX2"})[2] != reference[2]
    if "avx512" in Path("/proc/cpuinfo").read_text():
        unpinned = {k: v for k, v in pinned.items() if k not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")}
        assert _train(unpinned)[2] != reference[2]


# MKL decides whether it runs on an Intel processor by calling these two functions; a library loaded
# first (LD_PRELOAD) that answers "no" makes it dispatch as it does on an AMD processor.
NOT_INTEL = "int mkl_serv_intel_cpu_true(void) { return 0; }\nint mkl_serv_intel_cpu(void) { return 0; }\n"


@AVX2
@pytest.mark.skipif(not INTEL or not shutil.which("cc"), reason="an Intel processor and a C compiler")
def test_the_same_bits_when_mkl_dispatches_as_on_an_amd_processor(tmp_path):
    """On an Intel processor, MKL told it is not on one (as on AMD, where the stored outputs were
    once made) gives the same trained weights, pinned; with MKL_CBWR=AVX2, the setting this
    replaced, the two disagree (AMD ignores it), which is how the stored outputs came to check on
    one vendor only. What this cannot emulate is an instruction whose bits differ by vendor, such
    as rsqrtps: test_the_pinned_vector_maths_is_exact covers those."""
    source = tmp_path / "not_intel.c"
    source.write_text(NOT_INTEL)
    shim = tmp_path / "not_intel.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(source)], check=True, timeout=120)
    pinned = setup.pinned_env()
    as_amd = {**pinned, "LD_PRELOAD": str(shim)}
    assert _train(as_amd) == _train(pinned)
    old = {**pinned, "MKL_CBWR": "AVX2"}
    assert _train({**old, "LD_PRELOAD": str(shim)})[2] != _train(old)[2]


VECTOR_MATHS = textwrap.dedent("""
    import torch
    torch.manual_seed(0)
    p = torch.rand(1_000_000) * 10
    exact = p.double().sqrt().float()                       # sqrt in float64, then rounded: exact
    tiny = p * 1e-30
    print(int((p.sqrt() != exact).sum()), int((tiny.sqrt() != tiny.double().sqrt().float()).sum()))
""")


@AVX2
def test_the_pinned_vector_maths_is_exact():
    """PyTorch's sqrt on a float tensor calls MKL's vector maths. Pinned, it is correctly rounded
    (as float64's sqrt rounded to float32), so it does not depend on the approximate rsqrtps it
    starts from, whose bits differ between AMD and Intel chips; MKL's generic kernels, which run
    without the pinning, are not (about 15 % of a million square roots off by one unit)."""
    def wrong(env):
        out = subprocess.run([sys.executable, "-c", VECTOR_MATHS], env=env, capture_output=True, text=True,
                             timeout=300, check=True)
        return [int(n) for n in out.stdout.split()]

    pinned = setup.pinned_env()
    assert wrong(pinned) == [0, 0]
    assert wrong({k: v for k, v in pinned.items() if k != "MKL_VML_DEBUG_CPU_TYPE"})[0] > 10_000
