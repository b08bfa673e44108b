"""Reader notebooks (notebooks/): the book's chapters as Colab and Jupyter show them, no MyST left."""

from __future__ import annotations

import base64
import shutil
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from tinyformer.course import reader, slicing
from tinyformer.course.reader import Book, ReaderError, myst_problems, reader_notebook, repr_problems
from tinyformer.student import BEGIN, END, exercise_name, stub_function, stub_source, write_student_notebooks

from conftest import ROOT, chapter_notebooks

CONFIG = """\
repository: {url: https://github.com/example/book, branch: main}
bibtex_bibfiles: [refs.bib]
parse:
  myst_enable_extensions: [amsmath, colon_fence, dollarmath, substitution]
"""
BIB = """\
@article{alpha, title = {One}, author = {Alpha, Ann}, journal = {J}, year = {2001}}
@article{beta, title = {Two}, author = {Beta, Bo and Gamma, Gus}, journal = {J}, year = {2002}}
@article{delta, title = {Three}, author = {Delta, Di and Eps, Ed and Zeta, Zoe}, journal = {J}, year = {2003}}
"""
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake image bytes").decode()


@pytest.fixture
def book(tmp_path):
    (tmp_path / "_config.yml").write_text(CONFIG)
    (tmp_path / "refs.bib").write_text(BIB)
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "appendix-notes.md").write_text("# Notes on notes\n\nText.\n")
    return Book.load(tmp_path)


def md(text, **meta):
    return nbformat.v4.new_markdown_cell(text, metadata=meta)


def code(source, tags=(), outputs=(), **meta):
    if tags:
        meta["tags"] = list(tags)
    return nbformat.v4.new_code_cell(source, metadata=meta, outputs=list(outputs))


def glued(name, value=None, png=None):
    """The output MyST-NB's glue(name, value, display=False) stores."""
    data = {"application/papermill.record/text/plain": repr(value)}
    if png is not None:
        data["application/papermill.record/image/png"] = png
    return nbformat.v4.new_output("display_data", data=data, metadata={
        "scrapbook": {"mime_prefix": "application/papermill.record/", "name": name}})


def convert(book, *cells, exercises=False):
    nb = nbformat.v4.new_notebook(cells=list(cells))
    return reader_notebook(nb, "05-demo", book, exercises=exercises)


def texts(nb):
    return [c.source for c in nb.cells]


# --- constructs --------------------------------------------------------------------------------
def test_glued_values_are_inlined_with_their_format_spec(book):
    out = convert(book, code("glue('pi', 3.14159)", outputs=[glued("pi", 3.14159), glued("n", 1234567)]),
                  md("Pi is {glue:text}`pi:.2f`, n is {glue:text}`n:,d`, raw {glue:text}`pi`."))
    assert out.cells[1].source == f"Pi is {3.14159:.2f}, n is {1234567:,d}, raw {3.14159}."
    assert out.cells[0].outputs == []  # the hidden glue records show nothing in Jupyter: dropped


def test_unresolved_glue_is_an_error_that_names_it(book):
    with pytest.raises(ReaderError, match="glue 'missing'.*05-demo"):
        convert(book, md("A {glue:text}`missing:.2f` value."))


def test_glued_figure_becomes_an_attachment_with_a_numbered_caption(book):
    figure = {"mystnb": {"figure": {"caption": "First.", "name": "fig-first"}}}
    out = convert(book, code("plot()", **figure),
                  code("glue('g', fig)", outputs=[glued("g", "<Figure>", png=PNG)]),
                  md("```{glue:figure} g\n:name: fig-glued\n\nThe glued one.\n```\n\nSee {numref}`fig-glued`."))
    cell = out.cells[-1]
    assert cell.source.startswith("![g](attachment:g.png)\n\n**Figure 5.2.** The glued one.")
    assert cell.source.endswith("See Figure 5.2.")
    assert cell.attachments["g.png"]["image/png"] == PNG


