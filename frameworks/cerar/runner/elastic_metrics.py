"""The elastic driver's Prometheus metrics (cerarrun --elastic-metrics-port; docs/metrics.md):
served by a daemon thread of the launcher, read from the driver's fields when scraped."""
import socket

from cerar import _metrics

# (metric, kind, meaning), every one the driver exports (the dashboard test checks its queries
# against these).
FAMILIES = (
    ("cerar_elastic_generation", "gauge", "The current generation (1 at start)."),
    ("cerar_elastic_size", "gauge", "Ranks in the current generation's plan."),
    ("cerar_elastic_resets_total", "counter", "Resets (new generations after the first), by "
     "reason: failure (a worker failed) or membership (hosts added or dropped)."),
    ("cerar_elastic_blacklisted_hosts", "gauge", "Hosts blacklisted now."),
    ("cerar_elastic_last_resume_seconds", "gauge",
     "Seconds from the last reset's event to the new generation's training."),
    ("cerar_elastic_resume_seconds_total", "counter", "Those seconds summed over the resets."),
)
REASONS = ("failure", "membership")


class DriverCollector:
    def __init__(self, driver, client):
        self._driver, self._core = driver, client.core
        self._host = socket.gethostname()

    def collect(self):
        d, core, host = self._driver, self._core, [self._host]
        resumes = list(d.resume_seconds)
        values = {
            "cerar_elastic_generation": d.generation,
            "cerar_elastic_size": len(d.plan),
            "cerar_elastic_blacklisted_hosts": len(d.hosts.blacklisted()),
            "cerar_elastic_last_resume_seconds": resumes[-1] if resumes else 0.0,
            "cerar_elastic_resume_seconds_total": sum(resumes),
        }
        for name, kind, doc in FAMILIES:
            cls = core.CounterMetricFamily if kind == "counter" else core.GaugeMetricFamily
            if name == "cerar_elastic_resets_total":
                family = cls(name, doc, labels=["host", "reason"])
                for reason in REASONS:
                    family.add_metric([*host, reason], d.resets_by_reason[reason])
            else:
                family = cls(name, doc, labels=["host"])
                family.add_metric(host, values[name])
            yield family


def serve_driver_metrics(driver, port):
    """The driver's exporter on `port`, serving; None when port is 0 or None. JobEnded (exit 2)
    naming the port when it cannot be bound."""
    from cerar.runner.elastic_generations import JobEnded
    if not port:
        return None
    try:
        exporter = _metrics.bind(port, 0)
    except ValueError as e:  # InvalidArgumentError
        raise JobEnded(f"cerarrun: --elastic-metrics-port: {e}", 2) from None
    exporter.start_with(lambda client: DriverCollector(driver, client))
    return exporter
