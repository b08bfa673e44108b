"""Tests for tinyformer.setup: seeding, device choice, shape checks, source display, the
Colab bootstrap cell."""

from __future__ import annotations

import os
import random
import sys
import types

import numpy as np
import pytest
import torch
from IPython.core.inputtransformer2 import TransformerManager

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
# bootstrap_cell
# --------------------------------------------------------------------------------------------

URL = "https://github.com/example-org/tinyformer-book"


def test_bootstrap_cell_text():
    cell = bootstrap_cell(URL)
    assert URL in cell
    install = [line for line in cell.splitlines() if "pip install" in line]
    assert len(install) == 1
    line = install[0]
    assert "--no-deps" in line  # must not reinstall Colab's torch
    assert f"git+{URL}" in line
    assert "tinyformer" in line
    # the install line is indented, and the closest unindented line above it is the Colab test
    lines = cell.splitlines()
    i = lines.index(line)
    assert line.startswith((" ", "\t"))
    guard = next(ln for ln in reversed(lines[:i]) if ln and not ln[0].isspace())
    assert guard.strip() == 'if "google.colab" in sys.modules:'


@pytest.mark.parametrize("in_colab", [False, True])
def test_bootstrap_cell_runs_pip_only_in_colab(monkeypatch, in_colab):
    """Transform the cell as IPython would, run it with a fake IPython, record magics."""
    python = TransformerManager().transform_cell(bootstrap_cell(URL))
    calls = []

    class FakeShell:
        def run_line_magic(self, name, line):
            calls.append((name, line))

        def run_cell_magic(self, name, line, cell):  # pragma: no cover - must not happen
            calls.append((name, line, cell))

        def system(self, cmd):  # pragma: no cover - `!pip` must not be used either
            calls.append(("system", cmd))

    if in_colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    namespace = {"get_ipython": lambda: FakeShell()}
    exec(compile(python, "<bootstrap>", "exec"), namespace)

    if in_colab:
        assert len(calls) == 1
        name, line = calls[0]
        assert name == "pip"
        assert line.split()[0] == "install"
        assert "--no-deps" in line.split()
        assert f"git+{URL}" in line
    else:
        assert calls == []
