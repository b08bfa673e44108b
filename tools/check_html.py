"""Check the built book the way a reader would meet it (run after `jupyter-book build`).

    python tools/check_html.py [_build/html]

For every chapter page: MathJax is served from the book itself (math renders offline), every
image is a local file that exists, every exercise solution is a collapsed dropdown, and no code
cell output holds a Python traceback. Its launch links lead to the reader notebooks of the
repository named in _config.yml, never to the book's MyST notebook: the Colab button (and the
Binder button, when Binder is configured, which needs binder/) opens notebooks/NN-slug.ipynb; a
chapter with exercises links "Exercises in Colab" to notebooks/exercises/NN-slug.ipynb and offers
that notebook for download from a copy served with the book; every linked notebook exists in the
repository, and every served copy is identical to it. The API reference (book/appendix-api.md)
has an entry for every public function, class and documented method of the modules it documents
(tools/api_docs.py). Exits 1 with one line per problem.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BINDER_FILES = ("binder/requirements.txt", "binder/runtime.txt", "binder/postBuild")
INTERFACES = {"classic": "tree", "jupyterlab": "lab/tree"}


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.scripts, self.images, self.links, self.classes = [], [], [], []
        self.anchors: list[dict] = []  # every <a href>: its attributes, and its text under "text"
        self._open: list[dict] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" and a.get("src"):
            self.scripts.append(a["src"])
        if tag == "img":
            self.images.append(a.get("src", ""))
        if tag == "a":
            if a.get("href"):
                self.links.append(a["href"])
            self._open.append({**a, "text": ""})
        if a.get("class"):
            self.classes.append(a["class"])

    def handle_data(self, data):
        for anchor in self._open:
            anchor["text"] += data

    def handle_endtag(self, tag):
        if tag == "a" and self._open:
            anchor = self._open.pop()
            anchor["text"] = " ".join(anchor["text"].split())
            if anchor.get("href"):
                self.anchors.append(anchor)


def has_exercises(chapter: Path) -> bool:
    return bool(re.search(r"\{exercise(?:-start)?\}", chapter.read_text()))


def check_launch(page: Page, html_path: Path, html_root: Path, chapter: Path, config: dict,
                 root: Path = ROOT) -> list[str]:
    """The page's launch and download links (see the module's docstring)."""
    name, stem = html_path.name, chapter.stem
    repo_url, branch = config["repository"]["url"].rstrip("/"), config["repository"]["branch"]
    buttons = config.get("launch_buttons") or {}
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+)", repo_url)
    if not match:
        return [f"{name}: the repository url {repo_url} is not a GitHub repository, which Colab needs"]
    org, repo = match.groups()
    problems = []
    reader, exercises = f"notebooks/{stem}.ipynb", f"notebooks/exercises/{stem}.ipynb"
    hrefs = [a["href"] for a in page.anchors]

    def colab(path):
        return f"{buttons.get('colab_url', '').rstrip('/')}/github/{org}/{repo}/blob/{branch}/{path}"

    def in_repository(path):
        if not (root / path).is_file():
            problems.append(f"{name}: links {path}, which is not in the repository")

    def served(href):
        """A relative link to a notebook leads to a copy, served with the book, of the repository's file."""
        copy = (html_path.parent / href.split("#")[0].split("?")[0]).resolve()
        if not copy.is_relative_to(html_root.resolve()) or not copy.is_file():
            problems.append(f"{name}: {href} is not served with the book")
            return
        path = copy.relative_to(html_root.resolve()).as_posix()
        if not (root / path).is_file() or copy.read_bytes() != (root / path).read_bytes():
            problems.append(f"{name}: {href} is not a copy of the repository's {path}")

    # nothing may launch or download the book's own notebook, which is MyST
    for href in hrefs:
        if href.endswith((f"book/{stem}.ipynb", f"book/{stem}.md")) or "/_sources/" in href:
            problems.append(f"{name}: a link opens the book's MyST notebook instead of the reader's: {href}")
    local = [h for h in hrefs if h.endswith(".ipynb") and not re.match(r"[a-z][a-z0-9+.-]*:|//", h)]
    for href in dict.fromkeys(local):
        served(href)
    if not buttons.get("colab_url"):
        problems.append(f"{name}: _config.yml has no launch_buttons.colab_url")
    else:
        if colab(reader) not in hrefs:
            problems.append(f"{name}: no Colab button opening {reader}")
        allowed = {colab(reader), colab(exercises)}
        for href in hrefs:
            if "colab.research.google.com" in href and href not in allowed:
                problems.append(f"{name}: a Colab link opens neither reader notebook: {href}")
    in_repository(reader)
    if not any(href.endswith(reader) for href in local):
        problems.append(f"{name}: no download of {reader}")
    binder = buttons.get("binderhub_url", "").rstrip("/")
    binder_links = [h for h in hrefs if "mybinder.org" in h or (binder and h.startswith(binder))]
    if binder:
        ui = INTERFACES.get(buttons.get("notebook_interface", "classic"), "tree")
        want = f"{binder}/v2/gh/{org}/{repo}/{branch}?urlpath={ui}/{reader}"
        if binder_links != [want]:
            problems.append(f"{name}: the Binder button should open {want}, found {binder_links}")
        for path in BINDER_FILES:
            if not (root / path).is_file():
                problems.append(f"{name}: a Binder button, but no {path} to build its environment")
    elif binder_links:
        problems.append(f"{name}: Binder links although Binder is not configured: {binder_links}")
    if has_exercises(chapter):
        in_repository(exercises)
        named = [a["href"] for a in page.anchors if a["text"] == "Exercises in Colab"]
        if named != [colab(exercises)]:
            problems.append(f"{name}: the link \"Exercises in Colab\" should open {colab(exercises)}, found {named}")
        if not any("download" in a and a["href"].endswith(exercises) and a["href"] in local for a in page.anchors):
            problems.append(f"{name}: no download link (<a download>) for {exercises}")
    return problems


