"""Horovod's timeline (docs/timeline.md): HOROVOD_TIMELINE and HOROVOD_TIMELINE_MARK_CYCLES in
a 2-rank job, and hvd.start_timeline / stop_timeline with Horovod's signature."""
import inspect
import json

import pytest

from conftest import assert_ok, run_job

pytest.importorskip("cerar._cerar")


def _rows(path):
    """The file's complete events by row name, its cycle marks, and row 0's args."""
    events = json.loads(path.read_text())  # a complete JSON array
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    rows = {}
    for e in events:
        if e["ph"] == "X":
            rows.setdefault(names[e["pid"]], []).append(e)
    marks = [e for e in events if e["ph"] == "i"]
    header = next(e["args"] for e in events if e["ph"] == "M" and e["pid"] == 0)
    return rows, marks, header


def _inside(outer, inner):
    return outer["ts"] <= inner["ts"] and \
        inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]


def test_horovod_timeline_is_rank_zeros_with_horovods_names_and_cycle_marks(tmp_path):
    first, second = tmp_path / "tl.json", tmp_path / "second.json"
    result = run_job("timeline_job.py", np=2, args=[second], timeout=60, env={
        "HOROVOD_TIMELINE": str(first), "HOROVOD_TIMELINE_MARK_CYCLES": "1"})
    assert_ok(result, "done", np=2)
    assert "[0] while running: " in result.stdout  # valid JSON before the job ended
    assert sorted(p.name for p in tmp_path.iterdir()) == ["second.json", "tl.json"]

    rows, marks, header = _rows(first)
    assert header["rank"] == 0  # rank 0's file: the other rank wrote none
    events = {e["name"]: e for e in rows["allreduce.grad.w"]}
    assert {"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "MEMCPY_IN_FUSION_BUFFER",
            "MEMCPY_OUT_FUSION_BUFFER"} <= set(events), events
    operation = events["ALLREDUCE"]
    assert operation["args"]["algorithm"] in ("ring", "cerar"), operation
    assert {"0", "1"} <= set(events), events  # each rank's readiness tick, as Horovod's
    for name, event in events.items():
        if name not in ("ALLREDUCE", "NEGOTIATE_ALLREDUCE", "0", "1"):
            assert _inside(operation, event), (name, event, operation)
    assert marks and {m["name"] for m in marks} == {"CYCLE_START"}
    # grad.v ran after start_timeline moved on (rank 1's readiness tick may come before)
    assert {e["name"] for e in rows.get("allreduce.grad.v", [])} <= {"1"}, rows

    rows, marks, _ = _rows(second)
    assert "ALLREDUCE" in {e["name"] for e in rows["allreduce.grad.v"]}
    odd = rows['allreduce.grad."odd"\\name\t\x01']  # escaped in the file, whole once read
    assert {e["cat"] for e in odd} == {'allreduce.grad."odd"\\name\t\x01'}, odd
    assert "allreduce.grad.w" not in rows and not marks  # mark_cycles=False


def test_start_timeline_has_horovods_signature():
    import cerar
    import cerar.torch as hvd
    assert hvd.start_timeline is cerar.start_timeline and hvd.stop_timeline is cerar.stop_timeline
    parameters = inspect.signature(hvd.start_timeline).parameters
    assert list(parameters) == ["file_path", "mark_cycles"]
    assert parameters["mark_cycles"].default is False
