"""Smoke test of benchmarks/bpe.py: it runs on a small text, beside Hugging Face tokenizers, and
writes its table (no timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bpe.py"


def test_quick_run_writes_the_table(tmp_path):
    out = tmp_path / "table.md"
    run = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    text = out.read_text(encoding="utf-8")
    assert text in run.stdout and "--quick" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0].startswith("| tokenizer |")
    names = [r.split("|")[1].strip() for r in rows[1:]]
    assert names == ["tinyformer BPETokenizer", "Hugging Face tokenizers"]
    for row in rows[1:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == "1,000" and 0 < float(cells[5]) < 1   # fewer tokens than bytes
    assert "Ours / Hugging Face" in text
