"""tools/browser_check.py: it finds each kind of problem on doctored pages, and passes a clean one.

The pages are loaded in headless Chromium (skipped where chromium or its driver is missing); one
browser session checks a small site where every page but one carries exactly one problem, and
pages with tinyformer.viz.attention_widget outputs, working or doctored.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "_ext"))

import browser_check  # noqa: E402

from conftest import sphinx_build  # noqa: E402

REPO_URL = "https://github.com/someone/somebook"
COLAB = "https://colab.research.google.com/github/someone/somebook/blob/main/"
BINDER = "https://mybinder.org/v2/gh/someone/somebook/main?urlpath=lab/tree/"

PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{name}</title>
<style>
  body {{ margin: 0; font: 16px sans-serif; }}
  main {{ max-width: 700px; margin: 0 auto; padding: 0 16px; }}
  .scroll {{ overflow-x: auto; max-width: 100%; }}
  .hidden-body > :not(.admonition-title) {{ height: 0; margin: 0; visibility: hidden; }}
  img {{ max-width: 100%; }}
</style>
<script>window.MathJax = {{options: {{processHtmlClass: 'math', ignoreHtmlClass: 'tex2jax_ignore'}}}};</script>
<script defer src="mathjax/tex-chtml.js"></script>
</head><body><main><section id="top" class="tex2jax_ignore">
<h1 id="title">{name}</h1>
<p>Some prose with inline math <span class="math">\\(x_i W_Q\\)</span>.</p>
{body}
</section></main></body></html>
"""

WIDE_TEX = " + ".join(f"a_{{{i}}} b_{{{i}}}" for i in range(10))

# page name -> (body, a fragment of the problem it must produce, or None for a clean page)
PAGES = {
    "clean": (
        f"""<div class="math scroll">\\[{WIDE_TEX}\\]</div>
        <figure><img src="small.png" alt="A small grey rectangle."><figcaption>A figure.</figcaption></figure>
        <div class="solution admonition hidden-body"><p class="admonition-title">Solution</p><p>hidden</p></div>
        <p><a href="#title">here</a> <a href="clean.html#top">there</a> <a href="{COLAB}notebooks/01-x.ipynb">Colab</a>
        <a href="{BINDER}notebooks/01-x.ipynb">Binder</a> <a href="https://example.org/elsewhere">web</a></p>
        <pre># markers: notebooks only</pre>""",
        None,
    ),
    "formula": (f"<div class='math'>\\[{WIDE_TEX}\\]</div>", "px wide in a 390 px window"),
    "wide-code": ("<pre>" + "x = 1; " * 30 + "</pre>", 'too wide: <pre> "x = 1;'),
    "wide-image": ('<img src="small.png" alt="wide" style="max-width: none; width: 900px">', "too wide: <img"),
    "missing-image": ('<img src="missing.png" alt="gone">', "image did not load: missing.png"),
    "unfolded": (
        '<div class="solution admonition"><p class="admonition-title">Solution to 1.1</p><p>shown</p></div>',
        "solution is not folded: Solution to 1.1",
    ),
    "broken-file": ('<a href="nowhere.html">x</a>', "broken link nowhere.html"),
    "broken-anchor": ('<a href="clean.html#no-such-place">x</a>', "no #no-such-place in clean.html"),
    "launch": (f'<a href="{COLAB}notebooks/exercises/99-missing.ipynb">Exercises in Colab</a>',
               "opens notebooks/exercises/99-missing.ipynb, which is not in the repository"),
    "binder-elsewhere": ('<a href="https://mybinder.org/v2/gh/other/repo/main?urlpath=tree/a.ipynb">B</a>',
                         "does not open this repository"),
    "math-error": ("<p><span class='math'>\\(\\frac{1}\\)</span></p>", "MathJax error"),
    "raw-tex": ("<p>$$x^2$$ was never typeset</p>", "formula left as raw TeX: $$x^2$$"),
    "marker": ("<pre>def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION</pre>", "grading marker"),
    "alt-text": ('<figure><img src="small.png"><figcaption>Loss curve.</figcaption></figure>',
                 "figure image has no alt text"),
    "clipped": ('<div style="overflow: hidden; width: 200px"><div style="width: 600px">a long row</div></div>',
                "cuts off 400 px"),
}



