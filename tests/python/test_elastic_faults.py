"""Elastic jobs across emulated hosts under the faults that used to take healthy hosts or the
whole job down (docs/elastic.md, "Blame" and "The driver"): a death while the runtime starts,
a second death during a reset, a link outage shorter than the timeout, a new host whose sshd
accepts and never answers, and a discovery script that hangs or prints garbage. The jobs and
checks are test_elastic.py's (workers/elastic_job.py: exactly-once samples, equal states).
"""
import os
import signal
import subprocess
import time

import pytest

from conftest import needs_runtime
from emulated_hosts import unavailable
# The emulated hosts (one set for this module) and the jobs' clean-up are test_elastic.py's.
from test_elastic import (TIMEOUT, Job, assert_finished_together,  # noqa: F401 (fixtures)
                          assert_synced_states_identical, elastic, hosts, jobs, kill_workers,
                          synced, workers_on)

WHY_NOT = unavailable()
pytestmark = [needs_runtime, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]


def sockets_of(hosts, host, pid):
    """Established TCP connections of process `pid` in `host`'s namespace."""
    out = subprocess.run(["ip", "netns", "exec", hosts.namespace(host), "ss", "-tnpH",
                          "state", "established"], capture_output=True, text=True).stdout
    return sum(f"pid={pid}," in line for line in out.splitlines())


def resets(job):
    return [line for _, line in job.lines if "cerarrun: reset " in line]


def test_a_death_while_the_runtime_starts_takes_out_only_its_host(hosts, jobs, tmp_path):
    job = Job(hosts, tmp_path, [0, 1, 2], elastic())
    jobs.append(job)
    # The victim is in cerar.init(): it holds the store's connection and makes its links.
    deadline = time.monotonic() + 120
    victim = None
    while victim is None and time.monotonic() < deadline:
        victim = next((pid for pid in workers_on(hosts, 1) if sockets_of(hosts, 1, pid) >= 2),
                      None)
        time.sleep(0.05)
    assert victim is not None, job.text()
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    resumed = job.wait_for(synced(job, 4), count=4, timeout=120)
    print(f"kill -9 inside init() -> training at size 4: {resumed - killed:.1f} s")
    assert job.finish() == 0, job.text()
    assert_finished_together(job, 4)
    assert_synced_states_identical(job)
    assert len(resets(job)) == 1 and "size 6 -> 4" in resets(job)[0], job.text()


def test_a_second_death_during_a_reset_keeps_the_survivors(hosts, jobs, tmp_path):
    job = Job(hosts, tmp_path, [0, 1, 2], elastic("--min-np", "2"))
    jobs.append(job)
    job.wait_for(synced(job, 6), count=6, timeout=180)
    first = kill_workers(hosts, 2, count=1)
    job.wait_for(r"cerarrun: reset 1 -> generation 2", after=first, timeout=60)
    time.sleep(0.3)
    kill_workers(hosts, 1, count=1)
    resumed = job.wait_for(synced(job, 2), count=2, after=first, timeout=120)
    print(f"two kills 0.3 s into a reset -> training at size 2: {resumed - first:.1f} s")
    assert job.finish() == 0, job.text()
    assert_synced_states_identical(job)
    assert "holds the job's state survives" not in job.text(), job.text()
    assert {f[5] for f in assert_finished_together(job, 2)} == {hosts.names[0]}, job.text()


def test_an_outage_shorter_than_the_timeout_never_evicts_rank_zeros_host(hosts, jobs, tmp_path):
    job = Job(hosts, tmp_path, [0, 1, 2], elastic())
    jobs.append(job)
    job.wait_for(synced(job, 6), count=6, timeout=180)
    link = ["ip", "netns", "exec", hosts.namespace(2), "ip", "link", "set", "veth0"]
    subprocess.run(link + ["down"], check=True)
    cut = time.monotonic()
    time.sleep(0.7 * TIMEOUT)
    subprocess.run(link + ["up"], check=True)
    again = job.wait_for(r"SYNCED \d+ [46] \d+ ", after=cut, timeout=120)
    print(f"{0.7 * TIMEOUT:g} s outage -> training again: {again - cut:.1f} s")
    assert job.finish(timeout=180) == 0, job.text()
    size = sum("FINAL " in line for _, line in job.lines)
    finals = assert_finished_together(job, size)
    assert_synced_states_identical(job)
    # rank 0's host and the other healthy one stay; at most the cut host's two ranks go
    assert size in (4, 6) and {f[5] for f in finals} >= {hosts.names[0], hosts.names[1]}, \
        job.text()
    print(f"7 s outage: resets {resets(job)}; final size {len(finals)}")


def test_a_new_host_whose_sshd_never_answers_is_given_up(hosts, jobs, tmp_path):
    sshd = hosts._sshd[2]
    # The start timeout also bounds the first generation's start: 15 s leaves room for 4
    # workers importing torch on a loaded 2-core machine.
    job = Job(hosts, tmp_path, [0, 1], ["-np", "4", "--min-np", "2", "--max-np", "6",
                                        "--elastic-start-timeout", "15"])
    jobs.append(job)
    job.wait_for(synced(job, 4), count=4, timeout=180)
    os.kill(sshd.pid, signal.SIGSTOP)
    try:
        added = time.monotonic()
        job.list_hosts([0, 1, 2])
        given_up = job.wait_for(r"did not join within 15 s", after=added, timeout=60)
        resumed = job.wait_for(synced(job, 4), count=4, after=added, timeout=60)
        print(f"silent sshd listed -> given up {given_up - added:.1f} s, training at size 4 "
              f"{resumed - added:.1f} s")
        assert job.finish() == 0, job.text()
    finally:
        os.kill(sshd.pid, signal.SIGCONT)
    assert_finished_together(job, 4)
    assert_synced_states_identical(job)


def test_a_hanging_or_garbled_discovery_leaves_nothing_and_changes_nothing(hosts, jobs,
                                                                          tmp_path):
    job = Job(hosts, tmp_path, [0, 1], ["-np", "4", "--min-np", "2"])
    jobs.append(job)
    job.wait_for(synced(job, 4), count=4, timeout=180)
    listing = job.listing.read_text()
    job.listing.write_text("WARNING: cache stale\n" + listing)
    job.wait_for(r"ignoring line 1: bad .*'WARNING: cache stale'", timeout=30)
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {job.listing}\nsleep 47.25 &\nsleep 48.25\n")
    job.wait_for(r"host discovery failed \(took more than 10 s\)", timeout=60)
    job.listing.write_text("")
    script.write_text(f"#!/bin/sh\ncat {job.listing}\n")
    job.wait_for(r"printed no host \(exit 0\): taken as no change", timeout=60)
    job.listing.write_text(listing)
    assert job.finish() == 0, job.text()
    assert not resets(job), job.text()
    left = subprocess.run(["pgrep", "-f", "sleep 4[78].25"], capture_output=True, text=True)
    assert not left.stdout.strip(), left.stdout
