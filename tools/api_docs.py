"""The API reference (book/appendix-api.md): which modules it documents, and what it must show.

    python tools/api_docs.py            every public object without a docstring (exit 1 if any)

The reference is made by Sphinx's autodoc from the library's docstrings. A module's public objects
are the functions and classes in its ``__all__`` (imported ones included) and those defined in it
whose names do not start with an underscore; a public class's public methods and properties are its
own (not inherited) attributes of that kind. Each of them needs a docstring: autodoc leaves an
undocumented member out of the page. tests/test_api_docs.py checks the docstrings and that the page
documents every module of :data:`DOCUMENTED`; tools/check_html.py checks that the built page has an
entry (an ``id``) for every public object.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "appendix-api.md"

#: The modules the reference documents, in the book's chapter order.
DOCUMENTED = (
    "tinyformer", "tinyformer.setup", "tinyformer.validation",
    "tinyformer.embeddings", "tinyformer.data",          # chapter 1 (data: 1, 5 and 6)
    "tinyformer.attention",                              # 2
    "tinyformer.blocks",                                 # 3
    "tinyformer.positions",                              # 4
    "tinyformer.model", "tinyformer.sampling",           # 5
    "tinyformer.tokenizers", "tinyformer.training",      # 6
    "tinyformer.scaling",                                # 7
    "tinyformer.kvcache",                                # 8
    "tinyformer.lora", "tinyformer.pretrained",          # 9
    "tinyformer.interp",                                 # 10
    "tinyformer.viz", "tinyformer.checks",               # shared by the chapters
)

#: The library's other top-level modules and packages, and why the reference leaves them out.
LEFT_OUT = {
    "tinyformer.course": "course machinery: the checks' judging engine and each chapter's exercises",
    "tinyformer.student": "course machinery: the command that makes the exercise notebooks",
    "tinyformer.grade": "course machinery: the grader's command",
    "tinyformer.pytest_numerics": "a pytest plugin that pins the numerics of every test run",
    "tinyformer.experiments": "the chapters' experiment scaffolding, which readers need not study",
}

_SHOWN = ("its class's source is printed by show_source in chapter 3, and a docstring would change "
          "that stored output; the class docstring says what calling the module does")
#: Public methods that have no docstring (and so no entry in the reference), and why.
UNDOCUMENTED_METHODS = {
    "tinyformer.blocks.LayerNorm.forward": _SHOWN,
    "tinyformer.blocks.RMSNorm.forward": _SHOWN,
    "tinyformer.blocks.FeedForward.forward": _SHOWN,
}
#: Method names never documented: ``nn.Module``'s hook for its repr (autodoc excludes it too).
SKIPPED_METHODS = ("extra_repr",)


def _own_doc(obj) -> str:
    """``obj``'s own docstring, stripped ('' if none; a dataclass's generated one counts as none)."""
    doc = obj.__doc__ if isinstance(getattr(obj, "__doc__", None), str) else ""
    if inspect.isclass(obj):
        doc = obj.__dict__.get("__doc__") or ""
        if dataclasses.is_dataclass(obj) and doc.startswith(f"{obj.__name__}("):
            doc = ""  # dataclasses write "Name(field: type, ...)" where the class has no docstring
    return doc.strip()


def public_objects(module: ModuleType) -> list[tuple[str, object]]:
    """``(name, object)`` for every public function and class of ``module``."""
    names = [n for n in getattr(module, "__all__", ()) if isinstance(n, str)]
    for name, obj in vars(module).items():
        if not name.startswith("_") and name not in names and getattr(obj, "__module__", None) == module.__name__:
            names.append(name)
    out = []
    for name in names:
        obj = getattr(module, name, None)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            out.append((name, obj))
    return out


def public_methods(cls: type) -> list[tuple[str, object]]:
    """``(name, callable or property)`` for the public methods and properties ``cls`` defines."""
    out = []
    for name, attr in vars(cls).items():
        if name.startswith("_") or name in SKIPPED_METHODS or inspect.isclass(attr):
            continue
        if isinstance(attr, property):
            out.append((name, attr))
        elif isinstance(attr, (classmethod, staticmethod)) or inspect.isfunction(attr):
            out.append((name, getattr(cls, name)))
        elif hasattr(attr, "__get__") and inspect.isroutine(getattr(cls, name, None)):
            out.append((name, getattr(cls, name)))  # a descriptor such as tokenizers' train
    return out


def undocumented(module: ModuleType, allowed=UNDOCUMENTED_METHODS) -> list[str]:
    """The qualified names of ``module``'s public functions, classes, methods and properties that
    have no docstring, except those in ``allowed``."""
    missing = []
    for name, obj in public_objects(module):
        qualified = f"{module.__name__}.{name}"
        if not _own_doc(obj):
            missing.append(qualified)
        if inspect.isclass(obj):
            missing += [f"{qualified}.{m}" for m, attr in public_methods(obj)
                        if not _own_doc(attr) and f"{qualified}.{m}" not in allowed]
    return missing


def documented_modules(page: Path = PAGE) -> list[str]:
    """The modules ``page`` documents: its ``automodule`` directives, in order."""
    return re.findall(r"^\.\. automodule:: (\S+)\s*$", page.read_text(encoding="utf-8"), re.M)


def expected_ids(modules=DOCUMENTED) -> dict[str, list[str]]:
    """For every public function and class of ``modules``, and every public method and property with
    a docstring: the ids its entry may have in the built page. An object exported by two modules
    (``tinyformer.get_device`` is ``tinyformer.setup.get_device``) is documented under one of them."""
    aliases: dict[int, list[str]] = {}  # id(object) -> every qualified name it has
    objects = []
    for module_name in modules:
        for name, obj in public_objects(importlib.import_module(module_name)):
            aliases.setdefault(id(obj), []).append(f"{module_name}.{name}")
            objects.append((f"{module_name}.{name}", obj))
    out = {}
    for qualified, obj in objects:
        names = aliases[id(obj)]
        out[qualified] = names
        if inspect.isclass(obj):
            for method, attr in public_methods(obj):
                if _own_doc(attr):
                    out[f"{qualified}.{method}"] = [f"{name}.{method}" for name in names]
    return out


def missing_ids(html: str, modules=DOCUMENTED) -> list[str]:
    """The public objects of ``modules`` that have no entry in the built page ``html``."""
    ids = set(re.findall(r'\bid="([^"]+)"', html))
    return [q for q, aliases in expected_ids(modules).items() if not ids.intersection(aliases)]


def main() -> int:
    missing = [name for module in DOCUMENTED for name in undocumented(importlib.import_module(module))]
    for name in missing:
        print(f"{name}: no docstring")
    print(f"api_docs: {len(DOCUMENTED)} modules, {len(missing)} public object(s) without a docstring")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