def widget_pages() -> dict[str, tuple[str, list[str]]]:
    """Two pages of attention widgets: one with two that work (one with tokens that need escaping),
    one with four doctored ones, and the problems each page must produce."""
    import torch

    from tinyformer.attention import causal_mask, softmax
    from tinyformer.viz import attention_widget

    T = 12

    def widget(seed: int, tokens=None, **kwargs) -> str:
        scores = 3 * torch.randn(2, 3, T, T, generator=torch.Generator().manual_seed(seed))
        weights = softmax(scores.masked_fill(~causal_mask(T), float("-inf")))
        return attention_widget(weights, tokens or [f"t{i}" for i in range(T)], **kwargs).html

    def doctor(seed: int, old: str, new: str) -> str:
        page = widget(seed)
        assert old in page, old
        return page.replace(old, new)

    nasty = ["</script>", "<b>", "&amp;", '"', " ", "\n"] + [f"t{i}" for i in range(6, T)]
    broken = [
        (re.sub(r"<script>.*?</script>", "", widget(1), flags=re.S), "1: its script did not run"),
        (doctor(2, 'mathjax_ignore"', 'mathjax_ignore" style="min-width: 600px"'),
         "2 sticks out of the 390 px window"),
        (doctor(3, "(h) => { st.head = h; show(); }", "(h) => {}"),
         "3: selecting another head did not change the highlighted weights"),
        (doctor(4, "const pick = (q, k = null) => {", "const pick = (q, k = null) => { return;"),
         "4: pointing at a token did not change the highlighted weights"),
    ]
    return {
        "widget": (widget(0) + widget(0, nasty, titles=["</script>", "&", "<!--"]), []),
        "widget-broken": ("".join(page for page, _ in broken), [f"attention widget {why}" for _, why in broken]),
    }


def mathjax_folder() -> Path | None:
    """The MathJax that sphinx-mathjax-offline serves with the book."""
    try:
        dist = importlib.metadata.distribution("sphinx-mathjax-offline")
    except importlib.metadata.PackageNotFoundError:
        return None
    folder = Path(dist.locate_file("sphinx-mathjax-offline/static/mathjax"))
    return folder if (folder / "tex-chtml.js").exists() else None


