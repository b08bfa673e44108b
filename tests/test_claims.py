"""The claims ledger (tools/claims.py): claim cells are checked, the appendix page follows them."""

from __future__ import annotations

import subprocess
import sys

import jupytext
import nbformat
import pytest

from conftest import BOOK, ROOT

sys.path.insert(0, str(ROOT / "tools"))
import claims  # noqa: E402
import nb as nbtool  # noqa: E402


def _chapter(book, name, *cells, title=None):
    """Write a MyST chapter source book/<name>.md built from (source, tags) code cells, the way
    jupytext writes the real ones, so the tool reads it through jupytext as it reads the book."""
    book.mkdir(exist_ok=True)
    title = title or f"{name[:2].lstrip('0')}. Chapter {name}"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {title}\n\nSome prose.")])
    for source, tags in cells:
        nb.cells.append(nbformat.v4.new_code_cell(source, metadata={"tags": list(tags)} if tags else {}))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    jupytext.write(nb, book / f"{name}.md", fmt="md:myst")
    return book / f"{name}.md"


GOOD = ("# claim: Two plus two is four.\nx = 2 + 2\nassert x == 4", ["claim"])


def _run(fn, book, capsys):
    code = fn(book)
    return code, capsys.readouterr().out


# --- the real book -------------------------------------------------------------------------

def test_the_book_passes_the_check(capsys):
    code, out = _run(claims.check, BOOK, capsys)
    assert code == 0, out
    assert "ledger up to date" in out


def test_the_ledger_is_not_a_chapter():
    for listed in (claims.chapter_sources(), nbtool.chapters()):
        assert claims.LEDGER_NAME not in {p.name for p in listed}
        assert all(p.name[:2].isdigit() for p in listed)


def test_cli_check_reports_a_count():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "claims.py"), "check"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    n_chapters = len(list(BOOK.glob("[0-9][0-9]-*.md")))
    assert f"cells in {n_chapters} chapters, ledger up to date" in result.stdout


# --- invalid claim cells ---------------------------------------------------------------------

def test_a_claim_that_asserts_nothing_fails_naming_it(tmp_path, capsys):
    _chapter(tmp_path, "03-empty", GOOD, ("# claim: Softmax rows sum to one.\nprint(1)", ["claim"]))
    code, out = _run(claims.check, tmp_path, capsys)
    assert code == 1
    # the markdown title is cell 1, GOOD is cell 2, the empty claim cell 3
    assert "03-empty.md, cell 3" in out and "asserts nothing" in out and "Softmax rows sum to one." in out


def test_a_claim_cell_without_its_comment_fails(tmp_path, capsys):
    _chapter(tmp_path, "04-nocomment", ("x = 1\nassert x == 1", ["claim"]))
    code, out = _run(claims.check, tmp_path, capsys)
    assert code == 1 and "04-nocomment.md, cell 2" in out and "first line is not `# claim:" in out


def test_a_claim_comment_below_the_first_line_fails(tmp_path, capsys):
    _chapter(tmp_path, "04-late", ("x = 1\n# claim: One is one.\nassert x == 1", ["claim"]))
    errors = claims.collect(tmp_path)[1]
    assert len(errors) == 1 and "04-late.md, cell 2" in errors[0] and "first line is not" in errors[0]


def test_two_claims_in_one_cell_fail(tmp_path):
    source = "# claim: One is one.\nassert 1 == 1\n# claim: Two is two.\nassert 2 == 2"
    _chapter(tmp_path, "04-two", (source, ["claim"]))
    errors = claims.collect(tmp_path)[1]
    assert len(errors) == 1 and "04-two.md, cell 2" in errors[0] and "one claim per cell" in errors[0]


def test_an_empty_claim_sentence_fails(tmp_path, capsys):
    _chapter(tmp_path, "04-blank", ("# claim:\nassert True", ["claim"]))
    code, out = _run(claims.check, tmp_path, capsys)
    assert code == 1 and "no sentence" in out


def test_a_claim_comment_in_an_untagged_cell_fails(tmp_path, capsys):
    _chapter(tmp_path, "05-untagged", ("# claim: One is one.\nassert 1 == 1", []))
    code, out = _run(claims.check, tmp_path, capsys)
    assert code == 1 and "05-untagged.md, cell 2" in out and "not tagged `claim`" in out


def test_a_claim_cell_that_is_not_python_fails(tmp_path, capsys):
    _chapter(tmp_path, "06-syntax", ("# claim: It parses.\nassert (", ["claim"]))
    code, out = _run(claims.check, tmp_path, capsys)
    assert code == 1 and "06-syntax.md, cell 2" in out and "cannot parse" in out