def test_figure_caption_is_a_cell_under_the_figure(book):
    figure = {"figure": {"caption": "Weights $\\alpha$ of {glue:text}`n:d` heads.", "name": "fig-w"},
              "image": {"alt": "a heatmap"}}
    out = convert(book, code("glue('n', 2)", outputs=[glued("n", 2)]), code("plot()", mystnb=figure),
                  md("As {numref}`fig-w` shows, and {numref}`Plot %s <fig-w>` too."))
    assert texts(out)[1:] == ["plot()", "**Figure 5.1.** Weights $\\alpha$ of 2 heads.",
                              "As Figure 5.1 shows, and Plot 5.1 too."]
    assert "mystnb" not in out.cells[1].metadata


def test_numbers_follow_sphinx_rules(book):
    """Only captioned, named figures and labelled equations are numbered, in page order."""
    out = convert(book,
                  code("a()", mystnb={"figure": {"name": "fig-nocaption"}}),
                  code("b()", mystnb={"figure": {"caption": "B.", "name": "fig-b"}}),
                  md("```{math}\na = 1\n```\n\n```{math}\n:label: eq-b\nb = 2\n```\n\n$$ c = 3 $$ (eq-c)\n\n"
                     "Inline $x^2$ stays; see {eq}`eq-c`, {eq}`eq-b` and {numref}`fig-b`."))
    text = out.cells[-1].source
    assert "$$\na = 1\n$$" in text  # no label, no number
    assert "$$\nb = 2\n\\tag{5.1}\n$$" in text and "$$\nc = 3\n\\tag{5.2}\n$$" in text
    assert text.endswith("Inline $x^2$ stays; see (5.2), (5.1) and Figure 5.1.")
    with pytest.raises(ReaderError, match="fig-nocaption"):
        convert(book, code("a()", mystnb={"figure": {"name": "fig-nocaption"}}), md("{numref}`fig-nocaption`"))
    with pytest.raises(ReaderError, match="'fig-nowhere'"):
        convert(book, md("See {numref}`fig-nowhere`."))


def test_numbering_is_per_chapter_as_on_the_website(book, tmp_path):
    """As on the website (_ext/layout.py): figures and equations count from 1 in each chapter,
    prefixed by the chapter's number; the Preface (00) counts without a prefix."""
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/00-intro.md\nparts:\n  - caption: P\n"
                                       "    chapters:\n      - file: book/04-a.ipynb\n"
                                       "      - file: book/05-demo.ipynb\n")
    assert reader._toc_files(tmp_path) == ["book/00-intro.md", "book/04-a.ipynb", "book/05-demo.ipynb"]
    book.order = ["00-intro", "04-a", "05-demo"]
    book.add("00-intro", nbformat.v4.new_notebook(cells=[md("$$ z $$ (eq-z)")]), notebook=False)
    fig = {"mystnb": {"figure": {"caption": "F.", "name": "fig-a1"}}}
    book.add("04-a", nbformat.v4.new_notebook(cells=[code("a()", **fig), code("b()", mystnb={"figure": {
        "caption": "G.", "name": "fig-a2"}}), md("```{math}\n:label: eq-a\na\n```")]))
    out = convert(book, code("c()", mystnb={"figure": {"caption": "H.", "name": "fig-c"}}),
                  md("$$ c $$ (eq-c)\n\nSee {numref}`fig-c`, {eq}`eq-c` and {numref}`fig-a1`."))
    assert out.cells[1].source == "**Figure 5.1.** H."
    assert out.cells[2].source == "$$\nc\n\\tag{5.1}\n$$\n\nSee Figure 5.1, (5.1) and Figure 4.1 in “04-a”."
    assert book.docs["00-intro"].targets["eq-z"].number == 1


def test_citations_are_author_year_with_a_reference_list(book):
    out = convert(book, md("Shown {footcite:p}`alpha,beta` by {footcite:t}`delta` and {cite:p}`alpha`."),
                  md("## References\n\n```{footbibliography}\n```"))
    assert out.cells[0].source == ("Shown (Alpha, 2001; Beta and Gamma, 2002) by Delta et al. (2003) "
                                   "and (Alpha, 2001).")
    refs = out.cells[1].source.split("\n")
    assert refs[:2] == ["## References", ""]
    assert [line[:8] for line in refs[2:]] == ["- Ann Al", "- Bo Bet", "- Di Del"]  # plain style, by author
    assert "Di Delta, Ed Eps, and Zoe Zeta. Three. *J*, 2003." in refs[-1]


