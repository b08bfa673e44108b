"""The chapter-independent tests of the exercise checks, written once for every chapter.

A chapter's test file (tests/test_checks_ch0N.py) keeps what is its own: the solutions, the wrong
answers a learner writes with the phrase each must earn, the odd returns it tries, and the tests
of its references against independent computations. It describes itself with a :class:`Chapter`
and takes the generic tests it wants into its namespace, where pytest collects them under the
chapter file's name, with the same ids as if they were written there. One block of a chapter file
(its section "the generic tests") lists them all, e.g.::

    SUITE = exercise_suite.Chapter(CHAPTER, DRILLS, SOLUTIONS, NOTEBOOK)
    globals().update(
        SUITE.solution_tests(page_width=79)
        | SUITE.wrong_answer_tests(WRONG)
        | SUITE.odd_answer_tests(BAD)
    )

Each ``*_tests`` method returns {name: test function} for these tests (and fixture); a chapter
takes the groups that apply to it:

``solution_tests(page_width=None)``
    test_solution_passes: each solution passes, and its check prints the ✓ line it returns.
    test_solution_passes_for_every_seed: each solution passes on every seed of SEEDS.
    test_solution_code_fits_the_page: (only with page_width) no line of a solution is wider.
    test_stub_is_not_implemented: the learner's stub made from the solution cell raises
    NotImplementedError("<function> is not implemented yet"), and the check says 'not implemented
    yet' (not 'it calls ...').
``notebook_tests()``  (skipped while the chapter's notebook does not exist)
    test_the_chapter_has_a_cell_for_every_checked_exercise: a cell tagged exercise-<name> each.
    test_chapter_solution_passes_for_every_seed: the notebook's exercise cells pass on every seed.
``registered_mistake_tests(apart_by, flattened=False)``
    test_every_registered_mistake_is_caught_by_its_own_hint: whatever the seed, the verdict of each
    mistake registered with the exercise ends with its own hint.
    test_the_cases_tell_every_mistake_from_the_reference_and_the_others: on every seed each mistake
    runs without error and its outputs differ from the reference's and every other mistake's: by
    shape or by more than rtol=1e-6, atol=apart_by somewhere (numbers: unequal), output by output;
    with ``flattened``, all the outputs of a run are one float64 vector, compared so.
``wrong_answer_tests(wrong)``  (and the module fixture wrong_verdicts: {index in wrong: [verdict per seed]})
    test_wrong_answer_gets_its_hint_whatever_the_seed: each learner's wrong answer fails (an error
    counts; 'not implemented yet' only where its phrase says so), never with 'could not judge', with
    its phrase, folded to 88 columns, and with the same message on every seed.
    test_every_registered_hint_is_earned_by_a_wrong_answer: every hint of an exercise is earned.
    test_wrong_answers_get_different_verdicts: answers with different phrases get different messages.
``nearly_right_tests(names)``
    test_nearly_right_fails: the solution's outputs times 1 + 1e-4 or 1 + 1e-7 fail; times 1 + 1e-13
    (another order of the sums) pass.
``odd_answer_tests(bad)``
    test_any_wrong_answer_fails_without_raising: whatever a function returns or raises (the
    chapter's table ``bad``, built on :func:`odd_answers`), the check prints and returns a ✗ verdict
    that says what is wrong, never 'could not judge'.
``meta_device_tests()``
    test_another_device_is_named: the solution's output moved to the meta device is refused, named.
``case_tests(fixed=(), sometimes_fixed=(), dtypes=(torch.float64,))``
    test_seed_changes_the_inputs: the cases are the same for the same seed and differ for every other
    seed (never for ``fixed``, for some seed for ``sometimes_fixed``); their tensors are of ``dtypes``.
``travel_tests(answers)``
    test_cases_travel_to_the_sandbox_and_back: the cases survive torch.save / torch.load(weights_only=
    True), and so do the outcomes of the solution and of ``answers``: the verdict does not change.
``hint_tests()``
    test_every_hint_is_written_once: no exercise repeats a hint or has an empty one.
``diagnosis_tests()``
    test_the_diagnoses_never_raise: odd outputs handed straight to the diagnoses give a str or None.

Helpers the chapters' own tests use: :func:`verdict_for`, :func:`cell_function`,
:func:`assert_nearly_right_fails`, :func:`assert_it_calls_an_unfinished`, :func:`odd_answers`,
:class:`Hostile`, :meth:`Chapter.solution`, :meth:`Chapter.stub`, :meth:`Chapter.graded` and
:meth:`Chapter.assert_registry`.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import torch.nn as nn

from tinyformer import checks
from tinyformer.course import _nbrun, engine, grade
from tinyformer.student import make_student

from conftest import define, exercise_cells

SEEDS = range(5)
PAGE = 88           # the columns a verdict is folded to


def harvest(name: str, fn, seed: int = 0, timeout: float = 30):
    """What the grader's harvest cell records for ``fn`` (outputs, error, flags for library answers,
    tampering) on the cases of ``seed``, and the verdict the grader gives it."""
    ex = checks.EXERCISES[name]
    cases = checks.cases_for(ex, seed)
    rec = _nbrun.judge_function(fn, cases, engine.library_answer_keys(ex), timeout, engine)
    verdict = checks.judge(ex, cases, checks.Outcome(outputs=rec["outputs"], error=rec["error"] and
                                                     tuple(rec["error"]), mutated=rec["mutated"],
                                                     grads=rec.get("grads")))
    return rec, verdict


def in_book_refuses(name: str, fn, flags: list[str], seed: int = 0) -> None:
    """The in-book check refuses ``fn``, whose outputs are right, and names one of ``flags``, the
    library's answers the grader caught it calling."""
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        verdict = checks.check(name, fn, seed)
    assert_refused(verdict, printed.getvalue())
    assert "the outputs are right" in verdict.message, verdict.message
    assert any(flag in verdict.message for flag in flags), (flags, verdict.message)


