"""Horovod's variables in a cerarrun job (core/config/settings.cc's aliases, core/config/variable_names.h)."""
import pytest

from conftest import run_job

pytest.importorskip("cerar._cerar")


def test_horovod_variables_set_every_rank_and_the_ignored_ones_are_named_once(tmp_path):
    timeline = tmp_path / "tl.json"
    result = run_job("horovod_env_job.py", np=2, env={
        "HOROVOD_FUSION_THRESHOLD": "0", "HOROVOD_CYCLE_TIME": "7",
        "HOROVOD_TIMELINE": str(timeline), "HOROVOD_HIERARCHICAL_ALLGATHER": "1",
        "HOROVOD_FUSION_TRESHOLD": "0"})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for rank in range(2):
        assert f"[{rank}] fusion_threshold_bytes=0 cycle_time_ms=7" in result.stdout, output
    assert output.count("HOROVOD_HIERARCHICAL_ALLGATHER has no effect here") == 1, output
    assert output.count("did you mean HOROVOD_FUSION_THRESHOLD?") == 1, output
    assert "[cerar rank 1] WARNING: HOROVOD_" not in output, output
    assert [path.name for path in tmp_path.iterdir()] == ["tl.json"]  # rank 0's alone
    assert "ALLREDUCE" in timeline.read_text()
