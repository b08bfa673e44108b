"""The API reference (book/appendix-api.md) covers the library: every public function, class and
method of the modules it documents has a docstring (autodoc leaves an undocumented one out), and the
page documents every module of tools/api_docs.py's list, which accounts for every module of the
library. No build needed; tools/check_html.py checks the built page."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import types
from pathlib import Path

import pytest

import tinyformer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import api_docs  # noqa: E402


@pytest.mark.parametrize("module_name", api_docs.DOCUMENTED)
def test_every_public_object_has_a_docstring(module_name):
    module = importlib.import_module(module_name)
    assert (module.__doc__ or "").strip(), f"{module_name} has no module docstring"
    assert api_docs.public_objects(module), f"{module_name} has no public functions or classes"
    assert api_docs.undocumented(module) == []


def test_the_page_documents_every_listed_module_once():
    on_page = api_docs.documented_modules()
    assert sorted(on_page) == sorted(api_docs.DOCUMENTED)
    assert len(set(on_page)) == len(on_page)
    # in chapter order, as listed
    assert on_page == list(api_docs.DOCUMENTED)


def test_every_library_module_is_documented_or_left_out_for_a_reason():
    found = {f"tinyformer.{m.name}" for m in pkgutil.iter_modules(tinyformer.__path__)} | {"tinyformer"}
    listed = set(api_docs.DOCUMENTED) | set(api_docs.LEFT_OUT)
    assert found == listed, f"not accounted for: {sorted(found - listed)}; gone: {sorted(listed - found)}"
    assert not set(api_docs.DOCUMENTED) & set(api_docs.LEFT_OUT)
    assert all(reason.strip() for reason in api_docs.LEFT_OUT.values())


def test_the_allowed_undocumented_methods_exist_and_are_undocumented():
    for qualified in api_docs.UNDOCUMENTED_METHODS:
        module_name, cls_name, method = qualified.rsplit(".", 2)
        cls = getattr(importlib.import_module(module_name), cls_name)
        assert method in vars(cls), f"{qualified} no longer exists: drop it from UNDOCUMENTED_METHODS"
        assert not (vars(cls)[method].__doc__ or "").strip(), f"{qualified} has a docstring now: drop it"


def test_the_page_names_every_chapter_that_introduces_a_module():
    text = api_docs.PAGE.read_text(encoding="utf-8")
    for chapter in sorted((ROOT / "book").glob("[0-9][0-9]-*.md")):
        if chapter.stem != "00-preface":
            assert f"<{chapter.stem}>`" in text, f"the API reference never links {chapter.stem}"


# ---- the checks can fail ------------------------------------------------------------------------

SYNTHETIC = '''
"""A module for the test."""
import math
from os.path import join

__all__ = ["documented", "Undocumented", "join_alias"]
join_alias = join  # imported, in __all__: public


def documented(x):
    """Has one."""


def bare(x):
    return x


def _private(x):
    return x


class Undocumented:
    def method(self):
        return 1

    @property
    def size(self):
        return 2

    def extra_repr(self):
        return ""

    def _hidden(self):
        return 3


class Documented:
    """Has one."""

    def method(self):
        """Has one."""

    @classmethod
    def load(cls, path):
        return cls()
'''


def synthetic_module(source: str = SYNTHETIC) -> types.ModuleType:
    module = types.ModuleType("fakemod")
    exec(compile(source, "fakemod.py", "exec"), module.__dict__)
    return module


def test_undocumented_reports_what_lacks_a_docstring():
    module = synthetic_module()
    names = [name for name, _ in api_docs.public_objects(module)]
    assert names == ["documented", "Undocumented", "join_alias", "bare", "Documented"]
    missing = api_docs.undocumented(module)
    assert "fakemod.bare" in missing  # defined here, not underscored: public although not in __all__
    assert "fakemod.Undocumented" in missing
    assert {"fakemod.Undocumented.method", "fakemod.Undocumented.size", "fakemod.Documented.load"} <= set(missing)
    assert not [m for m in missing if "_private" in m or "_hidden" in m or "extra_repr" in m
                or m in ("fakemod.documented", "fakemod.Documented", "fakemod.Documented.method")]
    assert api_docs.undocumented(module, allowed={"fakemod.Documented.load"}).count("fakemod.Documented.load") == 0


def test_a_dataclass_without_a_docstring_counts_as_undocumented(monkeypatch):
    monkeypatch.setitem(sys.modules, "fakemod", types.ModuleType("fakemod"))  # dataclass looks it up
    module = synthetic_module('''
from dataclasses import dataclass

@dataclass
class Point:
    x: int = 0
''')
    assert inspect.getdoc(module.Point)  # dataclass writes "Point(x: int = 0)"
    assert api_docs.undocumented(module) == ["fakemod.Point"]


def test_missing_ids_reports_an_object_without_an_entry():
    expected = api_docs.expected_ids(("tinyformer", "tinyformer.setup", "tinyformer.attention"))
    # a re-exported function may be documented under either of its names
    assert expected["tinyformer.setup.get_device"] == expected["tinyformer.get_device"]
    assert "tinyformer.attention.MultiHeadAttention.forward" in expected
    page = " ".join(f'<dt id="{aliases[0]}">' for aliases in expected.values())
    assert api_docs.missing_ids(page, ("tinyformer", "tinyformer.setup", "tinyformer.attention")) == []
    page = page.replace('id="tinyformer.attention.causal_mask"', "")
    assert api_docs.missing_ids(page, ("tinyformer", "tinyformer.setup", "tinyformer.attention")) == [
        "tinyformer.attention.causal_mask"]