def verdict_for(name: str, fn, seed: int = 0) -> checks.Verdict:
    """The verdict on ``fn`` for the cases of ``seed``, judged without printing."""
    ex = checks.EXERCISES[name]
    cases = checks.cases_for(ex, seed)
    return checks.judge(ex, cases, engine.with_gradients(ex, fn, cases, checks.run_cases(fn, cases)))


def cell_function(name: str, source: str):
    """The function an exercise-<name> cell defines (the cell must define it)."""
    function = checks.EXERCISES[name].function
    assert f"def {function}(" in source, f"the exercise-{name} cell does not define {function}"
    return define(source, function)


def assert_refused(verdict: checks.Verdict, printed: str) -> None:
    """A ✗ verdict, printed as it is returned, that says what is wrong (not 'could not judge')."""
    assert not verdict and printed.strip().startswith("✗") and verdict.message.startswith("✗")
    assert "could not judge" not in verdict.message, verdict.message


def assert_it_calls_an_unfinished(verdict: checks.Verdict, unfinished: str, number: str) -> None:
    """The verdict on a function that calls the unfinished exercise ``number`` names it."""
    assert verdict.status == checks.NOT_IMPLEMENTED, verdict.message
    assert verdict.message.endswith(f"it calls {unfinished}, which is not implemented yet (Exercise {number}).")


def nearly(fn, rel: float):
    """``fn`` with every output (each item of a tuple) scaled by 1 + rel."""
    def scale(out):
        return tuple(scale(o) for o in out) if isinstance(out, tuple) else out * (1 + rel)
    return lambda *args: scale(fn(*args))


def assert_nearly_right_fails(name: str, right) -> None:
    """Off by 1e-4 or 1e-7 is a mistake; off by 1e-13 is another order of the same sums."""
    for rel in (1e-4, 1e-7):
        verdict = checks.check(name, nearly(right, rel))
        assert not verdict and verdict.status == checks.FAIL, (rel, verdict.message)
    assert checks.check(name, nearly(right, 1e-13))


# --------------------------------------------------------------------------- odd returns


class Hostile:
    """An object that raises when its length or its representation is asked for."""

    def __len__(self):
        raise RuntimeError("no len")

    def __repr__(self):
        raise RuntimeError("no repr")


def raising(err: BaseException):
    """A function that raises ``err`` whatever it is given."""
    def fn(*args):
        raise err
    return fn


