"""The grader's honesty flags, in process (no kernel): the harvest's profiler catches the library's
own answer, by any name, and its own removal; honest solutions are never flagged."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import exercise_suite
import pytest
import test_checks_ch02
import test_checks_ch03
import test_checks_ch04
import torch

from tinyformer import checks
from tinyformer.course import _nbrun
from tinyformer.course import engine as E
from tinyformer.course.grade import Sandbox, _runtime_paths

from conftest import define, scaled

SOLUTIONS = {**test_checks_ch02.SOLUTIONS, **test_checks_ch03.SOLUTIONS, **test_checks_ch04.SOLUTIONS}


def _fn(source: str, name: str):
    return define(textwrap.dedent(source), checks.EXERCISES[name].function)


def test_every_library_answer_names_a_function():
    for ex in checks.EXERCISES.values():
        keys = E.library_answer_keys(ex)
        assert keys["code"], ex.name                 # the reference, at least
        assert len(keys["code"]) + len(keys["builtin"]) >= len(ex.library_answers), ex.name
    with pytest.raises(ValueError, match="names no importable object"):
        E.library_answer_keys(E.Exercise(name="x", number="", function="x", chapter="c", args=(),
                                         make_cases=lambda g: [], reference=lambda: 0,
                                         library_answers=("tinyformer.attention.no_such_thing",)))


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_honest_solutions_are_not_flagged(name):
    rec, verdict = exercise_suite.harvest(name, define(SOLUTIONS[name], checks.EXERCISES[name].function))
    assert rec["flags"] == [] and rec["tampering"] == [], rec["flags"]
    assert verdict.status == checks.PASS, verdict.message


LIBRARY_ANSWERS = {
    "multi_head_attention": ("from tinyformer.attention import multi_head_attention as all_heads_at_once",
                             "tinyformer.attention.multi_head_attention"),
    "sum_over_heads": ("""
        from tinyformer.attention import merge_heads as glue

        def sum_over_heads(heads, W_O):
            return glue(heads) @ W_O
        """, "tinyformer.attention.merge_heads"),
    "block_flops": ("from tinyformer.course.ch02 import block_flops_reference as block_flops",
                    "tinyformer.course.ch02.block_flops_reference"),
    "causal_mask": ("import tinyformer.attention as A\ncausal_mask = lambda T: A.causal_mask(T) | False",
                    "tinyformer.attention.causal_mask"),
    "layer_norm": ("""
        import torch.nn.functional as Fn

        def layer_norm(x, gain, bias, eps=1e-5):
            return Fn.layer_norm(x, x.shape[-1:], gain, bias, eps)
        """, "torch.nn.functional.layer_norm"),
    "left_padded_causal_mask": ("""
        from tinyformer.course import ch02 as course

        def left_padded_causal_mask(lengths, T):
            i, j, start = course._padding_parts(lengths, T)
            return (j <= i) & (j >= start)
        """, "the course's checking code (_padding_parts in tinyformer/course/ch02.py)"),
    "stable_softmax": ("import torch\n\ndef stable_softmax(s):\n    return torch.softmax(s, -1)", "torch.softmax"),
    "block_params": ("""
        from tinyformer.blocks import TransformerBlock as TB

        def block_params(d_model, n_heads, d_ff):
            return sum(p.numel() for p in TB(d_model, n_heads, d_ff).parameters())
        """, "tinyformer.blocks.TransformerBlock.__init__"),
}


@pytest.mark.parametrize("name", sorted(LIBRARY_ANSWERS))
def test_the_library_answer_is_flagged_by_any_name(name):
    source, caught = LIBRARY_ANSWERS[name]
    rec, verdict = exercise_suite.harvest(name, _fn(source, name))
    assert caught in rec["flags"], rec["flags"]
    assert verdict.status == checks.PASS          # its outputs are right: the flag alone takes the credit


def test_a_function_that_is_the_library_is_flagged_without_being_called():
    from tinyformer.attention import merge_heads

    assert _nbrun._library_identity(merge_heads) == ["tinyformer.attention.merge_heads"]
    assert _nbrun._library_identity(lambda x: x) == []


def test_removing_the_profiler_is_tampering():
    def all_heads_at_once(x, W_Q, W_K, W_V, W_O, n_heads):
        sys.setprofile(None)
        from tinyformer.attention import multi_head_attention  # unseen: the profiler is gone
        return multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads)

    rec, _ = exercise_suite.harvest("multi_head_attention", all_heads_at_once)
    assert rec["tampering"] == ["the grader's profiler was removed while the function ran"]


def test_a_slow_function_times_out_and_exceptions_are_recorded():
    def block_flops(T, d_model, d_ff):
        while True:
            pass

    rec, verdict = exercise_suite.harvest("block_flops", block_flops, timeout=0.5)
    assert rec["error"] == ("TimeoutError", "the function ran for more than 0.5 s") and rec["seconds"] < scaled(5)

    def stubborn(T, d_model, d_ff):                   # `except Exception` cannot eat the alarm
        try:
            while True:
                pass
        except Exception:
            return 0

    rec, _ = exercise_suite.harvest("block_flops", stubborn, timeout=0.3)
    assert rec["error"][0] == "TimeoutError"

    def raises(T, d_model, d_ff):
        raise SystemExit("bye " * 1000)

    rec, verdict = exercise_suite.harvest("block_flops", raises)
    assert rec["error"][0] == "SystemExit" and len(rec["error"][1]) <= 300 and verdict.status == checks.ERROR


def test_in_place_changes_are_recorded_like_run_cases():
    fn = define(test_checks_ch02.SOLUTIONS["sum_over_heads"], "sum_over_heads")

    def clobbers(heads, W_O):
        out = fn(heads, W_O)
        heads.zero_()
        return out

    rec, verdict = exercise_suite.harvest("sum_over_heads", clobbers)
    cases = checks.cases_for(checks.EXERCISES["sum_over_heads"], 0)
    assert rec["mutated"] == checks.run_cases(clobbers, cases).mutated == [0]
    assert verdict.status == checks.FAIL
    assert all(isinstance(o, torch.Tensor) for o in rec["outputs"])


def test_the_sandbox_hides_the_submissions_and_the_reports():
    base = Path("/srv/grading")                     # outside /tmp (which is private in the sandbox anyway)
    box = Sandbox("none", hide=(base / "in", base / "out"))
    assert box.describe() == "process group only (bubblewrap not asked for)"
    box.bwrap = "bwrap"
    private = base / "root" / "nb-1"
    cmd = box.command(private, private / "work", ["python", "x.py"])
    assert cmd[:10] == ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    bind = cmd.index("--bind")
    middle = cmd[10:bind]
    tmpfs = [middle[i + 1] for i, arg in enumerate(middle) if arg == "--tmpfs"]
    assert tmpfs == [str(base / "in"), str(base / "out"), str(base / "root")]
    # then, only where this test runs from a clone or an environment under /tmp: those, read-only
    shown = [middle[i + 1] for i, arg in enumerate(middle) if arg == "--ro-bind"]
    assert shown == [str(p) for p in _runtime_paths() if p.is_relative_to("/tmp")]
    assert len(middle) == 2 * len(tmpfs) + 3 * len(shown)
    assert cmd[bind:bind + 3] == ["--bind", str(private), str(private)]    # the last mount: nothing hides it
    assert "--tmpfs" not in cmd[bind:]
    for flag in ("--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session"):
        assert flag in cmd
    assert cmd[-3:] == ["--", "python", "x.py"]
    # a folder that holds the Python that runs the notebook is never hidden
    assert str(Path(sys.prefix).resolve().parent) not in Sandbox("none", hide=(Path(sys.prefix).parent,))._wrap(
        private, private, ["true"])
