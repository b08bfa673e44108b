"""Grade a folder of completed exercise notebooks:

    python -m tinyformer.grade submissions/ --out grades/ [--timeout 600] [--exercise-timeout 60]

The grader is course machinery and lives in :mod:`tinyformer.course.grade`; this module keeps the
old import path and command working.
"""

import sys

from tinyformer.course.grade import (
    IGNORED,
    Row,
    grade_exercises,
    grade_folder,
    grade_notebook,
    identify,
    main,
    md_cell,
    write_reports,
)

__all__ = ["IGNORED", "Row", "grade_exercises", "grade_folder", "grade_notebook", "identify", "main", "md_cell",
           "write_reports"]

if __name__ == "__main__":
    sys.exit(main())