def browser_or_skip():
    try:
        return browser_check.find_browser()
    except browser_check.BrowserMissing as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A repository with one notebook and a built site of doctored pages."""
    root = tmp_path_factory.mktemp("book")
    (root / "_config.yml").write_text(f"repository:\n  url: {REPO_URL}\n  branch: main\n")
    (root / "notebooks").mkdir()
    (root / "notebooks" / "01-x.ipynb").write_text("{}")
    html = root / "_build" / "html"
    html.mkdir(parents=True)
    mathjax = mathjax_folder()
    if mathjax is None:
        pytest.skip("sphinx-mathjax-offline's MathJax is not installed")
    (html / "mathjax").symlink_to(mathjax, target_is_directory=True)
    Image.new("RGB", (40, 20), "grey").save(html / "small.png")
    for name, (body, _) in (PAGES | widget_pages()).items():
        (html / f"{name}.html").write_text(PAGE.format(name=name, body=body))
    return root


@pytest.fixture(scope="module")
def problems(site) -> list[str]:
    browser_or_skip()
    return browser_check.check(site / "_build" / "html", repo_root=site)


def test_a_clean_page_passes(problems):
    assert [p for p in problems if p.startswith("clean.html")] == []


@pytest.mark.parametrize("name", [name for name, (_, expected) in PAGES.items() if expected])
def test_each_problem_is_found(problems, name):
    expected = PAGES[name][1]
    found = [p for p in problems if p.startswith(f"{name}.html")]
    assert any(expected in p for p in found), f"{name}: expected {expected!r} in {found}"


def test_working_attention_widgets_pass(problems):
    assert [p for p in problems if p.startswith("widget.html")] == []


def test_each_widget_problem_is_found(problems):
    found = [p for p in problems if p.startswith("widget-broken.html")]
    for expected in widget_pages()["widget-broken"][1]:
        assert any(expected in p for p in found), f"expected {expected!r} in {found}"
    assert not [p for p in found if "sticks out" in p and " at 1280 px" in p], found  # it fits the desktop


def test_the_wide_formula_is_found_on_the_phone_only(problems):
    wide = [p for p in problems if p.startswith("formula.html") and "px wide" in p]
    assert len(wide) == 1 and " at 390 px" in wide[0], wide


def test_screenshots_are_saved(problems, site):
    shots = sorted(p.name for p in (site / "_build" / "browser").glob("*.png"))
    assert "unfolded-390-1.png" in shots and "formula-390-1.png" in shots, shots


def test_exit_status_and_one_line_per_problem(site, capsys, monkeypatch):
    browser_or_skip()
    monkeypatch.setattr(browser_check, "ROOT", site)
    html = site / "_build" / "html"
    clean = site / "clean-only"
    clean.mkdir()
    for name in ("clean", "formula"):
        (clean / f"{name}.html").write_text((html / f"{name}.html").read_text())
    (clean / "small.png").write_bytes((html / "small.png").read_bytes())
    (clean / "mathjax").symlink_to((html / "mathjax").resolve(), target_is_directory=True)
    assert browser_check.main([str(clean)]) == 1  # formula.html is too wide on the phone
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("formula.html at 390 px: page is") and out[-1].startswith("browser_check: 2 pages")
    (clean / "formula.html").unlink()
    assert browser_check.main([str(clean)]) == 0


def test_missing_browser_is_a_clear_failure(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("CHROMIUM", str(tmp_path / "no-chromium"))
    driver = tmp_path / "chromedriver"  # a driver that exists, so that only the browser is missing
    driver.write_text("")
    driver.chmod(0o755)
    monkeypatch.setenv("CHROMEDRIVER", str(driver))
    (tmp_path / "html").mkdir()
    (tmp_path / "html" / "a.html").write_text("<p>x</p>")
    assert browser_check.main([str(tmp_path / "html")]) == 1
    assert "chromium not found" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"{COLAB}notebooks/02-a.ipynb", ("notebooks/02-a.ipynb", True)),
        (f"{BINDER}notebooks/02-a.ipynb", ("notebooks/02-a.ipynb", True)),
        ("https://mybinder.org/v2/gh/someone/somebook/main?labpath=book%2F02-a.ipynb", ("book/02-a.ipynb", True)),
        ("https://colab.research.google.com/github/other/repo/blob/main/x.ipynb", ("", True)),
        (f"{REPO_URL}/blob/main/notebooks/exercises/02-a.ipynb", ("notebooks/exercises/02-a.ipynb", False)),
        ("https://raw.githubusercontent.com/someone/somebook/main/nb/02-a.ipynb", ("nb/02-a.ipynb", False)),
        (f"{REPO_URL}/issues/new?title=x", (None, False)),
        ("https://github.com/other/repo/blob/main/x.py", (None, False)),
    ],
)
def test_links_into_the_repository(tmp_path, url, expected):
    (tmp_path / "_config.yml").write_text(f"repository:\n  url: {REPO_URL}\n")
    assert browser_check.Repo.from_config(tmp_path).path_of(url) == expected


def test_layout_extension_strips_the_markers_the_student_tool_uses():
    import layout

    from tinyformer.course.student import BEGIN, END

    assert layout.MARKERS == (BEGIN, END)
    source = f"def f():\n    {BEGIN}\n    return 1\n    {END}\n"
    assert layout.strip_markers(source) == "def f():\n    return 1\n"
    assert layout.strip_markers("x = 1  # BEGIN SOLUTION is a comment here\n").startswith("x = 1")


# --------------------------------------------------------------------------------------------
# _ext/layout.py, the build-time half of the same fixes (the browser check above tests the result)
# --------------------------------------------------------------------------------------------


def test_figures_without_alt_text_get_their_caption():
    import layout
    from docutils.core import publish_doctree

    doctree = publish_doctree(
        ".. figure:: a.png\n\n   Loss against *steps*.\n\n"
        ".. figure:: b.png\n   :alt: Two curves.\n\n   Its caption.\n")
    layout.figure_alt_text(doctree)
    images = list(doctree.findall(lambda n: n.tagname == "image"))
    assert [image.get("alt") for image in images] == ["Loss against steps.", "Two curves."]


def test_exercise_titles_lose_their_parentheses():
    import layout
    from docutils import nodes

    title = nodes.title("", "", nodes.Text("Exercise"), nodes.Text(" ("), nodes.Text("2.1 · By hand"), nodes.Text(")"))
    layout.unparenthesize(title)
    assert title.astext() == "Exercise 2.1 · By hand"
    title = nodes.title("", "", nodes.Text("Exercise"), nodes.Text(" ("), nodes.Text("Warm-up"), nodes.Text(")"))
    layout.unparenthesize(title)
    assert title.astext() == "Exercise: Warm-up"
    reference = nodes.reference("", "", nodes.Text(" Exercise"), nodes.Text(" ("), nodes.Text("2.1"), nodes.Text(")"))
    title = nodes.title("", "", nodes.Text("Solution to"), reference)
    layout.unparenthesize(reference)
    layout.move_leading_space(title, reference)
    assert title.children[0].astext() == "Solution to " and reference.astext() == "Exercise 2.1"


def test_short_tables_are_marked_for_stacking():
    import layout
    from docutils import nodes
    from docutils.core import publish_doctree

    doctree = publish_doctree(
        "+-----+---------------------------------+-------+\n"
        "| sym | meaning                         | shape |\n"
        "+=====+=================================+=======+\n"
        "| B   | the batch size, many sequences  |       |\n"
        "+-----+---------------------------------+-------+\n"
        "| X   | the input to a layer, per token | (B,T) |\n"
        "+-----+---------------------------------+-------+\n\n"
        "+---+---+---+---+\n| a | b | c | d |\n+===+===+===+===+\n| 1 | 2 | 3 | 4 |\n+---+---+---+---+\n")
    layout.mark_short_tables(doctree)
    short, wide = doctree.findall(lambda n: n.tagname == "table")
    assert layout.STACK_CLASS in short["classes"] and layout.STACK_CLASS not in wide["classes"]
    labels = [n.astext() for n in short.findall(nodes.inline) if layout.LABEL_CLASS in n["classes"]]
    assert labels == ["shape: "]  # the prose column needs no label, the empty cell gets none
    empty = [n for n in short.findall(nodes.entry) if layout.EMPTY_CLASS in n["classes"]]
    assert len(empty) == 1


def test_layout_extension_numbers_per_chapter():
    """Sphinx numbers figures and equations in one sequence through the book; the extension
    renumbers them (chapter, k) from each page's file name, and leaves the Preface unprefixed."""
    import types

    import layout
    assert layout.chapter_number("book/03-transformer-block") == 3
    assert layout.chapter_number("book/00-preface") is None
    assert layout.chapter_number("book/appendix-claims") is None
    env = types.SimpleNamespace(toc_fignumbers={
        "book/00-preface": {"figure": {"f0": (1,)}},
        "book/02-attention": {"figure": {"a": (3,), "b": (2,)}, "displaymath": {"eq-x": (1,)}},
        "book/03-transformer-block": {"figure": {"c": (4,)}, "displaymath": {"eq-y": (2,), "eq-z": (3,)}},
    })
    assert layout.number_per_chapter(None, env) == []
    assert env.toc_fignumbers == {
        "book/00-preface": {"figure": {"f0": (1,)}},
        "book/02-attention": {"figure": {"a": (2, 2), "b": (2, 1)}, "displaymath": {"eq-x": (2, 1)}},
        "book/03-transformer-block": {"figure": {"c": (3, 1)}, "displaymath": {"eq-y": (3, 1), "eq-z": (3, 2)}},
    }


