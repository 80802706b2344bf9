"""horovodrun's command line in cerarrun (frameworks/cerar/runner/horovodrun.py): each flag's effect
on the ranks' variables or the launcher, the YAML --config-file, the warnings and errors, and
one 2-rank job with Horovod's tuning and timeline flags."""
import json
import subprocess
import sys

import pytest

from conftest import run_job

run = pytest.importorskip("cerar.run")
from cerar.runner import launch as _launch  # noqa: E402


def _env(*flags):
    return run.knob_env(run.parse_args(["-np", "2", *flags, "true"]))


def test_horovods_tuning_flags_set_the_ranks_variables_in_horovods_units():
    assert _env("--fusion-threshold-mb", "64", "--cycle-time-ms", "3.5", "--cache-capacity",
                "0", "--timeline-filename", "tl.json", "--timeline-mark-cycles",
                "--gloo-timeout-seconds", "12", "--start-timeout", "9") == {
        "CERAR_FUSION_THRESHOLD": str(64 << 20), "CERAR_CYCLE_TIME": "3.5",
        "CERAR_CACHE_CAPACITY": "0", "CERAR_TIMELINE": "tl.json",
        "CERAR_TIMELINE_MARK_CYCLES": "1", "CERAR_TIMEOUT_SECONDS": "12.0",
        "CERAR_RENDEZVOUS_TIMEOUT_SECONDS": "9.0"}
    assert _env("--autotune", "--autotune-log-file", "a.csv") == {
        "CERAR_AUTOTUNE": "1", "CERAR_AUTOTUNE_LOG": "a.csv"}
    assert _env("--no-autotune", "--no-timeline-mark-cycles") == {
        "CERAR_AUTOTUNE": "0", "CERAR_TIMELINE_MARK_CYCLES": "0"}
    assert _env("--stall-check-warning-time-seconds", "30",
                "--stall-check-shutdown-time-seconds", "90") == {
        "CERAR_STALL_CHECK_TIME_SECONDS": "30.0", "CERAR_STALL_SHUTDOWN_TIME_SECONDS": "90.0"}
    # As in Horovod, disabling the check wins over its time.
    assert _env("--no-stall-check", "--stall-check-warning-time-seconds", "30") == {
        "CERAR_STALL_CHECK_TIME_SECONDS": "0"}
    assert _env("--log-level", "TRACE") == {"CERAR_LOG_LEVEL": "debug"}
    assert _env("--log-level", "fatal") == {"CERAR_LOG_LEVEL": "error"}
    assert _env("--log-level", "INFO") == {"CERAR_LOG_LEVEL": "info"}
    assert _env("--network-interfaces", "eth0,ib0") == {"CERAR_IFACE": "eth0,ib0"}
    assert _env("--network-interface", "ib0", "--network-interface", "eth1") == {
        "CERAR_IFACE": "ib0,eth1"}
    assert _env("--tcp", "--gloo", "--disable-cache", "--log-without-timestamp") == {
        "NCCL_IB_DISABLE": "1"}
    args = run.parse_args(["-np", "3", "-H", "a:2,b:1", "-p", "2222", "-i", "/k/id",
                           "--output-filename", "out", "-prefix-timestamp", "--verbose",
                           "true"])
    assert (args.np, args.hosts, args.ssh_port) == (3, "a:2,b:1", 2222)
    assert run.spawn_options(args) == _launch.SpawnOptions("/k/id", "out", 1, True, True)
    assert run.parse_args(["--num-proc", "2", "--min-num-proc", "1", "--max-num-proc", "4",
                           "--host-discovery-script", "d.sh", "true"]).max_np == 4


def test_start_timeout_defaults_to_horovod_start_timeout(monkeypatch):
    monkeypatch.setenv("HOROVOD_START_TIMEOUT", "45")
    assert _env() == {"CERAR_RENDEZVOUS_TIMEOUT_SECONDS": "45.0"}
    assert _env("--start-timeout", "5") == {"CERAR_RENDEZVOUS_TIMEOUT_SECONDS": "5.0"}


