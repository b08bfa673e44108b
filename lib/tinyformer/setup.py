"""Chapter 0 helpers: the device, seeding, showing library code, and shape checks."""

from __future__ import annotations

import inspect
import json
import os
import random
import re
import textwrap
from importlib.resources import files as _files

import numpy as np
import torch

from tinyformer.validation import check_int  # re-exported: tinyformer.check_int


def parse_env(text: str) -> dict[str, str]:
    """``VAR=value`` lines as a dict (``#`` starts a comment), as in ``tinyformer/numerics.env``."""
    pinned = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name.strip()) or not value.strip():
            raise ValueError(f"line {number}: expected VAR=value, got {line!r}")
        pinned[name.strip()] = value.strip()
    return pinned


#: The numerics pinned for the book's stored outputs (``tinyformer/numerics.env``): PyTorch's,
#: MKL's and oneDNN's code paths held at ones every vendor runs alike, and two threads, so that a
#: run gives the same bits on every x86-64 processor with AVX2, Intel or AMD. They act only when
#: set before torch starts: in the environment of a new process (:func:`pinned_env`).
PINNED_NUMERICS = parse_env(_files("tinyformer").joinpath("numerics.env").read_text())


def pinned_env(env=None) -> dict[str, str]:
    """``env`` (default: this process's environment) with :data:`PINNED_NUMERICS` set: the
    environment to start a kernel or a process in whose numbers must reproduce anywhere."""
    out = dict(os.environ if env is None else env)
    out.update(PINNED_NUMERICS)
    return out


def numerics_pinned() -> bool:
    """Whether this process runs with the pinned numerics (its environment has them and torch's
    vectorised kernels run at the pinned level)."""
    if any(os.environ.get(k) != v for k, v in PINNED_NUMERICS.items()):
        return False
    return torch.backends.cpu.get_cpu_capability().lower() == PINNED_NUMERICS["ATEN_CPU_CAPABILITY"].lower()