def test_references_are_added_when_the_chapter_has_no_bibliography(book):
    out = convert(book, md("Shown {footcite:p}`beta`."))
    assert out.cells[-1].source.startswith("## References\n\n- Bo Beta and Gus Gamma. Two.")
    with pytest.raises(ReaderError, match="citation 'nobody'"):
        convert(book, md("Shown {footcite:p}`nobody`."))


def test_admonitions_are_quotes_with_a_bold_title(book):
    out = convert(book, code("glue('k', 7)", outputs=[glued("k", 7)]),
                  md("```{note}\nRows, not columns ({glue:text}`k:d`).\n```"),
                  md("```{warning} Mind the axis.\nReally.\n```"),
                  md("```{admonition} Going further\n:class: dropdown\nMore, $x$.\n```"),
                  md("- item\n\n  ```{note}\n  nested\n  ```"))
    assert texts(out)[1:] == [
        "> **Note**\n>\n> Rows, not columns (7).",
        "> **Warning**\n>\n> Mind the axis.\n> Really.",
        "<details>\n<summary><strong>Going further</strong></summary>\n\n> More, $x$.\n\n</details>",
        "- item\n\n  > **Note**\n  >\n  > nested",
    ]


EXERCISE = (":::{exercise} 5.1 · Add one\n:label: ex-add\n:nonumber:\n\nWrite `add_one`.\n:::\n\n"
            "::::{solution-start} ex-add\n:class: dropdown\n::::\n\nAdd one to the input.")
SOLUTION = "def add_one(x):\n    # BEGIN SOLUTION\n    return x + 1\n    # END SOLUTION"


def _exercise_cells():
    return [md("## Exercises\n\nDo them."), md(EXERCISE),
            code(SOLUTION, tags=["exercise-add_one"],
                 outputs=[nbformat.v4.new_output("stream", name="stdout", text="x")]),
            md("::::{solution-end}\n::::\n\nAfter the solution."), code("check(add_one)")]


def test_exercise_heading_and_folded_solution_in_the_reader_notebook(book):
    out = convert(book, *_exercise_cells())
    assert out.cells[1].source == ("### Exercise 5.1 · Add one\n\nWrite `add_one`.\n\n"
                                   "<details>\n<summary>Solution</summary>\n\nAdd one to the input.\n\n</details>")
    solution = out.cells[2]
    assert BEGIN not in solution.source and END not in solution.source
    assert solution.source.startswith("# @title Solution to Exercise 5.1 · Add one\n")
    assert solution.metadata["jupyter"] == {"source_hidden": True} and solution.metadata["cellView"] == "form"
    namespace: dict = {}
    exec(solution.source, namespace)  # noqa: S102 - still runnable: later check cells need it
    assert namespace["add_one"](41) == 42
    assert out.cells[3].source == "After the solution."
    assert out.metadata["tinyformer"] == {"chapter": "05-demo", "exercises": ["add_one"]}


def test_exercise_notebook_has_stubs_and_no_solution_text(book):
    out = convert(book, *_exercise_cells(), exercises=True)
    everything = "\n".join(texts(out))
    assert "Add one to the input" not in everything and "x + 1" not in everything
    assert 'raise NotImplementedError("add_one is not implemented yet")' in out.cells[2].source
    assert "### Exercise 5.1 · Add one\n\nWrite `add_one`." == out.cells[1].source
    assert all(c.outputs == [] for c in out.cells if c.cell_type == "code")
    assert myst_problems(out) == []


