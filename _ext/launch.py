"""Sphinx extension: every chapter page launches the reader notebooks, not the book's own.

The book's notebooks (book/NN-slug.ipynb) are written in MyST, which Colab and Jupyter show as
raw text. Each chapter is therefore also published as a plain notebook, notebooks/NN-slug.ipynb,
with its exercise version in notebooks/exercises/NN-slug.ipynb. For every chapter page this
extension

- points the theme's Colab and Binder buttons at notebooks/NN-slug.ipynb, and its ".ipynb"
  download button at a copy of that notebook served with the book;
- adds the exercise notebook to those two menus;
- puts a line of links under the chapter title: "Chapter in Colab", "Exercises in Colab" and
  "Download the exercises (.ipynb)". The download is a copy served with the book: same origin,
  so the browser saves it rather than showing JSON (it ignores ``download`` on a link to another
  site, such as a raw GitHub URL), it is the version of the page being read, and it works offline;
- copies those notebooks into the HTML output, at the same paths as in the repository.

A chapter page whose reader notebook is missing, or whose chapter has exercises but no exercise
notebook, gets a warning (an error under ``-W``): a launch link must never lead nowhere.
The repository, branch and launch services come from _config.yml (``repository``,
``launch_buttons``), which the theme's own buttons read too.
"""

from __future__ import annotations

import html
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.osutil import relative_uri

logger = logging.getLogger(__name__)

#: Chapter pages: book/NN-slug, where NN is the chapter number.
CHAPTER = re.compile(r"book/(?P<stem>\d\d-[A-Za-z0-9_-]+)")
READER_DIR = "notebooks"
EXERCISES_DIR = "notebooks/exercises"
#: A chapter has exercises when its source uses sphinx-exercise's directive.
HAS_EXERCISES = re.compile(r"\{exercise(?:-start)?\}")
INTERFACES = {"classic": "tree", "jupyterlab": "lab/tree"}
LINKS_CLASS = "tf-launch-links"


def chapter_stem(docname: str) -> str | None:
    """``"02-attention"`` for the page ``book/02-attention``; ``None`` for any other page."""
    match = CHAPTER.fullmatch(docname)
    return match["stem"] if match else None


def github_parts(repository_url: str) -> tuple[str, str]:
    """``(org, repo)`` of a ``https://github.com/org/repo`` URL."""
    match = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?", repository_url or "")
    if not match:
        raise ValueError(f"repository url must look like https://github.com/org/repo, got {repository_url!r}")
    return match[1], match[2]


def colab_url(colab: str, repository_url: str, branch: str, path: str) -> str:
    """Colab's address for the notebook at ``path`` in the repository's ``branch``."""
    org, repo = github_parts(repository_url)
    return f"{colab.rstrip('/')}/github/{org}/{repo}/blob/{quote(branch)}/{path}"


def binder_url(binderhub: str, repository_url: str, branch: str, path: str, interface: str = "classic") -> str:
    """Binder's address that builds the repository's ``branch`` and opens ``path``."""
    if interface not in INTERFACES:
        raise ValueError(f"notebook_interface must be one of {sorted(INTERFACES)}, got {interface!r}")
    org, repo = github_parts(repository_url)
    return f"{binderhub.rstrip('/')}/v2/gh/{org}/{repo}/{quote(branch)}?urlpath={INTERFACES[interface]}/{path}"


def has_exercises(source: Path) -> bool:
    """Whether a chapter has exercises (its .md source when there is one, else the notebook)."""
    md = source.with_suffix(".md")
    text = (md if md.exists() else source).read_text(encoding="utf-8")
    return bool(HAS_EXERCISES.search(text))


@dataclass(frozen=True)
class Links:
    """Where one chapter page's launch and download links lead (paths relative to the repository)."""

    stem: str
    reader: str  # notebooks/NN-slug.ipynb
    exercises: str | None  # notebooks/exercises/NN-slug.ipynb, None when the chapter has no exercises
    colab: str | None  # Colab's address of the reader notebook
    colab_exercises: str | None
    binder: str | None


def repository_root(app: Sphinx) -> Path:
    book_relpath = str((app.config.html_theme_options or {}).get("path_to_docs", "")).strip("/")
    root = Path(app.srcdir)
    return root.parents[len(Path(book_relpath).parts) - 1] if book_relpath else root


