"""Smoke test of benchmarks/train_throughput.py: it runs and writes its table (no timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "train_throughput.py"
COLUMNS = ["size", "params", "tokens/s", "model GFLOP/s", "matmul GFLOP/s", "fraction", "target", "pass/fail"]


def test_quick_run_writes_the_table(tmp_path):
    out = tmp_path / "table.md"
    run = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    text = out.read_text(encoding="utf-8")
    assert text in run.stdout  # printed as well as written
    header = next(line for line in text.splitlines() if line.startswith("| size"))
    assert [c.strip() for c in header.strip("|").split("|")][:len(COLUMNS)] == COLUMNS
    rows = [line for line in text.splitlines() if line.startswith("| (")]
    assert len(rows) == 2
    # by hand, (a): 65·128 + 64·128 + 4·(4·128² + 4·128 + 2·128·512 + 512 + 128 + 4·128) + 2·128
    assert "| 809,856 |" in rows[0] and "| 10,770,816 |" in rows[1]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[2].replace(",", "")) > 0 and cells[7] in ("pass", "FAIL")
    assert "threads" in text and "--quick" in text
