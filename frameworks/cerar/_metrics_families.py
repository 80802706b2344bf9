"""The metric families of one rank, built from one `Runtime.stats()` copy per scrape
(docs/metrics.md lists them; frameworks/cerar/_metrics.py serves them)."""
import socket

BASE_LABELS = ("rank", "local_rank", "host")


class RuntimeCollector:
    """A prometheus_client collector: every family carries rank, local_rank and host."""

    def __init__(self, runtime, client):
        self._runtime = runtime
        self._core = client.core
        self._base = [str(runtime.rank), str(runtime.local_rank), socket.gethostname()]

    def collect(self):
        stats = self._runtime.stats()
        families = _Families(self._core, self._base)
        _counters(families, stats)
        _breakdowns(families, stats)
        _gauges(families, stats)
        _measured(families, stats)
        _link(families, stats["link"])
        _wait(families, stats["negotiation_wait"])
        _transport_wait(families, stats["transport_wait"])
        return families.all()


class _Families:
    """Families by name, each with the base labels first and its own after them."""

    def __init__(self, core, base):
        self._core, self._base, self._by_name = core, base, {}

    def add(self, metric_type, name, doc, value, **labels):
        family = self._by_name.get(name)
        if family is None:
            cls = {"counter": self._core.CounterMetricFamily,
                   "gauge": self._core.GaugeMetricFamily}[metric_type]
            family = self._by_name[name] = cls(name, doc, labels=[*BASE_LABELS, *labels])
        family.add_metric([*self._base, *labels.values()], value)

    def histogram(self, name, doc, buckets, total):
        family = self._core.HistogramMetricFamily(name, doc, labels=list(BASE_LABELS))
        family.add_metric(self._base, buckets, total)
        self._by_name[name] = family

    def all(self):
        return list(self._by_name.values())


# (metric, stats key, meaning) of the plain counters.
_COUNTERS = (
    ("cerar_cycles_total", "cycles", "Coordinator cycles run."),
    ("cerar_cache_hits_total", "cache_hits", "Requests sent as response cache bits."),
    ("cerar_cache_misses_total", "cache_misses", "Requests sent in full (cache on)."),
    ("cerar_allgather_buffers_total", "allgather_buffers", "Fused allgather buffers run."),
    ("cerar_reducescatter_buffers_total", "reducescatter_buffers",
     "Fused reducescatter buffers run."),
    ("cerar_hierarchical_buffers_total", "hierarchical_buffers",
     "All-reduce buffers reduced host by host."),
    ("cerar_budget_buffers_total", "budget_buffers",
     "All-reduce buffers decided within CERAR_MAX_ERROR."),
    ("cerar_non_finite_fallbacks_total", "non_finite_fallbacks",
     "CERAR buffers run on the exact ring because of NaN, Inf or near-overflow input."),
    ("cerar_wire_fallbacks_total", "wire_fallbacks",
     "Budgeted lossy-wire buffers whose guard sent them on the float32 ring."),
    ("cerar_stall_warnings_total", "stall_warnings",
     "Stall warnings logged (the coordinator rank inspects; 0 elsewhere)."),
)


def _counters(f, stats):
    for name, key, doc in _COUNTERS:
        f.add("counter", name, doc, stats[key])
    # Bytes by channel: the data links, the negotiation's control messages, the store.
    for channel, sent in (("data", "bytes_sent"), ("control", "control_bytes_sent"),
                          ("rendezvous", "rendezvous_bytes_sent")):
        f.add("counter", "cerar_sent_bytes_total", "Bytes this rank sent, by channel.",
              stats[sent], channel=channel)
    for channel, received in (("data", "bytes_received"), ("control", "control_bytes_received"),
                              ("rendezvous", "rendezvous_bytes_received")):
        f.add("counter", "cerar_received_bytes_total", "Bytes this rank received, by channel.",
              stats[received], channel=channel)


def _label(name):
    return name.replace(" ", "_")


def by_process_set(stats):
    """{set id: its counters}: the runtime's per-set breakdowns, with set 0 (every rank) always
    there (zeros before its first collective) so that its series exist from the start."""
    sets = dict(stats["by_process_set"])
    if 0 not in sets:
        sets[0] = {
            "units_by_kind": dict.fromkeys(stats["units_by_kind"], 0),
            "tensors_by_kind": dict.fromkeys(stats["tensors_by_kind"], 0),
            "allreduce_by_algorithm": {
                algorithm: {wire: {"buffers": 0, "bytes_sent": 0} for wire in wires}
                for algorithm, wires in stats["allreduce_by_algorithm"].items()},
        }
    return dict(sorted(sets.items()))


