"""The benchmark harnesses run end to end on the CPU (tiny model), so they never rot between GPU runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_model_throughput_smoke(tmp_path):
    out = tmp_path / "rows.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/model_throughput.py"), "--smoke", "--json", str(out)],
                   check=True, capture_output=True, text=True, cwd=ROOT)
    rows = json.loads(out.read_text())["rows"]
    assert rows[0]["variant"].startswith("official") and rows[0]["precision"] == "fp32"
    fast = rows[1:]
    assert {r["precision"] for r in fast} == {"fp16", "bf16"}
    assert all(r["faces_per_s"] > 0 and r["rel_error"] < 1e-2 for r in fast)
