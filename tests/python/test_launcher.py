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
    args = run.parse_args(["-np", "2", "--network-interfaces", "ib0,eth0", "true"])
    assert run.knob_env(args) == {"CERAR_IFACE": "ib0,eth0"}
    args = run.parse_args(["-np", "2", "--autotune", "--autotune-log-file", "tune.csv",
                           "--autotune-warmup-samples", "0", "--autotune-steps-per-sample", "4",
                           "true"])
    assert run.knob_env(args) == {
        "CERAR_AUTOTUNE": "1", "CERAR_AUTOTUNE_LOG": "tune.csv",
        "CERAR_AUTOTUNE_WARMUP_SAMPLES": "0", "CERAR_AUTOTUNE_STEPS_PER_SAMPLE": "4"}
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
    assert remote.startswith("IFS= read -r CERAR_SECRET || exit 1; export CERAR_SECRET; "
                             "cd '/work dir' || exit 1; exec 3<&0; setsid env ")
    for key in ("CERAR_RANK=3", "CERAR_SIZE=4", "CERAR_LOCAL_RANK=1", "CERAR_LOCAL_SIZE=2",
                "CERAR_RENDEZVOUS_ADDR=head", "CERAR_RENDEZVOUS_PORT=1234",
                "CERAR_ALGORITHM=ring"):
        assert key in remote
    assert "python train.py 'a b' </dev/null 3<&- & pid=$!" in remote
    assert remote.endswith("wait $pid; rc=$?; kill $watch 2>/dev/null; exit $rc")
    # The secret is on no command line, ssh's included: it goes through the remote stdin.
    assert all("s3cr3t" not in part for part in cmd)
    assert run.ssh_stdin(env) == b"s3cr3t\n"


def _remote_shell(env, script, cwd):
    """What sshd does with ssh_command's remote string: runs it with the user's shell, its
    input being ssh's."""
    import subprocess
    import sys
    remote = run.ssh_command("node2", env, [sys.executable, "-c", script], str(cwd))[-1]
    return subprocess.Popen(["sh", "-c", remote], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_ssh_remote_shell_reads_the_secret_from_stdin(tmp_path):
    env = run.rank_env(0, 1, 0, 1, "head", 1234, "5ecret", {})
    shell = _remote_shell(env, "import os, sys; print(os.environ['CERAR_SECRET'], "
                          "os.environ['CERAR_RANK']); sys.exit(3)", tmp_path)
    shell.stdin.write(run.ssh_stdin(env))
    shell.stdin.flush()
    out = shell.stdout.read()  # to the end, with the input still open (as ssh keeps it)
    assert shell.wait(timeout=30) == 3, shell.stderr.read()  # the rank's code, which ssh returns
    assert out.decode().split() == ["5ecret", "0"]
    shell.stdin.close()


def test_ssh_remote_rank_stops_when_its_input_closes(tmp_path):
    # The launcher closes ssh's input when it stops the job (or dies): the rank must end.
    env = run.rank_env(0, 1, 0, 1, "head", 1234, "5ecret", {})
    marker = tmp_path / "pid"
    shell = _remote_shell(env, f"import os, time; open({str(marker)!r}, 'w').write("
                          "str(os.getpid())); time.sleep(600)", tmp_path)
    shell.stdin.write(run.ssh_stdin(env))
    shell.stdin.flush()
    deadline = time.monotonic() + 30
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(marker.read_text())
    shell.stdin.close()
    assert shell.wait(timeout=30) == 128 + 15  # the rank got SIGTERM
    import os
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_hostfile_exports_and_forwarding(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# Horovod's format\nnode1 slots=2\n\nnode2  slots=3  # big\nnode3\n")
    assert run.parse_hostfile(str(hostfile), 5) == [("node1", 2), ("node2", 3), ("node3", 1)]
    hostfile.write_text("node1 gpus=2\n")
    with pytest.raises(ValueError, match="slots=N"):
        run.parse_hostfile(str(hostfile), 1)
    args = run.parse_args(["-np", "2", "--hostfile", "f", "-x", "A", "-x", "B=1", "true"])
    assert args.hostfile == "f" and args.export == ["A", "B=1"]
    with pytest.raises(SystemExit):  # -H and --hostfile exclude each other
        run.parse_args(["-np", "2", "-H", "a:2", "--hostfile", "f", "true"])
    assert run.exported(["A", "B=x=y"], {"A": "1"}) == {"A": "1", "B": "x=y"}
    with pytest.raises(ValueError, match="not set"):
        run.exported(["MISSING"], {})
    with pytest.raises(ValueError, match="not a variable"):
        run.exported(["A-B=1"], {})
    environ = {"CERAR_ALGORITHM": "ring", "NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "eth1",
               "HOROVOD_GLOO_IFACE": "eth1", "PYTHONPATH": "/p", "PATH": "/bin", "HOME": "/r",
               "LD_LIBRARY_PATH": "/l"}
    assert sorted(run.forwarded(environ)) == ["CERAR_ALGORITHM", "GLOO_SOCKET_IFNAME",
                                              "HOROVOD_GLOO_IFACE", "NCCL_DEBUG", "PYTHONPATH"]


def test_local_hosts_and_route_source():
    import socket
    assert run.is_local("localhost") and run.is_local(socket.gethostname())
    assert run.is_local("127.0.0.1")
    assert not run.is_local("192.0.2.1")  # TEST-NET-1: never an address of this host
    assert not run.is_local("no-such-host.invalid")
    assert run.route_source("127.0.0.1") == "127.0.0.1"
    with pytest.raises(ValueError, match="cannot resolve host 'no-such-host.invalid'"):
        run.route_source("no-such-host.invalid")


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


def test_the_launcher_answers_to_each_of_its_names():
    """`cerar.run` (its first name) is cerar.runner.cli itself; `python -m cerar.runner` and
    `python -m cerar.run` are cerarrun."""
    import subprocess
    import sys
    from cerar.runner import cli
    assert run is cli
    for module in ("cerar.run", "cerar.runner"):
        result = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert "--hostfile" in result.stdout
