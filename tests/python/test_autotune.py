"""CERAR_AUTOTUNE across 4 processes: ranks started with different local tuning settings end
with the coordinator's parameters, identical everywhere; only rank 0 writes the log."""
import csv
import json
import re

from conftest import assert_ok, needs_runtime, run_job

pytestmark = needs_runtime


def test_ranks_with_different_tuning_settings_end_identical(tmp_path):
    result = run_job("autotune_job.py", np=4, args=[tmp_path], timeout=240)
    assert_ok(result, "autotune OK")
    found = dict(re.findall(r"\[(\d)\] PARAMS (\{.*\}) steps=\d+", result.stdout))
    assert sorted(found) == ["0", "1", "2", "3"], result.stdout
    params = [json.loads(found[str(r)]) for r in range(4)]
    assert all(p == params[0] for p in params), params
    assert params[0]["autotune_frozen"] and not params[0]["autotuning"], params[0]

    # Ranks 1 and 2 had their own settings and were told the job's.
    log = result.stdout + result.stderr
    for rank, setting in (("1", "CERAR_AUTOTUNE"), ("1", "CERAR_CYCLE_TIME"),
                          ("2", "CERAR_AUTOTUNE_LOG"), ("2", "CERAR_AUTOTUNE_STEPS_PER_SAMPLE")):
        assert re.search(rf"\[{rank}\][^\n]*job-wide setting {setting}:", log), (setting, log)

    # Rank 0's log: a header, one line per sample (its one warm-up first), then the best point,
    # which is the one every rank ended with.
    assert not (tmp_path / "rank2.csv").exists()
    rows = list(csv.DictReader(open(tmp_path / "rank0.csv")))
    samples, best = rows[:-1], rows[-1]
    assert [r["warmup"] for r in samples[:2]] == ["1", "0"], rows
    assert [int(r["sample"]) for r in samples] == list(range(len(samples)))
    # Four sweeps: 9 thresholds, 5 new cycle times, the thresholds again at the best cycle
    # time (none new if that is the first sweep's), 5 new scales of c; no point twice.
    assert len(samples) in (1 + 9 + 5 + 5, 1 + 9 + 5 + 8 + 5), rows
    points = [(r["fusion_threshold_bytes"], r["cycle_time_ms"], r["components_scale"])
              for r in samples[1:]]
    assert len(set(points)) == len(points), points
    assert all(float(r["score_bytes_per_second"]) > 0 for r in rows)
    assert best["sample"] == "best"
    assert int(best["fusion_threshold_bytes"]) == params[0]["fusion_threshold_bytes"]
    assert float(best["cycle_time_ms"]) == params[0]["cycle_time_ms"]
    assert float(best["components_scale"]) == params[0]["components_scale"]
    scored = [r for r in samples if r["warmup"] == "0"]
    top = max(scored, key=lambda r: float(r["score_bytes_per_second"]))
    assert (top["fusion_threshold_bytes"], top["cycle_time_ms"], top["components_scale"]) == \
        (best["fusion_threshold_bytes"], best["cycle_time_ms"], best["components_scale"])

    # The timelines of rank 0 and rank 3 (a rank that does not tune) show the same periods of
    # parameters and the freeze at the final point.
    final = {k: params[0][k] for k in ("fusion_threshold_bytes", "cycle_time_ms",
                                       "components_scale")}
    seen = []
    for rank in (0, 3):
        events = json.load(open(tmp_path / f"timeline{rank}.json"))
        tuning = [e for e in events if e.get("cat") == "cerar.autotune"]
        periods = [{k: e["args"][k] for k in final} for e in tuning if e["name"] == "PARAMETERS"]
        frozen = [e["args"] for e in tuning if e["name"] == "FROZEN"]
        assert len(frozen) == 1 and {k: frozen[0][k] for k in final} == final, tuning
        assert len(periods) >= len(samples) - 2, periods
        seen.append(periods)
    assert seen[0] == seen[1]