@pytest.fixture(scope="module")
def sphinx_site(tmp_path_factory) -> Path:
    """A real two-page Sphinx site, built here, whose search index the browser must read offline."""
    src = tmp_path_factory.mktemp("search-src")
    (src / "conf.py").write_text("project = 'x'\nhtml_theme = 'basic'\n")
    (src / "index.rst").write_text("Home\n====\n\n.. toctree::\n\n   heads\n")
    (src / "heads.rst").write_text("Heads\n=====\n\nAn induction head copies what followed a token before.\n")
    out, warnings = sphinx_build(src)
    assert warnings == "" and (out / "searchindex.js").exists()
    return out


def test_the_search_page_answers_from_the_local_index(sphinx_site):
    chromium, driver = browser_or_skip()
    server, base = browser_check.serve(sphinx_site)
    browser = browser_check.start_browser(chromium, driver)
    try:
        assert browser_check.search_problems(browser, base, sphinx_site, (("induction", "heads.html"),)) == []
        missed = browser_check.search_problems(browser, base, sphinx_site, (("transformer", "heads.html"),))
        assert missed == ["search for 'transformer' does not find heads.html (0 results)"]
        (sphinx_site / "searchindex.js").rename(sphinx_site / "index-moved.js")
        try:
            broken = browser_check.search_problems(browser, base, sphinx_site, (("induction", "heads.html"),))
        finally:
            (sphinx_site / "index-moved.js").rename(sphinx_site / "searchindex.js")
        assert broken == ["search: the site has no search.html or no searchindex.js"]
    finally:
        browser.quit()
        server.shutdown()
        server.server_close()
