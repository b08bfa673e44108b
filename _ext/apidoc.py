"""Sphinx extension: the library's docstrings as the API reference (book/appendix-api.md) renders them.

Loaded from _config.yml (`sphinx: local_extensions: {apidoc: _ext}`), beside ``sphinx.ext.autodoc``.
The docstrings are reST, but they are also read as plain text: in ``help()`` and in the listings a
chapter prints with ``show_source``, whose stored output must not change when the reference is
built. One plain-text habit reads differently in reST: an absolute value or a norm, ``|u| |v|``,
is a substitution reference there, an error. This extension escapes such bars, outside inline
literals, as autodoc reads each docstring; the source keeps the text a reader sees in a listing.

A dataclass field with a ``default_factory`` shows in ``inspect.signature`` as ``= <factory>``,
which is not Python: Sphinx then cannot parse the signature, and prints it as raw text, unlinked
and unwrapped. The signature shows the value the factory makes instead (``= []``).
"""

from __future__ import annotations

import dataclasses
import re

from sphinx.application import Sphinx

LITERAL = re.compile(r"(``.+?``)")
# |text| in the shape of a substitution reference: no space just inside either bar
BARS = re.compile(r"(?<![\\`|])\|(?=[^\s|])([^|`]*?[^\s|\\])\|(?![`|])")


def escape_bars(line: str) -> str:
    """``line`` with every ``|text|`` outside inline literals written ``\\|text\\|``."""
    parts = LITERAL.split(line)
    return "".join(part if i % 2 else BARS.sub(r"\\|\1\\|", part) for i, part in enumerate(parts))


def on_docstring(app, what, name, obj, options, lines: list[str]) -> None:
    if name.startswith("tinyformer"):
        lines[:] = [escape_bars(line) for line in lines]


def factory_defaults(obj, signature: str) -> str:
    """``signature`` of the dataclass ``obj`` with each ``<factory>`` replaced by what it makes.

    ``__init__`` takes the fields in order (keyword-only ones last), so the k-th ``<factory>`` is
    the k-th field that has one.
    """
    fields = dataclasses.fields(obj)
    made = []
    for field in [f for f in fields if not f.kw_only] + [f for f in fields if f.kw_only]:
        if field.init and field.default_factory is not dataclasses.MISSING:
            value = repr(field.default_factory())
            made.append(value if len(value) <= 20 else "...")
    values = iter(made)
    return re.sub(r"<factory>", lambda m: next(values, "..."), signature)


def on_signature(app, what, name, obj, options, signature, return_annotation):
    if signature and "<factory>" in signature and dataclasses.is_dataclass(obj):
        return factory_defaults(obj, signature), return_annotation
    return None


def setup(app: Sphinx) -> dict:
    app.connect("autodoc-process-docstring", on_docstring)
    app.connect("autodoc-process-signature", on_signature)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
