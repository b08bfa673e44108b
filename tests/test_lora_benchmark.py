"""Smoke test of benchmarks/lora_step.py: it runs and writes its table (no timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "lora_step.py"


def test_quick_run_writes_the_table(tmp_path):
    out = tmp_path / "table.md"
    run = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    text = out.read_text(encoding="utf-8")
    assert text in run.stdout
    rows = [line for line in text.splitlines()
            if line.startswith("| ") and not line.startswith(("| ---", "| measured"))]
    assert len(rows) == 5                                    # three training steps, two forward passes
    assert rows[0].startswith("| training step, batch 2 | full fine-tuning |") and rows[0].endswith("| 1.00× |")
    assert rows[3].startswith("| forward pass, batch 2 | LoRA r 8, all six maps, merged |")
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[2]) > 0 and cells[3].endswith("×")
    assert "--quick" in text
