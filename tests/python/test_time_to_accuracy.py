"""Smoke test of the time-to-accuracy bench (bench/time_to_accuracy.py): every variant trains
the toy-sized language model for a few steps on loopback and reports through the driver."""
import json
import subprocess
import sys
from pathlib import Path

from ports import free_port

BENCH = Path(__file__).resolve().parents[2] / "bench"
VARIANTS = ["ddp", "ddp-fp16", "cerar-ring", "cerar-auto", "cerar-budget"]


def driver(tmp_path, *args):
    # A target between the first and the second validation: every variant reaches it. A
    # reserved port: the driver's own choice is an ephemeral one, which concurrent tests share.
    done = subprocess.run(
        [sys.executable, str(BENCH / "time_to_accuracy.py"), "--loopback", "--ranks", "2",
         "--seeds", "1", "--tiny", "--quiet", "--python", sys.executable,
         "--target-loss", "5.77", "--out", str(tmp_path), "--port", str(free_port()), *args],
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((tmp_path / "results.json").read_text())["runs"]


def test_every_variant_trains_and_reports(tmp_path):
    first = driver(tmp_path, "--variants", ",".join(VARIANTS[:-1]))
    # --resume keeps the finished runs and adds only the missing variant.
    runs = driver(tmp_path, "--resume", "--variants", ",".join(VARIANTS))
    assert runs[:-1] == first
    assert [r["variant"] for r in runs] == VARIANTS
    assert runs[-1]["max_error"] == 3e-3
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
    assert all(f"| {v} | 0 |" in table for v in VARIANTS), table  # the table of every run
    # --report-only rewrites the report from results.json alone.
    (tmp_path / "report.md").unlink()
    driver(tmp_path, "--report-only")
    assert (tmp_path / "report.md").read_text() == table
