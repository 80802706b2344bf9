"""This rank's Prometheus metrics (CERAR_METRICS_PORT; docs/metrics.md).

A daemon thread serves `/metrics` on metrics_port + local_rank and reads the runtime's own
counters (`Runtime.stats()`, one copy under the runtime's lock) only when scraped: the training
thread does no metrics work at all. The port is bound before the runtime starts, so a port in
use fails init() on its rank before anything else has begun.
"""
import http.server
import threading

from cerar._cerar import InvalidArgumentError

PATH = "/metrics"


def _prometheus_client():
    try:
        import prometheus_client
        import prometheus_client.core  # noqa: F401 (the metric families)
    except ImportError:
        raise InvalidArgumentError(
            "cerar: CERAR_METRICS_PORT (metrics_port) is set but the Python package "
            "prometheus_client is not installed: pip install 'cerar[metrics]' "
            "(or prometheus-client), or unset the port") from None
    return prometheus_client


def bind(base_port, local_rank):
    """The exporter of this rank, bound to base_port + local_rank but not serving yet; None
    when base_port is 0. InvalidArgumentError naming the port when it cannot be bound."""
    if not base_port:
        return None
    port = base_port + local_rank
    if base_port < 0 or port > 65535:
        raise InvalidArgumentError(f"cerar: metrics port {base_port} + local rank {local_rank} "
                                   f"= {port} is outside [1, 65535] (CERAR_METRICS_PORT)")
    client = _prometheus_client()
    try:
        server = _Server(("", port), _Handler)
    except OSError as e:
        raise InvalidArgumentError(
            f"cerar: cannot serve metrics on port {port} (CERAR_METRICS_PORT {base_port} + "
            f"local rank {local_rank}): {e.strerror or e}") from None
    return Exporter(client, server)


class Exporter:
    """Serves a registry whose one collector reads the runtime on each scrape."""

    def __init__(self, client, server):
        self._client = client
        self._server = server
        self._thread = None
        self.port = server.server_address[1]

    def start(self, runtime):
        from cerar._metrics_families import RuntimeCollector
        self.start_with(lambda client: RuntimeCollector(runtime, client))

    def start_with(self, make_collector):
        """Serves the collector make_collector(prometheus_client) returns."""
        registry = self._client.CollectorRegistry(auto_describe=False)
        registry.register(make_collector(self._client))
        self._server.render = lambda: self._client.generate_latest(registry)
        self._server.content_type = self._client.CONTENT_TYPE_LATEST
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="cerar-metrics", daemon=True)
        self._thread.start()

    def close(self):
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()


class _Server(http.server.ThreadingHTTPServer):
    # HTTPServer sets SO_REUSEADDR: a restarted job rebinds while old connections linger, and
    # a port another process listens on still fails.
    daemon_threads = True
    render = None  # set by Exporter.start: the exposition's bytes
    content_type = "text/plain"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        render = self.server.render
        if self.path.split("?", 1)[0] != PATH or render is None:
            self.send_error(404)
            return
        try:
            body = render()
        except Exception as e:  # a scrape's failure is the scraper's to see, not the job's
            self.send_error(500, explain=f"cerar metrics: {type(e).__name__}: {e}")
            return
        self.send_response(200)
        self.send_header("Content-Type", self.server.content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # scrapes are not the job's output
        pass
