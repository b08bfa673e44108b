"""Readers outside the website: the launch links (_ext/launch.py and their check in
tools/check_html.py), the Binder configuration, local reading, the Makefile's interpreter and torch
choices, and the licence."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
import tomllib
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from conftest import ROOT, sphinx_build

sys.path.insert(0, str(ROOT / "_ext"))
sys.path.insert(0, str(ROOT / "tools"))
import check_html  # noqa: E402
import launch  # noqa: E402

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
COLAB = "https://colab.research.google.com"


def pins(path: Path) -> dict[str, str]:
    """Name -> version of every ``name==version`` line of a requirements file."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].split(";")[0].strip()   # no environment marker
        if "==" in line:
            name, version = line.split("==")
            found[canonicalize_name(name)] = version.strip()
    return found


REQUIREMENTS = pins(ROOT / "requirements.txt")


# --------------------------------------------------------------------------------------------
# the URLs, written out by hand from Colab's and Binder's documented forms
# --------------------------------------------------------------------------------------------


def test_colab_and_binder_urls():
    repo = "https://github.com/some-org/some.book"
    assert launch.colab_url(COLAB + "/", repo, "main", "notebooks/02-attention.ipynb") == (
        "https://colab.research.google.com/github/some-org/some.book/blob/main/notebooks/02-attention.ipynb")
    assert launch.binder_url("https://mybinder.org", repo + ".git", "v1", "notebooks/x.ipynb", "jupyterlab") == (
        "https://mybinder.org/v2/gh/some-org/some.book/v1?urlpath=lab/tree/notebooks/x.ipynb")
    assert launch.binder_url("https://mybinder.org", repo, "main", "n.ipynb").endswith("main?urlpath=tree/n.ipynb")


@pytest.mark.parametrize("url", ["https://gitlab.com/a/b", "github.com/a/b", "https://github.com/a", ""])
def test_only_github_repositories(url):
    with pytest.raises(ValueError, match="repository url"):
        launch.github_parts(url)


def test_unknown_interface():
    with pytest.raises(ValueError, match="notebook_interface"):
        launch.binder_url("https://mybinder.org", "https://github.com/a/b", "main", "x.ipynb", "vscode")


@pytest.mark.parametrize(
    ("docname", "stem"),
    [("book/02-attention", "02-attention"), ("book/10-interp_x", "10-interp_x"), ("book/appendix-claims", None),
     ("book/2-x", None), ("02-attention", None), ("book/sub/02-x", None)],
)
def test_chapter_pages(docname, stem):
    assert launch.chapter_stem(docname) == stem


# --------------------------------------------------------------------------------------------
# a small book built with the extension, then checked by tools/check_html.py
# --------------------------------------------------------------------------------------------

REPO = "https://github.com/some-org/some-book"
BRANCH = "dev"


def make_book(root: Path, exercises: bool = True, notebooks: bool = True) -> None:
    """A book with one chapter page (book/07-demo.ipynb) and the repository files around it."""
    (root / "book").mkdir(parents=True)
    (root / "conf.py").write_text(f"""
import sys
sys.path.insert(0, {str(ROOT / "_ext")!r})
extensions = ["myst_nb", "sphinx_exercise", "launch"]
html_theme = "sphinx_book_theme"
html_theme_options = {{
    "repository_url": {REPO!r}, "repository_branch": {BRANCH!r}, "use_download_button": True,
    "launch_buttons": {{"colab_url": {COLAB!r}, "binderhub_url": "https://mybinder.org",
                        "notebook_interface": "jupyterlab"}},
}}
nb_execution_mode = "off"
exclude_patterns = ["notebooks", "_build"]
""")
    (root / "index.md").write_text("# Book\n\n```{toctree}\nbook/07-demo.ipynb\n```\n")
    cells = [nbformat.v4.new_markdown_cell("# 7. Demo"),
             nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["remove-cell"]}),
             nbformat.v4.new_markdown_cell("Some prose.")]
    if exercises:
        cells.append(nbformat.v4.new_markdown_cell(":::{exercise} 7.1 · Try\nDo it.\n:::"))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "book" / "07-demo.ipynb")
    (root / "book" / "07-demo.md").write_text("# 7. Demo\n" + (":::{exercise} 7.1\n:::\n" if exercises else ""))
    if notebooks:
        (root / "notebooks" / "exercises").mkdir(parents=True)
        (root / "notebooks" / "07-demo.ipynb").write_text('{"reader": 1}')
        (root / "notebooks" / "exercises" / "07-demo.ipynb").write_text('{"exercises": 1}')
    for path in check_html.BINDER_FILES:
        (root / path).parent.mkdir(exist_ok=True)
        (root / path).write_text("x\n")


