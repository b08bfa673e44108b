"""Smoke test of benchmarks/train_english.py: a 5-second budget runs and writes its table (no timing
or loss asserted beyond being finite)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "train_english.py"


def test_quick_run_writes_the_table(tmp_path):
    out = tmp_path / "table.md"
    run = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    text = out.read_text(encoding="utf-8")
    assert text in run.stdout and "--quick" in text
    row = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(row) == 1
    cells = [c.strip().replace(",", "") for c in row[0].strip("|").split("|")]
    assert int(cells[0]) >= 10 and 0 < float(cells[5]) < 10 and float(cells[7]) > 1