def odd_answers(shape: tuple[int, ...]) -> dict[str, Callable]:
    """The odd answers any exercise is tried with; the shaped ones are ``shape``, the size of the
    chapter's outputs. A chapter adds its own (and may replace one) in its table BAD."""
    return {
        "runtime-error": raising(RuntimeError("boom")),
        "system-exit": raising(SystemExit(3)),
        "none": lambda *a: None,
        "string": lambda *a: "a tensor",
        "tuple": lambda *a: (torch.zeros(1), torch.zeros(1)),
        "list": lambda *a: [torch.zeros(shape)],
        "list-of-numbers": lambda *a: [1.0, 2.0],
        "ndarray": lambda *a: np.zeros(shape),
        "dict": lambda *a: {"out": torch.zeros(1)},
        "hostile": lambda *a: Hostile(),
        "nan": lambda *a: torch.full(shape, math.nan, dtype=torch.float64),
        "float16": lambda *a: torch.zeros(shape, dtype=torch.float16),
        "complex": lambda *a: torch.zeros(shape, dtype=torch.complex128),
        "int": lambda *a: 7,
        "bool": lambda *a: True,
        "module": lambda *a: nn.Linear(2, 2),
    }


# --------------------------------------------------------------------------- cases and outcomes


def leaves(case):
    """The tensors and numbers of a case, in order: tuples, lists and dicts (by key) opened."""
    for item in case:
        if isinstance(item, dict):
            yield from leaves(tuple(item[k] for k in sorted(item)))
        elif isinstance(item, (tuple, list)):
            yield from leaves(tuple(item))
        else:
            yield item


def same_cases(a, b) -> bool:
    """The same cases: leaf by leaf, of the same type and equal (tensors to the bit)."""
    la, lb = [list(leaves(c)) for c in a], [list(leaves(c)) for c in b]
    return len(la) == len(lb) and all(
        len(x) == len(y) and all(type(u) is type(v) and (torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v)
                                 for u, v in zip(x, y)) for x, y in zip(la, lb))


def alike(a, b, atol: float) -> bool:
    """Two outputs alike: tensors of one shape, close (rtol=1e-6, atol) in float64; others equal."""
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), rtol=1e-6, atol=atol))
    return a == b


def flat(out) -> torch.Tensor:
    """An output (a tensor, a number or a tuple of them) as one float64 vector."""
    if isinstance(out, tuple):
        return torch.cat([flat(o) for o in out])
    if isinstance(out, torch.Tensor):
        return out.reshape(-1).double()
    return torch.tensor([float(out)], dtype=torch.float64)


def shipped(outcome: checks.Outcome) -> checks.Outcome:
    """The outcome as the grader gets it back from its sandbox: through torch.save and
    torch.load(weights_only=True)."""
    buf = io.BytesIO()
    torch.save({"outputs": outcome.outputs, "error": outcome.error, "mutated": outcome.mutated}, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=True)
    return checks.Outcome(outputs=back["outputs"], error=back["error"] and tuple(back["error"]),
                          mutated=back["mutated"])


# --------------------------------------------------------------------------- a chapter