@pytest.mark.parametrize("flags, message", [
    (["--cycle-time-ms", "0"], "--cycle-time-ms 0 must be positive"),
    (["--fusion-threshold-mb", "-1"], "--fusion-threshold-mb -1 must be at least 0"),
    (["--cache-capacity", "-2"], "--cache-capacity -2 must be at least 0"),
    (["--log-level", "LOUD"], "invalid choice"),
    (["--mpi"], "--mpi: cerarrun starts the ranks itself"),
    (["--jsrun"], "--jsrun: cerarrun starts the ranks itself"),
    (["--mpi-args=--map-by ppr:6:node"], "--mpi-args: cerarrun starts the ranks itself"),
])
def test_bad_and_mpi_flags_are_refused(capsys, flags, message):
    with pytest.raises(SystemExit) as stop:
        run.parse_args(["-np", "2", *flags, "true"])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_flags_without_effect_warn_and_change_nothing(capsys):
    flags = ["--hierarchical-allgather", "--num-nccl-streams", "2",
             "--thread-affinity", "1", "--binding-args=--bind-to core",
             "--autotune-bayes-opt-max-samples", "5", "--autotune-gaussian-process-noise", "0.5",
             "--log-with-timestamp"]
    assert _env(*flags) == {}
    err = capsys.readouterr().err
    for flag in run_flags_without_effect():
        assert f"cerarrun: {flag} has no effect here: " in err
    # Asking for what already holds is silent.
    assert _env("--no-hierarchical-allgather", "--mpi-threads-disable", "--stall-check") == {}
    assert capsys.readouterr().err == ""


def test_hierarchical_allreduce_flags_set_the_setting(capsys):
    assert _env("--hierarchical-allreduce") == {"CERAR_HIERARCHICAL_ALLREDUCE": "1"}
    assert _env("--no-hierarchical-allreduce") == {"CERAR_HIERARCHICAL_ALLREDUCE": "0"}
    assert capsys.readouterr().err == ""


def run_flags_without_effect():
    from cerar.runner.horovodrun import NO_EFFECT
    return list(NO_EFFECT)