def test_cell_tags(book):
    boot = code("# Set-up\nimport sys", tags=["remove-cell"])
    out_cell = [nbformat.v4.new_output("stream", name="stdout", text="shown\n")]
    err_cell = [nbformat.v4.new_output("stream", name="stderr", text="warn\n")]
    out = convert(book, md("# 5. Demo"), boot,
                  code("helper = 1", tags=["remove-cell"], outputs=out_cell),
                  code("plot()", tags=["hide-input"], outputs=out_cell),
                  code("print(1)", tags=["remove-output"], outputs=out_cell),
                  code("print(2)", tags=["hide-output"], outputs=out_cell),
                  code("print(3)", tags=["remove-stderr"], outputs=out_cell + err_cell),
                  md("hidden prose", tags=["remove-cell"]))
    cells = out.cells
    assert cells[1] == reader_notebook(nbformat.v4.new_notebook(cells=[boot]), "x", book).cells[0]
    assert cells[1].source == boot.source and "jupyter" not in cells[1].metadata  # first, runnable, visible
    assert cells[2].metadata["jupyter"] == {"source_hidden": True} and cells[2].outputs == []
    assert cells[3].metadata["jupyter"] == {"source_hidden": True} and cells[3].outputs == out_cell
    assert cells[4].outputs == []
    assert cells[5].metadata["jupyter"] == {"outputs_hidden": True}
    assert cells[6].outputs == out_cell
    assert len(cells) == 7  # the removed Markdown cell is gone


def test_sections_documents_and_comments(book):
    book.add("07-other", nbformat.v4.new_notebook(cells=[md("# 7. Other\n\n(sec-far)=\n## Far away")]))
    out = convert(book, md("# 5. Demo\n\n% a comment for authors\n(sec-near)=\n## Near *here*\n\n"
                           "See {ref}`sec-near`, {ref}`that one <sec-near>`, {ref}`sec-far`, "
                           "{doc}`the notes <appendix-notes>`, {doc}`appendix-notes` and {doc}`07-other`."))
    assert out.cells[0].source == (
        "# 5. Demo\n\n## Near *here*\n\nSee Section “Near *here*”, that one, Section “Far away” in “7. Other”, "
        "[the notes](https://github.com/example/book/blob/main/book/appendix-notes.md), "
        "[Notes on notes](https://github.com/example/book/blob/main/book/appendix-notes.md) "
        "and [7. Other](07-other.ipynb).")


def test_a_role_in_code_is_left_alone_and_a_role_in_a_table_is_resolved(book):
    out = convert(book, code("glue('k', 3)", outputs=[glued("k", 3)]),
                  md("Write `{eq}`x`` to cite; k = {glue:text}`k:d`.\n\n| a | b |\n|---|---|\n"
                     "| {glue:text}`k:d` | {glue:text}`k:.1f` |"))
    assert out.cells[1].source == "Write `{eq}`x`` to cite; k = 3.\n\n| a | b |\n|---|---|\n| 3 | 3.0 |"


@pytest.mark.parametrize(("text", "message"), [
    ("A {kbd2}`x` role.", r"role \{kbd2\}"),
    ("```{mermaid}\ngraph\n```", r"directive \{mermaid\}"),
    ("A {{ name }} substitution.", "substitution"),
    ("See {ref}`nowhere`.", "'nowhere'"),
    ("See {eq}`eq-none`.", "'eq-none'"),
])
def test_unsupported_or_unresolved_is_an_error(book, text, message):
    with pytest.raises(ReaderError, match=message):
        convert(book, md(text))


def test_bad_arguments(book):
    with pytest.raises(TypeError, match="chapter"):
        reader_notebook(nbformat.v4.new_notebook(), "", book)
    with pytest.raises(ReaderError, match="root"):
        Book.load(book.root / "book")


# --- the checks --------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "Stale {numref}`fig-x` role.", "```{note}\nx\n```", ":::{exercise} 2.1\n:::", "(my-label)=\n## H",
    "Text\n:label: eq-x\n", "% a MyST comment", "$$ x $$ (eq-x)", "A {{ sub }} here.",
])
def test_myst_checker_finds_leftovers(text):
    nb = nbformat.v4.new_notebook(cells=[md("Fine $x$, `code {eq}`y``, <details>ok</details>."), md(text)])
    problems = myst_problems(nb, "doctored.ipynb")
    assert problems and all(p.startswith("doctored.ipynb, cell 1:") for p in problems), problems


