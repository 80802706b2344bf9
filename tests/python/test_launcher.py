"""cerarrun: argument handling, environment, output prefixes, failure handling."""
import re
import time

import pytest

from conftest import run_job

# Without the extension the session fails (conftest.py) unless skipping is asked for.
run = pytest.importorskip("cerar.run")


def test_parse_hosts_and_assign():
    assert run.parse_hosts(None, 3) == [("localhost", 3)]
    hosts = run.parse_hosts("a:2,b:3", 4)
    assert hosts == [("a", 2), ("b", 3)]
    assert run.assign(hosts, 4) == [(0, "a", 0, 2), (1, "a", 1, 2), (2, "b", 0, 2),
                                    (3, "b", 1, 2)]
    assert run.parse_hosts("a,b", 2) == [("a", 1), ("b", 1)]
    with pytest.raises(ValueError, match="slots"):
        run.parse_hosts("a:1", 2)
    with pytest.raises(ValueError):
        run.parse_hosts("a:x", 1)


def test_parse_args_and_knobs():
    args = run.parse_args(["-np", "2", "--fusion-threshold-mb", "1.5", "--algorithm", "cerar",
                           "--components", "3", "--eps", "0.001", "--timeline", "t.json",
                           "--timeout", "7", "python", "x.py", "--lr", "1"])
    assert args.np == 2 and args.command == ["python", "x.py", "--lr", "1"]
    assert run.knob_env(args) == {
        "CERAR_FUSION_THRESHOLD": str(int(1.5 * 1024 * 1024)), "CERAR_ALGORITHM": "cerar",
        "CERAR_COMPONENTS": "3", "CERAR_EPS": "0.001", "CERAR_TIMELINE": "t.json",
        "CERAR_TIMEOUT_SECONDS": "7.0"}
    with pytest.raises(SystemExit):
        run.parse_args(["-np", "2"])
    with pytest.raises(SystemExit):
        run.parse_args(["-np", "2", "--algorithm", "tree", "true"])


def test_ssh_command():
    env = run.rank_env(3, 4, 1, 2, "head", 1234, "s3cr3t", {"CERAR_ALGORITHM": "ring"})
    cmd = run.ssh_command("node2", env, ["python", "train.py", "a b"], "/work dir", 2222)
    assert cmd[:6] == ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-p"]
    assert cmd[7] == "node2"
    remote = cmd[8]
    assert remote.startswith("IFS= read -r CERAR_SECRET && export CERAR_SECRET && "
                             "cd '/work dir' && exec env ")
    for key in ("CERAR_RANK=3", "CERAR_SIZE=4", "CERAR_LOCAL_RANK=1", "CERAR_LOCAL_SIZE=2",
                "CERAR_RENDEZVOUS_ADDR=head", "CERAR_RENDEZVOUS_PORT=1234",
                "CERAR_ALGORITHM=ring"):
        assert key in remote
    assert remote.endswith("python train.py 'a b' </dev/null")
    # The secret is on no command line, ssh's included: it goes through the remote stdin.
    assert all("s3cr3t" not in part for part in cmd)
    assert run.ssh_stdin(env) == b"s3cr3t\n"


def test_ssh_remote_shell_reads_the_secret_from_stdin(tmp_path):
    import subprocess
    import sys
    env = run.rank_env(0, 1, 0, 1, "head", 1234, "5ecret", {})
    script = "import os; print(os.environ['CERAR_SECRET'], os.environ['CERAR_RANK'])"
    remote = run.ssh_command("node2", env, [sys.executable, "-c", script], str(tmp_path))[-1]
    # What sshd does with the remote string: runs it with the user's shell.
    result = subprocess.run(["sh", "-c", remote], input=run.ssh_stdin(env),
                            capture_output=True, timeout=30)
    assert result.stdout.decode().split() == ["5ecret", "0"], result.stderr


def test_environment_and_prefixes():
    result = run_job("env_echo.py", np=3, launcher_args=["--fusion-threshold-mb", "2",
                                                         "--algorithm", "ring"])
    assert result.returncode == 0, result.stdout + result.stderr
    ports = set()
    for rank in range(3):
        line = next(l for l in result.stdout.splitlines() if l.startswith(f"[{rank}] CERAR_"))
        assert f"CERAR_RANK={rank} CERAR_SIZE=3 CERAR_LOCAL_RANK={rank} CERAR_LOCAL_SIZE=3" in line
        assert "CERAR_RENDEZVOUS_ADDR=127.0.0.1" in line
        assert "CERAR_FUSION_THRESHOLD=2097152" in line and "CERAR_ALGORITHM=ring" in line
        ports.add(re.search(r"CERAR_RENDEZVOUS_PORT=(\d+)", line).group(1))
        assert f"[{rank}] secret_len=32" in result.stdout
        assert f"[{rank}] two\n" in result.stdout and f"[{rank}] lines\n" in result.stdout
    assert len(ports) == 1


def test_failing_rank_terminates_the_others():
    start = time.monotonic()
    # rank 2 exits with 7 at once; the others would sleep 60 s
    result = run_job("env_echo.py", np=4, args=["2", "7", "60"], timeout=30)
    assert result.returncode == 7, result.stdout + result.stderr
    assert time.monotonic() - start < 20
    assert "rank 2 exited with code 7" in result.stderr


def test_max_time():
    result = run_job("env_echo.py", np=2, args=["9", "0", "60"],
                     launcher_args=["--max-time", "1"], timeout=30)
    assert result.returncode == 124
    assert "--max-time" in result.stderr


def test_missing_command_fails():
    result = run_job("does_not_exist.py", np=2, timeout=30)
    assert result.returncode != 0