def check(root: Path, out: Path) -> list[str]:
    config = {"repository": {"url": REPO, "branch": BRANCH},
              "launch_buttons": {"colab_url": COLAB, "binderhub_url": "https://mybinder.org",
                                 "notebook_interface": "jupyterlab"}}
    page = out / "book" / "07-demo.html"
    return check_html.check_launch(_parse(page), page, out, root / "book" / "07-demo.md", config, root)


def _parse(page: Path) -> check_html.Page:
    parsed = check_html.Page()
    parsed.feed(page.read_text())
    return parsed


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("book")
    make_book(root)
    out, warnings = sphinx_build(root)
    return root, out, warnings


def test_built_page_launches_the_reader_notebooks(built):
    root, out, warnings = built
    assert "launch" not in warnings, warnings
    page = _parse(out / "book" / "07-demo.html")
    links = {a["text"]: a for a in page.anchors}
    base = f"{COLAB}/github/some-org/some-book/blob/dev/notebooks"
    assert links["Exercises in Colab"]["href"] == f"{base}/exercises/07-demo.ipynb"
    assert links["Chapter in Colab"]["href"] == f"{base}/07-demo.ipynb"
    assert links["Colab"]["href"] == f"{base}/07-demo.ipynb"  # the theme's button, rewritten
    assert links["Binder"]["href"] == (
        "https://mybinder.org/v2/gh/some-org/some-book/dev?urlpath=lab/tree/notebooks/07-demo.ipynb")
    download = links["Download the exercises (.ipynb)"]
    assert "download" in download and download["href"] == "../notebooks/exercises/07-demo.ipynb"
    # the copies served with the book are the repository's files
    assert (out / "notebooks" / "exercises" / "07-demo.ipynb").read_text() == '{"exercises": 1}'
    assert (out / "notebooks" / "07-demo.ipynb").read_text() == '{"reader": 1}'
    assert not any("book/07-demo.ipynb" in a["href"] for a in page.anchors)
    assert check(root, out) == []


def test_check_html_catches_broken_launch_links(built, tmp_path):
    root, out, _ = built
    page = out / "book" / "07-demo.html"
    html = page.read_text()
    copy = tmp_path / "html"
    shutil.copytree(out, copy)
    mutants = {
        "old Colab target": html.replace("blob/dev/notebooks/07-demo.ipynb", "blob/dev/book/07-demo.ipynb"),
        "no exercises link": html.replace(">Exercises in Colab<", ">Exercises<"),
        "no download attribute": html.replace(' download="07-demo-exercises.ipynb"', ""),
        "Binder opens the book": html.replace("lab/tree/notebooks/07-demo.ipynb", "lab/tree/book/07-demo.ipynb"),
        "wrong branch": html.replace("/blob/dev/", "/blob/main/"),
    }
    for what, text in mutants.items():
        assert text != html, what
        (copy / "book" / "07-demo.html").write_text(text)
        assert check(root, copy), what
    (copy / "book" / "07-demo.html").write_text(html)
    assert check(root, copy) == []
    (copy / "notebooks" / "exercises" / "07-demo.ipynb").write_text("stale")
    assert any("not a copy" in p for p in check(root, copy))
    (root / "binder" / "postBuild").rename(root / "postBuild.away")
    try:
        assert any("binder/postBuild" in p for p in check(root, copy))
    finally:
        (root / "postBuild.away").rename(root / "binder" / "postBuild")


def test_missing_notebooks_fail_the_build_and_the_check(tmp_path):
    make_book(tmp_path, notebooks=False)
    out, warnings = sphinx_build(tmp_path)
    assert "notebooks/07-demo.ipynb is missing" in warnings
    assert "notebooks/exercises/07-demo.ipynb is missing" in warnings
    problems = check(tmp_path, out)
    assert any("not in the repository" in p for p in problems)


def test_chapter_without_exercises_links_none(tmp_path):
    make_book(tmp_path, exercises=False)
    out, warnings = sphinx_build(tmp_path)
    assert "launch" not in warnings, warnings
    texts = [a["text"] for a in _parse(out / "book" / "07-demo.html").anchors]
    assert "Chapter in Colab" in texts and "Exercises in Colab" not in texts
    assert check(tmp_path, out) == []


# --------------------------------------------------------------------------------------------
# Binder: CPU torch 2.13, the library, and the pinned versions of everything it needs
# --------------------------------------------------------------------------------------------


