"""The judging engine behind every exercise check.

An :class:`Exercise` declares what the reader writes (``function``), how to draw test inputs
(``make_cases``), the right answer (``reference``) and the mistakes it knows: wrong
implementations whose outputs the reader's may equal (``mistakes``), exceptions a mistake raises
(``error_hints``), and optional ``compare`` / ``diagnose`` hooks for answers that are not a plain
tensor (a tuple of numbers, a pair of matrices judged by what they do).

Judging happens in two steps, so the grader can run the first one in a sandbox process:

1. :func:`run_cases` calls the reader's function on fresh copies of every case and records an
   :class:`Outcome`: its outputs, made *portable* (plain CPU tensors, numbers, tuples; anything
   else becomes a description), the exception it raised, and which arguments it modified in place.
2. :func:`judge` compares that outcome with the reference and returns a :class:`Verdict` whose
   message starts with ✓ or ✗ and, on failure, names the likely mistake.

Neither step raises, whatever the reader's function does or returns; only ``KeyboardInterrupt``
goes through, so a reader can still stop a function that loops.

Policies (the same for every chapter):

- Tensor inputs are float64. An output whose dtype differs from the reference's fails with its
  own hint (decided by the dtype alone, so the verdict never depends on the random inputs).
- Values are compared with ``rtol=1e-9, atol=1e-12`` by default: float64 computations done in
  another order (a loop over heads, einsum, a sum over blocks) agree to ~1e-15 relative, five
  orders of magnitude inside; an answer off by 1e-7 relative, let alone 1e-4, fails.
- The cases are built so that every registered mistake differs from the reference, and from the
  other mistakes, whatever the seed: the seed changes the numbers, never the verdict.
- A case holds plain data only (tensors, numbers, strings), so the grader can ship it with
  ``torch.save`` and read it back with ``weights_only=True``. An argument that is an object (an
  ``nn.Module`` the reader's function calls) is stored as :func:`built` data and rebuilt, fresh,
  for every call by the builder its chapter registered with :func:`register_builder`.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
import textwrap
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

PASS, FAIL, NOT_IMPLEMENTED, ERROR = "pass", "fail", "not implemented", "error"

_FOREIGN = "__foreign__"          # key of the marker that stands for an object the grader cannot ship
_MAX_ITEMS = 10_000               # a longer list is described, not copied
_MAX_DEPTH = 8
_STUB = re.compile(r"^\s*([A-Za-z_]\w*) is not implemented yet")
_BUILT = "__built__"              # key of a case item that stands for an object built for each call


# --------------------------------------------------------------------------- data


@dataclass
class Verdict:
    """The result of a check. Truthy when the exercise passed; ``message`` is the printed line."""

    exercise: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        """Whether the exercise passed (what ``bool(verdict)`` says)."""
        return self.status == PASS

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return self.message

    def wrapped(self, width: int = 88) -> str:
        """The message folded to ``width`` columns (continuation lines indented), as printed."""
        return textwrap.fill(self.message, width, subsequent_indent="  ", break_long_words=False,
                             break_on_hyphens=False)

    def _ipython_display_(self):
        """The check has printed the verdict already: a notebook shows nothing more."""


@dataclass
class Outcome:
    """What the reader's function did on the cases, in a form that survives ``torch.save``.

    ``outputs`` holds the (portable) outputs of the cases that returned, in order; if a case
    raised, ``error`` is ``(exception type name, message)`` for the case right after them.
    ``mutated`` lists the positions of the arguments the function modified in place.
    """

    outputs: list | None = None
    error: tuple[str, str] | None = None
    mutated: list[int] = field(default_factory=list)
    grads: list | None = None      # per case, what :func:`gradients` returned (exercises with grad_args)


@dataclass(kw_only=True)
class Exercise:
    """One checked exercise. Declare it with keyword arguments and ``register`` it."""

    name: str                      # the key, also the check's suffix: tinyformer.checks.check_<name>
    number: str                    # "2.6"; "" for a drill (a check that is no exercise of the chapter)
    function: str                  # the name of the function the reader writes
    chapter: str                   # the chapter notebook it belongs to, e.g. "02-attention"
    args: tuple[str, ...]          # the function's argument names, for messages
    make_cases: Callable[[torch.Generator], list[tuple]]
    reference: Callable
    returns: str = "the output tensor"   # what the function must return, in words
    item_names: tuple[str, ...] = ()     # the items' names when the reference returns a tuple
    mistakes: list[tuple[Callable, str]] = field(default_factory=list)        # (wrong version, hint)
    error_hints: list[tuple[type | str, str, str]] = field(default_factory=list)  # (type, regex, hint)
    generic_hint: str = ""
    exact_dtype: bool = True       # tensors must have the reference's dtype (else: any real dtype)
    integers_for_floats: bool = True   # with exact_dtype False: may integer tensors stand for floats? (False
                                   # where they would break the reader's own code, a matmul with floats)
    accept_lists: bool = False     # nested lists of numbers are accepted where tensors are expected
    rtol: float = 1e-9
    atol: float = 1e-12
    compare: Callable[[tuple, Any, Any], bool] | None = None   # (case, output, reference) -> agrees?
    diagnose: Callable[[list, list, list], str | None] | None = None  # (cases, outputs, refs) -> text
    diagnose_hints: tuple[str, ...] = ()   # every hint `diagnose` can give (so tests can cover them)
    drill: bool = False            # a check outside the chapter's exercises: the grader does not expect it
    mistakes_by_compare: bool = False   # True: a known mistake matches when `compare` says its output
                                   # agrees with the reader's (an order-free answer, say); else _close
    check_shapes: bool = True      # False: the outputs' shapes may differ from the reference's (a free
                                   # hidden width), and `compare` / `diagnose` judge them
    grad_args: tuple[int, ...] = ()   # arguments whose gradient (autograd through the reader's code) must
                                   # match the reference's: a detached statistic gives right values only
    dtype_from: str = "x"          # the input whose dtype new tensors should take, named in the dtype hint
    library_answers: tuple[str, ...] = ()   # dotted names of functions (or classes: all their methods)
                                   # that ARE the answer, e.g. "tinyformer.attention.causal_mask": the
                                   # grader gives no credit to a function that calls one (see
                                   # library_answer_keys; the exercise's `reference` always counts)

    @property
    def title(self) -> str:
        """``"Exercise 2.1 (attention_by_hand)"``; a drill's function name."""
        return f"Exercise {self.number} ({self.function})" if self.number else self.function

    def hints(self) -> list[str]:
        """Every named hint this exercise can give (mistakes, error hints, diagnoses)."""
        return ([h for _, h in self.mistakes] + [h for *_, h in self.error_hints] + list(self.diagnose_hints))


