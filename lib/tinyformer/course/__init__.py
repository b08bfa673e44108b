"""Course machinery that readers never study: the checks' judging engine, each chapter's exercise
registry, and the ``student`` and ``grade`` tools.

Importing the package registers every chapter's exercises in :data:`EXERCISES`. Readers use the
checks through :mod:`tinyformer.checks` (``tinyformer.checks.check_<name>``).
"""

from tinyformer.course import (
    ch01,  # noqa: F401 - registers chapter 1's exercises
    ch02,  # noqa: F401 - registers chapter 2's exercises
    ch03,  # noqa: F401 - registers chapter 3's exercises
    ch04,  # noqa: F401 - registers chapter 4's exercises
    ch05,  # noqa: F401 - registers chapter 5's exercises
    ch06,  # noqa: F401 - registers chapter 6's exercises
    ch07,  # noqa: F401 - registers chapter 7's exercises
    ch08,  # noqa: F401 - registers chapter 8's exercises
    ch09,  # noqa: F401 - registers chapter 9's exercises
    ch10,  # noqa: F401 - registers chapter 10's exercises
)
from tinyformer.course.engine import (
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
    describe,
    judge,
    portable,
    register,
    run_cases,
)

__all__ = [
    "ERROR", "EXERCISES", "FAIL", "NOT_IMPLEMENTED", "PASS", "Exercise", "Outcome", "Verdict", "cases_for",
    "check", "describe", "judge", "portable", "register", "run_cases",
]
