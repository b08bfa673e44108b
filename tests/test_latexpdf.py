"""The PDF build's rewrites (_ext/latexpdf.py), without TeX: `make pdf` itself is not part of `make test`."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from conftest import ROOT

sys.path.insert(0, str(ROOT / "_ext"))
import latexpdf  # noqa: E402


def test_pygments_output_becomes_sphinx_code():
    ipython = ("\\begin{Verbatim}[commandchars=\\\\\\{\\}]\n\\PY{k}{def}\\PY{+w}{ }\\PY{n}{f\\PYZus{}x}\n"
               "\\end{Verbatim}\n")
    assert latexpdf.pygments_to_sphinx(ipython) == (
        "\\begin{sphinxVerbatim}[commandchars=\\\\\\{\\}]\n\\PYG{k}{def}\\PYG{+w}{ }\\PYG{n}{f\\PYGZus{}x}\n"
        "\\end{sphinxVerbatim}")


@pytest.mark.parametrize(("mathjax", "latex"), [
    (r"\sqrt{\texttt{n_pos}}", r"\sqrt{\texttt{n\_pos}}"),
    (r"\text{a\_b_c} + x_1", r"\text{a\_b\_c} + x_1"),
    (r"\text{lr}_\max, \min_\theta, x^\maxi", r"\text{lr}_{\max}, \min_\theta, x^\maxi"),
    (r"W_\text{out} x_\ell", r"W_\text{out} x_\ell"),
])
def test_math_that_latex_cannot_read(mathjax, latex):
    assert latexpdf.math_for_latex(mathjax) == latex


def test_chapter_10_has_the_viewer_the_pdf_draws():
    """The attention viewer's stored output carries the data the static figure is drawn from."""
    nb = json.loads((ROOT / "book" / "10-interp.ipynb").read_text(encoding="utf-8"))
    found = []
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            markup = "".join(data.get("text/html", ""))
            if "".join(data.get("text/plain", "")).startswith(latexpdf.WIDGET_TEXT):
                found.append(latexpdf.WIDGET_DATA.search(markup))
    assert found and all(found)
    payload = json.loads(found[0].group(1))
    assert {"layers", "heads", "layer", "head", "scale", "w"} <= set(payload)


def test_config_loads_the_extension_and_its_stand_in():
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert config["sphinx"]["local_extensions"]["latexpdf"] == "_ext"
    for path in config["sphinx"]["config"]["latex_additional_files"]:
        assert (ROOT / path).is_file()
