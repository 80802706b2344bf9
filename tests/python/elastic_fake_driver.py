"""A fake elastic driver for whole-job tests of elastic workers (test_elastic_api.py's torch job,
test_keras.py's fit): cerarrun's side of the store protocol, plans published by hand, local
worker processes started with the protocol's environment."""
import os
import subprocess
import sys
import time

import pytest

from cerar.elastic import protocol


class FakeDriver:
    """cerarrun's side of the protocol, reduced to what the tests need: the store, plans
    published by hand, and worker processes started with the protocol's environment."""

    def __init__(self, tmp_path, worker):
        from cerar._cerar import StoreClient
        from cerar._store import HostedStore
        self.hosted = HostedStore("127.0.0.1", local=True)
        self.store = StoreClient("127.0.0.1", self.hosted.port, self.hosted.secret, 10.0)
        self.tmp_path, self.worker = tmp_path, str(worker)
        self.processes, self.logs = {}, {}

    def publish(self, generation, ids, removed=(), added=(), reason=""):
        workers = {w: {"rank": r, "local_rank": r, "local_size": len(ids), "host": "localhost"}
                   for r, w in enumerate(ids)}
        self.store.set(protocol.plan_key(generation),
                       protocol.encode_plan(generation, workers, added=added, removed=removed,
                                            reason=reason))
        self.store.set(protocol.LATEST, str(generation).encode())

    def start(self, worker_id, generation=1, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CERAR_")}
        env.update({protocol.ENV_ID: worker_id, protocol.ENV_GENERATION: str(generation),
                    protocol.ENV_TIMEOUT: "20", "CERAR_RENDEZVOUS_ADDR": "127.0.0.1",
                    "CERAR_RENDEZVOUS_PORT": str(self.hosted.port),
                    "CERAR_SECRET": self.hosted.secret, "CERAR_ALGORITHM": "ring",
                    "CERAR_TIMEOUT_SECONDS": "5", "CERAR_LOG_LEVEL": "warning",
                    "PYTHONPATH": os.pathsep.join(sys.path), **extra})
        log = self.logs[worker_id] = self.tmp_path / f"{worker_id}.log"
        with open(log, "w") as out:
            self.processes[worker_id] = subprocess.Popen(
                [sys.executable, self.worker], env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)

    def output(self, worker_id):
        return self.logs[worker_id].read_text()

    def wait_for(self, condition, what, limit=30.0):
        deadline = time.monotonic() + limit
        while not condition():
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"{what}: not within {limit} s\n" + self.all_output())
            time.sleep(0.05)

    def has(self, key):
        return self.hosted._server.try_get(key) is not None

    def finish(self, limit=40.0):
        """Every worker's exit code once all have ended."""
        self.wait_for(lambda: all(p.poll() is not None for p in self.processes.values()),
                      "the workers' end", limit)
        return {w: p.returncode for w, p in self.processes.items()}

    def result(self, worker_id):
        import json
        lines = [line for line in self.output(worker_id).splitlines() if line.startswith("{")]
        assert lines, f"{worker_id} printed no result\n{self.all_output()}"
        return json.loads(lines[-1])

    def kill_first_and_go_on(self, what, steps=3, limit=120.0, **extra):
        """Generation 1 of w0, w1, w2 (started with `extra` variables) runs until w1 has printed
        `steps` "step " lines; w0 is killed; once a survivor has reported the failure,
        generation 2 (w1, w2) is published. Returns every worker's exit code."""
        import signal
        self.publish(1, ["w0", "w1", "w2"])
        for worker_id in ("w0", "w1", "w2"):
            self.start(worker_id, **extra)
        self.wait_for(lambda: self.output("w1").count("step ") >= steps, what, limit)
        self.processes["w0"].send_signal(signal.SIGKILL)
        self.wait_for(lambda: any(self.has(protocol.failed_key(1, w)) for w in ("w1", "w2")),
                      "a survivor's failure report", 30)
        self.publish(2, ["w1", "w2"], removed=["w0"], reason="w0 failed")
        return self.finish(limit=limit)

    def all_output(self):
        return "\n".join(f"--- {w}:\n{self.output(w)}" for w in self.logs)

    def stop(self):
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)


def _has_store_client():
    from cerar import _cerar
    return hasattr(_cerar, "StoreClient") and hasattr(_cerar.RuntimeConfig(), "rendezvous_scope")


needs_store_client = pytest.mark.skipif(
    not _has_store_client(), reason="this build of the extension has no StoreClient or "
    "RuntimeConfig.rendezvous_scope")