@pytest.mark.parametrize("text", [
    "the largest gap is np.float64(0.014)).", "a share of tensor(0.0140).", "numpy.int64(3) rows",
    "values array([1, 2]) here",
])
def test_repr_checker_finds_glued_reprs(text):
    nb = nbformat.v4.new_notebook(cells=[md("Fine: `torch.tensor([1])` and `np.float64(2)` in code, "
                                            "an array (of numbers) and a tensor."), md(text)])
    problems = repr_problems(nb, "doctored.ipynb")
    assert len(problems) == 1 and problems[0].startswith("doctored.ipynb, cell 1:"), problems


def test_glue_stores_numpy_and_tensor_scalars_as_plain_numbers():
    import numpy as np
    import torch

    from tinyformer.setup import _plain
    assert repr(_plain(np.float64(0.014))) == "0.014" and type(_plain(np.int64(3))) is int
    assert repr(_plain(torch.tensor(0.25))) == "0.25" and _plain(torch.tensor([7])) == 7
    vector = np.array([1.0, 2.0])
    assert _plain(vector) is vector and _plain("0.014") == "0.014" and _plain(3) == 3


def _copy_book(tmp_path, chapters=("00-preface", "02-attention")):
    """A copy of the book with the chapters whose reader notebooks these tests doctor."""
    for name in ("_config.yml", "references.bib"):
        shutil.copy(ROOT / name, tmp_path / name)
    for folder in ("book", "notebooks", "notebooks/exercises"):
        (tmp_path / folder).mkdir(exist_ok=True)
        for path in (ROOT / folder).glob("*.*"):
            if path.stem in chapters or path.stem.startswith("appendix-") or path.suffix == ".json":
                shutil.copy(path, tmp_path / folder / path.name)
    return tmp_path


def test_committed_reader_notebooks_are_fresh_and_clean():
    """The same check as `python tools/nb.py check-readers`."""
    assert reader.check_readers(ROOT) == []


def test_staleness_and_myst_checks_can_fail(tmp_path):
    root = _copy_book(tmp_path)
    assert reader.check_readers(root) == []
    target = root / "notebooks" / "02-attention.ipynb"
    nb = nbformat.read(target, as_version=4)
    first_md = next(c for c in nb.cells if c.cell_type == "markdown" and "attention" in c.source)
    first_md.source += "\n\nSee {numref}`fig-simple-attention`."
    nbformat.write(nb, target)
    (root / "notebooks" / "exercises" / "02-attention.ipynb").unlink()
    shutil.copy(target, root / "notebooks" / "99-gone.ipynb")
    problems = reader.check_readers(root)
    assert "notebooks/02-attention.ipynb is stale (differs from a fresh conversion): run " \
           "`python tools/nb.py readers`" in problems
    assert any(p.startswith("notebooks/02-attention.ipynb, cell") and "{numref}" in p for p in problems)
    assert any(p.startswith("notebooks/exercises/02-attention.ipynb is missing") for p in problems)
    assert any(p.startswith("notebooks/99-gone.ipynb has no chapter") for p in problems)
    assert reader.write_readers(root)  # regenerating repairs all of it
    assert reader.check_readers(root) == []