EXERCISES: dict[str, Exercise] = {}


def randint(g: torch.Generator, low: int, high: int) -> int:
    """A random int in [low, high], drawn from ``g`` (for the exercises' random cases)."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


def as_int(x):
    """``x`` as an int if it is a whole number (an int, or a finite float with no fraction), else None."""
    if type(x) is int:
        return x
    if type(x) is float and math.isfinite(x) and x.is_integer():
        return int(x)
    return None


def safe_diagnosis(diagnose: Callable) -> Callable:
    """Wrap an exercise's ``diagnose`` so that it gives up (None: the engine's own message)
    rather than raise on an odd output."""
    def guarded(cases, outputs, refs):
        try:
            return diagnose(cases, outputs, refs)
        except Exception:  # noqa: BLE001 - an odd output must still get a verdict
            return None
    return guarded


def register(ex: Exercise) -> Exercise:
    """Add ``ex`` to :data:`EXERCISES`; names and hints must be unique (tests tell hints apart)."""
    if ex.name in EXERCISES:
        raise ValueError(f"an exercise named {ex.name!r} is already registered")
    hints = ex.hints()
    if len(set(hints)) != len(hints):
        raise ValueError(f"exercise {ex.name!r} has two identical hints")
    EXERCISES[ex.name] = ex
    return ex


# --------------------------------------------------------------------------- the library's own answers


def _resolve(dotted: str):
    """The object a dotted name such as ``tinyformer.blocks.LayerNorm.forward`` names."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        return obj
    raise ValueError(f"library_answers: {dotted!r} names no importable object")


def _answer_key(obj, dotted: str, keys: dict[str, list], check_name: bool) -> None:
    if isinstance(obj, (classmethod, staticmethod)):
        obj = obj.__func__
    obj = inspect.unwrap(obj)
    code = getattr(obj, "__code__", None)
    if code is not None:
        if check_name and code.co_name != dotted.rsplit(".", 1)[-1]:
            raise ValueError(f"library_answers: {dotted!r} is a wrapper (its code is {code.co_name!r}); name the "
                             f"function it wraps")
        tail = "/".join(Path(code.co_filename).parts[-2:])
        keys["code"].append((tail, code.co_firstlineno, code.co_name, dotted))
    elif isinstance(obj, types.BuiltinFunctionType) and getattr(obj, "__module__", None):
        keys["builtin"].append((obj.__module__, obj.__name__, dotted))
    elif isinstance(getattr(obj, "_qualified_op_name", None), str):   # torch.ops.aten.<name>: an operator
        namespace, name = obj._qualified_op_name.split("::")
        keys["builtin"].append(("torch" if namespace == "aten" else namespace, name, dotted))
    else:
        raise ValueError(f"library_answers: {dotted!r} is {describe(obj)}, not a function")


