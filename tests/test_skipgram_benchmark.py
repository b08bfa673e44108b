"""Smoke test of benchmarks/skipgram.py: it runs on a small corpus, beside gensim where installed,
and writes its table (no timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "skipgram.py"


def test_quick_run_writes_the_table(tmp_path):
    out = tmp_path / "table.md"
    run = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    text = out.read_text(encoding="utf-8")
    assert text in run.stdout and "--quick" in text and "50,000 words" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0].startswith("| implementation | seconds | capital (baseline)")
    names = [r.split("|")[1].strip() for r in rows[1:]]
    try:
        import gensim  # noqa: F401
        assert names == ["tinyformer train_skipgram", "gensim Word2Vec"] and "gensim's time" in text
    except ImportError:
        assert names == ["tinyformer train_skipgram"]
    for row in rows[1:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[1]) > 0 and all(c.endswith("%)") for c in cells[2:])