def _num_threads(default: int | None = None) -> int:
    """``TINYFORMER_NUM_THREADS`` if set (the grader sets it to share the cores among the
    notebooks it runs side by side), else ``default``, by default the pinned count."""
    if default is None:
        default = int(PINNED_NUMERICS["TINYFORMER_NUM_THREADS"])
    text = os.environ.get("TINYFORMER_NUM_THREADS", "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"TINYFORMER_NUM_THREADS must be a positive integer, got {text!r}")
    return int(text)


#: Threads used for CPU kernels. Reductions over many floats change in their last digits with
#: the thread count, so the book pins it to make printed numbers identical on every machine.
NUM_THREADS = _num_threads()


def get_device() -> torch.device:
    """The best available device: ``cuda``, then Apple's ``mps``, then ``cpu``."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int = 0) -> None:
    """Seed Python's ``random``, NumPy and PyTorch, and fix the CPU thread count.

    Fixing the thread count matters as much as the seed: a sum of many floats split over more
    threads is added in a different order and changes in its last digits. String hashing
    (``PYTHONHASHSEED``) is fixed only when Python starts, so it is left alone here: code that must
    be reproducible should not depend on the iteration order of a set of strings.
    """
    seed = check_int("seed", seed, minimum=None)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.set_num_threads(NUM_THREADS)


def below(value, bound: float) -> str:
    """``"below 1e-05"``: a value whose digits are rounding error, shown as the bound it stays under.

    An error of 3e-7 between two float32 computations prints other digits on another processor
    (or 0), so the book prints and glues the bound, not the value; and checks it, raising an
    ``AssertionError`` when ``|value|`` is not below ``bound``.
    """
    value, bound = float(value), float(bound)
    if not bound > 0:
        raise ValueError(f"bound must be a positive number, got {bound!r}")
    if not abs(value) < bound:  # NaN included
        raise AssertionError(f"{value!r} is not below {bound:.0e}")
    return f"below {bound:.0e}"


def show_source(obj) -> object:
    """Display the source of a library function or class, highlighted, in a notebook.

    Outside IPython it returns the source as a plain string.
    """
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (TypeError, OSError) as err:
        raise TypeError(f"show_source expects a function or class with source code, got {obj!r}") from err
    try:
        from IPython.display import Code
    except ImportError:  # pragma: no cover - IPython ships with every notebook install
        return source
    return Code(source, language="python")


def check_shape(tensor: torch.Tensor, shape: tuple, name: str = "tensor") -> torch.Tensor:
    """Raise a ``ValueError`` unless ``tensor.shape == shape``; ``None`` in ``shape`` matches any size.

    Returns the tensor so it can wrap an expression: ``out = check_shape(f(x), (B, T, d_model))``.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    actual = tuple(tensor.shape)
    expected = tuple(shape)
    ok = len(actual) == len(expected) and all(e is None or a == e for a, e in zip(actual, expected))
    if not ok:
        raise ValueError(f"{name} has shape {actual}, expected {expected}")
    return tensor


def _plain(value):
    """A NumPy scalar or a one-element tensor as a Python number; anything else unchanged."""
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
        return value.item()
    if type(value).__name__ == "Tensor" and getattr(value, "numel", lambda: 0)() == 1:
        return value.item()
    return value


def glue(name: str, value, display: bool = False):
    """Record ``value`` under ``name`` so the book's prose can quote it (MyST-NB ``glue``).

    Where MyST-NB is not installed (in Colab, say) this does nothing except return the value.
    A NumPy scalar or a one-element tensor is glued as the Python number it holds, so the prose
    reads ``0.014``, not ``np.float64(0.014)`` or ``tensor(0.0140)``.
    """
    value = _plain(value)
    try:
        from myst_nb import glue as _glue
    except ImportError:
        return value
    _glue(name, value, display=display)
    return value


#: The first code cell of every chapter notebook, character for character (a test checks it).
#: In Colab it installs the library at the version the book was made with (the git tag
#: ``v{version}`` of the repository named in _config.yml). pip keeps what Colab already has
#: (its torch, numpy, matplotlib, tqdm satisfy the library's loose bounds) and adds only what is
#: missing. If that version cannot be imported afterwards, the cell stops with an error saying
#: what to do. Anywhere else it does nothing: `make book` / `pip install -e .` installed the library.
BOOTSTRAP = '''\
# Set-up: in Colab, install the tinyformer library this book was made with
# (Colab's own torch is kept). Anywhere else this cell does nothing.
import sys

if "google.colab" in sys.modules:
    pin = "tinyformer @ git+{url}@v{version}"
    %pip install --quiet "{{pin}}"
    try:
        import tinyformer
    except ImportError:
        tinyformer = None
    if getattr(tinyformer, "__version__", None) != "{version}":
        raise ImportError(
            "tinyformer {version} did not install (see pip's messages above). "
            "Choose Runtime > Restart session, then run this cell again."
        )'''


def bootstrap_cell(url: str, version: str | None = None) -> str:
    """The bootstrap cell for the repository ``url`` named in ``_config.yml``.

    ``version`` (default: this library's ``__version__``) is the release it installs, from the
    repository's git tag ``v{version}``.
    """
    if version is None:
        from tinyformer import __version__ as version
    for name, value in (("url", url), ("version", version)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    if not re.fullmatch(r"https://[^\s\"'{}@]+", url):
        raise ValueError(f"url must be an https:// repository address, got {url!r}")
    if not re.fullmatch(r"\d+(\.\d+)*[A-Za-z0-9.+-]*", version):
        raise ValueError(f"version must be a release number such as '0.1.0', got {version!r}")
    return BOOTSTRAP.format(url=url.rstrip("/"), version=version)


def measured(name: str) -> dict:
    """A measurement stored with the library (``tinyformer/measured/NAME.json``):
    runs made on hardware the book's build does not have, a GPU say, recorded
    by a script in ``tools/`` so that a chapter can show and plot them."""
    from importlib import resources

    files = resources.files("tinyformer") / "measured"
    known = sorted(f.name[:-5] for f in files.iterdir() if f.name.endswith(".json"))
    if name not in known:
        raise ValueError(f"no stored measurement {name!r}; there are {known}")
    return json.loads((files / f"{name}.json").read_text())
