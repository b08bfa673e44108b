"""The "Running on a GPU" appendix matches the stored measurements it is generated from."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gpu_page", ROOT / "tools" / "gpu_page.py")
gpu_page = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_page)


def test_the_page_is_fresh():
    assert (ROOT / "book" / "appendix-gpu.md").read_text() == gpu_page.page(), "run `python tools/gpu_page.py write`"


def test_the_page_quotes_the_stored_gpu_run():
    h100 = json.loads((ROOT / "lib" / "tinyformer" / "measured" / "h100-ch06.json").read_text())
    run = next(r for r in h100["runs"] if r["name"] == "gpu-branch-b64-400")
    text = " ".join(gpu_page.page().split())
    assert h100["device"] in text
    assert f"took {run['seconds']:.1f} s" in text and f"loss of {run['val_last']:.2f}" in text
    timings = json.loads((ROOT / "book" / "timings.json").read_text())
    assert f"| {timings['10-interp']:.0f} |" in text


def _rows(book):
    return [line for line in gpu_page.page(book=book).splitlines() if line.startswith("| {doc}")]


def test_only_chapters_that_ask_for_the_gpu_are_marked(tmp_path):
    book = tmp_path / "book"
    shutil.copytree(ROOT / "book", book, ignore=shutil.ignore_patterns("*.ipynb", "appendix-*"))
    shutil.copy(ROOT / "book" / "06-training.ipynb", book)
    rows = _rows(book)
    assert len(rows) == 10
    assert [r for r in rows if "GPU size" in r] == [r for r in rows if "<06-training>" in r]
    ch2 = book / "02-attention.md"
    ch2.write_text(ch2.read_text() + "\n```{code-cell} ipython3\nmodel = model.to(get_device())\n```\n")
    rows = _rows(book)
    assert sum("GPU size" in r for r in rows) == 2
    assert any("<02-attention>" in r and "GPU size" in r for r in rows)


def test_a_stored_chapter_7_sweep_replaces_the_note(tmp_path):
    measured = tmp_path / "measured"
    shutil.copytree(ROOT / "lib" / "tinyformer" / "measured", measured)
    assert "no such run is stored" in gpu_page.page(measured=measured)
    sweep = {"device": "Tesla T4", "date": "2027-01-01", "runs": [{}] * 3}
    (measured / "t4-ch07.json").write_text(json.dumps(sweep))
    text = gpu_page.page(measured=measured)
    assert "no such run is stored" not in text and "3 runs on Tesla T4" in text