def _breakdowns(f, stats):
    for set_id, counters in by_process_set(stats).items():
        process_set = str(set_id)
        for kind, count in counters["units_by_kind"].items():
            f.add("counter", "cerar_collectives_total",
                  "Collectives (negotiated units) this rank took part in, by kind and process "
                  "set.", count, kind=_label(kind), process_set=process_set)
        for kind, count in counters["tensors_by_kind"].items():
            f.add("counter", "cerar_tensors_total",
                  "Tensors of those collectives, by kind and process set.", count,
                  kind=_label(kind), process_set=process_set)
        for algorithm, wires in counters["allreduce_by_algorithm"].items():
            for wire, cell in wires.items():
                f.add("counter", "cerar_allreduce_buffers_total",
                      "Fused all-reduce buffers as run, by algorithm, wire and process set.",
                      cell["buffers"], algorithm=algorithm, wire=wire, process_set=process_set)
                f.add("counter", "cerar_allreduce_sent_bytes_total",
                      "Bytes this rank sent for fused all-reduce buffers, by algorithm, wire "
                      "and process set.", cell["bytes_sent"], algorithm=algorithm, wire=wire,
                      process_set=process_set)


def _gauges(f, stats):
    f.add("gauge", "cerar_cycle_time_seconds", "The cycle time in force.",
          stats["cycle_time_ms"] / 1000.0)
    f.add("gauge", "cerar_fusion_threshold_bytes", "The fusion threshold in force.",
          stats["fusion_threshold_bytes"])
    f.add("gauge", "cerar_autotuning", "1 while the autotuner samples.",
          float(stats["autotuning"]))
    f.add("gauge", "cerar_autotune_frozen", "1 once the autotuner froze its best parameters.",
          float(stats["autotune_frozen"]))
    f.add("gauge", "cerar_predicted_error",
          "The error budget's predicted relative error of the last lossy or budgeted buffer.",
          stats["predicted_error_last"])
    f.add("gauge", "cerar_predicted_error_max",
          "The largest predicted relative error of any such buffer so far.",
          stats["predicted_error_max"])
    f.add("gauge", "cerar_shared_memory", "1 where the job's data moves through shared memory.",
          float(stats["shared_memory"]))


def _measured(f, stats):
    # Only CERAR_DEBUG_ERROR measures (an exact ring beside each CERAR or lossy-wire buffer);
    # without it the buffers counter stays 0 and so do the gauges.
    f.add("gauge", "cerar_measured_error",
          "Measured relative error of the last CERAR or lossy-wire buffer (CERAR_DEBUG_ERROR).",
          stats["measured_error_last"])
    f.add("gauge", "cerar_measured_error_max",
          "The largest measured relative error of any such buffer so far.",
          stats["measured_error_max"])
    f.add("counter", "cerar_measured_buffers_total",
          "Buffers whose error was measured (0 unless CERAR_DEBUG_ERROR).",
          stats["measured_buffers"])


def _link(f, link):
    # Fixed at start and the same on every rank; scope local only in a layered job.
    for scope, figures in link.items():
        labels = {"scope": scope, "probed": str(figures["probed"]).lower()}
        f.add("gauge", "cerar_link_latency_seconds",
              "The cost model's per-message latency of a round (alpha), by link.",
              figures["alpha"], **labels)
        beta = figures["beta"]
        f.add("gauge", "cerar_link_bandwidth_bytes_per_second",
              "The cost model's bytes per second of a round (1 / beta), by link.",
              1.0 / beta if beta > 0 else float("inf"), **labels)
    job = link["job"]
    f.add("gauge", "cerar_link_cpu_bound",
          "1 where the link probe found the CPU, not a queue, bounds a free stream "
          "(receives are then posted in step); 0 otherwise.", float(job["cpu_bound"]))
    f.add("gauge", "cerar_link_window_bytes",
          "The pacing window of bytes in flight per link the probe set; 0: none.",
          float(job["window_bytes"]))


def _buckets(wait):
    """Prometheus' cumulative buckets of one of the runtime's wait histograms."""
    cumulative, buckets = 0, []
    for bound, count in zip(wait["bounds"], wait["buckets"]):
        cumulative += count
        buckets.append((repr(float(bound)), cumulative))
    buckets.append(("+Inf", wait["count"]))
    return buckets


def _transport_wait(f, wait):
    f.histogram("cerar_transport_wait_seconds",
                "Per collective run on the host: seconds this rank was blocked in the transport "
                "on its peers; large where it waits for a slower rank (a straggler's own is "
                "small).", _buckets(wait), wait["sum"])


def _wait(f, wait):
    buckets = _buckets(wait)
    f.histogram("cerar_negotiation_wait_seconds",
                "Per collective of this rank: seconds from its enqueue to the coordinator's "
                "answer that runs it; large where this rank waits for others (a straggler's "
                "own is small).", buckets, wait["sum"])