def runtime_closure(name: str) -> dict[str, str]:
    """Every distribution ``name`` needs at run time (no extras), with its installed version."""
    found, todo = {}, [name]
    while todo:
        dist = metadata.distribution(todo.pop())
        key = canonicalize_name(dist.metadata["Name"])
        if key in found:
            continue
        found[key] = dist.version
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return found


def test_binder_installs_the_pinned_runtime():
    text = (ROOT / "binder" / "requirements.txt").read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text.splitlines()
    binder = pins(ROOT / "binder" / "requirements.txt")
    assert binder["torch"] == f"{REQUIREMENTS['torch']}+cpu"  # the CPU build, nothing else matches it
    for name, version in binder.items():
        assert Version(version).public == REQUIREMENTS[name], name
    needed = set(runtime_closure("tinyformer")) - {"tinyformer", "setuptools"}
    assert set(binder) == needed


def test_binder_python_and_library():
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"
    post = ROOT / "binder" / "postBuild"
    assert os.access(post, os.X_OK) and post.read_text().startswith("#!/bin/bash")
    commands = [ln for ln in post.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert commands[-1].split()[-1] == "." and "--no-deps" in commands[-1] and "pip install" in commands[-1]


# --------------------------------------------------------------------------------------------
# local reading, Python versions, CPU-only torch
# --------------------------------------------------------------------------------------------

README = (ROOT / "README.md").read_text()


def test_readme_local_reading_command_works():
    """`.venv/bin/jupyter lab notebooks/` after `make book`: JupyterLab is pinned, installed, runs."""
    match = re.search(r"`\.venv/bin/jupyter lab ([\w/.-]+)`", README)
    assert match, "README gives no local-reading command"
    assert match[1].rstrip("/") == "notebooks"  # the reader notebooks: plain Jupyter shows them as meant
    assert "jupyterlab" in REQUIREMENTS, "requirements.txt must pin jupyterlab"
    assert metadata.version("jupyterlab") == REQUIREMENTS["jupyterlab"]
    jupyter = Path(sys.executable).parent / "jupyter"
    out = subprocess.run([str(jupyter), "lab", "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == REQUIREMENTS["jupyterlab"], out.stderr


def test_requirements_are_complete():
    """Every distribution the pinned toolchain needs is pinned itself (a fresh install resolves
    to the same set)."""
    missing = {}
    for name in REQUIREMENTS:
        for dep, version in runtime_closure(name).items():
            if dep not in REQUIREMENTS and dep not in {"setuptools", "pip", "wheel"}:  # packaging tools
                missing[dep] = version
    assert not missing, f"pin these in requirements.txt: {missing}"


def make_dry_run(**variables) -> str:
    args = ["make", "-n", "-B", "--no-print-directory", ".venv/.installed"]
    args += [f"{k}={v}" for k, v in variables.items()]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_makefile_chooses_python_and_torch_index():
    plain = make_dry_run()
    assert "--index-url" not in plain
    index = "https://download.pytorch.org/whl/cpu"
    lines = make_dry_run(PYTHON="python3.12", TORCH_INDEX=index).splitlines()
    torch_line = next(ln for ln in lines if "torch==" in ln)
    assert f"--index-url {index}" in torch_line
    assert not any(index in ln for ln in lines if ln is not torch_line)  # the rest from the usual index
    assert any(ln.startswith("python3.12 -m venv") or " python3.12 -m venv" in ln for ln in lines)
    # the CPU build's version (2.13.0+cpu) satisfies the pin, so `pip install -r` keeps it
    assert SpecifierSet(f"=={REQUIREMENTS['torch']}").contains(f"{REQUIREMENTS['torch']}+cpu")


def test_readme_says_which_python_and_which_torch():
    for text in ("3.11", "3.12", "make PYTHON=", "TORCH_INDEX=https://download.pytorch.org/whl/cpu",
                 "jupyter lab notebooks/"):
        assert text in README, text
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert SpecifierSet(requires).contains("3.11") and SpecifierSet(requires).contains("3.12")


# --------------------------------------------------------------------------------------------
# licence
# --------------------------------------------------------------------------------------------


def test_license_covers_code_and_text():
    text = (ROOT / "LICENSE").read_text()
    assert "MIT License" in text and "Permission is hereby granted, free of charge" in text
    assert "Creative Commons Attribution 4.0 International" in text
    assert "https://creativecommons.org/licenses/by/4.0/legalcode" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    # the installed package says the same
    assert metadata.metadata("tinyformer").get("License-Expression") == "MIT"


def test_readme_names_the_licences():
    assert "LICENSE" in README and "MIT" in README and "CC BY 4.0" in README

