"""Smoke test of benchmarks/kv_cache.py: it runs, writes its table and compares the same tokens (no
timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "kv_cache.py"


def test_quick_run_writes_the_table(tmp_path):
    out = tmp_path / "table.md"
    run = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    text = out.read_text(encoding="utf-8")
    assert text in run.stdout  # printed as well as written
    assert "| decoding | total (ms) | per token (ms) | speed-up over uncached |" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "ms)" not in line
            and not line.startswith("| ---")]
    assert len(rows) == 6
    assert rows[0].startswith("| uncached: generate(use_cache=False)")
    assert rows[-1].startswith("| + small-kernel settings = generate(use_cache=True)")
    assert "identical tokens in every row: yes" in text and "--quick" in text
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[1]) > 0 and cells[3].endswith("×")
