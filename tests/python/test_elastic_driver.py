"""cerarrun's elastic driver: host discovery, blacklist and placement (pure), its flags, and
local jobs of fake workers (workers/elastic_fake.py: the store protocol, no runtime) on two
names of this host, localhost and 127.0.0.1, so that one can be blacklisted or dropped."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import WORKERS

run = pytest.importorskip("cerar.run")
from cerar.runner import elastic_hosts as eh  # noqa: E402

# -- discovery --------------------------------------------------------------------------------


def test_parse_discovery_lines_and_defaults():
    text = "a:2\n\n  b  \n[::1]:3\nfe80::1\n[::2]\na:2\ndrained:0\n"
    assert eh.parse_discovery(text, 4) == [("a", 2), ("b", 4), ("::1", 3), ("fe80::1", 4),
                                          ("::2", 4)]
    assert eh.parse_discovery("", 1) == []


@pytest.mark.parametrize("text, error", [
    ("a:x", "line 1: bad slot count in 'a:x'"), ("ok:1\na:-1", "line 2: bad host 'a:-1'"),
    (":2", "bad host"), ("a:1\nb\na:2", "line 3: host 'a' listed twice, with 1 and 2 slots"),
    ("a b:1", "bad host"), ("[::1]x", "bad slot count")])
def test_parse_discovery_errors(text, error):
    with pytest.raises(ValueError, match=error.replace("[", r"\[")):
        eh.parse_discovery(text, 1)


def _any_name(host):
    return True


def test_script_discovery_output_failure_and_timeout():
    assert eh.ScriptDiscovery("printf 'h1:2\\nh2\\n'", 3, resolves=_any_name).find() == [
        ("h1", 2), ("h2", 3)]
    with pytest.raises(ValueError, match="exited with code 3: no hosts here"):
        eh.ScriptDiscovery("echo no hosts here >&2; exit 3", 1).find()
    with pytest.raises(ValueError, match="took more than 0.2 s"):
        eh.ScriptDiscovery("sleep 5", 1, timeout=0.2).find()
    with pytest.raises(ValueError, match="line 1"):
        eh.ScriptDiscovery("echo h:zero", 1).find()


def test_lines_that_are_not_hosts_are_left_out_with_a_warning_once():
    rejected = []
    text = "Warning: slow API\nh1:2\n# cached\nh-2\nbad host:1\n-x\n[::1]\n"
    assert eh.parse_discovery(text, 1, rejected) == [("h1", 2), ("h-2", 1), ("::1", 1)]
    assert [why.split(":")[0] for why in rejected] == ["line 1", "line 3", "line 5", "line 6"]
    lines = []
    script = eh.ScriptDiscovery("printf 'localhost:2\\nnot a host\\nno-such-host.invalid\\n'",
                                1, log=lines.append)
    assert script.find() == [("localhost", 2)]
    assert script.find() == [("localhost", 2)]
    assert lines == ["cerarrun: host discovery: ignoring line 2: bad host 'not a host' "
                     "(expected host:slots or host)",
                     "cerarrun: host discovery: ignoring host 'no-such-host.invalid': its name "
                     "does not resolve"]
    with pytest.raises(ValueError, match="no valid host in its output"):
        eh.ScriptDiscovery("echo 'error: quota'", 1, log=lines.append).find()


def _left(token):
    """Processes whose command line holds `token` (a unique sleep length)."""
    found = subprocess.run(["pgrep", "-f", token], capture_output=True, text=True)
    return found.stdout.split()


def test_a_hanging_script_is_killed_with_its_whole_process_group():
    script = eh.ScriptDiscovery("sleep 31.017 & echo h1; sleep 32.017", 1, timeout=0.5,
                                resolves=_any_name)
    with pytest.raises(ValueError, match="took more than 0.5 s"):
        script.find()
    assert _left("31.017") == [] and _left("32.017") == []
    # a run that succeeds leaves nothing behind either
    assert eh.ScriptDiscovery("(sleep 33.017 &); echo h1", 1, resolves=_any_name).find() == [
        ("h1", 1)]
    assert _left("33.017") == []


def test_closing_kills_a_run_in_progress():
    import threading
    import time
    script = eh.ScriptDiscovery("sleep 34.017", 1, timeout=60)
    errors = []
    thread = threading.Thread(target=lambda: errors.append(pytest.raises(ValueError,
                                                                         script.find)))
    thread.start()
    time.sleep(0.5)
    started = time.monotonic()
    script.close()
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - started < 5
    assert _left("34.017") == []
    with pytest.raises(ValueError, match="ending"):
        script.find()


def test_an_empty_listing_is_no_change():
    lines = []
    poller = eh.DiscoveryPoller(eh.ScriptDiscovery("echo h1:2", 1, resolves=_any_name),
                                interval=60, log=lines.append)
    poller.start()
    poller.stop()
    poller._discovery = eh.ScriptDiscovery("true", 1)
    poller.poll_once()
    poller.poll_once()
    assert poller.hosts() == [("h1", 2)]
    assert lines == ["cerarrun: host discovery printed no host (exit 0): taken as no change, "
                     "keeping the last hosts it listed"]


def test_poller_keeps_the_last_good_list_and_logs_a_failure_once():
    answers = [[("a", 1)], ValueError("boom"), ValueError("boom"), [("b", 2)]]

    class Scripted:
        def __init__(self, script=answers):
            self.script = script

        def find(self):
            answer = self.script.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    lines = []
    poller = eh.DiscoveryPoller(Scripted(), interval=60, log=lines.append)
    assert poller.hosts() is None
    poller.start()
    poller.stop()
    poller.poll_once()
    poller.poll_once()
    assert poller.hosts() == [("a", 1)]
    assert lines == ["cerarrun: host discovery failed (boom); keeping the last hosts it listed"]
    poller.poll_once()
    assert poller.hosts() == [("b", 2)] and lines[-1] == "cerarrun: host discovery works again"
    with pytest.raises(ValueError, match=r"host discovery failed \(boom\)"):
        eh.DiscoveryPoller(Scripted([ValueError("boom")])).start()


# -- hosts: order, blacklist, cooldown --------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_stable_order_and_a_relisted_host_goes_last():
    hosts = eh.HostManager()
    assert hosts.update([("a", 2), ("b", 1)]) == (["a", "b"], [])
    # a new listing order changes nothing; a new host is appended; more slots count as added
    assert hosts.update([("c", 1), ("b", 2), ("a", 2)]) == (["b", "c"], [])
    assert hosts.available() == [("a", 2), ("b", 2), ("c", 1)]
    assert hosts.update([("b", 2), ("c", 1)]) == ([], ["a"])
    assert hosts.update([("a", 2), ("b", 2), ("c", 1)]) == (["a"], [])
    assert hosts.available() == [("b", 2), ("c", 1), ("a", 2)]


def test_blacklist_without_cooldown_is_for_good():
    clock = Clock()
    hosts = eh.HostManager(clock=clock)
    hosts.update([("a", 1), ("b", 1)])
    hosts.blacklist("a")
    assert hosts.is_blacklisted("a") and hosts.available() == [("b", 1)]
    clock.now += 1e9
    assert hosts.update([("a", 1), ("b", 1)]) == ([], [])
    assert hosts.available() == [("b", 1)]


def test_cooldown_returns_the_host_last_and_grows_with_failures():
    clock = Clock()
    hosts = eh.HostManager(cooldown_range=(10, 25), clock=clock, draw=lambda: 0.5)
    hosts.update([("a", 1), ("b", 1), ("c", 1)])
    hosts.blacklist("a")  # first failure: 10 * 1.5 = 15 s
    clock.now += 14.9
    assert hosts.update([("a", 1), ("b", 1), ("c", 1)]) == ([], [])
    clock.now += 0.2
    assert hosts.update([("a", 1), ("b", 1), ("c", 1)]) == (["a"], [])
    assert [h for h, _ in hosts.available()] == ["b", "c", "a"]
    hosts.blacklist("a")  # second failure: 20 * 1.5 = 30, capped at 25
    clock.now += 24.9
    assert not hosts.update([("a", 1), ("b", 1), ("c", 1)])[0] and hosts.is_blacklisted("a")
    clock.now += 0.2
    assert hosts.update([("a", 1), ("b", 1), ("c", 1)])[0] == ["a"]
    # a host back from cooldown that discovery no longer lists stays away
    hosts.blacklist("b")
    clock.now += 1000
    assert hosts.update([("a", 1), ("c", 1)]) == ([], [])
    assert eh.cooldown_seconds(1, 2, 100, lambda: 0.0) == 2
    assert eh.cooldown_seconds(3, 2, 100, lambda: 0.99) == pytest.approx(2 * 4 * 1.99)
    assert eh.cooldown_seconds(30, 2, 100, lambda: 0.0) == 100


def test_cooldown_grows_with_failures_in_a_row_only():
    clock = Clock()
    hosts = eh.HostManager(cooldown_range=(10, 1000), clock=clock, draw=lambda: 0.0)
    hosts.update([("a", 1)])
    for out in (10, 20, 40):  # a host that fails each time it returns: 10, 20, 40 s out
        hosts.blacklist("a")
        clock.now += out - 0.1
        assert hosts.is_blacklisted("a")
        clock.now += 0.2
        assert hosts.update([("a", 1)])[0] == ["a"]
    hosts.worked("a")  # it trained in a generation: the next failure is a first again
    hosts.blacklist("a")
    clock.now += 10.1
    assert not hosts.is_blacklisted("a")


def test_blames_are_judged_together():
    from cerar.runner.elastic_blame import judge
    # a death during a start: survivors blame their neighbours; only the dead one goes out
    out, ignored = judge([("0", "1"), ("1", "2"), ("3", "4")], died={"2"}, reporters={"0", "1"})
    assert out == [] and [(r, b) for r, b, _ in ignored] == [("0", "1"), ("3", "4")]
    assert ignored[0][2] == "it reported the failure itself"
    assert ignored[1][2] == "worker 2 died in the same failure"
    # nobody died: a silent peer is blamed and goes out; one that reported is alive
    assert judge([("0", "5"), ("1", "0"), ("4", "5")], died=set(),
                 reporters={"0", "1", "4"}) == (["5"], [("1", "0",
                                                         "it reported the failure itself")])


# -- placement ----------------------------------------------------------------------------------


def test_place_first_generation_fills_hosts_in_order():
    assert eh.place([("a", 2), ("b", 2)], [], 3) == [
        (None, "a", 0, 2), (None, "a", 1, 2), (None, "b", 0, 1)]


def test_place_keeps_survivors_order_and_rank0_is_the_lowest_survivor():
    # rank 0 ("w0" on a) is gone with its host; "w2" (rank 2, on b) is the lowest survivor
    available = [("b", 2), ("c", 2)]
    survivors = [("w2", "b"), ("w3", "b"), ("w4", "c")]
    placement = eh.place(available, survivors, 6)
    assert placement[0][0] == "w2"
    assert [p[0] for p in placement] == ["w2", "w3", "w4", None]
    assert placement[3] == (None, "c", 1, 2)
    # a host back from cooldown is last: its new workers come after every survivor
    placement = eh.place(available + [("a", 2)], survivors, 6)
    assert [p[0] for p in placement] == ["w2", "w3", "w4", None, None, None]
    assert [p[1] for p in placement[3:]] == ["c", "a", "a"]


def test_place_grows_up_to_the_target_and_drops_what_no_longer_fits():
    assert len(eh.place([("a", 4), ("b", 4)], [("w0", "a")], 5)) == 5
    assert len(eh.place([("a", 4), ("b", 4)], [("w0", "a")], 20)) == 8
    # b shrank to one slot: its second survivor is not in the plan
    placement = eh.place([("a", 1), ("b", 1)], [("w0", "a"), ("w1", "b"), ("w2", "b")], 3)
    assert placement == [("w0", "a", 0, 1), ("w1", "b", 0, 1)]


# -- flags --------------------------------------------------------------------------------------


def test_elastic_flags_and_defaults():
    args = run.parse_args(["-np", "4", "--host-discovery-script", "./d.sh", "python", "x.py"])
    assert args.elastic and (args.min_np, args.max_np) == (4, 4)
    assert args.slots_per_host == 1 and args.elastic_timeout == 600.0
    assert args.reset_limit is None and args.blacklist_cooldown_range is None
    args = run.parse_args(["--min-np", "2", "--max-np", "8", "--reset-limit", "3",
                           "--blacklist-cooldown-range", "5", "60", "--slots-per-host", "4",
                           "--elastic-timeout", "30", "true"])
    assert args.np == 2 and (args.min_np, args.max_np) == (2, 8)
    assert args.blacklist_cooldown_range == [5.0, 60.0] and args.reset_limit == 3
    assert not run.parse_args(["-np", "2", "true"]).elastic


@pytest.mark.parametrize("argv, error", [
    (["-np", "2", "--min-np", "3"], "--min-np 3 is above -np 2"),
    (["-np", "4", "--max-np", "3"], "--max-np 3 is below -np 4"),
    (["-np", "2", "--min-np", "0"], "--min-np must be at least 1"),
    (["-np", "2", "--min-np", "1", "--slots-per-host", "0"], "--slots-per-host"),
    (["-np", "2", "--min-np", "1", "--elastic-timeout", "0"], "--elastic-timeout"),
    (["-np", "2", "--min-np", "1", "--reset-limit", "-1"], "--reset-limit"),
    (["-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "9", "3"], "MIN <= MAX"),
    (["--max-np", "3"], "-np is required"),
])
def test_elastic_flag_errors(argv, error, capsys):
    with pytest.raises(SystemExit):
        run.parse_args(argv + ["true"])
    assert error in capsys.readouterr().err


def test_fixed_hosts_are_the_discovery(tmp_path):
    args = run.parse_args(["-np", "4", "--min-np", "2", "-H", "a:1,b:2", "true"])
    assert eh.discovery_of(args).find() == [("a", 1), ("b", 2)]  # fewer than -np slots is fine
    assert eh.discovery_of(run.parse_args(["-np", "3", "--min-np", "2", "true"])).find() == \
        [("localhost", 3)]
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=2\nb\n")
    args = run.parse_args(["-np", "3", "--min-np", "2", "--hostfile", str(hostfile), "true"])
    assert eh.discovery_of(args).find() == [("a", 2), ("b", 1)]


def test_membership_changes_that_make_a_generation():
    from cerar.runner.elastic_driver import ElasticDriver
    from cerar.runner.launch import Worker

    class Running:
        def poll(self):
            return None

    args = run.parse_args(["-np", "3", "--min-np", "1", "--max-np", "4",
                           "--host-discovery-script", "true", "true"])
    hosts = eh.HostManager()
    hosts.update([("a", 2), ("b", 1)])
    driver = ElasticDriver(args, poller=None, hosts=hosts, log=lambda text: None)
    for rank, (worker, host) in enumerate([("0", "a"), ("1", "a"), ("2", "b")]):
        driver.workers[worker] = Worker(worker, host, Running(), None)
        driver.plan[worker] = {"rank": rank, "local_rank": 0, "local_size": 1, "host": host}
    assert driver._membership_change([]) is None
    assert driver._membership_change(["a"]) is None  # no slot beyond the plan's
    hosts.update([("a", 2), ("b", 1), ("c", 1)])
    assert driver._membership_change(["c"]) == "hosts added: c"
    args.max_np = 3
    assert driver._membership_change(["c"]) is None  # already at --max-np
    hosts.update([("a", 1), ("c", 1)])
    assert driver._membership_change([]) == "hosts removed: b; fewer slots on a"
    # survivors that never took part in a sync cannot carry the job on
    from cerar.runner.elastic_driver import JobEnded
    with pytest.raises(JobEnded, match="no worker of generation 0 that holds the job's state"):
        driver._reset("hosts removed: b", 0.0, failure=False)


# -- local jobs of fake workers -----------------------------------------------------------------


def _job(tmp_path, spec, launcher_args, hosts="localhost:1\n127.0.0.1:1\n", timeout=30,
         env=None):
    discovery = tmp_path / "hosts"
    discovery.write_text(hosts)
    spec = {"discovery_file": str(discovery), "timeout": 20, **spec}
    command = [sys.executable, "-m", "cerar.run", *launcher_args,
               "--host-discovery-script", f"cat {discovery}",
               sys.executable, str(WORKERS / "elastic_fake.py"), json.dumps(spec)]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"the elastic job did not end in {timeout} s\nstdout:\n{error.stdout}\n"
                    f"stderr:\n{error.stderr}")


def _pids(stdout):
    return [int(line.split("pid=")[1].split()[0]) for line in stdout.splitlines()
            if "] pid=" in line]


def _gone(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            return any(line.split()[1] == "Z" for line in status if line.startswith("State:"))
    except FileNotFoundError:
        return True


def test_all_workers_finishing_ends_the_job_with_0(tmp_path):
    result = _job(tmp_path, {"finish": 1}, ["-np", "2", "--min-np", "1", "--elastic-timeout",
                                            "7"])
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "[0] gen=1 rank=0 size=2 host=localhost local=0/1" in result.stdout, out
    assert "[1] gen=1 rank=1 size=2 host=127.0.0.1 local=0/1" in result.stdout, out
    assert "[1] pid=" in result.stdout and "first_rank=1 first_size=2 timeout=7.0" in out
    assert "[0] done" in result.stdout and "[1] done" in result.stdout
    assert "reset" not in result.stderr


def test_lost_rank0_survivor_becomes_rank0_and_the_host_returns_after_cooldown(tmp_path):
    result = _job(tmp_path, {"fail": {"1": {"0": 3}}, "finish": 3},
                  ["-np", "2", "--min-np", "1", "--max-np", "2",
                   "--blacklist-cooldown-range", "1", "1"])
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    # the exit and the peer's blame of the dead rank are one failure: one reset
    assert re.search(r"cerarrun: reset 1 -> generation 2: [^\n]*rank 0 on localhost exited "
                     r"with code 3[^\n]*; size 2 -> 1\n", result.stderr), out
    assert ("cerarrun: reset 2 -> generation 3: hosts added: localhost; size 1 -> 2"
            in result.stderr), out
    # worker 1 (rank 1 before) is rank 0; the returning host's new worker 2 is last
    assert "[1] gen=3 rank=0 size=2 host=127.0.0.1" in result.stdout, out
    assert "[2] gen=3 rank=1 size=2 host=localhost" in result.stdout, out
    assert "[2] pid=" in result.stdout and "first_rank=1 first_size=2" in result.stdout
    assert "cerarrun: generation 3 resumed training" in result.stderr, out


def test_a_worker_that_never_joins_fails_its_host_and_the_job_goes_on(tmp_path):
    result = _job(tmp_path, {"hang": ["1"], "finish": 2},
                  ["-np", "2", "--min-np", "1", "--elastic-start-timeout", "1.5"])
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert re.search(r"cerarrun: reset 1 -> generation 2: rank 1 on 127.0.0.1 did not join "
                     r"within 1.5 s \(--elastic-start-timeout\); size 2 -> 1", result.stderr), out
    assert "[0] gen=2 rank=0 size=1 host=localhost" in result.stdout, out
    assert "[0] done" in result.stdout, out


def test_a_death_at_start_blacklists_no_healthy_host(tmp_path):
    # worker 2 dies; its neighbours' reports blame each other's healthy ranks, as survivors of
    # a failed start do: only the dead worker's host goes out
    result = _job(tmp_path, {"fail": {"1": {"2": 3}}, "report": {"1": {"0": 1, "1": 2}},
                             "report_after": 0.6, "finish": 2},
                  ["-np", "3", "--min-np", "1"], hosts="localhost:2\n127.0.0.1:1\n")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert re.search(r"cerarrun: reset 1 -> generation 2: rank 2 on 127.0.0.1 exited with code "
                     r"3; size 3 -> 2\n", result.stderr), out
    # set aside as the blame of a peer that reported itself, or as one beside a death
    assert "cerarrun: not blacklisting localhost: rank 1 blamed by rank 0, but " in out, out
    assert "[0] gen=2 rank=0 size=2 host=localhost" in result.stdout, out
    assert "[1] gen=2 rank=1 size=2 host=localhost" in result.stdout, out


def test_blamed_peer_host_is_blacklisted_in_one_reset(tmp_path):
    result = _job(tmp_path, {"report": {"1": {"0": 1}}, "finish": 2},
                  ["-np", "2", "--min-np", "1"])
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert ("cerarrun: reset 1 -> generation 2: rank 1 on 127.0.0.1 blamed by rank 0; "
            "size 2 -> 1") in result.stderr, out
    assert result.stderr.count("reset ") == 1, out  # worker 1's termination is no new event
    assert "[0] gen=2 rank=0 size=1" in result.stdout
    assert "generation 2 resumed training" in result.stderr


def test_discovery_grows_then_drops_a_host(tmp_path):
    spec = {"write": {"1": "localhost:1\n127.0.0.1:1\n", "2": "127.0.0.1:1\n"}, "finish": 3}
    result = _job(tmp_path, spec, ["-np", "1", "--max-np", "2"], hosts="localhost:1\n")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "reset 1 -> generation 2: hosts added: 127.0.0.1; size 1 -> 2" in result.stderr, out
    assert "reset 2 -> generation 3: hosts removed: localhost; size 2 -> 1" in result.stderr, out
    assert "[1] gen=2 rank=1 size=2 host=127.0.0.1" in result.stdout, out
    assert "[0] left gen=3" in result.stdout and "[1] gen=3 rank=0 size=1" in result.stdout


def test_a_remote_worker_runs_through_the_ssh_path(tmp_path):
    # 192.0.2.1 (TEST-NET-1) is never this host: its worker starts over "ssh", here a stand-in
    # that runs the remote command line locally (the secret on its input, as with sshd)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").symlink_to(WORKERS / "fake_ssh.sh")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    # rank 0 blames the remote rank: the driver stops it by closing its ssh input
    result = _job(tmp_path, {"report": {"1": {"0": 1}}, "finish": 2},
                  ["-np", "2", "--min-np", "1", "--rendezvous-addr", "127.0.0.1"],
                  hosts="localhost:1\n192.0.2.1:1\n", env=env)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "[1] gen=1 rank=1 size=2 host=192.0.2.1 local=0/1" in result.stdout, out
    assert ("reset 1 -> generation 2: rank 1 on 192.0.2.1 blamed by rank 0; size 2 -> 1"
            in result.stderr), out
    assert "[0] gen=2 rank=0 size=1" in result.stdout and "[0] done" in result.stdout
    pids = _pids(result.stdout)
    assert len(pids) == 2 and all(_gone(pid) for pid in pids), out


def test_below_min_np_past_the_elastic_timeout_fails_the_job(tmp_path):
    result = _job(tmp_path, {"fail": {"1": {"1": 3}}},
                  ["-np", "2", "--min-np", "2", "--elastic-timeout", "1"])
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert ("cerarrun: only 1 slot (below --min-np 2) for 1 s (--elastic-timeout); "
            "stopping the job") in result.stderr, out
    pids = _pids(result.stdout)
    assert len(pids) == 2 and all(_gone(pid) for pid in pids), out


def test_past_the_reset_limit_fails_the_job(tmp_path):
    # reset 1: rank 1's failure; reset 2 would be its host's return after the cooldown
    result = _job(tmp_path, {"fail": {"1": {"1": 3}}},
                  ["-np", "2", "--min-np", "1", "--reset-limit", "1",
                   "--blacklist-cooldown-range", "0.5", "0.5"])
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert re.search(r"reset 1 -> generation 2: [^\n]*rank 1 on 127.0.0.1 exited with code 3"
                     r"[^\n]*; size 2 -> 1\n", result.stderr), out
    assert ("cerarrun: reset 2 (hosts added: 127.0.0.1) would pass --reset-limit 1; "
            "stopping the job") in result.stderr, out
    pids = _pids(result.stdout)
    assert len(pids) == 2 and all(_gone(pid) for pid in pids), out


def test_no_survivor_stops_the_job_with_the_workers_code(tmp_path):
    # one host: its failing worker takes the other down with it, and no state is left to sync
    result = _job(tmp_path, {"fail": {"1": {"0": 5}}}, ["-np", "2", "--min-np", "1"],
                  hosts="localhost:2\n")
    out = result.stdout + result.stderr
    assert result.returncode == 5, out
    assert re.search(r"cerarrun: no worker of generation 1 that holds the job's state survives "
                     r"\([^\n]*rank 0 on localhost exited with code 5[^\n]*\); stopping the "
                     r"job\n", result.stderr), out
    assert "reset" not in result.stderr


def test_a_failure_after_a_worker_finished_ends_the_job_with_its_code(tmp_path):
    result = _job(tmp_path, {"fail": {"1": {"1": 6}}, "finish": 1, "hold": 0},
                  ["-np", "2", "--min-np", "1"])
    out = result.stdout + result.stderr
    assert result.returncode == 6, out
    assert "[0] done" in result.stdout
    assert ("cerarrun: rank 1 on 127.0.0.1 exited with code 6 after others finished; "
            "terminating the others") in result.stderr, out
    assert "reset" not in result.stderr


def test_a_report_after_a_worker_finished_ends_the_job(tmp_path):
    # no new generation comes once a worker is done: the reporter must not wait in vain
    result = _job(tmp_path, {"report": {"1": {"1": None}}, "report_after": 0.5, "finish": 1,
                             "hold": 0}, ["-np", "2", "--min-np", "1"])
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert ("cerarrun: rank 1 on 127.0.0.1 reported a failure after others finished (fake "
            "failure); terminating the others") in result.stderr, out
    assert "reset" not in result.stderr


def test_max_time_stops_every_worker(tmp_path):
    result = _job(tmp_path, {}, ["-np", "2", "--min-np", "1", "--max-time", "1"])
    out = result.stdout + result.stderr
    assert result.returncode == 124, out
    assert "the job ran past --max-time 1 s" in result.stderr
    pids = _pids(result.stdout)
    assert len(pids) == 2 and all(_gone(pid) for pid in pids), out


def test_a_discovery_failing_from_the_start_stops_the_job_at_once():
    command = [sys.executable, "-m", "cerar.run", "-np", "1", "--host-discovery-script",
               "echo down >&2; exit 2", "true"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == "cerarrun: host discovery failed (exited with code 2: down)"


def test_too_few_slots_at_the_start_time_out(tmp_path):
    command = [sys.executable, "-m", "cerar.run", "-np", "3", "--min-np", "2",
               "--host-discovery-script", "echo localhost:1", "--elastic-timeout", "1", "true"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == ("cerarrun: only 1 slot (below --min-np 2) for 1 s "
                                     "(--elastic-timeout); stopping the job")