def library_answer_keys(ex: Exercise) -> dict[str, list]:
    """How the grader recognises a call of the library's own answer to ``ex`` while the reader's
    function runs: ``{"code": [(file, first line, name, dotted name)], "builtin": [(module, name,
    dotted name)]}`` for each of ``ex.library_answers`` (a class stands for every function defined
    in its body) and for ``ex.reference``; ``file`` is the last two parts of the source path.
    Raises ValueError for a name that names no function (a test calls this for every exercise)."""
    keys: dict[str, list] = {"code": [], "builtin": []}
    for dotted in ex.library_answers:
        obj = _resolve(dotted)
        if inspect.isclass(obj):
            methods = [(n, f) for n, f in vars(obj).items()
                       if inspect.isfunction(inspect.unwrap(getattr(f, "__func__", f)))]
            if not methods:
                raise ValueError(f"library_answers: class {dotted!r} defines no function")
            for name, f in methods:
                _answer_key(f, f"{dotted}.{name}", keys, check_name=True)
        else:
            _answer_key(obj, dotted, keys, check_name=True)
    module, name = getattr(ex.reference, "__module__", "?"), getattr(ex.reference, "__qualname__", "?")
    name = f"{module}.{name}" if "<" not in name else f"the reference answer in {module}"
    _answer_key(ex.reference, name, keys, check_name=False)
    keys["grad_args"] = list(ex.grad_args)   # travels with the keys to the grader's kernel
    return keys


# --------------------------------------------------------------------------- arguments built for each call


BUILDERS: dict[str, Callable[..., Any]] = {}


def register_builder(kind: str, build: Callable[..., Any]) -> None:
    """Let cases hold ``built(kind, **fields)``: every call gets ``build(**fields)``, made from fresh
    copies of the fields' tensors (so a call that modifies the object cannot affect the next)."""
    if kind in BUILDERS and BUILDERS[kind] is not build:
        raise ValueError(f"a builder named {kind!r} is already registered")
    BUILDERS[kind] = build


def built(kind: str, **fields) -> dict:
    """A case item that stands for ``BUILDERS[kind](**fields)``, as plain data that the grader can
    ship (``fields`` hold tensors, numbers, strings, and dicts, lists or tuples of those)."""
    if kind not in BUILDERS:
        raise ValueError(f"kind must be a registered builder {sorted(BUILDERS)}, got {kind!r}")
    return {_BUILT: kind, **fields}


def _is_built(obj) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get(_BUILT), str)


def _copied(obj):
    """``obj`` with every tensor inside it (in dicts, lists and tuples) cloned."""
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, dict):
        return {k: _copied(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_copied(v) for v in obj)
    return obj


def _fresh(arg):
    """The argument a call receives for the case item ``arg``: a copy of a tensor, a newly built
    object for :func:`built` data, the item itself otherwise."""
    if isinstance(arg, torch.Tensor):
        return arg.clone()
    if _is_built(arg):
        fields = {k: _copied(v) for k, v in arg.items() if k != _BUILT}
        return BUILDERS[arg[_BUILT]](**fields)
    return arg


# --------------------------------------------------------------------------- running the reader's code


def portable(obj, depth: int = 0):
    """``obj`` as plain data that ``torch.load(weights_only=True)`` accepts: CPU tensors, numbers,
    strings, None, tuples and lists of those. Anything else becomes a marker that describes it."""
    try:
        if obj is None or type(obj) in (bool, int, float, str):
            return obj
        if isinstance(obj, torch.Tensor):
            if obj.device.type == "meta":
                return _foreign(obj, "a tensor on the meta device, which holds no values")
            if obj.layout != torch.strided:
                return _foreign(obj, f"a {obj.layout} tensor")
            t = obj.detach().cpu().clone()    # a copy: a view of a huge tensor must not ship it all
            return t if type(t) is torch.Tensor else t.as_subclass(torch.Tensor)
        if isinstance(obj, (tuple, list)):
            if depth >= _MAX_DEPTH or len(obj) > _MAX_ITEMS:
                return _foreign(obj, describe(obj))
            items = [portable(o, depth + 1) for o in obj]
            return tuple(items) if isinstance(obj, tuple) else items
        if isinstance(obj, (bool, int, float, str)):          # subclasses: IntEnum, numpy.float64
            return next(t(obj) for t in (bool, int, float, str) if isinstance(obj, t))
        if type(obj).__module__ == "numpy" and getattr(obj, "ndim", None) == 0:
            return portable(obj.item(), depth)                 # a numpy scalar, e.g. numpy.int64
        if _numeric_ndarray(obj):                              # described, its numbers kept for accept_lists
            return {**_foreign(obj, describe(obj)), "values": torch.tensor(obj.tolist(), dtype=torch.float64)}
    except Exception:  # noqa: BLE001 - an object that misbehaves when read is described instead
        return _foreign(obj, f"{_a(_type_name(obj))} that could not be read")
    return _foreign(obj, describe(obj))


def _numeric_ndarray(obj) -> bool:
    return (type(obj).__module__ == "numpy" and type(obj).__name__ == "ndarray"
            and obj.dtype.kind in "iuf" and 0 < obj.ndim <= _MAX_DEPTH and obj.size <= _MAX_ITEMS)


def _foreign(obj, about: str) -> dict:
    return {_FOREIGN: _type_name(obj), "about": about}


def _type_name(obj) -> str:
    t = type(obj)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__.split('.')[0]}.{t.__qualname__}"


