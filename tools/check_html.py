"""Check the built book the way a reader would meet it (run after `jupyter-book build`).

    python tools/check_html.py [_build/html]

For every chapter page: MathJax is served from the book itself (math renders offline), every
image is a local file that exists, every exercise solution is a collapsed dropdown, the Colab and
Binder buttons open the chapter's .ipynb in the repository named in _config.yml, and no code
cell output holds a Python traceback. Exits 1 with one line per problem.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.scripts, self.images, self.links, self.classes = [], [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" and a.get("src"):
            self.scripts.append(a["src"])
        if tag == "img":
            self.images.append(a.get("src", ""))
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if a.get("class"):
            self.classes.append(a["class"])


def check_page(html_path: Path, chapter: Path, repo_url: str, branch: str) -> list[str]:
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
    path = f"{repo_url.removeprefix('https://github.com/')}/blob/{branch}/book/{chapter.stem}.ipynb"
    if not any(link.startswith("https://colab.research.google.com/github/") and link.endswith(path)
               for link in page.links):
        problems.append(f"{name}: no Colab button opening {path}")
    if not any("mybinder.org" in link and link.endswith(f"book/{chapter.stem}.ipynb") for link in page.links):
        problems.append(f"{name}: no Binder button opening book/{chapter.stem}.ipynb")
    if "Traceback (most recent call last)" in text:
        problems.append(f"{name}: a cell output shows a traceback")
    return problems


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    html = Path(argv[0]) if argv else ROOT / "_build" / "html"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo, branch = config["repository"]["url"], config["repository"]["branch"]
    chapters = sorted((ROOT / "book").glob("[0-9][0-9]-*.md"))
    problems = []
    for chapter in chapters:
        page = html / "book" / f"{chapter.stem}.html"
        if not page.exists():
            problems.append(f"{page} was not built")
            continue
        problems += check_page(page, chapter, repo, branch)
    for p in problems:
        print(p)
    print(f"check_html: {len(chapters)} pages, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
