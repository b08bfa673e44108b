"""Tests for tinyformer.setup: seeding, device choice, shape checks, source display, the
Colab bootstrap cell."""

from __future__ import annotations

import importlib.metadata
import os
import random
import re
import shlex
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import tomllib
import torch
from IPython.core.interactiveshell import InteractiveShell
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from traitlets.config import Config

import tinyformer
import tinyformer.setup as tsetup
from tinyformer import check_int, check_shape, get_device, glue, seed_everything, show_source
from tinyformer.setup import bootstrap_cell


@pytest.fixture
def restore_global_state():
    """Undo what seed_everything changes: the RNG states and the thread count."""
    py_state, np_state, torch_state = (
        random.getstate(),
        np.random.get_state(),
        torch.get_rng_state(),
    )
    threads = torch.get_num_threads()
    yield
    random.setstate(py_state)
    np.random.set_state(np_state)
    torch.set_rng_state(torch_state)
    torch.set_num_threads(threads)


def draws():
    return random.random(), np.random.rand(3), torch.randn(3)


def test_public_names():
    for name in ("get_device", "seed_everything", "show_source", "check_shape", "check_int", "glue"):
        assert callable(getattr(tinyformer, name))


# --------------------------------------------------------------------------------------------
# seed_everything
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 1234, 2**40])
def test_seed_everything_is_reproducible(restore_global_state, seed):
    seed_everything(seed)
    a = draws()
    random.random(), np.random.rand(5), torch.randn(5)  # move every generator on
    seed_everything(seed)
    b = draws()
    assert a[0] == b[0]
    np.testing.assert_array_equal(a[1], b[1])
    assert torch.equal(a[2], b[2])


def test_seed_everything_matches_library_seeding(restore_global_state):
    """The draws are those of random.seed / np.random.seed / torch.manual_seed with that seed."""
    seed_everything(7)
    got = draws()
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    want = draws()
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])
    assert torch.equal(got[2], want[2])


def test_seed_everything_different_seeds_differ(restore_global_state):
    seed_everything(0)
    a = draws()
    seed_everything(1)
    b = draws()
    assert a[0] != b[0]
    assert not np.array_equal(a[1], b[1])
    assert not torch.equal(a[2], b[2])


def test_seed_everything_default_seed(restore_global_state):
    seed_everything()
    a = draws()
    seed_everything(0)
    b = draws()
    assert a[0] == b[0]


def test_seed_everything_sets_thread_count(restore_global_state):
    assert isinstance(tsetup.NUM_THREADS, int) and tsetup.NUM_THREADS >= 1
    torch.set_num_threads(tsetup.NUM_THREADS + 1)
    assert torch.get_num_threads() != tsetup.NUM_THREADS
    seed_everything(0)
    assert torch.get_num_threads() == tsetup.NUM_THREADS


def test_thread_count_comes_from_the_environment_when_set(monkeypatch):
    monkeypatch.delenv("TINYFORMER_NUM_THREADS", raising=False)
    assert tsetup._num_threads() == 2                       # the book's stored outputs were made with 2
    monkeypatch.setenv("TINYFORMER_NUM_THREADS", " 1 ")     # what the grader sets for notebooks side by side
    assert tsetup._num_threads() == 1
    for bad in ("0", "-1", "two", "1.5"):
        monkeypatch.setenv("TINYFORMER_NUM_THREADS", bad)
        with pytest.raises(ValueError, match="TINYFORMER_NUM_THREADS must be a positive integer"):
            tsetup._num_threads()


@pytest.mark.parametrize("seed", [1.5, 1.0, "0", None, True, np.float64(3.0)], ids=repr)
def test_seed_everything_rejects_non_int(restore_global_state, seed):
    with pytest.raises(TypeError, match="seed"):
        seed_everything(seed)


def test_seed_everything_accepts_numpy_integers(restore_global_state):
    seed_everything(np.int64(7))
    a = draws()
    seed_everything(7)
    b = draws()
    assert a[0] == b[0]
    assert torch.equal(a[2], b[2])


def test_seed_everything_leaves_the_environment_alone(restore_global_state):
    """PYTHONHASHSEED only acts when a Python process starts, so setting it would be a false promise."""
    before = dict(os.environ)
    seed_everything(123)
    assert dict(os.environ) == before