def check_page(html_path: Path, chapter: Path, config: dict, html_root: Path | None = None,
               root: Path = ROOT) -> list[str]:
    text = html_path.read_text()
    page = Page()
    page.feed(text)
    name = html_path.name
    problems = []
    if "$" in text or "\\(" in text:  # the page has math, so MathJax must be there, and local
        mathjax = [s for s in page.scripts if "mathjax" in s.lower()]
        if not mathjax or any(s.startswith(("http:", "https:", "//")) for s in mathjax):
            problems.append(f"{name}: MathJax is not served locally: {mathjax}")
    for src in page.images:
        if src.startswith(("http:", "https:", "//")):
            problems.append(f"{name}: remote image {src}")
        elif not (html_path.parent / src.split("?")[0]).exists():
            problems.append(f"{name}: missing image {src}")
    solutions = [c for c in page.classes if re.search(r"\bsolution\b", c)]
    exercises = chapter.read_text().count("{solution-start}")
    if len(solutions) != exercises or any("dropdown" not in c for c in solutions):
        problems.append(f"{name}: {exercises} solutions in the source, {len(solutions)} rendered, "
                        f"collapsed: {sum('dropdown' in c for c in solutions)}")
    problems += check_launch(page, html_path, html_root or html_path.parents[1], chapter, config, root)
    if "Traceback (most recent call last)" in text:
        problems.append(f"{name}: a cell output shows a traceback")
    return problems


def check_api(html: Path) -> list[str]:
    """The API reference's page has an entry (an ``id``) for every public object (tools/api_docs.py)."""
    import api_docs  # beside this file

    page = html / "book" / "appendix-api.html"
    if not page.exists():
        return [f"{page} was not built"]
    return [f"{page.name}: no entry for {name}" for name in api_docs.missing_ids(page.read_text())]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    html = Path(argv[0]) if argv else ROOT / "_build" / "html"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    chapters = sorted((ROOT / "book").glob("[0-9][0-9]-*.md"))
    problems = []
    for chapter in chapters:
        page = html / "book" / f"{chapter.stem}.html"
        if not page.exists():
            problems.append(f"{page} was not built")
            continue
        problems += check_page(page, chapter, config, html)
    problems += check_api(html)
    for p in problems:
        print(p)
    print(f"check_html: {len(chapters)} pages, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