def test_write_refuses_invalid_cells(tmp_path, capsys):
    _chapter(tmp_path, "03-empty", ("# claim: Nothing checked.\nx = 1", ["claim"]))
    assert _run(claims.write, tmp_path, capsys)[0] == 1
    assert not (tmp_path / claims.LEDGER_NAME).exists()


# --- what counts as an assertion -------------------------------------------------------------

@pytest.mark.parametrize("line", [
    "assert_close(a, a)",
    "torch.testing.assert_close(a, a)",
    "np.testing.assert_allclose(a, a)",
    "for _ in range(2):\n    assert a == a",
    "if True:\n    torch.testing.assert_close(a, a)",
])
def test_assertions_count(tmp_path, capsys, line):
    source = f"# claim: A equals itself.\nimport numpy as np\nimport torch\nfrom torch.testing import assert_close\n" \
             f"a = 1.0\n{line}"
    exec(compile(source, "<claim>", "exec"), {})  # the cell is real Python that runs
    _chapter(tmp_path, "07-close", (source, ["claim"]))
    assert _run(claims.write, tmp_path, capsys)[0] == 0
    assert claims.collect(tmp_path)[0][0].claims[0].asserting == line  # only the asserting statement is shown


@pytest.mark.parametrize("line", ["print(a == a)", "check_close(a, a)", "x = 'assert a == a'"])
def test_lookalikes_do_not_count(tmp_path, line):
    _chapter(tmp_path, "07-fake", (f"# claim: A equals itself.\na = 1\n{line}", ["claim"]))
    errors = claims.collect(tmp_path)[1]
    assert len(errors) == 1 and "asserts nothing" in errors[0]


def test_magics_are_ignored_when_parsing(tmp_path, capsys):
    _chapter(tmp_path, "08-magic", ("# claim: It is fast enough.\n%time x = sum(range(10))\n!true\nassert x == 45",
                                    ["claim"]))
    assert _run(claims.write, tmp_path, capsys)[0] == 0
    assert claims.collect(tmp_path)[0][0].claims[0].asserting == "assert x == 45"


# --- the page ---------------------------------------------------------------------------------

def test_page_lists_each_claim_under_its_chapter(tmp_path, capsys):
    _chapter(tmp_path, "02-attention", GOOD,
             ("# claim: The scores keep unit variance\n# for every $d_k$.\n#\n# (measured, not derived)\n"
              "v = 1.0\nassert 0.8 < v < 1.2", ["claim", "remove-input"]),
             title="2. Attention")
    _chapter(tmp_path, "00-preface", title="Preface")  # no claims: no section
    assert _run(claims.write, tmp_path, capsys)[0] == 0
    page = (tmp_path / claims.LEDGER_NAME).read_text()
    assert page.startswith("# Claims ledger\n")
    assert "tools/claims.py" in page
    assert "## {doc}`2. Attention <02-attention>`" in page and "Preface" not in page
    expected = ("1. Two plus two is four.\n\n   ```python\n   assert x == 4\n   ```\n\n"
                "2. The scores keep unit variance for every $d_k$.\n\n   ```python\n   assert 0.8 < v < 1.2\n   ```\n")
    assert page.endswith(expected)


def test_page_without_claims_says_so(tmp_path, capsys):
    _chapter(tmp_path, "02-attention", ("x = 1", []))
    code, out = _run(claims.write, tmp_path, capsys)
    assert code == 0 and "claims: 0 cells in 1 chapters" in out
    page = (tmp_path / claims.LEDGER_NAME).read_text()
    assert "No claims yet" in page and "{doc}" not in page


def test_writer_is_deterministic(tmp_path, capsys):
    # Chapters written in reverse order still come out in file-name order, identically each time.
    _chapter(tmp_path, "03-later", ("# claim: Later.\nassert True", ["claim"]))
    _chapter(tmp_path, "02-earlier", GOOD)
    assert _run(claims.write, tmp_path, capsys)[0] == 0
    first = (tmp_path / claims.LEDGER_NAME).read_bytes()
    assert first.index(b"<02-earlier>") < first.index(b"<03-later>")
    assert _run(claims.write, tmp_path, capsys)[0] == 0
    assert (tmp_path / claims.LEDGER_NAME).read_bytes() == first
    assert _run(claims.check, tmp_path, capsys)[0] == 0


def test_a_stale_or_missing_ledger_fails(tmp_path, capsys):
    source = _chapter(tmp_path, "02-attention", GOOD)
    code, out = _run(claims.check, tmp_path, capsys)
    assert code == 1 and "missing" in out and "python tools/claims.py write" in out
    assert _run(claims.write, tmp_path, capsys)[0] == 0
    source.write_text(source.read_text().replace("Two plus two is four.", "Two plus two is five."))
    code, out = _run(claims.check, tmp_path, capsys)
    assert code == 1 and "stale" in out and "make execute" in out