# --------------------------------------------------------------------------------------------
# check_int
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 7, 2**40, np.int64(3), np.int32(5), np.uint8(9)], ids=repr)
def test_check_int_accepts_integers(value):
    got = check_int("n_heads", value)
    assert type(got) is int
    assert got == int(value)


@pytest.mark.parametrize("value", [1.0, 2.5, "3", None, True, False, np.float64(3.0), torch.tensor(3)], ids=repr)
def test_check_int_rejects_non_integers(value):
    with pytest.raises(TypeError, match=r"^n_heads must be an integer, got \w+"):
        check_int("n_heads", value)


def test_check_int_error_text():
    with pytest.raises(TypeError) as info:
        check_int("n_heads", 2.0)
    assert str(info.value) == "n_heads must be an integer, got float"
    with pytest.raises(ValueError) as info:
        check_int("n_heads", 0)
    assert str(info.value) == "n_heads must be at least 1, got 0"


@pytest.mark.parametrize(("value", "minimum", "ok"), [(0, 0, True), (-1, 0, False), (-5, None, True), (4, 5, False)])
def test_check_int_minimum(value, minimum, ok):
    if ok:
        assert check_int("T", value, minimum=minimum) == value
    else:
        with pytest.raises(ValueError, match=rf"^T must be at least {minimum}, got {value}$"):
            check_int("T", value, minimum=minimum)


# --------------------------------------------------------------------------------------------
# get_device
# --------------------------------------------------------------------------------------------


def test_get_device_returns_device():
    assert isinstance(get_device(), torch.device)


def _set_available(monkeypatch, cuda: bool, mps: bool):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize(
    ("cuda", "mps", "expected"),
    [(False, False, "cpu"), (True, False, "cuda"), (True, True, "cuda"), (False, True, "mps")],
)
def test_get_device_choice(monkeypatch, cuda, mps, expected):
    _set_available(monkeypatch, cuda, mps)
    dev = get_device()
    assert isinstance(dev, torch.device)
    assert dev.type == expected


# --------------------------------------------------------------------------------------------
# check_shape
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape", [(2, 3, 4), [2, 3, 4], (None, 3, 4), (2, None, None), (None, None, None)], ids=str
)
def test_check_shape_accepts_and_returns_tensor(shape):
    t = torch.zeros(2, 3, 4)
    assert check_shape(t, shape) is t


def test_check_shape_scalar():
    t = torch.tensor(1.0)
    assert check_shape(t, ()) is t


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        ((2, 3), (2, 4)),  # wrong size
        ((2, 5), (2, 4)),  # wrong size (larger)
        ((2, 3), (2, 3, 1)),  # wrong rank (too few)
        ((2, 3, 1), (2, 3)),  # wrong rank (too many)
        ((2, 3), (None, 4)),  # wildcard does not excuse the other size
        ((2, 3), (None,)),  # a wildcard does not match a whole rank
    ],
    ids=str,
)
def test_check_shape_rejects(actual, expected):
    with pytest.raises(ValueError) as info:
        check_shape(torch.zeros(actual), expected, name="logits")
    msg = str(info.value)
    assert "logits" in msg
    assert str(actual) in msg
    assert str(expected) in msg


def test_check_shape_default_name_and_type_error():
    with pytest.raises(ValueError):
        check_shape(torch.zeros(2), (3,))
    with pytest.raises(TypeError, match="scores"):
        check_shape([[1.0, 2.0]], (1, 2), name="scores")
    with pytest.raises(TypeError):
        check_shape(np.zeros((1, 2)), (1, 2))


# --------------------------------------------------------------------------------------------
# show_source, glue
# --------------------------------------------------------------------------------------------


def _sample_function(a, b):
    """A docstring."""
    total = a + b  # a distinctive comment: 7f3a
    return total


class _SampleClass:
    marker = "class-marker-91c2"


def _text(obj) -> str:
    return obj.data if hasattr(obj, "data") else obj


@pytest.mark.parametrize(
    ("obj", "snippets"),
    [
        (_sample_function, ["def _sample_function(a, b):", "total = a + b  # a distinctive"]),
        (_SampleClass, ["class _SampleClass:", 'marker = "class-marker-91c2"']),
        (check_shape, ["def check_shape("]),
    ],
    ids=["function", "class", "library-function"],
)
def test_show_source_contains_source(obj, snippets):
    text = _text(show_source(obj))
    assert isinstance(text, str)
    for s in snippets:
        assert s in text