def test_cli_exit_status_and_one_line_per_problem(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, str(ROOT / "tools"))
    import nb as nbtool

    root = _copy_book(tmp_path)
    monkeypatch.setattr(nbtool, "ROOT", root)
    assert nbtool.main(["check-readers"]) == 0
    (root / "notebooks" / "00-preface.ipynb").write_text("{}")
    (root / "notebooks" / "exercises" / "02-attention.ipynb").unlink()
    assert nbtool.main(["check-readers"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-4:] == ["notebooks/00-preface.ipynb is stale (differs from a fresh conversion): run "
                          "`python tools/nb.py readers`",
                          "notebooks/00-preface.ipynb is not a readable notebook (ValidationError)",
                          "notebooks/exercises/02-attention.ipynb is missing: run `python tools/nb.py readers`",
                          "check-readers: 3 problem(s)"]
    assert nbtool.main(["readers"]) == 0 and nbtool.main(["check-readers"]) == 0


def test_regeneration_is_byte_identical(tmp_path):
    root = _copy_book(tmp_path)
    shutil.rmtree(root / "notebooks")
    first = {p: p.read_bytes() for p in reader.write_readers(root)}
    assert sorted(p.relative_to(root).as_posix() for p in first) == [
        "notebooks/00-preface.ipynb", "notebooks/02-attention.ipynb", "notebooks/exercises/02-attention.ipynb"]
    assert reader.write_readers(root) == []  # nothing changes
    assert all(p.read_bytes() == data for p, data in first.items())


def test_unresolved_item_in_a_chapter_fails_the_check(tmp_path):
    root = _copy_book(tmp_path)
    path = root / "book" / "02-attention.ipynb"
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[2].cell_type == "markdown"
    nb.cells[2].source += "\n\nA value: {glue:text}`no_such_value:.2f`."
    nbformat.write(nb, path)
    problem = ("02-attention, cell 2: glue 'no_such_value': no cell of 02-attention glues this name "
               "(run `make execute`?)")
    assert reader.check_readers(root) == [f"cannot convert book/02-attention.ipynb: {problem}",
                                          f"cannot convert book/02-attention.ipynb (exercises): {problem}"]
    with pytest.raises(ReaderError, match="no_such_value"):
        reader.write_readers(root)


def test_website_number_check_can_fail(tmp_path, book):
    book.add("05-demo", nbformat.v4.new_notebook(cells=[
        code("a()", mystnb={"figure": {"caption": "A.", "name": "fig-a"}}),
        md("```{math}\n:label: eq-a\na\n```")]))
    page = tmp_path / "html" / "book" / "05-demo.html"
    page.parent.mkdir(parents=True)
    html = ('<figure id="fig-a"><figcaption><span class="caption-number">Fig. {f} </span>A.</figcaption></figure>'
            '<div class="math"><span class="eqno">({e})<a class="headerlink" href="#equation-eq-a">#</a></span></div>')
    page.write_text(html.format(f="5.1", e="5.1"))
    assert reader.website_numbers(page) == {"fig-a": "5.1", "eq-a": "5.1"}
    assert reader._check_numbers(book, tmp_path / "html") == []
    page.write_text(html.format(f="2", e="5.1"))
    assert reader._check_numbers(book, tmp_path / "html") == [
        "05-demo: figure 'fig-a' is 5.1 in the reader notebook but 2 on the website"]


def test_make_student_writes_the_committed_exercise_notebooks(tmp_path):
    written = write_student_notebooks(chapter_notebooks(), tmp_path)
    assert written
    for path in written:
        committed = ROOT / "notebooks" / "exercises" / path.name
        assert path.read_bytes() == committed.read_bytes(), path.name
        meta = nbformat.read(path, as_version=4).metadata["tinyformer"]
        assert meta["chapter"] == path.stem and meta["exercises"]


def test_reader_notebooks_show_no_grading_markers():
    for path in (ROOT / "notebooks").rglob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        assert not any(BEGIN in c.source or END in c.source for c in nb.cells), path


# --- what differs from the executed chapter runs in a plain kernel ------------------------------
# CI executes each chapter once (nbval, in book/). A reader or exercise notebook is that chapter
# rendered again: the tests below show its code is the chapter's but for the stubs, and run only
# what differs (the exercise and check cells and what they need) in a kernel without MyST-NB, as
# in Colab, started in an empty folder.
GENERATED = sorted((ROOT / "notebooks").rglob("*.ipynb"))


def _code(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def _without_title(source: str) -> str:
    """A folded solution's source without the ``# @title`` line the reader notebook adds."""
    first, _, rest = source.partition("\n")
    return rest if first.startswith("# @title ") else source


@pytest.mark.parametrize("path", GENERATED, ids=lambda p: p.relative_to(ROOT / "notebooks").as_posix())
def test_generated_code_is_the_executed_chapters(path):
    """Every code cell is the chapter's (markers stripped), in order; in an exercise notebook an
    exercise cell is its stub and nothing else differs."""
    chapter = _code(nbformat.read(ROOT / "book" / path.name, as_version=4))
    generated = _code(nbformat.read(path, as_version=4))
    assert len(generated) == len(chapter), path.name
    for ours, theirs in zip(generated, chapter):
        if path.parent.name == "exercises" and exercise_name(theirs):
            assert ours.source == stub_source(theirs.source, stub_function(exercise_name(theirs), theirs.source))
        else:
            assert _without_title(ours.source) == reader._strip_markers(theirs.source), theirs.source[:80]


def test_only_the_exercises_and_what_reads_them_differ():
    """No chapter cell reads a name an exercise cell defines except the checks and the cells that
    catch NotImplementedError (they are run below, with the stubs); so the rest of an exercise
    notebook runs as the chapter did."""
    for path in (ROOT / "notebooks" / "exercises").glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        for index, names in slicing.exercise_dependents(nb).items():
            assert "except NotImplementedError" in _code(nb)[index].source, (path.name, index, names)


def test_slice_keeps_what_the_exercises_need_and_fails_loudly():
    nb = nbformat.v4.new_notebook(cells=[
        code("# set-up"), code("import torch\nfrom tinyformer import checks"), code("big = train_for_an_hour()"),
        code("helper = lambda x: x + 1\nunused = 3"), code("def f(x):\n    return helper(x)", tags=["exercise-f"]),
        code("checks.check_f(f)"), code("other = big * 2"),
        code("try:\n    f(1)\nexcept NotImplementedError:\n    pass"),
    ])
    kept = [c.source.splitlines()[0] for c in slicing.exercise_slice(nb).cells]
    assert kept == ["# set-up", "import torch", "helper = lambda x: x + 1", "def f(x):", "checks.check_f(f)", "try:"]
    assert slicing.exercise_dependents(nb) == {7: {"f"}}
    nb.cells.append(code("checks.check_g(g)"))
    with pytest.raises(ValueError, match="code cell 8 uses 'g', which no earlier cell defines"):
        slicing.exercise_slice(nb)
    defined, used = slicing.cell_names("import numpy as np\ndef g(x):\n    i = 2\n    return [j * i * k for j in x]\n"
                                       "%time y = 1\nz = g(w)")
    assert defined == {"np", "g", "z"} and used == {"g", "k", "w"}  # locals are not module names


@pytest.mark.parametrize("path", GENERATED, ids=lambda p: p.relative_to(ROOT / "notebooks").as_posix())
def test_what_differs_runs_in_a_plain_kernel(path, tmp_path, monkeypatch):
    """The notebook's exercise and check cells with what they need, in a kernel without MyST-NB
    (a shadow ``myst_nb`` that fails to import, as in Colab) started in an empty folder: a reader
    notebook's checks give the verdicts the chapter's execution stored, an exercise notebook's stubs
    report "not implemented", and nothing is glued. About 5 s a notebook on an idle 2-core
    machine; the limit only guards against a hang."""
    shadow = tmp_path / "shadow" / "myst_nb"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('MyST-NB is not installed here, as in Colab')\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow.parent))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    work = tmp_path / "work"
    work.mkdir()
    nb = slicing.exercise_slice(nbformat.read(path, as_version=4))
    nb.cells.append(code("import tinyformer\nprint('glue in a plain kernel gives back', tinyformer.glue('x', 2.5))"))
    NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
    glue_records = [o for c in nb.cells for o in c.outputs if "scrapbook" in o.get("metadata", {})]
    assert not glue_records, "MyST-NB was importable in the kernel"
    assert nb.cells[-1].outputs[0]["text"] == "glue in a plain kernel gives back 2.5\n"
    verdicts = [o.get("text", "") for c in nb.cells if "checks.check_" in c.source
                for o in c.outputs if o.get("name") == "stdout"]
    expected = nb.metadata.get("tinyformer", {}).get("exercises", [])
    assert len(verdicts) >= len(expected)
    if path.parent.name == "exercises":
        assert verdicts and all("not implemented" in v for v in verdicts), verdicts
    else:  # the verdicts the chapter's own execution stored, right and wrong answers alike
        stored = [o.get("text", "") for c in _code(nbformat.read(ROOT / "book" / path.name, as_version=4))
                  if "checks.check_" in c.source for o in c.outputs if o.get("name") == "stdout"]
        assert verdicts == stored
