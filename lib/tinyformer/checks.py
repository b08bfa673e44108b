"""Self-checking exercises: ``check_<name>(fn)`` for every exercise in the book.

A check runs the reader's function on randomized float64 inputs, compares it with the library's
reference, and prints one verdict line that starts with ✓ or ✗. When the answer is wrong it looks
for the *mistake* (a missing ``1/√d_k``, a softmax over the wrong axis, a mask off by one, a
tuple where a tensor was expected, an input modified in place, float32 arithmetic, …) and the
hint names it. A check never raises, and a stub that still raises ``NotImplementedError`` is told
so, or told which unfinished earlier exercise it calls.

The judging engine lives in ``tinyformer.course.engine`` and each chapter's exercises in
``tinyformer.course`` (``ch02``, …); this module is their public face. The grader
(``tinyformer.grade``) uses the same :func:`run_cases` and :func:`judge`.
"""

from __future__ import annotations

from collections.abc import Callable

from tinyformer.course import (
    ERROR,
    EXERCISES,
    FAIL,
    NOT_IMPLEMENTED,
    PASS,
    Exercise,
    Outcome,
    Verdict,
    cases_for,
    check,
    judge,
    run_cases,
)


def _make_check(ex: Exercise) -> Callable[..., Verdict]:
    def check_exercise(fn, seed: int = 0) -> Verdict:
        return check(ex.name, fn, seed)

    check_exercise.__name__ = check_exercise.__qualname__ = f"check_{ex.name}"
    what = f"Exercise {ex.number}" if ex.number else "Drill"
    check_exercise.__doc__ = (f"{what}: check ``{ex.function}({', '.join(ex.args)})``, which returns {ex.returns}. "
                              f"Prints one ✓/✗ line and returns the :class:`Verdict`.")
    return check_exercise


for _ex in EXERCISES.values():
    globals()[f"check_{_ex.name}"] = _make_check(_ex)
del _ex

__all__ = ["ERROR", "EXERCISES", "FAIL", "NOT_IMPLEMENTED", "PASS", "Exercise", "Outcome", "Verdict", "cases_for",
           "check", "judge", "run_cases"] + [f"check_{name}" for name in EXERCISES]