def test_show_source_is_dedented():
    def nested():
        return 42

    text = _text(show_source(nested))
    assert text.startswith("def nested():")


@pytest.mark.parametrize("obj", [len, 3, torch.zeros], ids=["len", "int", "torch.zeros"])
def test_show_source_rejects_objects_without_source(obj):
    with pytest.raises(TypeError):
        show_source(obj)


@pytest.mark.parametrize("has_myst_nb", [True, False], ids=["myst_nb", "no-myst_nb"])
@pytest.mark.parametrize("value", [3, 2.5, "text", [1, 2], None])
def test_glue_returns_value(monkeypatch, value, has_myst_nb):
    if not has_myst_nb:  # as in Colab: importing myst_nb fails
        monkeypatch.setitem(sys.modules, "myst_nb", None)
    else:
        pytest.importorskip("myst_nb")
    assert glue("tinyformer_test_value", value) is value


# --------------------------------------------------------------------------------------------
# bootstrap_cell: the first cell of every notebook, run here in a real IPython shell whose
# %pip magic is replaced by a recorder (nothing is installed)
# --------------------------------------------------------------------------------------------

URL = "https://github.com/example-org/tinyformer-book"


@pytest.fixture
def shell(tmp_path, monkeypatch):
    """An IPython shell (no history file) whose %pip only records its expanded argument line."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    config = Config()
    config.HistoryManager.enabled = False
    sh = InteractiveShell(config=config)
    sh.pip_calls = []
    sh.register_magic_function(sh.pip_calls.append, "line", "pip")
    # `!pip` or `%%bash` would go through these; the bootstrap must use neither
    monkeypatch.setattr(sh, "system", lambda cmd: pytest.fail(f"shell command run: {cmd}"))
    return sh


def in_colab(monkeypatch, colab: bool):
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)


def run(shell, source):
    result = shell.run_cell(source, store_history=False, silent=True)
    return result.error_in_exec or result.error_before_exec


def test_bootstrap_default_version_is_the_library_version():
    """One place names the version: tinyformer.__version__, which the package metadata reads too."""
    assert bootstrap_cell(URL) == bootstrap_cell(URL, tinyformer.__version__)
    assert importlib.metadata.version("tinyformer") == tinyformer.__version__
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tinyformer.__version__"}


@pytest.mark.parametrize("version", ["0.1.0", "2.13.1rc1"])
def test_bootstrap_cell_text(version):
    cell = bootstrap_cell(URL, version)
    lines = cell.splitlines()
    assert len(lines) <= 20  # short: it opens every notebook
    assert all(len(line) <= 79 for line in lines if URL not in line)  # the URL's length is the repo's
    assert "--no-deps" not in cell  # pip must add the dependencies Colab lacks (and keep the rest)
    assert not re.search(r"--upgrade|\s-U\b|--force-reinstall|--ignore-installed", cell)
    assert cell.count("%pip install") == 1 and "!pip" not in cell
    # the Colab test guards everything below it
    body = lines[lines.index('if "google.colab" in sys.modules:') + 1:]
    assert body and all(line.startswith("    ") for line in body)
    assert f'git+{URL}@v{version}"' in cell


def test_bootstrap_pins_are_satisfied_by_our_own_pins():
    """pip keeps an installed torch that satisfies the library's bound: no bound may exclude a newer
    release (Colab's), nor the versions this book pins."""
    root = Path(__file__).resolve().parents[1]
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = dict(line.split(";")[0].strip().split("==")
                for line in (root / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    pins = {canonicalize_name(k): v for k, v in pins.items()}
    assert {canonicalize_name(Requirement(d).name) for d in deps} >= {"torch", "numpy", "matplotlib", "tqdm"}
    for dep in map(Requirement, deps):
        assert not dep.url and dep.marker is None, dep
        assert dep.specifier.contains(pins[canonicalize_name(dep.name)]), (dep, "excludes our pin")
        assert dep.specifier.contains("999.0"), (dep, "has an upper bound: pip would replace Colab's copy")


@pytest.mark.parametrize("colab", [False, True], ids=["elsewhere", "colab"])
def test_bootstrap_installs_the_pinned_version_only_in_colab(shell, monkeypatch, colab):
    in_colab(monkeypatch, colab)
    error = run(shell, bootstrap_cell(URL))
    assert error is None
    if not colab:
        assert shell.pip_calls == [] and "pin" not in shell.user_ns and "tinyformer" not in shell.user_ns
        return
    assert len(shell.pip_calls) == 1
    args = shlex.split(shell.pip_calls[0])  # as IPython's %pip splits them, after expanding {pin}
    assert args[0] == "install" and set(args[1:-1]) <= {"--quiet", "-q"}
    req = Requirement(args[-1])
    assert req.name == "tinyformer" and req.url == f"git+{URL}@v{tinyformer.__version__}"
    assert shell.user_ns["tinyformer"] is tinyformer  # the check imported the library


def _fake_tinyformer(version):
    module = types.ModuleType("tinyformer")
    module.__version__ = version
    return module


@pytest.mark.parametrize(
    "installed",
    [None, _fake_tinyformer("0.0.1"), types.ModuleType("tinyformer")],
    ids=["import-fails", "other-version", "no-version"],
)
def test_bootstrap_stops_when_the_install_failed(shell, monkeypatch, installed):
    """pip's failure does not raise in a notebook; the cell's own check must, with a clear message."""
    in_colab(monkeypatch, True)
    monkeypatch.setitem(sys.modules, "tinyformer", installed)  # None: `import tinyformer` fails
    error = run(shell, bootstrap_cell(URL, "0.1.0"))
    assert isinstance(error, ImportError)
    message = str(error)
    assert "tinyformer 0.1.0 did not install" in message and "run this cell again" in message


def test_bootstrap_check_does_not_hide_later_errors(shell, monkeypatch):
    """A working install lets the next cell run; the names the cell leaves behind are few."""
    in_colab(monkeypatch, True)
    assert run(shell, bootstrap_cell(URL)) is None
    assert run(shell, "from tinyformer import seed_everything") is None
    assert {"pin", "tinyformer"} <= set(shell.user_ns)


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"url": 3}, TypeError, "url"),
        ({"url": "github.com/x/y"}, ValueError, "url"),
        ({"url": "https://github.com/x/y@main"}, ValueError, "url"),
        ({"url": 'https://github.com/x/y"'}, ValueError, "url"),
        ({"url": URL, "version": 1.0}, TypeError, "version"),
        ({"url": URL, "version": "v0.1.0"}, ValueError, "version"),
        ({"url": URL, "version": ""}, ValueError, "version"),
    ],
)
def test_bootstrap_cell_rejects_bad_arguments(kwargs, error, name):
    with pytest.raises(error, match=rf"^{name} must"):
        bootstrap_cell(**kwargs)


