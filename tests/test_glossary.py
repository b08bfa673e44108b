"""The glossary (tools/glossary.py): its page follows the chapters' bold definitions, and its links,
labelled by _ext/glossary_labels.py, land on the bold words and are checked by the build."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

from conftest import BOOK, ROOT, sphinx_build

sys.path.insert(0, str(ROOT / "tools"))
import glossary  # noqa: E402


def _chapter(book: Path, name: str, *markdown: str) -> Path:
    """Write a MyST chapter source book/<name>.md whose cells are these markdown cells, the way
    jupytext writes the real ones, so the tool reads it through jupytext as it reads the book."""
    book.mkdir(exist_ok=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(m) for m in markdown])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    jupytext.write(nb, book / f"{name}.md", fmt="md:myst")
    return book / f"{name}.md"


def _terms(book: Path) -> list[str]:
    return [d.term for d in glossary.definitions(book)]


@pytest.fixture(scope="module")
def book_definitions():
    return glossary.definitions()


# --- the real book -------------------------------------------------------------------------------

def test_the_committed_page_is_fresh(book_definitions):
    page = (BOOK / glossary.PAGE_NAME).read_text(encoding="utf-8")
    assert page == glossary.render(book_definitions), f"book/{glossary.PAGE_NAME} is stale: {glossary.FIX}"


def test_cli_check_passes_and_counts():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "glossary.py"), "check"],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"glossary: \d+ terms from \d+ definitions, page up to date", result.stdout)


def test_every_label_is_unique_and_linked_once(book_definitions):
    labels = [d.label for d in book_definitions]
    assert len(labels) == len(set(labels))
    assert all(re.fullmatch(r"glossary-[a-z0-9]+(-[a-z0-9]+)*", label) for label in labels)
    page = (BOOK / glossary.PAGE_NAME).read_text(encoding="utf-8")
    for label in labels:
        assert page.count(f"(#{label})") == 1, label


def test_the_book_has_a_glossary_worth_the_name(book_definitions):
    terms = {d.term for d in book_definitions}
    # terms a reader of chapters 1 to 10 looks up; each chapter defines them in bold
    for term in ("cosine similarity", "self-attention", "causal mask", "multi-head attention", "residual stream",
                 "layer normalisation", "perplexity", "KV cache", "LoRA", "induction head", "logit lens"):
        assert term in terms, term
    # the forms a glossary would not list: a plural beside its singular, a capitalised sentence start
    assert not {"keys", "hooks", "Skip-gram", "Top-k", "Layer normalisation"} & terms
    assert "Jacobian" in terms and "GELU" in terms  # names and acronyms keep their capitals
    # the preview in the dict analogy is listed after the definition of the roles
    query = [d for d in book_definitions if d.term == "query"]
    assert [d.bold.section for d in query] == ["Attention as a soft dictionary lookup", "Queries, keys and values"]
    page = (BOOK / glossary.PAGE_NAME).read_text(encoding="utf-8")
    entry = next(line for line in page.splitlines() if line.startswith("**query**"))
    assert entry.index("#glossary-query-2") < entry.index("#glossary-query)")


def test_what_the_rules_decide_in_the_book():
    verdicts = {(b.source.name[:2], b.markup): b.verdict
                for source in glossary.chapter_sources() for b in glossary.read_chapter(source)}
    assert verdicts[("02", "causal mask")] is None
    assert verdicts[("02", "Difficulty")] == "exercise metadata"
    assert verdicts[("02", "Order.")] == "run-in heading"
    assert verdicts[("02", "Cross-attention")] == "summary"
    assert verdicts[("03", "block")] == "table"
    assert verdicts[("02", "not")].startswith("excluded: ")


def test_the_lists_of_exceptions_name_bolds_that_exist():
    bolds: dict[tuple[int, str], list] = {}
    for source in glossary.chapter_sources():
        for b in glossary.read_chapter(source):
            bolds.setdefault((int(source.name[:2]), b.markup), []).append(b)
    for key in glossary.EXCLUDED:
        assert key in bolds, f"EXCLUDED names {key}, which no chapter has: drop it"
        assert any(b.verdict.startswith("excluded: ") for b in bolds[key]), f"a rule already catches {key}: drop it"
    for key in glossary.PREVIEWS:
        assert key in bolds and bolds[key][0].verdict is None, f"PREVIEWS names {key}, which is no definition"
    forms = {glossary.uncapitalised(b.text) for found in bolds.values() for b in found if b.verdict is None}
    for form in glossary.FORMS:
        assert form in forms, f"FORMS maps {form!r}, which no definition is: drop it"


# --- doctored chapters ---------------------------------------------------------------------------

def test_a_new_bold_in_a_real_chapter_becomes_an_entry(tmp_path):
    text = (BOOK / "02-attention.md").read_text(encoding="utf-8")
    anchor = "A table of static word vectors gives every word one vector, wherever it appears."
    assert anchor in text
    doctored = text.replace(anchor, anchor + " A **frobnicator** is a gadget that twiddles the keys.", 1)
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "02-attention.md").write_text(doctored, encoding="utf-8")
    (tmp_path / "orig").mkdir()
    (tmp_path / "orig" / "02-attention.md").write_text(text, encoding="utf-8")
    before, after = glossary.definitions(tmp_path / "orig"), glossary.definitions(tmp_path / "book")
    assert len(after) == len(before) + 1
    new = [d for d in after if d.term == "frobnicator"]
    assert [d.label for d in new] == ["glossary-frobnicator"]
    assert new[0].bold.section == "Attention"
    page = glossary.render(after)
    assert ("**frobnicator**: A frobnicator is a gadget that twiddles the keys. "
            "([Chapter 2, Attention](#glossary-frobnicator))") in page
    assert "frobnicator" not in glossary.render(before)


def test_bold_that_defines_nothing_yields_no_entry(tmp_path):
    book = tmp_path / "book"
    _chapter(book, "03-demo",
             "# 3. Demo\n\nThe **widget** is a small thing that does one job.",
             "**In Colab.** Open the chapter there.\n\n**Why it works:** because.",
             "| a | b |\n|---|---|\n| **tabled** | x |",
             ":::{exercise} 3.1 · Try **titled**\n:label: ex-try\n\n**Difficulty** ●○○ · **Time** ~5 min\n\n"
             "Write the **stressed** function.\n:::",
             "::::{solution-start} ex-try\n::::",
             "The **solved** answer.",
             "::::{solution-end}\n::::",
             "```{admonition} A **boxed** title\nA box's **boxed term** defined in a box.\n```",
             "## Summary\n\n- **Recapped** terms are restated here.")
    verdicts = {b.markup: b.verdict for b in glossary.read_chapter(book / "03-demo.md")}
    assert verdicts == {
        "widget": None, "In Colab.": "run-in heading", "Why it works:": "run-in heading", "tabled": "table",
        "titled": "box title", "Difficulty": "exercise metadata", "Time": "exercise metadata",
        "stressed": None, "solved": "solution", "boxed": "box title", "boxed term": None, "Recapped": "summary"}
    assert _terms(book) == ["widget", "stressed", "boxed term"]


def test_an_excluded_bold_yields_no_entry(tmp_path, monkeypatch):
    book = tmp_path / "book"
    _chapter(book, "03-demo", "# 3. Demo\n\nThe **widget** is a small thing. It is **not** large.")
    assert _terms(book) == ["widget", "not"]
    monkeypatch.setitem(glossary.EXCLUDED, (3, "not"), "stress")
    assert _terms(book) == ["widget"]
    assert [b.verdict for b in glossary.read_chapter(book / "03-demo.md")] == [None, "excluded: stress"]


def test_case_and_number_make_one_entry(tmp_path):
    book = tmp_path / "book"
    _chapter(book, "04-demo", "# 4. Demo\n\n## Heads\n\nAn **Attention head** reads the stream.",
             "Several **attention heads** run side by side.")
    defs = glossary.definitions(book)
    assert [(d.term, d.label) for d in defs] == [("attention head", "glossary-attention-head"),
                                                 ("attention head", "glossary-attention-head-2")]
    page = glossary.render(defs)
    assert page.count("**attention head**") == 1
    assert "([Chapter 4, Heads](#glossary-attention-head); also [Chapter 4, Heads](#glossary-attention-head-2))" in page


def test_a_term_of_two_chapters_lists_the_first_and_mentions_the_other(tmp_path):
    book = tmp_path / "book"
    _chapter(book, "05-later", "# 5. Later\n\n## Again\n\nA **gizmo**, a device with two knobs and a dial, is back.")
    _chapter(book, "01-first", "# 1. First\n\n## Start\n\nThe **gizmo** is a device with two knobs.")
    page = glossary.render(glossary.definitions(book))
    entry = next(line for line in page.splitlines() if line.startswith("**gizmo**"))
    assert entry == ("**gizmo**: The gizmo is a device with two knobs. ([Chapter 1, Start](#glossary-gizmo); "
                     "also [Chapter 5, Again](#glossary-gizmo-2))")
    assert "## G" in page


def test_glosses_keep_what_renders_elsewhere_and_drop_what_does_not(tmp_path):
    book = tmp_path / "book"
    _chapter(book, "06-demo",
             "# 6. Demo\n\nTo compare rows we use the **cosine similarity**, the cosine of the angle between two "
             "vectors: see {numref}`fig-x`.",
             "The run repeats its data {glue:text}`epochs` times (**epochs**), with rate "
             "{glue:text}`lr:.2f` {footcite:p}`smith2020`.",
             "Three numbers describe a sample. **Diversity**: the share of word pairs that are distinct.")
    glosses = {d.term: glossary.gloss(d.bold) for d in glossary.definitions(book)}
    assert glosses == {
        "cosine similarity": "The cosine of the angle between two vectors.",
        "epoch": "The run repeats its data {glue:text}`06-demo.ipynb::epochs:s` times (epochs), "
                 "with rate {glue:text}`06-demo.ipynb::lr:.2f`.",
        "diversity": "The share of word pairs that are distinct.",
    }


def test_write_then_check_then_a_stale_page_fails_naming_the_fix(tmp_path, capsys):
    book = tmp_path / "book"
    source = _chapter(book, "07-demo", "# 7. Demo\n\nThe **widget** is a small thing that does one job.")
    assert glossary.check(book) == 1 and "is missing" in capsys.readouterr().out
    assert glossary.write(book) == 0
    assert (book / glossary.PAGE_NAME).read_text().startswith("# Glossary\n")
    assert glossary.check(book) == 0
    capsys.readouterr()
    source.write_text(source.read_text().replace("**widget**", "**gadget**"))
    assert glossary.check(book) == 1
    out = capsys.readouterr().out
    assert "is stale" in out and "python tools/glossary.py write" in out


# --- the extension, in a real (small) Sphinx build -----------------------------------------------

def _sphinx_book(root: Path) -> None:
    (root / "conf.py").write_text(f"""
