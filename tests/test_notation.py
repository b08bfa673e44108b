"""The notation table (tinyformer.course.notation) holds the chapters to it, and its page is fresh."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from tinyformer.course import notation

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("notation_tool", ROOT / "tools" / "notation.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


@pytest.fixture(scope="module")
def chapters():
    return tool.chapters_markdown()


def test_the_chapters_keep_to_the_table(chapters):
    assert sorted(chapters) == list(range(1, 11))
    assert notation.problems(chapters) == []


def test_the_appendix_page_is_generated_from_the_table():
    page = (ROOT / "book" / "appendix-notation.md").read_text()
    assert page == notation.page(titles=tool.titles()), "run `python tools/notation.py write`"
    for row in notation.TABLE:
        assert f"${row.latex.replace('|', chr(92) + '|')}$" in page


@pytest.mark.parametrize("latex, expected", [
    (r"d_\text{model}", {"d_model"}),
    (r"d_{\text{model}}", {"d_model"}),
    (r"d_\mathrm{model}", {"d_model"}),
    (r"W_Q^{(h)\top} x_i", {"W_Q", "x_i"}),
    (r"\alpha_{ij} = \operatorname{softmax}_j(s_j)", {"\\alpha_ij", "s_j", "j"}),
    (r"N_\text{matmul} \text{ so that } T", {"N_matmul", "T"}),
])
def test_symbols_are_read_whatever_the_markup(latex, expected):
    assert set(notation.symbols_in(notation._strip_words(latex))) == expected


def test_a_doctored_chapter_with_an_unknown_symbol_is_caught(chapters):
    doctored = dict(chapters)
    doctored[3] = chapters[3] + "\n\nThe gate's weights $W_G$ have shape $(d_\\text{model}, d_\\text{gate})$.\n"
    found = notation.problems(doctored)
    assert any("$W_G$" in p for p in found) and any("$d_gate$" in p for p in found), found
    # the same letters outside math are prose, not notation
    doctored[3] = chapters[3] + "\n\nThe W_G weights and d_gate, in words.\n"
    assert notation.problems(doctored) == []


def test_a_symbol_used_before_its_chapter_is_caught(chapters):
    doctored = dict(chapters)
    doctored[2] = chapters[2] + "\n\nLater, a frozen weight $W_0$ gets an adapter.\n"  # W_0 belongs to chapter 9
    assert any("$W_0$ is written in chapter 2" in p for p in notation.problems(doctored))


def test_a_row_in_the_wrong_chapter_is_caught(chapters):
    moved = tuple(dataclasses.replace(row, chapter=8) if row.latex == "W_0" else row for row in notation.TABLE)
    assert any("chapter 8 introduces $W_0$" in p for p in notation.problems(chapters, moved))
    dropped = tuple(row for row in notation.TABLE if row.latex != "d_\\text{ff}")
    assert any("$d_ff$, which the notation table lacks" in p for p in notation.problems(chapters, dropped))


def test_the_tool_fails_on_a_stale_page(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "appendix-notation.md"
    stale.write_text(notation.page(titles=tool.titles()).replace("| $W_V$ |", "| $W_v$ |"))
    monkeypatch.setattr(tool, "PAGE", stale)
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    assert tool.main(["check"]) == 1
    assert "stale" in capsys.readouterr().err
    assert tool.main(["write"]) == 0 and tool.main(["check"]) == 0


def test_a_preview_must_be_declared_and_real(chapters):
    undeclared = tuple(dataclasses.replace(row, previewed=()) if row.latex == "d_\\text{ff}" else row
                       for row in notation.TABLE)
    assert any("$d_ff$ is written in chapter 2" in p for p in notation.problems(chapters, undeclared))
    false = tuple(dataclasses.replace(row, previewed=(1,)) if row.latex == "d_\\text{ff}" else row
                  for row in notation.TABLE)
    assert any("chapter 1 uses $d_\\text{ff}$ ahead" in p for p in notation.problems(chapters, false))


@pytest.mark.parametrize("written", [r"\hat{W}_G", r"\mathbf{W}_G", r"{W}_G", r"\mathrm{W}_G", r"\bar{W}_G",
                                     r"\vec{W}_G", r"\bm{W}_G", r"\widehat{W}_G"])
def test_a_decorated_unknown_symbol_is_caught(chapters, written):
    doctored = dict(chapters)
    doctored[3] = chapters[3] + f"\n\nA gate ${written} x$.\n"
    assert any("$W_G$, which the notation table lacks" in p for p in notation.problems(doctored))


@pytest.mark.parametrize("written, complaint", [("W^Q", "by its subscript"), ("W^{q}", "by its subscript"),
                                               ("d_{model}", "upright")])
def test_a_spelling_that_hides_a_symbol_is_caught(chapters, written, complaint):
    doctored = dict(chapters)
    doctored[4] = chapters[4] + f"\n\nHere ${written}$ again.\n"
    assert any(complaint in p and p.startswith("chapter 4") for p in notation.problems(doctored))


def test_math_wrapped_over_two_lines_is_read(chapters):
    doctored = dict(chapters)
    doctored[3] = chapters[3] + "\n\nThe gate multiplies $x W_1 \\odot\nx W_G$ elementwise.\n"
    assert any("$W_G$, which the notation table lacks" in p for p in notation.problems(doctored))


def test_a_greek_letter_used_before_its_chapter_is_caught(chapters):
    doctored = dict(chapters)  # lambda, the weight decay, belongs to chapter 6
    doctored[2] = chapters[2] + "\n\nWith a weight decay $\\lambda$ the weights shrink.\n"
    assert any("$\\lambda$ is written in chapter 2" in p for p in notation.problems(doctored))