def test_measured_gpu_runs_are_consistent_and_match_the_chapter():
    # what tools/gpu_sizes.py stored must agree with itself, and the GPU
    # branch chapter 6 runs must be the one that was measured
    import re
    from pathlib import Path

    from tinyformer import measured

    doc = measured("h100-ch06")
    runs = {r["name"]: r for r in doc["runs"]}
    for r in runs.values():
        tokens = r["steps"] * r["batch_size"] * r["block_size"]
        assert r["epochs"] == pytest.approx(tokens / doc["train_tokens"], abs=0.1)
        assert r["tokens_per_s"] == pytest.approx(tokens / r["seconds"], rel=0.01)
        steps, losses = zip(*r["curve"])
        assert steps[-1] == r["steps"] and r["val_last"] == losses[-1]
        assert r["val_best"] == min(losses)
    chapter = (Path(__file__).parents[1] / "book" / "06-training.md").read_text()
    gpu = re.search(r'if device.type == "cuda":.*\n\s+run = dict\(steps=(\d+), batch_size=(\d+)\)',
                    chapter)
    branch = runs["gpu-branch-b64-400"]
    assert gpu and (int(gpu[1]), int(gpu[2])) == (branch["steps"], branch["batch_size"])


def test_measured_names_what_exists():
    from tinyformer import measured

    with pytest.raises(ValueError, match="h100-ch06"):
        measured("h100")


def test_below_shows_the_bound_and_checks_it():
    assert tsetup.below(2.98e-07, 1e-5) == "below 1e-05"
    assert tsetup.below(-3e-7, 1e-6) == "below 1e-06" and tsetup.below(0.0, 1e-6) == "below 1e-06"
    for bad in (1e-5, 2e-5, float("nan"), float("inf")):
        with pytest.raises(AssertionError, match="is not below 1e-05"):
            tsetup.below(bad, 1e-5)
    for bound in (0, -1e-6):
        with pytest.raises(ValueError, match="bound must be a positive number"):
            tsetup.below(0.0, bound)