@dataclass(frozen=True)
class Chapter:
    """A chapter's exercises: ``chapter`` (numbered, in the registry's order) and ``drills``, the
    source of each one's solution cell, and the chapter's notebook (book/NN-name.ipynb, whose stem
    is the chapter's name in the registry)."""

    chapter: list[str]
    drills: list[str]
    solutions: dict[str, str]
    notebook: Path

    @property
    def names(self) -> list[str]:
        return self.chapter + self.drills

    def solution(self, name: str):
        """The function the solution cell of ``name`` defines."""
        return define(self.solutions[name], checks.EXERCISES[name].function)

    def stub(self, name: str) -> str:
        """The learner's version of the solution cell of ``name``: its solution cut out."""
        cell = nbformat.v4.new_code_cell(self.solutions[name], metadata={"tags": [f"exercise-{name}"]})
        return make_student(nbformat.v4.new_notebook(cells=[cell])).cells[0].source

    def graded(self, tmp_path: Path, sources: dict[str, str], seed: int = 5) -> dict[str, tuple[str, str]]:
        """{exercise: (status, message)} the grader gives a notebook of these exercise cells."""
        cells = [nbformat.v4.new_code_cell("from tinyformer import checks")]
        cells += [nbformat.v4.new_code_cell(source, metadata={"tags": [f"exercise-{name}"]})
                  for name, source in sources.items()]
        path = tmp_path / self.notebook.name
        nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
        (tmp_path / "work").mkdir()
        return {n: (status, message) for n, status, message in grade.grade_exercises(path, tmp_path / "work", seed, 30)}

    def assert_registry(self, numbers: list[str], functions: dict[str, str] | None = None) -> None:
        """The registry holds the chapter's exercises, then its drills, in order, numbered
        ``numbers``, each with its check; a function is named as its exercise but for ``functions``;
        the grader expects the numbered exercises of the notebook."""
        exercises = checks.EXERCISES
        assert [n for n, ex in exercises.items() if ex.chapter == self.notebook.stem] == self.names
        assert [exercises[n].number for n in self.chapter] == numbers
        assert all(exercises[n].drill and not exercises[n].number for n in self.drills)
        assert not any(exercises[n].drill for n in self.chapter)
        assert [exercises[n].function for n in self.names] == [(functions or {}).get(n, n) for n in self.names]
        for name in self.names:
            assert callable(getattr(checks, f"check_{name}")), name
        assert grade._expected_exercises(self.notebook, []) == self.chapter

    # ----------------------------------------------------------------------- the generic tests

    def solution_tests(self, page_width: int | None = None) -> dict[str, Callable]:
        names = self.names

        @pytest.mark.parametrize("name", names)
        def test_solution_passes(name, capsys):
            verdict = getattr(checks, f"check_{name}")(self.solution(name))
            line = capsys.readouterr().out.strip()
            assert verdict.passed and bool(verdict), verdict.message
            assert line.startswith("✓") and line == verdict.message

        @pytest.mark.parametrize("name", names)
        def test_solution_passes_for_every_seed(name):
            for seed in SEEDS:
                assert verdict_for(name, self.solution(name), seed).passed, seed

        @pytest.mark.parametrize("name", names)
        def test_solution_code_fits_the_page(name):
            assert all(len(line) <= page_width for line in self.solutions[name].splitlines())

        @pytest.mark.parametrize("name", names)
        def test_stub_is_not_implemented(name, capsys):
            stub = self.stub(name)
            function = checks.EXERCISES[name].function
            assert f'raise NotImplementedError("{function} is not implemented yet")' in stub
            verdict = checks.check(name, define(stub, function))
            line = capsys.readouterr().out.strip()
            assert verdict.status == checks.NOT_IMPLEMENTED and not verdict
            assert line.startswith("✗") and "not implemented yet" in line and "it calls" not in line

        tests = {"test_solution_passes": test_solution_passes,
                 "test_solution_passes_for_every_seed": test_solution_passes_for_every_seed,
                 "test_stub_is_not_implemented": test_stub_is_not_implemented}
        if page_width is not None:
            tests["test_solution_code_fits_the_page"] = test_solution_code_fits_the_page
        return tests

    def notebook_tests(self) -> dict[str, Callable]:
        cells = exercise_cells(self.notebook) if self.notebook.exists() else {}
        needs_notebook = pytest.mark.skipif(not self.notebook.exists(),
                                            reason=f"book/{self.notebook.name} not written yet")

        @needs_notebook
        def test_the_chapter_has_a_cell_for_every_checked_exercise():
            missing = [n for n in self.chapter if n not in cells]
            assert not missing, f"no cell tagged exercise-<name> for {missing}"

        @needs_notebook
        @pytest.mark.parametrize("name", sorted(cells) or ["none"])
        def test_chapter_solution_passes_for_every_seed(name):
            fn = cell_function(name, cells[name])
            for seed in SEEDS:
                verdict = verdict_for(name, fn, seed)
                assert verdict.passed, (seed, verdict.message)

        return {"test_the_chapter_has_a_cell_for_every_checked_exercise":
                test_the_chapter_has_a_cell_for_every_checked_exercise,
                "test_chapter_solution_passes_for_every_seed": test_chapter_solution_passes_for_every_seed}

    def registered_mistake_tests(self, apart_by: float, flattened: bool = False) -> dict[str, Callable]:
        names = self.names

        def same(a: list, b: list) -> bool:
            """The outputs of two runs alike."""
            if flattened:
                a, b = torch.cat([flat(o) for o in a]), torch.cat([flat(o) for o in b])
                return a.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-6, atol=apart_by))
            return all(alike(o, p, apart_by) for o, p in zip(a, b))

        @pytest.mark.parametrize("name", names)
        def test_every_registered_mistake_is_caught_by_its_own_hint(name):
            ex = checks.EXERCISES[name]
            for seed in SEEDS:
                cases = checks.cases_for(ex, seed)
                for wrong, hint in ex.mistakes:
                    verdict = checks.judge(ex, cases, checks.run_cases(wrong, cases))
                    assert not verdict and verdict.message.endswith(f"Hint: {hint}"), (seed, verdict.message)

        @pytest.mark.parametrize("name", names)
        def test_the_cases_tell_every_mistake_from_the_reference_and_the_others(name):
            ex = checks.EXERCISES[name]
            for seed in SEEDS:
                cases = checks.cases_for(ex, seed)
                runs = [checks.run_cases(ex.reference, cases)] + [checks.run_cases(w, cases) for w, _ in ex.mistakes]
                assert all(r.error is None and len(r.outputs) == len(cases) for r in runs), seed
                for a in range(len(runs)):
                    for b in range(a):
                        assert not same(runs[a].outputs, runs[b].outputs), (seed, a, b)

        return {"test_every_registered_mistake_is_caught_by_its_own_hint":
                test_every_registered_mistake_is_caught_by_its_own_hint,
                "test_the_cases_tell_every_mistake_from_the_reference_and_the_others":
                test_the_cases_tell_every_mistake_from_the_reference_and_the_others}

    def wrong_answer_tests(self, wrong: list[tuple[str, Callable, str]]) -> dict[str, Callable]:
        """``wrong``: (exercise, a learner's wrong function, a phrase its verdict must contain)."""
        names = self.names

        @pytest.fixture(scope="module")
        def wrong_verdicts():
            """The verdicts of every wrong answer: {index in WRONG: [verdict for seed in SEEDS]}."""
            return {k: [verdict_for(n, fn, seed) for seed in SEEDS] for k, (n, fn, _) in enumerate(wrong)}

        @pytest.mark.parametrize("k", range(len(wrong)), ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(wrong)])
        def test_wrong_answer_gets_its_hint_whatever_the_seed(k, wrong_verdicts):
            _, _, phrase = wrong[k]
            first, *others = wrong_verdicts[k]
            unfinished = (checks.NOT_IMPLEMENTED,) if "not implemented yet" in phrase else ()
            assert not first and first.status in (checks.FAIL, checks.ERROR, *unfinished), first.message
            assert first.message.startswith("✗") and "could not judge" not in first.message
            assert phrase in first.message, first.message
            assert all(len(line) <= PAGE for line in first.wrapped().splitlines())
            assert all(v.message == first.message for v in others), "the verdict depends on the seed"

        def messages_of(name, verdicts):
            return [(phrase, verdicts[k][0].message) for k, (n, _, phrase) in enumerate(wrong) if n == name]

        @pytest.mark.parametrize("name", names)
        def test_every_registered_hint_is_earned_by_a_wrong_answer(name, wrong_verdicts):
            earned = " ".join(message for _, message in messages_of(name, wrong_verdicts))
            missing = [hint for hint in checks.EXERCISES[name].hints() if hint not in earned]
            assert not missing, f"no test answer earns these hints of {name}: {missing}"

        def test_wrong_answers_get_different_verdicts(wrong_verdicts):
            for name in names:
                said = messages_of(name, wrong_verdicts)
                for a, (phrase_a, message_a) in enumerate(said):
                    for phrase_b, message_b in said[:a]:
                        if phrase_a != phrase_b:
                            assert message_a != message_b, (name, phrase_a, phrase_b)

        return {"wrong_verdicts": wrong_verdicts,
                "test_wrong_answer_gets_its_hint_whatever_the_seed": test_wrong_answer_gets_its_hint_whatever_the_seed,
                "test_every_registered_hint_is_earned_by_a_wrong_answer":
                test_every_registered_hint_is_earned_by_a_wrong_answer,
                "test_wrong_answers_get_different_verdicts": test_wrong_answers_get_different_verdicts}

    def nearly_right_tests(self, names: Iterable[str]) -> dict[str, Callable]:
        @pytest.mark.parametrize("name", list(names))
        def test_nearly_right_fails(name, capsys):
            assert_nearly_right_fails(name, self.solution(name))
            capsys.readouterr()

        return {"test_nearly_right_fails": test_nearly_right_fails}

    def odd_answer_tests(self, bad: dict[str, Callable]) -> dict[str, Callable]:
        pairs = [(name, kind) for kind in bad for name in self.names]

        @pytest.mark.parametrize(("name", "kind"), pairs, ids=[f"{name}-{kind}" for name, kind in pairs])
        def test_any_wrong_answer_fails_without_raising(name, kind, capsys):
            verdict = checks.check(name, bad[kind])
            assert_refused(verdict, capsys.readouterr().out)

        return {"test_any_wrong_answer_fails_without_raising": test_any_wrong_answer_fails_without_raising}

    def meta_device_tests(self) -> dict[str, Callable]:
        @pytest.mark.parametrize("name", self.names)
        def test_another_device_is_named(name, capsys):
            right = self.solution(name)
            verdict = checks.check(name, lambda *args: torch.as_tensor(right(*args)).to("meta"))
            capsys.readouterr()
            assert not verdict and "a tensor on the meta device, which holds no values" in verdict.message

        return {"test_another_device_is_named": test_another_device_is_named}

    def case_tests(self, fixed: Iterable[str] = (), sometimes_fixed: Iterable[str] = (),
                   dtypes: tuple[torch.dtype, ...] = (torch.float64,)) -> dict[str, Callable]:
        """``fixed``: exercises whose inputs never change (by design); ``sometimes_fixed``: those
        whose inputs change for some seeds only."""
        fixed, sometimes_fixed = set(fixed), set(sometimes_fixed)

        @pytest.mark.parametrize("name", self.names)
        def test_seed_changes_the_inputs(name):
            ex = checks.EXERCISES[name]
            first = checks.cases_for(ex, 0)
            assert same_cases(first, checks.cases_for(ex, 0))                 # reproducible
            changed = [not same_cases(first, checks.cases_for(ex, seed)) for seed in SEEDS[1:]]
            if name in fixed:
                assert not any(changed)
            elif name in sometimes_fixed:
                assert any(changed)
            else:
                assert all(changed)
            assert all(x.dtype in dtypes for c in first for x in leaves(c) if isinstance(x, torch.Tensor))

        return {"test_seed_changes_the_inputs": test_seed_changes_the_inputs}

    def travel_tests(self, answers: list[Callable]) -> dict[str, Callable]:
        def test_cases_travel_to_the_sandbox_and_back(tmp_path):
            for name in self.names:
                ex = checks.EXERCISES[name]
                cases = checks.cases_for(ex, seed=3)
                torch.save(cases, tmp_path / "cases.pt")
                back = torch.load(tmp_path / "cases.pt", weights_only=True)
                assert same_cases(cases, back)
                for fn in (self.solution(name), *answers):
                    returned = shipped(checks.run_cases(fn, back))
                    assert checks.judge(ex, cases, returned) == checks.judge(ex, cases, checks.run_cases(fn, cases))

        return {"test_cases_travel_to_the_sandbox_and_back": test_cases_travel_to_the_sandbox_and_back}

    def hint_tests(self) -> dict[str, Callable]:
        def test_every_hint_is_written_once():
            for name in self.names:
                hints = checks.EXERCISES[name].hints()
                assert len(hints) == len(set(hints)) and all(h.strip() for h in hints)
                assert engine.EXERCISES[name] is checks.EXERCISES[name]

        return {"test_every_hint_is_written_once": test_every_hint_is_written_once}

    def diagnosis_tests(self) -> dict[str, Callable]:
        def test_the_diagnoses_never_raise():
            """Odd outputs handed straight to the diagnoses (as a changed engine might): a message or None."""
            for name in self.names:
                ex = checks.EXERCISES[name]
                cases = checks.cases_for(ex, 0)
                refs = [ex.reference(*c) for c in cases]
                for odd in (None, [], "x", Hostile(), torch.zeros(3), math.nan, [1, 2], 10 ** 400):
                    said = ex.diagnose(cases, [odd] * len(cases), refs)
                    assert said is None or isinstance(said, str)

        return {"test_the_diagnoses_never_raise": test_the_diagnoses_never_raise}
