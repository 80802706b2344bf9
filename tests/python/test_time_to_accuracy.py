"""Smoke test of the time-to-accuracy bench (bench/time_to_accuracy.py): every variant trains
the toy-sized language model for a few steps on loopback and reports through the driver."""
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
VARIANTS = ["ddp", "ddp-fp16", "cerar-ring", "cerar-auto"]


def test_every_variant_trains_and_reports(tmp_path):
    # A target between the first and the second validation: every variant reaches it.
    done = subprocess.run(
        [sys.executable, str(BENCH / "time_to_accuracy.py"), "--loopback", "--ranks", "2",
         "--seeds", "1", "--tiny", "--quiet", "--python", sys.executable,
         "--variants", ",".join(VARIANTS), "--target-loss", "5.77", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert [r["variant"] for r in runs] == VARIANTS
    for r in runs:
        assert r["steps"] == 4 and len(r["log"]) == 2, r
        assert r["log"][0]["val_loss"] > r["log"][1]["val_loss"], r  # it learns
        assert r["reached"] and abs(r["seconds_to_target"] - r["log"][1]["train_s"]) < 1e-3, r
    # The same data, weights and averaged gradients: the variants' losses agree closely (fp16
    # wire and CERAR differ from the fp32 sums only in the last bits at this size).
    base = runs[0]["final_val_loss"]
    assert all(abs(r["final_val_loss"] - base) < 1e-2 for r in runs), runs
    table = (tmp_path / "report.md").read_text()
    assert all(f"| {v} |" in table for v in VARIANTS), table
