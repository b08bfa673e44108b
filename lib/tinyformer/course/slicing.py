"""The part of an exercise notebook that differs from its chapter, as a notebook that runs alone.

An exercise notebook is its chapter with every solution replaced by a stub (``make student``): its
other code cells are the chapter's, character for character, and CI has already executed those
once, in the chapter. What is left to run is what differs: the stubs and the cells that check
them. :func:`exercise_slice` keeps the set-up cell, every exercise cell, every cell that calls a
check, and, transitively, the latest earlier cell that defines a name one of those uses (an
import, a helper, a variable); the heavy experiments in between are left out.

A cell that reads a name an exercise cell defines (a cell that calls the reader's function
inside ``try: … except NotImplementedError``) runs differently with a stub, so it is part of what
differs and is kept too (:func:`exercise_dependents`). Every other cell does exactly what it did
in the chapter's own execution.
"""

from __future__ import annotations

import ast
import builtins
import copy
import symtable

import nbformat

from tinyformer.course.cells import exercise_name

#: Names IPython provides in every kernel.
KERNEL_NAMES = frozenset(dir(builtins)) | {"get_ipython", "display", "In", "Out", "exit", "quit"}


def _python(source: str) -> str | None:
    """The cell as Python (IPython's ``%magic`` and ``!shell`` lines turned into calls), or None."""
    from IPython.core.inputtransformer2 import TransformerManager

    code = TransformerManager().transform_cell(source)
    try:
        ast.parse(code)
    except SyntaxError:
        return None
    return code


def _globals_read(table) -> set[str]:
    """Module-level names that the functions, classes and comprehensions inside ``table`` read."""
    found = set()
    for child in table.get_children():
        found |= {s.get_name() for s in child.get_symbols() if s.is_global() and s.is_referenced()}
        found |= _globals_read(child)
    return found


def cell_names(source: str) -> tuple[set[str], set[str]]:
    """``(defined, used)``: the names a cell binds at its top level and the module-level names it
    (or a function it defines) reads, Python's own scoping rules deciding (``symtable``)."""
    code = _python(source)
    if code is None:
        return set(), set()
    top = symtable.symtable(code, "<cell>", "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    used = {s.get_name() for s in top.get_symbols() if s.is_referenced()} | _globals_read(top)
    return defined, used - KERNEL_NAMES


def _is_check(cell) -> bool:
    return "checks.check_" in cell.source


def _imported(source: str) -> set[str]:
    """Names a cell binds by a top-level import (a stub keeps its cell's imports)."""
    code = _python(source)
    return {alias.asname or alias.name.split(".")[0] for node in (ast.parse(code).body if code else [])
            if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}


def exercise_dependents(nb) -> dict[int, set[str]]:
    """``{code cell index: names}`` for every cell, other than an exercise or a check cell, that
    reads a name an exercise cell defines (its function, say; not its imports): such a cell runs
    differently with a stub in place of the solution, so it is part of what differs."""
    cells = [c for c in nb.cells if c.cell_type == "code"]
    from_exercise: set[str] = set()
    found = {}
    for i, cell in enumerate(cells):
        defined, used = cell_names(cell.source)
        if exercise_name(cell):
            from_exercise |= defined - _imported(cell.source)
            continue
        if not _is_check(cell) and used & from_exercise:
            found[i] = used & from_exercise
        from_exercise -= defined  # redefined: later cells read this cell's binding
    return found


def exercise_slice(nb):
    """A copy of notebook ``nb`` with only the code cells that differ from the chapter and what
    they need (see the module's text), in their order, and its metadata. Raises ``ValueError``
    naming a name that a kept cell uses and no earlier cell defines."""
    cells = [c for c in nb.cells if c.cell_type == "code"]
    names = [cell_names(c.source) for c in cells]
    keep = {0} if cells else set()
    keep |= {i for i, c in enumerate(cells) if exercise_name(c) or _is_check(c)}
    keep |= set(exercise_dependents(nb))
    todo = sorted(keep)
    while todo:
        i = todo.pop()
        for name in names[i][1] - names[i][0]:  # a name the cell binds itself is taken as bound before use
            source = next((j for j in range(i - 1, -1, -1) if name in names[j][0]), None)
            if source is None:
                raise ValueError(f"code cell {i} uses {name!r}, which no earlier cell defines")
            if source not in keep:
                keep.add(source)
                todo.append(source)
    out = copy.deepcopy(nb)
    out.cells = [copy.deepcopy(c) for i, c in enumerate(cells) if i in keep]
    nbformat.validate(out)
    return out
