"""A pytest plugin that runs the tests, and the notebooks nbval executes, with the pinned numerics.

pyproject.toml loads it for every ``pytest`` run (``-p tinyformer.pytest_numerics``), so ``make test``,
``make nbval`` and a contributor's own ``pytest`` agree: the settings in ``tinyformer/numerics.env``
go into this process's environment before any tensor is computed, and every kernel or process a
test starts inherits them. torch reads its CPU capability at its first operation, so setting it
here works; the plugin checks that it took. (It lives outside ``tinyformer.course``, whose import
registers the exercises and computes tensors.)
"""

from __future__ import annotations

import os

import pytest

from tinyformer import setup  # imports torch, which computes nothing yet

os.environ.update(setup.PINNED_NUMERICS)
if os.environ.get("PYTEST_XDIST_WORKER"):
    # each of pytest-xdist's workers (make test runs one per core) gets one thread, and so does every
    # kernel it starts: two threads per worker would leave OpenMP threads waiting for a core. The
    # notebooks whose outputs nbval compares run outside xdist, with the pinned count.
    os.environ.update({name: "1" for name in ("TINYFORMER_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")})
setup.NUM_THREADS = setup._num_threads()  # read again: the module was imported before the lines above


def pytest_configure(config):
    import torch

    want = os.environ.get("ATEN_CPU_CAPABILITY", "").lower()
    got = torch.backends.cpu.get_cpu_capability().lower()
    # a CPU without AVX2, or another architecture, runs what it has: nothing to pin there
    if got.startswith("avx") and got != want:
        raise pytest.UsageError(f"torch runs its {got} kernels although ATEN_CPU_CAPABILITY={want}: something "
                                "computed with torch before the numerics were pinned")
