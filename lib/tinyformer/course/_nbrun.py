"""Execute one notebook and write how it went: ``python _nbrun.py NOTEBOOK STATUS_JSON TIMEOUT``.

Run as a script by :mod:`tinyformer.course.grade` in a child process. It imports neither torch nor the
package, so a notebook's run costs only its own kernel's start-up.
"""

import json
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError


def execute(nb_path: str, status_path: str, timeout: str) -> int:
    """Execute one notebook, write {'run': ...} to ``status_path``."""
    nb = nbformat.read(nb_path, as_version=4)
    client = NotebookClient(nb, timeout=float(timeout), kernel_name="python3", allow_errors=True,
                            interrupt_on_timeout=True, record_timing=False,
                            resources={"metadata": {"path": str(Path(nb_path).parent)}})
    status = "ok"
    try:
        client.execute()
    except DeadKernelError:
        status = "kernel died"
    except Exception as err:  # noqa: BLE001 - report anything nbclient raises as the run status
        status = f"failed: {type(err).__name__}"
    if status == "ok":
        code_cells = [c for c in nb.cells if c.cell_type == "code"]
        for i, cell in enumerate(code_cells, 1):
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            if errors:
                status = f"error in code cell {i}: {errors[0].get('ename', 'Error')}"
                break
    Path(status_path).write_text(json.dumps({"run": status}))
    return 0


if __name__ == "__main__":
    sys.exit(execute(*sys.argv[1:4]))
