"""CITATION.cff, the site's "cite this book" page, the package version and LICENSE agree."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import tinyformer

ROOT = Path(__file__).resolve().parents[1]
CFF = yaml.safe_load((ROOT / "CITATION.cff").read_text())
PAGE = (ROOT / "book" / "appendix-cite.md").read_text()


def test_citation_file_has_what_the_format_requires():
    assert CFF["cff-version"] == "1.2.0"
    for field in ("message", "title", "authors", "version", "license", "repository-code"):
        assert CFF.get(field), field
    assert all(a.get("name") or a.get("family-names") for a in CFF["authors"])
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(CFF["date-released"]))
    assert CFF["preferred-citation"]["type"] == "book"


def test_citation_matches_the_package_and_the_book():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert CFF["version"] == tinyformer.__version__ == CFF["preferred-citation"]["edition"]
    assert CFF["title"] == config["title"] == CFF["preferred-citation"]["title"]
    assert CFF["repository-code"] == config["repository"]["url"]
    assert str(CFF["preferred-citation"]["year"]) == CFF["date-released"][:4] == str(config["copyright"])


def test_the_page_shows_the_same_entry():
    bibtex = re.search(r"```bibtex\n(.*?)```", PAGE, re.S).group(1)
    fields = dict(re.findall(r"(\w+)\s*=\s*\{+(.*?)\}+,?\n", bibtex))
    cite = CFF["preferred-citation"]
    assert bibtex.startswith("@misc{")  # @book would need a publisher, and print the version as an edition
    assert fields == {"author": cite["authors"][0]["name"], "title": cite["title"], "year": str(cite["year"]),
                      "note": f"Version {cite['edition']}", "howpublished": "\\url{" + cite["url"]}
    plain = re.search(r"```text\n(.*?)```", PAGE, re.S).group(1)
    for value in (cite["authors"][0]["name"], cite["title"], cite["edition"], cite["url"], str(cite["year"])):
        assert value in " ".join(plain.split()), value


def test_the_site_shows_its_version():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert f"tinyformer {tinyformer.__version__}" in config["html"]["extra_footer"]


def test_licences_agree_with_the_licence_file():
    licence = (ROOT / "LICENSE").read_text()
    assert "MIT License" in licence and "Creative Commons Attribution 4.0" in licence
    assert set(CFF["license"]) == {"MIT", "CC-BY-4.0"}
    assert "| code | MIT |" in PAGE and "| text | CC BY 4.0 |" in PAGE
    assert "python-docs-3.11.txt" in licence and "python-docs-3.11.txt" in PAGE