def test_check_build_and_version_answer_without_np(capsys):
    with pytest.raises(SystemExit) as stop:
        run.parse_args(["--check-build"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    import cerar
    assert out.startswith(f"cerar v{cerar.__version__}:\n\nAvailable Frameworks:\n")
    assert "    [X] PyTorch\n" in out and "    [ ] TensorFlow\n" in out
    assert "Available Controllers:\n    [ ] MPI\n    [X] Gloo\n" in out
    nccl = "X" if cerar.nccl_built() else " "
    assert f"Available Tensor Operations:\n    [{nccl}] NCCL\n" in out
    with pytest.raises(SystemExit) as stop:
        run.parse_args(["-v"])
    assert stop.value.code == 0 and capsys.readouterr().out == f"cerar {cerar.__version__}\n"


def test_config_file_is_horovods_yaml_and_the_command_line_wins(tmp_path, capsys):
    pytest.importorskip("yaml")
    config = tmp_path / "hvd.yaml"
    config.write_text("""
controller: gloo
params:
  fusion_threshold_mb: 32
  cycle_time_ms: 5
  cache_capacity: 256
  hierarchical_allreduce: false
autotune:
  enabled: true
  log_file: tune.csv
  warmup_samples: 2
  steps_per_sample: 4
timeline:
  filename: tl.json
  mark_cycles: true
stall_check:
  enabled: false
  warning_time_seconds: 30
  shutdown_time_seconds: 99
library_options:
  gloo_timeout_seconds: 40
  num_nccl_streams: 2
  ccl_bgt_affinity: 1
logging:
  level: fatal
  colour: loud
""")
    assert _env("--config-file", str(config), "--cycle-time-ms", "9") == {
        "CERAR_FUSION_THRESHOLD": str(32 << 20), "CERAR_CYCLE_TIME": "9.0",
        "CERAR_CACHE_CAPACITY": "256", "CERAR_AUTOTUNE": "1", "CERAR_AUTOTUNE_LOG": "tune.csv",
        "CERAR_AUTOTUNE_WARMUP_SAMPLES": "2", "CERAR_AUTOTUNE_STEPS_PER_SAMPLE": "4",
        "CERAR_TIMELINE": "tl.json", "CERAR_TIMELINE_MARK_CYCLES": "1",
        "CERAR_STALL_CHECK_TIME_SECONDS": "0", "CERAR_STALL_SHUTDOWN_TIME_SECONDS": "99.0",
        "CERAR_TIMEOUT_SECONDS": "40.0", "CERAR_LOG_LEVEL": "error",
        "CERAR_HIERARCHICAL_ALLREDUCE": "0"}
    err = capsys.readouterr().err
    assert "--num-nccl-streams has no effect here" in err
    assert "logging.colour is not Horovod's" in err
    assert "library_options.ccl_bgt_affinity has no effect here" in err
    config.write_text("controller: mpi\n")
    with pytest.raises(SystemExit):
        run.parse_args(["-np", "2", "--config-file", str(config), "true"])
    assert "controller 'mpi': cerarrun starts the ranks itself" in capsys.readouterr().err
    config.write_text("params:\n  cycle_time_ms: fast\n")
    with pytest.raises(SystemExit):
        run.parse_args(["-np", "2", "--config-file", str(config), "true"])
    assert "params.cycle_time_ms: 'fast' is not a float" in capsys.readouterr().err


def test_config_file_without_pyyaml_names_the_package(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml fails
    with pytest.raises(SystemExit):
        run.parse_args(["-np", "2", "--config-file", str(tmp_path / "c.yaml"), "true"])
    assert "python3-yaml" in capsys.readouterr().err


def test_ssh_identity_file_and_hidden_aliases():
    env = {"CERAR_FUSION_THRESHOLD": "0", "CERAR_TIMELINE": "t.json", "CERAR_RANK": "0"}
    assert _launch.shadowed(env) == ["HOROVOD_FUSION_THRESHOLD", "HOROVOD_START_TIMEOUT",
                                     "HOROVOD_TIMELINE"]
    cmd = run.ssh_command("node2", env, ["python", "x.py"], "/w", 22, "/k/id",
                          _launch.shadowed(env))
    assert cmd[:9] == ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-p",
                       "22", "-i", "/k/id"]
    assert ("setsid env -u HOROVOD_FUSION_THRESHOLD -u HOROVOD_START_TIMEOUT "
            "-u HOROVOD_TIMELINE CERAR_") in cmd[-1]


def test_ranks_get_horovodruns_identity_variables():
    from cerar.runner.horovodrun import horovod_identity
    placement = run.assign(run.parse_hosts("a:2,b:1", 3), 3)
    assert [horovod_identity(placement, rank) for rank in range(3)] == [
        {"HOROVOD_HOSTNAME": host, "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": "3",
         "HOROVOD_LOCAL_RANK": str(local), "HOROVOD_LOCAL_SIZE": str(local_size),
         "HOROVOD_CROSS_RANK": str(cross), "HOROVOD_CROSS_SIZE": str(cross_size)}
        for rank, host, local, local_size, cross, cross_size in (
            (0, "a", 0, 2, 0, 2), (1, "a", 1, 2, 0, 1), (2, "b", 0, 1, 1, 2))]


def test_output_filename_prefix_timestamp_and_verbose(tmp_path):
    script = "import sys; print('out', sys.argv[1]); print('err', file=sys.stderr)"
    out = tmp_path / "logs"
    result = subprocess.run(
        [sys.executable, "-m", "cerar.run", "-np", "2", "--output-filename", str(out),
         "--prefix-output-with-timestamp", "--verbose", sys.executable, "-c", script, "a b"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        assert (out / f"rank.{rank}" / "stdout").read_text() == "out a b\n"
        assert (out / f"rank.{rank}" / "stderr").read_text() == "err\n"
        assert f"cerarrun: [{rank}] on localhost: " in result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4 and all(" [0] " in line or " [1] " in line for line in lines)
    assert all(line[:3] in ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun") for line in lines)
    assert "CERAR_SECRET" not in result.stderr


def test_two_ranks_with_horovods_tuning_and_timeline_flags(tmp_path):
    timeline = tmp_path / "tl.json"
    result = run_job("horovodrun_job.py", np=2, timeout=60, launcher_args=[
        "--fusion-threshold-mb", "0", "--cycle-time-ms", "7", "--timeline-filename",
        str(timeline), "--timeline-mark-cycles"],
        # the flag wins, without a both-set warning; cerarrun's own variable stays with it
        env={"HOROVOD_FUSION_THRESHOLD": "123", "HOROVOD_START_TIMEOUT": "30"})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for rank in (0, 1):
        assert (f"[{rank}] fusion_threshold_bytes=0 cycle_time_ms=7 "
                f"HOROVOD_FUSION_THRESHOLD=- HOROVOD_RANK={rank} HOROVOD_SIZE=2") \
            in result.stdout, output
    assert "both set" not in output and "HOROVOD_START_TIMEOUT" not in output
    assert [p.name for p in tmp_path.iterdir()] == ["tl.json"]  # rank 0's file only
    events = json.loads(timeline.read_text())
    rows = {e["pid"]: e["args"]["name"] for e in events
            if e["ph"] == "M" and e["name"] == "process_name"}
    named = {e["name"] for e in events
             if e["ph"] == "X" and rows.get(e["pid"]) == "allreduce.grad.w"}
    assert {"NEGOTIATE_ALLREDUCE", "ALLREDUCE"} <= named, named
    assert any(e["ph"] == "i" and e["name"] == "CYCLE_START" for e in events)
