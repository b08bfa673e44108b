"""The judging engine: a check never raises, names what the reader returned, catches inputs
modified in place, decides the float32 policy by dtype alone, and survives the trip through the
grader's sandbox. Chapter 2's exercises and their mistakes are tested in test_checks_ch02.py.
"""

from __future__ import annotations

import enum
import math

import numpy as np
import pytest
import torch
from test_checks_ch02 import CHAPTER, DRILLS, solution

from tinyformer import checks
from tinyformer.course import engine

ALL = CHAPTER + DRILLS


def correct_head(x, W_Q, W_K, W_V):
    """One causal head, written out here as the reference for the engine tests."""
    s = (x @ W_Q) @ (x @ W_K).transpose(-2, -1) / math.sqrt(W_Q.shape[1])
    T = x.shape[-2]
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, dim=-1) @ (x @ W_V)


class Weird(torch.Tensor):
    """A tensor subclass whose every operation raises."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError("no operation works on me")


class Hostile:
    """An object that raises whenever it is looked at."""

    def __len__(self):
        raise RuntimeError("no len")

    def __eq__(self, other):
        raise RuntimeError("no eq")

    def __repr__(self):
        raise RuntimeError("no repr")


class Exit(BaseException):
    pass


def _raise(err):
    def fn(*args):
        raise err
    return fn


BAD = {
    "runtime-error": _raise(RuntimeError("boom")),
    "system-exit": _raise(SystemExit(3)),
    "base-exception": _raise(Exit("out")),
    "generator-exit": _raise(GeneratorExit()),
    "exception-without-str": _raise(type("Mute", (Exception,), {"__str__": lambda self: 1 / 0})()),
    "string": lambda *a: "not a tensor",
    "none": lambda *a: None,
    "tuple": lambda *a: (torch.zeros(1), torch.zeros(1)),
    "ndarray": lambda *a: np.zeros((2, 2)),
    "dict": lambda *a: {"out": torch.zeros(1)},
    "generator": lambda *a: (i for i in range(3)),
    "hostile": lambda *a: Hostile(),
    "tiny": lambda *a: torch.zeros(1),
    "nan": lambda *a: torch.full((1, 1), float("nan")),
    "meta": lambda *a: torch.empty(3, 3, device="meta"),
    "complex": lambda *a: torch.zeros(2, 2, dtype=torch.complex128),
    "sparse": lambda *a: torch.eye(3).to_sparse(),
    "subclass": lambda *a: torch.zeros(2, 2).as_subclass(Weird),
    "deep-list": lambda *a: [[[[[[[[[[1.0]]]]]]]]]],
    "long-list": lambda *a: [0.0] * 20_000,
    "bool": lambda *a: True,
    "int-tensor": lambda *a: torch.zeros(3, 3, dtype=torch.int64),
}


@pytest.mark.parametrize("bad", list(BAD), ids=list(BAD))
@pytest.mark.parametrize("name", ALL)
def test_any_wrong_answer_fails_without_raising(name, bad, capsys):
    verdict = checks.check(name, BAD[bad])
    line = capsys.readouterr().out.strip()
    assert not verdict and line.startswith("✗") and verdict.message.startswith("✗")
    assert "could not judge" not in verdict.message, verdict.message


def test_keyboard_interrupt_goes_through():
    with pytest.raises(KeyboardInterrupt):
        checks.check_causal_mask(_raise(KeyboardInterrupt()))


def test_the_engine_reraises_only_what_it_is_told():
    outcome = checks.run_cases(_raise(Exit("alarm")), [(1,)])
    assert outcome.error == ("Exit", "alarm")
    with pytest.raises(Exit):
        checks.run_cases(_raise(Exit("alarm")), [(1,)], reraise=(Exit,))


def test_another_device_is_read_not_crashed_on(capsys):
    verdict = checks.check_attention_head(lambda x, *W: torch.zeros(2, 4, 6, device="meta"))
    capsys.readouterr()
    assert not verdict and "a tensor on the meta device, which holds no values" in verdict.message


@pytest.mark.parametrize(("returned", "message"), [
    (lambda *a: (correct_head(*a), None), "returned a tuple of 2 items; return only the output tensor"),
    (lambda *a: [correct_head(*a)], "returned a list of 1 item; return a torch.Tensor"),
    (lambda *a: correct_head(*a).numpy(), "returned a numpy.ndarray of shape (2, 4, 6); return a torch.Tensor"),
    (lambda *a: None, "returned None; did you forget the `return` line?"),
    (lambda *a: 3.0, "returned a float; return a torch.Tensor"),
    (lambda *a: correct_head(*a).to(torch.int64), "returned dtype torch.int64; expected torch.float64"),
])
def test_what_was_returned_is_named(returned, message, capsys):
    verdict = checks.check_attention_head(returned)
    capsys.readouterr()
    assert not verdict and message in verdict.message, verdict.message


def test_a_list_stands_for_a_tuple_and_numbers_may_be_numpy_or_0d_tensors(capsys):
    def block_flops(T, d_model, d_ff):
        return [np.int64(8 * T * d_model ** 2), torch.tensor(4 * T * T * d_model), float(4 * T * d_model * d_ff)]

    assert checks.check_block_flops(block_flops)
    verdict = checks.check_block_flops(lambda T, d, f: (1, 2, "three"))
    capsys.readouterr()
    assert not verdict and "feed_forward is a str, not a number" in verdict.message


@pytest.mark.parametrize("seed", range(5))
def test_float32_fails_by_dtype_alone(seed, capsys):
    """Even the exact reference rounded to float32 fails, with the dtype hint, on every seed."""
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        verdict = checks.check("attention_head", lambda *a, dtype=dtype: correct_head(*a).to(dtype), seed=seed)
        assert not verdict and verdict.message.endswith(
            f"your function returned {dtype} for torch.float64 inputs: keep the inputs' dtype — avoid .float(), "
            "and create new tensors with dtype=x.dtype."), verdict.message
    capsys.readouterr()


def test_in_place_modification_is_named_even_when_the_output_is_right(capsys):
    def head_that_clears_x(x, W_Q, W_K, W_V):
        out = correct_head(x, W_Q, W_K, W_V)
        x.zero_()
        return out

    def head_that_scales_W_V(x, W_Q, W_K, W_V):
        W_V *= 2
        return correct_head(x, W_Q, W_K, W_V)

    right = checks.check_attention_head(head_that_clears_x)
    wrong = checks.check_attention_head(head_that_scales_W_V)
    capsys.readouterr()
    assert not right and "changed its input `x` in place (its output is right)" in right.message
    assert not wrong and "changed its input `W_V` in place:" in wrong.message


def test_the_tolerance_tells_reordering_from_a_mistake(capsys):
    def off_by(rel):
        return lambda *a: correct_head(*a) * (1 + rel)

    assert checks.check_attention_head(off_by(1e-13))           # a different summation order
    for rel in (1e-4, 1e-7):
        assert not checks.check_attention_head(off_by(rel))
    capsys.readouterr()


def test_verdict_is_folded_never_cut(capsys):
    verdict = checks.check_multi_head_attention(lambda x, *a: x * 2)
    printed = capsys.readouterr().out.strip()
    assert printed == verdict.wrapped() and len(printed.splitlines()) > 1
    assert " ".join(printed.split()) == verdict.message
    assert all(len(line) <= 88 for line in printed.splitlines())


def test_not_callable(capsys):
    verdict = checks.check_causal_mask(42)
    capsys.readouterr()
    assert not verdict and verdict.message.endswith("expected a function, got an int.")


def test_unknown_exercise_is_a_clear_error():
    with pytest.raises(ValueError, match="name must be one of the registered exercises"):
        checks.check("no_such_exercise", print)


def test_raising_function_is_reported_with_its_error(capsys):
    verdict = checks.check_stable_softmax(_raise(IndexError("dimension out of range")))
    capsys.readouterr()
    assert verdict.status == checks.ERROR
    assert "your function raised IndexError: dimension out of range" in verdict.message


@pytest.mark.parametrize(("message", "expected"), [
    ("", "not implemented yet - replace the `raise NotImplementedError` line"),
    ("all_heads_at_once is not implemented yet", "not implemented yet - replace"),
    ("multi_head_attention is not implemented yet", "not implemented yet - replace"),    # an older stub
    ("sum_over_heads is not implemented yet", "it calls sum_over_heads, which is not implemented yet (Exercise 2.3)."),
    ("stable_softmax is not implemented yet", "it calls stable_softmax, which is not implemented yet."),
    ("my_helper is not implemented yet", "it calls my_helper, which is not implemented yet."),
])
def test_not_implemented_names_the_unfinished_function(message, expected, capsys):
    verdict = checks.check_multi_head_attention(_raise(NotImplementedError(message)))
    capsys.readouterr()
    assert verdict.status == checks.NOT_IMPLEMENTED and expected in verdict.message, verdict.message


def test_error_hints_match_type_and_message():
    ex = checks.EXERCISES["attention_head"]
    cases = checks.cases_for(ex)
    msg = "mat1 and mat2 shapes cannot be multiplied (10x8 and 4x8)"
    hinted = checks.judge(ex, cases, checks.Outcome(outputs=[], error=("RuntimeError", msg)))
    other_type = checks.judge(ex, cases, checks.Outcome(outputs=[], error=("ValueError", msg)))
    assert "Hint: a matrix product with mismatched shapes" in hinted.message
    assert "Hint" not in other_type.message


def test_run_cases_keeps_the_outputs_before_the_exception():
    calls = []

    def fails_on_the_third(T):
        calls.append(T)
        if len(calls) == 3:
            raise ValueError("third")
        return torch.ones(T, T, dtype=torch.bool).tril()

    outcome = checks.run_cases(fails_on_the_third, [(1,), (2,), (3,), (4,)])
    assert len(outcome.outputs) == 2 and outcome.error == ("ValueError", "third") and calls == [1, 2, 3]


def test_portable_outputs():
    class Count(enum.IntEnum):
        ONE = 1

    big = torch.zeros(1000, 1000)
    view = big[:2, :2]
    assert engine.portable(np.float64(0.5)) == 0.5 and type(engine.portable(np.int64(3))) is int
    assert type(engine.portable(Count.ONE)) is int
    assert type(engine.portable(torch.nn.Parameter(torch.ones(2)))) is torch.Tensor
    assert engine.portable(view).untyped_storage().nbytes() == 4 * 4     # a copy, not the whole storage
    assert engine.portable(torch.ones(2, requires_grad=True)).requires_grad is False
    assert engine.describe(engine.portable(np.zeros((2, 3)))) == "a numpy.ndarray of shape (2, 3)"
    assert engine.describe(engine.portable((1, [2, 3]))) == "a tuple of 2 items"


@pytest.mark.parametrize("name", ALL)
def test_judging_outputs_shipped_from_a_sandbox_gives_the_same_verdict(name, tmp_path):
    """The grader saves the outcome with torch.save and judges what torch.load(weights_only=True)
    gives back: the verdict must not change on the way."""
    ex = checks.EXERCISES[name]
    cases = checks.cases_for(ex, seed=3)
    answers = [solution(name), BAD["ndarray"], BAD["tuple"], BAD["meta"], BAD["runtime-error"]]
    for fn in answers:
        outcome = checks.run_cases(fn, cases)
        torch.save({"outputs": outcome.outputs, "error": outcome.error, "mutated": outcome.mutated},
                   tmp_path / "out.pt")
        back = torch.load(tmp_path / "out.pt", weights_only=True)
        shipped = checks.Outcome(outputs=back["outputs"], error=back["error"] and tuple(back["error"]),
                                 mutated=back["mutated"])
        assert checks.judge(ex, cases, shipped) == checks.judge(ex, cases, outcome)


def test_registration_refuses_duplicates():
    ex = checks.EXERCISES["causal_mask"]
    with pytest.raises(ValueError, match="already registered"):
        engine.register(ex)
    twin = engine.Exercise(name="twin_hints", number="", function="f", chapter="x", args=(), make_cases=lambda g: [],
                           reference=lambda: None, mistakes=[(print, "same"), (print, "same")])
    with pytest.raises(ValueError, match="two identical hints"):
        engine.register(twin)
    assert "twin_hints" not in checks.EXERCISES


def test_every_exercise_has_a_documented_check():
    for name, ex in checks.EXERCISES.items():
        fn = getattr(checks, f"check_{name}")
        assert fn.__name__ == f"check_{name}" and ex.function in fn.__doc__
        assert f"check_{name}" in checks.__all__


def test_a_check_shows_one_verdict_and_nothing_else_in_ipython():
    """In Jupyter a cell's last value is shown only when it has a representation. The check has
    printed its line already: the returned Verdict must add nothing (no 'Verdict(...)')."""
    interactiveshell = pytest.importorskip("IPython.core.interactiveshell")
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    shell = interactiveshell.InteractiveShell.instance(config=config)
    shown = []
    try:
        hook = shell.displayhook            # shows what Jupyter would: data only, no prompt
        hook.write_output_prompt = lambda: None
        hook.write_format_data = lambda format_dict, md_dict=None: shown.append(format_dict)
        shell.user_ns["checks"] = checks
        shell.user_ns["good"] = solution("causal_mask")
        shell.user_ns["bad"] = BAD["none"]
        with pytest.MonkeyPatch.context() as mp:
            lines = []
            mp.setattr("builtins.print", lambda *a, **k: lines.append(" ".join(map(str, a))))
            shell.run_cell("checks.check_causal_mask(good)", store_history=False)
            shell.run_cell("checks.check_causal_mask(bad)", store_history=False)
            shell.run_cell("verdict = checks.check_causal_mask(good)\nverdict", store_history=False)
    finally:
        interactiveshell.InteractiveShell.clear_instance()
    assert shown == [], shown
    assert len(lines) == 3 and lines[0].startswith("✓") and lines[1].startswith("✗") and lines[2] == lines[0]


def test_a_float32_computation_cast_back_is_named(capsys):
    verdict = checks.check_attention_head(lambda *a: correct_head(*(t.float() for t in a)).double())
    capsys.readouterr()
    assert not verdict and "computed in float32 and cast back" in verdict.message, verdict.message


def test_a_numeric_ndarray_ships_its_values():
    import io
    buf = io.BytesIO()
    torch.save(engine.portable(np.arange(6.0).reshape(2, 3)), buf)
    buf.seek(0)
    shipped = torch.load(buf, weights_only=True)
    assert engine.describe(shipped) == "a numpy.ndarray of shape (2, 3)"
    assert torch.equal(shipped["values"], torch.arange(6.0, dtype=torch.float64).reshape(2, 3))


@pytest.mark.parametrize("name", ["block_params", "gpt_params"])
def test_an_integer_too_large_for_a_float_is_judged_wrong_not_unjudgeable(name, capsys):
    """math.isclose overflows on ints past 1e308: such an answer must still get a verdict."""
    v = getattr(checks, f"check_{name}")(lambda *args, **kwargs: 10 ** 400)
    assert v.status == checks.FAIL, v.message
    assert "could not judge" not in capsys.readouterr().out