def page_links(app: Sphinx, docname: str) -> Links | None:
    """The links of a chapter page, or ``None`` for any other page."""
    stem = chapter_stem(docname)
    if stem is None:
        return None
    opts = app.config.html_theme_options or {}
    buttons = opts.get("launch_buttons") or {}
    repo, branch = opts.get("repository_url", ""), opts.get("repository_branch") or "main"
    reader = f"{READER_DIR}/{stem}.ipynb"
    exercises = f"{EXERCISES_DIR}/{stem}.ipynb" if has_exercises(Path(app.env.doc2path(docname))) else None
    colab = buttons.get("colab_url")
    binder = buttons.get("binderhub_url")
    interface = buttons.get("notebook_interface", "classic")
    return Links(
        stem=stem,
        reader=reader,
        exercises=exercises,
        colab=colab_url(colab, repo, branch, reader) if colab else None,
        colab_exercises=colab_url(colab, repo, branch, exercises) if colab and exercises else None,
        binder=binder_url(binder, repo, branch, reader, interface) if binder else None,
    )


# ---------------------------------------------------------------------------------------------
# Sphinx event handlers
# ---------------------------------------------------------------------------------------------


def check_notebooks(app: Sphinx, env) -> None:
    """Warn (once per build) about chapter pages whose notebooks are not in the repository."""
    root = repository_root(app)
    for docname in sorted(env.found_docs):
        links = page_links(app, docname)
        if links is None:
            continue
        for path in (links.reader, links.exercises):
            if path and not (root / path).is_file():
                logger.warning(f"{path} is missing: the page's launch links would lead nowhere "
                               "(regenerate the reader notebooks)", location=docname, type="launch",
                               subtype="missing")


def add_links_under_title(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Insert the line of launch links after the chapter's title."""
    if app.builder.format != "html":
        return
    links = page_links(app, docname)
    section = next(iter(doctree.findall(nodes.section)), None)
    if links is None or section is None or not isinstance(section[0], nodes.title):
        return
    here = app.builder.get_target_uri(docname)
    items = []
    if links.colab:
        items.append(f'<a class="reference external tf-colab-chapter" href="{html.escape(links.colab)}">'
                     "Chapter in Colab</a>")
    if links.colab_exercises:
        items.append(f'<a class="reference external tf-colab-exercises" href="{html.escape(links.colab_exercises)}">'
                     "Exercises in Colab</a>")
    if links.exercises:
        local = relative_uri(here, links.exercises)
        items.append(f'<a class="reference download tf-download-exercises" href="{html.escape(local)}" '
                     f'download="{links.stem}-exercises.ipynb">Download the exercises (.ipynb)</a>')
    if not items:
        return
    raw = f'<p class="{LINKS_CLASS}">' + " · ".join(items) + "</p>\n"
    section.insert(1, nodes.raw("", raw, format="html"))


def rewrite_header_buttons(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Point the theme's launch and download buttons at the reader notebooks."""
    links = page_links(app, pagename)
    if links is None:
        return
    pathto = context["pathto"]
    for group in context.get("header_buttons", []):
        buttons = group.get("buttons", [])
        if group.get("label") == "launch-buttons":
            for button in buttons:
                if button.get("text") == "Colab" and links.colab:
                    button["url"] = links.colab
                elif button.get("text") == "Binder" and links.binder:
                    button["url"] = links.binder
            if links.colab_exercises:
                buttons.append({"type": "link", "text": "Exercises (Colab)", "url": links.colab_exercises,
                                "tooltip": "Open the exercise notebook in Colab",
                                "icon": "_static/images/logo_colab.png", "label": "colab-exercises-button"})
        elif group.get("label") == "download-buttons":
            # the book's .ipynb (and, for a .md page, its source) become the reader notebook, once
            sources = [b for b in buttons if b.get("label") in ("download-notebook-button", "download-source-button")]
            for button in sources[1:]:
                buttons.remove(button)
            if sources:
                sources[0].update(url=pathto(links.reader, 1), text=".ipynb",
                                  tooltip="Download this chapter as a notebook")
            if links.exercises:
                buttons.insert(1, {"type": "link", "text": "exercises .ipynb", "url": pathto(links.exercises, 1),
                                   "tooltip": "Download the exercise notebook", "icon": "fas fa-pencil",
                                   "label": "download-exercises-button"})


def copy_notebooks(app: Sphinx, exception) -> None:
    """Serve the chapters' reader and exercise notebooks with the book."""
    if exception is not None or app.builder.format != "html":
        return
    root, out = repository_root(app), Path(app.outdir)
    for docname in sorted(app.env.found_docs):
        links = page_links(app, docname)
        if links is None:
            continue
        for path in (links.reader, links.exercises):
            if path and (root / path).is_file():
                (out / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / path, out / path)


def setup(app: Sphinx) -> dict:
    app.connect("env-updated", check_notebooks)
    app.connect("doctree-resolved", add_links_under_title)
    app.connect("html-page-context", rewrite_header_buttons, priority=600)  # after the theme's (501)
    app.connect("build-finished", copy_notebooks)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