def _a(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def describe(obj) -> str:
    """A few words for what a function returned: 'a tuple of 2 items', 'a numpy.ndarray', …"""
    try:
        if obj is None:
            return "None"
        if isinstance(obj, dict) and _FOREIGN in obj:
            return str(obj["about"])
        if _is_built(obj):
            return _a(obj[_BUILT])
        if isinstance(obj, (tuple, list)):
            n = len(obj)
            return f"{_a(type(obj).__name__)} of {n} item{'s' if n != 1 else ''}"
        if isinstance(obj, torch.Tensor):
            return f"a tensor of shape {tuple(obj.shape)}"
        if type(obj).__module__ == "numpy" and hasattr(obj, "shape"):
            return f"a numpy.{type(obj).__name__} of shape {tuple(obj.shape)}"
        return _a(_type_name(obj))
    except Exception:  # noqa: BLE001
        return "an object that could not be described"


def _clone(case: tuple) -> tuple:
    """Fresh copies (objects freshly built), so a function that writes into its inputs cannot
    corrupt the next call."""
    return tuple(_fresh(a) for a in case)


def _changed(before: tuple, after: tuple) -> list[int]:
    """Positions of the tensor arguments whose contents the call modified."""
    changed = []
    for i, (a, b) in enumerate(zip(before, after)):
        if isinstance(a, torch.Tensor):
            try:
                same = a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
            except Exception:  # noqa: BLE001
                same = False
            if not same:
                changed.append(i)
    return changed


def _error_text(err: BaseException) -> str:
    try:
        text = " ".join(str(err).split())
    except Exception:  # noqa: BLE001 - an exception whose __str__ itself fails
        text = ""
    return text if len(text) <= 300 else text[:297] + "..."


@contextmanager
def _one_thread() -> Iterator[None]:
    """Run on one CPU thread: the cases are tiny, and on a busy machine every parallel region of
    torch's thread pool waits for a free core (a 5x5 tril then takes milliseconds, not microseconds)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_cases(fn: Callable, cases: list[tuple], *, reraise: tuple[type[BaseException], ...] = ()) -> Outcome:
    """Call ``fn(*case)`` on a copy of every case; stop at the first exception and record it.

    Any exception is recorded, ``SystemExit`` included; ``KeyboardInterrupt`` and the types in
    ``reraise`` (the grader's own time-out signal) propagate.
    """
    with _one_thread():
        return _run_cases(fn, cases, reraise)


def _run_cases(fn: Callable, cases: list[tuple], reraise: tuple[type[BaseException], ...]) -> Outcome:
    outputs: list = []
    mutated: set[int] = set()
    for case in cases:
        args = _clone(case)
        try:
            out = fn(*args)
        except KeyboardInterrupt:
            raise
        except reraise:
            raise
        except BaseException as err:  # noqa: BLE001 - whatever the reader's code raises is theirs to see
            return Outcome(outputs=outputs, error=(type(err).__name__, _error_text(err)), mutated=sorted(mutated))
        mutated.update(_changed(case, args))
        outputs.append(portable(out))
    return Outcome(outputs=outputs, mutated=sorted(mutated))


# --------------------------------------------------------------------------- reading outputs


class _Unfit(Exception):
    """An output that cannot be compared with the reference (type, structure, dtype)."""


def _read(out, ref, ex: Exercise, what: str | None = None):
    """``out`` brought to the reference's form (a tuple, a tensor, a number), or ``_Unfit`` naming
    what is wrong. ``what`` names an item of a tuple; None means the whole return value."""
    said = "returned" if what is None else f"{what} is"
    if isinstance(ref, tuple):
        if not isinstance(out, (tuple, list)) or len(out) != len(ref):
            raise _Unfit(f"{said} {describe(out)}; return {ex.returns}")
        names = ex.item_names or tuple(f"item {i}" for i in range(len(ref)))
        return tuple(_read(o, r, ex, n) for o, r, n in zip(out, ref, names))
    if isinstance(ref, torch.Tensor):
        return _read_tensor(out, ref, ex, what, said)
    if isinstance(ref, (int, float)):
        if isinstance(out, torch.Tensor) and out.dim() == 0 and not out.dtype.is_complex and out.dtype != torch.bool:
            out = out.item()
        if type(out) in (int, float):
            return out
        raise _Unfit(f"{said} {describe(out)}; return {ex.returns}" if what is None
                     else f"{what} is {describe(out)}, not a number")
    return out


def _read_tensor(out, ref: torch.Tensor, ex: Exercise, what: str | None, said: str) -> torch.Tensor:
    made_by_reader = isinstance(out, torch.Tensor)    # not a list of numbers (where 1 means 1.0)
    if isinstance(out, list) and ex.accept_lists:
        out = _list_to_tensor(out, what or "the result")
    if isinstance(out, dict) and isinstance(out.get("values"), torch.Tensor) and ex.accept_lists:
        out = out["values"]                                    # a numeric numpy array, read like a list
    if not isinstance(out, torch.Tensor):
        if out is None:
            raise _Unfit(f"{said} None; did you forget the `return` line?")
        if isinstance(out, tuple) and what is None:
            raise _Unfit(f"{said} {describe(out)}; return only {ex.returns}")
        if isinstance(out, list) and out and all(isinstance(o, torch.Tensor) for o in out):
            raise _Unfit(f"{said} {describe(out)}; return a torch.Tensor (torch.stack makes one tensor of a "
                         f"list of tensors)")
        raise _Unfit(f"{said} {describe(out)}; return a torch.Tensor")
    subject = "your function returned" if what is None else f"{what} has"
    if ex.exact_dtype and out.dtype != ref.dtype:
        raise _Unfit(_dtype_message(subject, out.dtype, ref.dtype, ex.dtype_from))
    if not ex.exact_dtype:
        if out.dtype == torch.bool or out.dtype.is_complex:
            raise _Unfit(f"{subject} dtype {out.dtype}; return real numbers")
        if out.is_floating_point() and not ref.is_floating_point() and ref.dtype != torch.bool:
            raise _Unfit(f"{subject} dtype {out.dtype}; return an integer tensor (like {ref.dtype}): ids and "
                         f"counts are whole numbers, and a float tensor cannot index a table")
        if (made_by_reader and not ex.integers_for_floats and ref.is_floating_point()
                and not out.is_floating_point()):
            raise _Unfit(f"{subject} dtype {out.dtype}, integers; return floating-point numbers: a matrix "
                         f"product of float inputs with an integer tensor raises in torch (write 1.0, not 1, "
                         f"or pass dtype=torch.float32)")
        out = out.to(ref.dtype)
    return out


def _dtype_message(subject: str, got: torch.dtype, want: torch.dtype, source: str = "x") -> str:
    if want == torch.bool:
        return (f"{subject} dtype {got}; return a torch.bool tensor (True where attention is allowed): "
                f"comparisons such as j <= i give one, as does torch.ones(..., dtype=torch.bool)")
    if want.is_floating_point and got.is_floating_point and got.itemsize < want.itemsize:
        return (f"{subject} {got} for {want} inputs: keep the inputs' dtype — avoid .float(), and create "
                f"new tensors with dtype={source}.dtype")
    return f"{subject} dtype {got}; expected {want}, the dtype of the inputs"


def _list_to_tensor(rows, what: str) -> torch.Tensor:
    """A nested list of numbers (or 0-d tensors) as a float64 tensor."""
    def number(x):
        if isinstance(x, torch.Tensor) and x.dim() == 0:
            x = x.item()
        if type(x) not in (int, float):
            raise _Unfit(f"{what} is a list that holds {describe(x)}; use numbers or a tensor")
        return float(x)

    def walk(x):
        return [walk(r) for r in x] if isinstance(x, (list, tuple)) else number(x)

    try:
        return torch.tensor(walk(rows), dtype=torch.float64)
    except _Unfit:
        raise
    except Exception:  # noqa: BLE001 - ragged rows
        raise _Unfit(f"{what} is a list whose rows have different lengths") from None


def _leaves(x):
    """The tensors and numbers inside a (nested) tuple, in order."""
    if isinstance(x, tuple):
        for item in x:
            yield from _leaves(item)
    else:
        yield x


def _shapes_agree(out, ref) -> bool:
    return all(not isinstance(r, torch.Tensor) or o.shape == r.shape for o, r in zip(_leaves(out), _leaves(ref)))


def _close(out, ref, ex: Exercise) -> bool:
    """Equal within the exercise's tolerance (exactly, for booleans); shapes must match."""
    if isinstance(ref, tuple):
        return isinstance(out, tuple) and len(out) == len(ref) and all(_close(o, r, ex) for o, r in zip(out, ref))
    if isinstance(ref, torch.Tensor):
        if not isinstance(out, torch.Tensor) or out.shape != ref.shape or out.dtype != ref.dtype:
            return False
        if ref.dtype == torch.bool:
            return bool(torch.equal(out, ref))
        return bool(torch.allclose(out, ref, rtol=ex.rtol, atol=ex.atol, equal_nan=True))
    if isinstance(ref, (int, float)) and type(out) in (int, float):
        if type(out) is int and type(ref) is int and out == ref:
            return True                     # exact, however large (math.isclose overflows past 1e308)
        if any(type(v) is int and abs(v) > 2 ** 1000 for v in (out, ref)):
            return False                    # no float tolerance can make such a number agree
        return math.isclose(out, ref, rel_tol=ex.rtol, abs_tol=ex.atol)
    return out == ref


def _agrees(ex: Exercise, case: tuple, out, ref) -> bool:
    if ex.check_shapes and not _shapes_agree(out, ref):
        return False
    return ex.compare(case, out, ref) if ex.compare is not None else _close(out, ref, ex)


# --------------------------------------------------------------------------- gradients


def gradients(fn: Callable, case: tuple, grad_args) -> list | str | None:
    """The gradient of a fixed projection of ``fn``'s output, sum(out * w) with w = cos(0.7 k + 0.3)
    over its entries k, with respect to the case's arguments at ``grad_args`` (fresh copies that
    require grad): a list of tensors; "cut" when the output is a float tensor that carries no
    gradient; None when there is nothing to compare (no float tensor returned, or ``fn`` raised)."""
    args = list(_clone(case))
    for i in grad_args:
        args[i] = args[i].detach().clone().requires_grad_(True)
    try:
        with torch.enable_grad():
            out = fn(*args)
            if not isinstance(out, torch.Tensor) or not out.is_floating_point():
                return None
            if not out.requires_grad:
                return "cut"
            w = torch.cos(0.7 * torch.arange(out.numel(), dtype=out.dtype, device=out.device) + 0.3)
            found = torch.autograd.grad((out * w.reshape(out.shape)).sum(), [args[i] for i in grad_args],
                                        allow_unused=True)
    except KeyboardInterrupt:
        raise
    except Exception:  # noqa: BLE001 - the values were judged already; a failing backward is not compared
        return None
    return [portable(torch.zeros_like(args[i]) if g is None else g.detach()) for i, g in zip(grad_args, found)]


def with_gradients(ex: Exercise, fn: Callable, cases: list[tuple], outcome: Outcome) -> Outcome:
    """``outcome`` with the gradients of ``fn`` on the cases, for an exercise with ``grad_args``
    whose run raised nothing and changed no input (a second pass, on fresh copies)."""
    if ex.grad_args and outcome.error is None and not outcome.mutated:
        with _one_thread():
            outcome.grads = [gradients(fn, case, ex.grad_args) for case in cases]
    return outcome


GRAD_CUT = ("the values are right, but your output carries no gradient: it was computed under torch.no_grad() "
            "(or rebuilt from numbers), so nothing before it could be trained. Compute it with tensor operations "
            "on the inputs, outside torch.no_grad().")


def _gradient_problem(ex: Exercise, cases: list[tuple], grads: list) -> str | None:
    """Why the reader's gradients differ from the reference's, or None."""
    for case, got in zip(cases, grads):
        if got is None:
            continue
        if isinstance(got, str):
            if got == "cut":
                return GRAD_CUT
            continue
        want = gradients(ex.reference, case, ex.grad_args)
        if not isinstance(want, list) or not isinstance(got, list) or len(got) != len(want):
            continue
        for i, g, r in zip(ex.grad_args, got, want):
            if not isinstance(g, torch.Tensor) or g.shape != r.shape or not torch.allclose(
                    g.to(r.dtype), r, rtol=1e-6, atol=1e-9):
                name = f"`{ex.args[i]}`" if i < len(ex.args) else f"argument {i + 1}"
                return (f"the values are right, but the gradient with respect to {name} is not: part of your "
                        f"computation is cut from autograd (.detach(), .data, a statistic computed under "
                        f"torch.no_grad(), .item()), so backpropagation through it would be wrong. Keep every "
                        f"step a tensor operation on the inputs.")
    return None


# --------------------------------------------------------------------------- judging


def judge(ex: Exercise, cases: list[tuple], outcome: Outcome) -> Verdict:
    """Compare an :class:`Outcome` with the reference and name the likely mistake. Never raises
    (but ``KeyboardInterrupt``)."""
    try:
        with _one_thread():
            return _judge(ex, cases, outcome)
    except Exception as err:  # noqa: BLE001 - the verdict must still be printed
        return Verdict(ex.name, ERROR, f"✗ {ex.title}: the check could not judge this answer "
                                       f"({type(err).__name__}: {_error_text(err)}).")


def _judge(ex: Exercise, cases: list[tuple], outcome: Outcome) -> Verdict:
    t = ex.title
    if outcome.error is not None:
        return _judge_error(ex, cases, outcome)
    outputs = list(outcome.outputs or [])
    if len(outputs) != len(cases):
        return Verdict(ex.name, ERROR, f"✗ {t}: expected {len(cases)} outputs, got {len(outputs)}.")
    refs = [portable(ex.reference(*_clone(c))) for c in cases]
    try:
        read, problem = [_read(o, r, ex) for o, r in zip(outputs, refs)], None
    except _Unfit as unfit:
        read, problem = None, str(unfit)
    right = read is not None and all(_agrees(ex, c, o, r) for c, o, r in zip(cases, read, refs))
    if outcome.mutated:   # a definite mistake, even when the output is right
        names = " and ".join(f"`{ex.args[i]}`" if i < len(ex.args) else f"argument {i + 1}" for i in outcome.mutated)
        return Verdict(ex.name, FAIL, f"✗ {t}: your function changed its input {names} in place"
                       f"{' (its output is right)' if right else ''}: the caller's tensors must stay as they were, so "
                       f"compute new tensors instead of using -=, exp_(), masked_fill_() or an indexed assignment.")
    if problem is not None:  # a type, structure or dtype the reference does not have
        return Verdict(ex.name, FAIL, f"✗ {t}: {problem}{'' if problem.endswith('?') else '.'}")
    if right and ex.grad_args and outcome.grads:
        problem = _gradient_problem(ex, cases, outcome.grads)
        if problem:
            return Verdict(ex.name, FAIL, f"✗ {t}: {problem}")
    if right:
        on = f"all {len(cases)} test inputs" if len(cases) > 1 else "the test input"
        return Verdict(ex.name, PASS, f"✓ {t}: correct on {on}.")
    return Verdict(ex.name, FAIL, f"✗ {t}: {_explain(ex, cases, read, refs)}")


def _explain(ex: Exercise, cases: list[tuple], read: list, refs: list) -> str:
    """Why well-formed outputs are wrong, most specific first: a known mistake, a shape, the
    exercise's own diagnosis, NaN or inf, else the generic hint."""
    for wrong, hint in ex.mistakes:
        if _same_behaviour(ex, cases, read, None, wrong):
            return f"wrong output. Hint: {hint}"
    for case, out, ref in zip(cases, read, refs):
        if ex.check_shapes and not _shapes_agree(out, ref):
            return f"{_shape_message(ex, case, out, ref)}."
    text = ex.diagnose(cases, read, refs) if ex.diagnose is not None else None
    if text:
        return text
    if ex.exact_dtype and _float32_round_trip(read, refs):
        half = next((name for dt, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16"))
                     if _round_trip(read, refs, dt)), None)
        if half:
            return (f"wrong values: every value is a {half} number, so your function computed in half precision "
                    f"({half}, .half() or autocast) and cast back. Hint: {HALF_HINT}")
        return (f"wrong values: every value is a float32 number, so your function computed in float32 and cast "
                f"back. Hint: {FLOAT32_HINT.replace('x.dtype', ex.dtype_from + '.dtype')}")
    for out, ref in zip(read, refs):
        for o, r in zip(_leaves(out), _leaves(ref)):
            if (isinstance(o, torch.Tensor) and o.is_floating_point() and not torch.isfinite(o).all()
                    and torch.isfinite(r).all()):
                return f"the output contains NaN or inf where the reference is finite. Hint: {ex.generic_hint}"
    return f"wrong values. Hint: {ex.generic_hint}"


FLOAT32_HINT = ("keep the inputs' float64 dtype throughout — avoid .float() and torch.float32, and create new "
                "tensors with dtype=x.dtype; float32 is off by ~1e-7, far outside the tolerance.")


HALF_HINT = ("keep the inputs' float64 dtype throughout — no .half(), torch.float16 or torch.bfloat16; half "
             "precision keeps about 3 significant digits, far outside the tolerance.")


def _float32_round_trip(read: list, refs: list) -> bool:
    """Are all the float64 outputs float32 numbers (while the reference's are not)? A float64
    computation lands on a float32 number by chance about once in 2**29 values, so on a few dozen
    values this is a deterministic sign of a float32 computation cast back to float64."""
    return _round_trip(read, refs, torch.float32)


def _round_trip(read: list, refs: list, dtype: torch.dtype) -> bool:
    """Are all the float64 outputs numbers of ``dtype`` (while the reference's are not)?"""
    outs = [o for out in read for o in _leaves(out) if isinstance(o, torch.Tensor) and o.dtype == torch.float64]
    rs = [r for ref in refs for r in _leaves(ref) if isinstance(r, torch.Tensor) and r.dtype == torch.float64]

    def numbers_of_dtype(ts):
        vals = torch.cat([t.reshape(-1) for t in ts]) if ts else torch.zeros(0, dtype=torch.float64)
        vals = vals[torch.isfinite(vals) & (vals != 0)]
        return vals.numel() >= 8 and bool((vals.to(dtype).double() == vals).all())

    return numbers_of_dtype(outs) and not numbers_of_dtype(rs)


def _judge_error(ex: Exercise, cases: list[tuple], outcome: Outcome) -> Verdict:
    t = ex.title
    kind, msg = outcome.error
    if kind == "NotImplementedError":
        m = _STUB.match(msg)
        called = m.group(1) if m else None
        if called is None or called in (ex.function, ex.name):
            return Verdict(ex.name, NOT_IMPLEMENTED,
                           f"✗ {t}: not implemented yet - replace the `raise NotImplementedError` line with your code.")
        other = next((e for e in EXERCISES.values() if e.function == called), None)
        where = f" ({other.title.split(' (')[0]})" if other is not None and other.number else ""
        return Verdict(ex.name, NOT_IMPLEMENTED, f"✗ {t}: it calls {called}, which is not implemented yet{where}.")
    said = f"✗ {t}: your function raised {kind}" + (f": {msg.rstrip('.')}" if msg else "")
    read = _read_prefix(ex, cases, outcome.outputs or [])
    if read:  # it returned on the first cases, then raised: a mistake that does the same is named
        for wrong, hint in ex.mistakes:
            if _same_behaviour(ex, cases, read, kind, wrong):
                return Verdict(ex.name, ERROR, f"{said}. Hint: {hint}")
    for err_type, pattern, hint in ex.error_hints:
        name = err_type if isinstance(err_type, str) else err_type.__name__
        if kind == name and re.search(pattern, msg):
            return Verdict(ex.name, ERROR, f"{said}. Hint: {hint}")
    return Verdict(ex.name, ERROR, said)


def _read_prefix(ex: Exercise, cases: list[tuple], outputs: list) -> list | None:
    """The outputs of the cases that returned before an exception, read; None if unreadable."""
    refs = [portable(ex.reference(*_clone(c))) for c in cases[:len(outputs)]]
    try:
        return [_read(o, r, ex) for o, r in zip(outputs, refs)]
    except _Unfit:
        return None


def _same_behaviour(ex: Exercise, cases: list[tuple], read: list, error_kind: str | None, wrong: Callable) -> bool:
    """Does the known-wrong version ``wrong`` return what the reader's returned on the same cases,
    and raise (an exception of the same type) where the reader's raised? Stops at the first case
    where the two part (most known mistakes differ from the reader's answer on the first case)."""
    with _one_thread():
        for i, case in enumerate(cases):
            try:
                out = wrong(*_clone(case))
            except KeyboardInterrupt:
                raise
            except BaseException as err:  # noqa: BLE001 - a known mistake may raise, as the reader's did
                return i == len(read) and type(err).__name__ == error_kind
            if i >= len(read):
                return False
            same = (ex.compare(case, read[i], portable(out)) if ex.mistakes_by_compare and ex.compare
                    else _close(read[i], portable(out), ex))
            if not same:
                return False
    return error_kind is None and len(read) == len(cases)


def _shape_message(ex: Exercise, case: tuple, out, ref) -> str:
    names = ex.item_names if isinstance(ref, tuple) else ("output",)
    arg_names = ex.args if len(ex.args) == len(case) else tuple(f"argument {i + 1}" for i in range(len(case)))
    inputs = ", ".join(f"{n} of shape {tuple(a.shape)}" if isinstance(a, torch.Tensor)
                       else f"{n} = {describe(a)}" if _is_built(a) else f"{n} = {a!r}"
                       for n, a in zip(arg_names, case))
    for name, o, r in zip(names, _leaves(out), _leaves(ref)):
        if isinstance(r, torch.Tensor) and o.shape != r.shape:
            return f"{name} shape {tuple(o.shape)}, expected {tuple(r.shape)}" + (f" for {inputs}" if inputs else "")
    return "wrong shapes"


# --------------------------------------------------------------------------- the public entry points


def cases_for(ex: Exercise, seed: int = 0) -> list[tuple]:
    """The test inputs of ``ex`` for ``seed`` (float64 tensors; the seed changes the numbers only)."""
    return ex.make_cases(torch.Generator().manual_seed(seed))


def check(name: str, fn: Callable, seed: int = 0) -> Verdict:
    """Run exercise ``name`` on ``fn``, print the verdict line, and return the :class:`Verdict`."""
    if name not in EXERCISES:
        raise ValueError(f"name must be one of the registered exercises {sorted(EXERCISES)}, got {name!r}")
    ex = EXERCISES[name]
    if not callable(fn):
        verdict = Verdict(name, ERROR, f"✗ {ex.title}: expected a function, got {describe(fn)}.")
    else:
        cases = cases_for(ex, seed)
        outcome, calls = _watched_run(ex, fn, cases)
        verdict = judge(ex, cases, outcome)
        if calls and not verdict.passed and outcome.grads:   # right values from the library: say so first
            verdict = judge(ex, cases, replace(outcome, grads=None))
        if verdict.passed and calls:
            whose = ("torch doing the exercise for you"
                     if all(c.startswith("torch.") for c in calls) else "the library's own answer")
            verdict = Verdict(name, FAIL, f"✗ {ex.title}: the outputs are right, but they come from "
                                          f"{', '.join(calls[:3])}, {whose}. Write it "
                                          "yourself, as the exercise asks: a grader gives an answer that "
                                          "calls it no credit.")
    print(verdict.wrapped())
    return verdict


def _watched_run(ex: Exercise, fn: Callable, cases: list[tuple]) -> tuple[Outcome, list[str]]:
    """``run_cases`` under the grader's profiler: the outcome, and the library's own answers (or
    the course's code) that ``fn`` is, or called while it ran."""
    from tinyformer.course import _nbrun  # the grader's watcher: standard library only

    profiler = _nbrun._Profiler(library_answer_keys(ex))

    def watched(*args):
        return profiler.call(fn, args)

    outcome = with_gradients(ex, watched, cases, run_cases(watched, cases))
    calls = _nbrun._library_identity(fn)
    return outcome, calls + [h for h in profiler.hits if h not in calls]