import sys
sys.path.insert(0, {str(ROOT / "_ext")!r})
extensions = ["myst_nb", "glossary_labels"]
myst_enable_extensions = ["colon_fence", "dollarmath"]
nb_execution_mode = "off"
exclude_patterns = ["_build"]
""")
    (root / "index.md").write_text("# Book\n\n```{toctree}\nbook/01-demo.md\nbook/appendix-glossary.md\n```\n")
    _chapter(root / "book", "01-demo", "# 1. Demo\n\n## Parts\n\nThe **widget** is a small thing that does one job.",
             "A **widget** again, in bold but not defined here: **Widget.** A run-in heading.")


def test_links_land_on_the_bold_word_and_a_missing_target_fails_the_build(tmp_path):
    _sphinx_book(tmp_path)
    glossary.write(tmp_path / "book")
    out, warnings = sphinx_build(tmp_path)
    assert warnings == ""
    chapter = (out / "book" / "01-demo.html").read_text()
    assert re.search(r'<strong id="glossary-widget">widget</strong>', chapter)
    assert re.search(r'<strong id="glossary-widget-2">widget</strong>', chapter)
    assert chapter.count('id="glossary-') == 2  # the run-in heading got no label
    page = (out / "book" / "appendix-glossary.html").read_text()
    assert 'href="01-demo.html#glossary-widget"' in page and 'href="01-demo.html#glossary-widget-2"' in page
    # the chapter stops defining the term, the page is not regenerated: the build must say so
    source = tmp_path / "book" / "01-demo.md"
    source.write_text(source.read_text().replace("The **widget** is", "The widget is"))
    _, warnings = sphinx_build(tmp_path)
    assert "glossary-widget-2" in warnings and "not found" in warnings


def test_written_glosses_name_terms_of_the_glossary():
    terms = {d.term for d in glossary.definitions()}
    assert set(glossary.GLOSSES) <= terms, set(glossary.GLOSSES) - terms
    page = (glossary.BOOK / glossary.PAGE_NAME).read_text()
    for term, text in glossary.GLOSSES.items():
        assert f"**{term}**: {text[0].upper() + text[1:]}" in page, term
