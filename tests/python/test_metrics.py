"""CERAR_METRICS_PORT (frameworks/cerar/_metrics.py, cerar._metrics_families): a 4-rank job
scraped by a real Prometheus server, whose series must match the ranks' own stats(); a slowed
rank is the one the others wait for; the transport wait is observed per collective; the data
links' bytes received add up to the bytes sent over every collective, algorithm and link kind;
process sets are counted apart; the link probe's figures and the measured error are exported
(probed or not, measured or not); the Grafana dashboard asks only for exported metrics; a port
in use fails init() naming it."""
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import WORKERS, needs_runtime, run_job
from ports import free_port, free_ports

pytestmark = needs_runtime
DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "cerar.json"
NP, SLOW_RANK, STEPS = 4, 2, 20


def _get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def _query(server, expr):
    """{rank: value} of an instant query whose series carry a rank label."""
    body = json.loads(_get(f"{server}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    return {int(r["metric"]["rank"]): float(r["value"][1]) for r in body["data"]["result"]}


def _wait_for(what, probe, seconds=20.0):
    deadline = time.monotonic() + seconds
    while True:
        try:
            value = probe()
            if value:
                return value
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.25)


def _start_prometheus(tmp, targets):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus server is not installed (scripts/setup.sh test installs it)")
    config = tmp / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: cerar\n"
                      "    static_configs:\n      - targets: [" +
                      ", ".join(f"'127.0.0.1:{port}'" for port in targets) + "]\n")
    port = free_port()
    log = open(tmp / "prometheus.log", "w")
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL)
    return process, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """The job's stats per rank and Prometheus's server URL, while the job still serves."""
    tmp = tmp_path_factory.mktemp("metrics")
    base = free_ports(NP)
    prometheus, server = _start_prometheus(tmp, range(base, base + NP))
    job = subprocess.Popen(
        [sys.executable, "-m", "cerar.run", "-np", str(NP), "--metrics-port", str(base),
         sys.executable, str(WORKERS / "metrics_job.py"), str(tmp), str(SLOW_RANK), str(STEPS)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
        env={**os.environ, "CERAR_LOG_LEVEL": "warning"})
    try:
        files = [tmp / f"stats.{rank}.json" for rank in range(NP)]
        _wait_for("every rank's stats", lambda: job.poll() is None and
                  all(f.exists() for f in files) or job.poll() is not None, 40)
        assert job.poll() is None, f"the job ended early:\n{job.communicate()[0]}"
        stats = {rank: json.loads(f.read_text()) for rank, f in enumerate(files)}
        _wait_for("Prometheus's ready endpoint", lambda: _get(f"{server}/-/ready"))
        yield stats, server
    finally:
        (tmp / "done").touch()
        try:
            output = job.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            job.kill()
            output = job.communicate()[0]
        prometheus.terminate()
        prometheus.wait(timeout=10)
    assert job.returncode == 0, output


def _matching(server, expr, expected):
    """Waits until Prometheus holds `expected` ({rank: value}) for `expr`; returns it."""
    _wait_for(f"{expr} == {expected}", lambda: _query(server, expr) == expected)
    return expected


def test_series_match_the_ranks_stats(scraped):
    stats, server = scraped
    for key, metric in (("bytes_sent", 'cerar_sent_bytes_total{channel="data"}'),
                        ("bytes_received", 'cerar_received_bytes_total{channel="data"}'),
                        ("cycle_time_ms", "cerar_cycle_time_seconds * 1000"),
                        ("fusion_threshold_bytes", "cerar_fusion_threshold_bytes")):
        _matching(server, metric, {r: float(s[key]) for r, s in stats.items()})
    ran = set()
    for algorithm, wires in stats[0]["allreduce_by_algorithm"].items():
        for wire in wires:
            labels = f'algorithm="{algorithm}",wire="{wire}",process_set="0"'
            for field, metric in (("buffers", "cerar_allreduce_buffers_total"),
                                  ("bytes_sent", "cerar_allreduce_sent_bytes_total")):
                expected = {r: float(s["allreduce_by_algorithm"][algorithm][wire][field])
                            for r, s in stats.items()}
                _matching(server, f"{metric}{{{labels}}}", expected)
                if field == "buffers" and any(expected.values()):
                    ran.add((algorithm, wire))
    assert ran, "no all-reduce buffer was counted"
    expected = {r: float(s["tensors_by_kind"]["allreduce"]) for r, s in stats.items()}
    assert set(expected.values()) == {3.0 * STEPS}
    _matching(server, 'cerar_tensors_total{kind="allreduce",process_set="0"}', expected)
    _matching(server, 'cerar_collectives_total{kind="allgather",process_set="0"}',
              {r: 1.0 for r in stats})
    _matching(server, "cerar_transport_wait_seconds_sum",
              {r: s["transport_wait"]["sum"] for r, s in stats.items()})


def test_link_figures_and_measured_error_match_the_ranks_stats(scraped):
    stats, server = scraped
    job = {r: s["link"]["job"] for r, s in stats.items()}
    assert all(figures["probed"] and figures["alpha"] > 0 and figures["beta"] > 0
               for figures in job.values()), job
    assert "local" not in stats[0]["link"]  # one host: no layered job
    labels = '{scope="job",probed="true"}'
    _matching(server, f"cerar_link_latency_seconds{labels}",
              {r: figures["alpha"] for r, figures in job.items()})
    _matching(server, f"cerar_link_bandwidth_bytes_per_second{labels}",
              {r: 1.0 / figures["beta"] for r, figures in job.items()})
    # The probe's verdict and window: one job-wide choice, as every rank's stats say.
    assert len({(f["cpu_bound"], f["window_bytes"]) for f in job.values()}) == 1, job
    _matching(server, "cerar_link_cpu_bound", {r: float(f["cpu_bound"]) for r, f in job.items()})
    _matching(server, "cerar_link_window_bytes",
              {r: float(f["window_bytes"]) for r, f in job.items()})
    # Without CERAR_DEBUG_ERROR nothing is measured: the series exist, at 0.
    for key, metric in (("measured_error_last", "cerar_measured_error"),
                        ("measured_error_max", "cerar_measured_error_max"),
                        ("measured_buffers", "cerar_measured_buffers_total")):
        assert all(s[key] == 0 for s in stats.values()), key
        _matching(server, metric, {r: 0.0 for r in stats})


def _samples(port):
    """{(name, scope): value} of one rank's /metrics, read without a server."""
    from prometheus_client.parser import text_string_to_metric_families
    text = _get(f"http://127.0.0.1:{port}/metrics")
    return {(sample.name, sample.labels.get("scope")): (sample.value, sample.labels)
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_measured_error_and_unprobed_link_figures(tmp_path):
    # An fp16 wire with CERAR_DEBUG_ERROR measures every buffer; with the probe off the link
    # figures are the cost model's defaults, labelled probed="false".
    base = free_ports(2)
    job = subprocess.Popen(
        [sys.executable, "-m", "cerar.run", "-np", "2", sys.executable,
         str(WORKERS / "metrics_job.py"), str(tmp_path), "0", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
        env={**os.environ, "CERAR_LOG_LEVEL": "warning", "CERAR_METRICS_PORT": str(base),
             "CERAR_COMPRESSION": "fp16", "CERAR_DEBUG_ERROR": "1", "CERAR_MEASURE_LINK": "0"})
    try:
        files = [tmp_path / f"stats.{rank}.json" for rank in range(2)]
        _wait_for("every rank's stats", lambda: all(f.exists() for f in files) or
                  job.poll() is not None, 60)
        assert job.poll() is None, f"the job ended early:\n{job.communicate()[0]}"
        for rank, file in enumerate(files):
            stats = json.loads(file.read_text())
            samples = _samples(base + rank)
            assert stats["measured_buffers"] > 0, stats
            assert 0 < stats["measured_error_max"] <= 2 * stats["predicted_error_max"], stats
            for key, name in (("measured_error_last", "cerar_measured_error"),
                              ("measured_error_max", "cerar_measured_error_max"),
                              ("measured_buffers", "cerar_measured_buffers_total"),
                              ("predicted_error_max", "cerar_predicted_error_max")):
                assert samples[(name, None)][0] == stats[key], (name, samples[(name, None)])
            assert stats["link"] == {"job": {"probed": False, "alpha": 50e-6, "beta": 0.8e-9,
                                             "cpu_bound": False, "window_bytes": 0}}
            latency, labels = samples[("cerar_link_latency_seconds", "job")]
            assert latency == 50e-6 and labels["probed"] == "false", labels
            bandwidth, _ = samples[("cerar_link_bandwidth_bytes_per_second", "job")]
            assert bandwidth == 1.0 / 0.8e-9
            assert ("cerar_link_latency_seconds", "local") not in samples
    finally:
        (tmp_path / "done").touch()
        try:
            output = job.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            job.kill()
            output = job.communicate()[0]
    assert job.returncode == 0, output


def test_a_layered_jobs_host_step_has_its_own_scope():
    # A layered job needs several hosts; its stats' "local" figures are rendered here alone.
    from prometheus_client import core
    from prometheus_client.exposition import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from cerar._metrics_families import _Families, _link
    families = _Families(core, ["0", "0", "h"])
    _link(families, {"job": {"probed": True, "alpha": 3e-5, "beta": 2e-9, "cpu_bound": True,
                             "window_bytes": 65536},
                     "local": {"probed": False, "alpha": 5e-6, "beta": 0.0}})

    class Collected:
        def collect(self):
            return families.all()

    registry = core.CollectorRegistry()
    registry.register(Collected())
    text = generate_latest(registry).decode()
    samples = [sample for family in text_string_to_metric_families(text)
               for sample in family.samples]
    # The probe's verdict and window are the job's links' alone: no scope.
    assert {(s.name, s.value) for s in samples if "scope" not in s.labels} == {
        ("cerar_link_cpu_bound", 1.0), ("cerar_link_window_bytes", 65536.0)}
    values = {(sample.name, sample.labels["scope"], sample.labels["probed"]): sample.value
              for sample in samples if "scope" in sample.labels}
    assert values == {("cerar_link_latency_seconds", "job", "true"): 3e-5,
                      ("cerar_link_bandwidth_bytes_per_second", "job", "true"): 1 / 2e-9,
                      ("cerar_link_latency_seconds", "local", "false"): 5e-6,
                      ("cerar_link_bandwidth_bytes_per_second", "local", "false"): math.inf}


def test_the_slowed_rank_is_the_one_the_others_wait_for(scraped):
    stats, server = scraped
    waits = _matching(server, "cerar_negotiation_wait_seconds_sum",
                      {r: s["negotiation_wait"]["sum"] for r, s in stats.items()})
    counts = _query(server, "cerar_negotiation_wait_seconds_count")
    assert all(count >= 3 * STEPS for count in counts.values()), counts
    others = [wait for rank, wait in waits.items() if rank != SLOW_RANK]
    assert waits[SLOW_RANK] < 0.5 * min(others), waits
    # The slow rank's waits sit in the lowest buckets; the others' above the sleep's 30 ms.
    slow = _query(server, 'cerar_negotiation_wait_seconds_bucket{le="0.01"}')
    assert slow[SLOW_RANK] > max(v for r, v in slow.items() if r != SLOW_RANK), slow


def test_transport_wait_histogram(scraped):
    # One observation per fused collective run on the host (a step's 3 tensors may run as one
    # buffer; the allgather is one more); which rank waits least is the C++ test
    # RuntimeInproc.TransportWaitShowsWhoTheOthersWaitFor (a slow link, staged in-process).
    stats, server = scraped
    _matching(server, "cerar_transport_wait_seconds_count",
              {r: float(s["transport_wait"]["count"]) for r, s in stats.items()})
    for rank, s in stats.items():
        wait = s["transport_wait"]
        assert STEPS + 1 <= wait["count"] <= 3 * STEPS + 1, (rank, wait)
        assert sum(wait["buckets"]) == wait["count"] and wait["sum"] >= 0, (rank, wait)


@pytest.mark.parametrize("algorithm,shared_memory", [
    ("ring", "1"), ("cerar", "1"), ("ring", "0"), ("cerar", "0")])
def test_data_bytes_received_add_up_to_bytes_sent(tmp_path, algorithm, shared_memory):
    result = run_job("data_bytes_job.py", np=NP, args=(tmp_path,), timeout=90,
                     env={"CERAR_ALGORITHM": algorithm, "CERAR_SHARED_MEMORY": shared_memory,
                          "CERAR_DYNAMIC_PROCESS_SETS": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    stats = [json.loads((tmp_path / f"stats.{rank}.json").read_text()) for rank in range(NP)]
    assert all(s["shared_memory"] == (shared_memory == "1") for s in stats)
    sent = sum(s["bytes_sent"] for s in stats)
    # 3 all-reduces of >= 200 kB, Adasum, allgather, reducescatter, broadcast, alltoall, pair
    assert sent > 3 * 200_000
    assert sum(s["bytes_received"] for s in stats) == sent
    assert all(s["bytes_received"] > 0 for s in stats)
    ran = "cerar" if algorithm == "cerar" else "ring"
    assert sum(s["allreduce_by_algorithm"][ran]["none"]["buffers"] for s in stats) >= 3 * NP
    # The pair's all-reduce is counted in set 1, on its two ranks only; the rest in set 0.
    for rank, s in enumerate(stats):
        sets = s["by_process_set"]
        assert sets["0"]["units_by_kind"]["allgather"] == 1
        pair = sets.get("1", {}).get("units_by_kind", {}).get("allreduce", 0)
        assert pair == (1 if rank < 2 else 0), (rank, sets)
        for kind, units in s["units_by_kind"].items():
            assert units == sum(c["units_by_kind"][kind] for c in sets.values()), (kind, sets)


def test_dashboard_asks_only_for_exported_metrics(scraped):
    from cerar._metrics_families import BASE_LABELS
    _, server = scraped
    from cerar.runner.elastic_metrics import FAMILIES  # the elastic driver's own exporter
    exported = set(json.loads(_get(f"{server}/api/v1/label/__name__/values"))["data"])
    exported |= {name for name, _, _ in FAMILIES}
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert exprs, "the dashboard has no queries"
    for expr in exprs:
        names = re.findall(r"\bcerar_\w+", expr)
        assert names, f"a query names no cerar metric: {expr}"
        missing = [name for name in names if name not in exported]
        assert not missing, f"{expr}: {missing} not exported"
    rows = _get(f"{server}/api/v1/series?" + urllib.parse.urlencode(
        {"match[]": "cerar_cycles_total"}))
    assert all(label in rows for label in BASE_LABELS), rows


def test_a_port_in_use_fails_init_naming_it(tmp_path):
    base = free_ports(2)
    with socket.socket() as taken:  # local rank 1's port
        taken.bind(("127.0.0.1", base + 1))
        taken.listen()
        result = run_job("metrics_job.py", np=2, args=(tmp_path, 0, 1), timeout=60,
                         env={"CERAR_METRICS_PORT": str(base)})
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"cannot serve metrics on port {base + 1}" in output, output
    assert "CERAR_METRICS_PORT" in output, output


def test_elastic_driver_metrics_and_only_metrics_path():
    from types import SimpleNamespace

    from prometheus_client.parser import text_string_to_metric_families

    from cerar.runner.elastic_metrics import FAMILIES, serve_driver_metrics
    driver = SimpleNamespace(generation=3, plan={"0": {}, "4": {}, "5": {}},
                             hosts=SimpleNamespace(blacklisted=lambda: ["bad"]),
                             resets_by_reason={"failure": 1, "membership": 1},
                             resume_seconds=[2.0, 1.5])
    port = free_port()
    exporter = serve_driver_metrics(driver, port)
    try:
        text = _get(f"http://127.0.0.1:{port}/metrics")
        with pytest.raises(urllib.error.HTTPError, match="404"):
            _get(f"http://127.0.0.1:{port}/")
    finally:
        exporter.close()
    samples = {(s.name, s.labels.get("reason")): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("cerar_elastic_generation", None)] == 3
    assert samples[("cerar_elastic_size", None)] == 3
    assert samples[("cerar_elastic_blacklisted_hosts", None)] == 1
    assert samples[("cerar_elastic_resets_total", "failure")] == 1
    assert samples[("cerar_elastic_last_resume_seconds", None)] == 1.5
    assert samples[("cerar_elastic_resume_seconds_total", None)] == 3.5
    assert {name for name, _ in samples} == {name for name, _, _ in FAMILIES}


def test_a_port_past_65535_fails_naming_it():
    from cerar import _metrics
    from cerar._cerar import InvalidArgumentError
    with pytest.raises(InvalidArgumentError, match=r"65535 \+ local rank 1 = 65536 is outside"):
        _metrics.bind(65535, 1)
    assert _metrics.bind(0, 3) is None  # off: nothing bound
