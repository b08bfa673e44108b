"""Make student notebooks (every solution replaced by a stub):

    python -m tinyformer.student book/ --out student/

The tool is course machinery and lives in :mod:`tinyformer.course.student`; this module keeps the
old import path and command working.
"""

import sys

from tinyformer.course.student import (
    BEGIN,
    END,
    EXERCISE_TAG,
    exercise_name,
    has_exercises,
    main,
    make_student,
    solution_lines,
    stub_function,
    stub_source,
    write_student_notebooks,
)

__all__ = ["BEGIN", "END", "EXERCISE_TAG", "exercise_name", "has_exercises", "main", "make_student",
           "solution_lines", "stub_function", "stub_source", "write_student_notebooks"]

if __name__ == "__main__":
    sys.exit(main())
