"""An elastic worker's side of the protocol with cerarrun's elastic driver (the keys and
encodings are cerar.elastic.protocol's): joining a generation, its barrier, reporting a
failure, waiting for the next generation and noticing newer ones.

One Worker exists per process started by the driver (CERAR_ELASTIC_ID set); cerar.init() hands
the start of the runtime to it, so that every start, the first and each after a reset, joins
the newest generation that names this worker.
"""
import os
import sys
import time

from cerar.elastic import protocol

POLL_SECONDS = 0.05
# Added to a generation's ready counter by a worker that gives that generation up. The counter
# then can never equal the plan's size, so either every member passes the barrier (all arrived
# before anyone gave up) or none does: the store's atomic add decides, not a race.
ABANDONED = 1 << 40

_worker = None  # this process's Worker, made at the first current() in elastic mode


def enabled(environ=os.environ):
    return bool(environ.get(protocol.ENV_ID))


def current():
    """This process's Worker, or None outside cerarrun's elastic mode."""
    global _worker
    if _worker is None and enabled():
        _worker = Worker(os.environ)
    return _worker


def _connect(environ, timeout):
    from cerar._cerar import StoreClient
    return StoreClient(environ["CERAR_RENDEZVOUS_ADDR"], int(environ["CERAR_RENDEZVOUS_PORT"]),
                       environ.get("CERAR_SECRET", ""), timeout)


def _timeout_error(message):
    from cerar._cerar import CerarTimeoutError
    return CerarTimeoutError(message)


class Worker:
    """The protocol state of one worker process. `store`: a StoreClient (made from the
    environment unless given)."""

    def __init__(self, environ, store=None):
        self.id = environ[protocol.ENV_ID]
        self.first_generation = int(environ.get(protocol.ENV_GENERATION, "1"))
        self.timeout = float(environ.get(protocol.ENV_TIMEOUT) or protocol.DEFAULT_TIMEOUT)
        self.store = store if store is not None else _connect(environ, self.timeout)
        # Where the runtime meets its peers: the driver's store (no CERAR_RANK in the
        # environment, so the runtime's own reading of it finds no launcher).
        self._store_address = {"rendezvous_addr": environ.get("CERAR_RENDEZVOUS_ADDR", ""),
                               "rendezvous_port": int(environ.get("CERAR_RENDEZVOUS_PORT", 0)),
                               "host_store": False}
        self.generation = None  # the generation joined last
        self.plan = None
        self._running_marked = None
        self._start = None  # (start function, process_sets, overrides) from cerar.init

    # -- generations --------------------------------------------------------------------
    def latest(self):
        return int(bytes(self.store.get(protocol.LATEST, self.timeout)).decode())

    def read_plan(self, generation, timeout=None):
        data = self.store.get(protocol.plan_key(generation),
                              self.timeout if timeout is None else timeout)
        return protocol.decode_plan(data)

    @property
    def rank(self):
        return self.plan["workers"][self.id]["rank"] if self.plan else None

    def join(self):
        """Joins the newest generation that names this worker (at least the one after the
        current): returns the runtime's identity overrides. Leaves the process (exit code 0)
        when the newest plan does not name it."""
        deadline = time.monotonic() + self.timeout
        floor = self.first_generation if self.generation is None else self.generation + 1
        target = max(floor, self.latest())
        while True:
            plan = self.read_plan(target, self._left(deadline, target))
            entry = plan["workers"].get(self.id)
            if entry is None:
                newest = self.latest()
                if newest > target:
                    target = newest
                    continue
                self._leave(plan)
            newer = self._barrier(target, plan["size"], deadline)
            if newer is None:
                self.generation, self.plan = target, plan
                return {"rank": entry["rank"], "size": plan["size"],
                        "local_rank": entry["local_rank"], "local_size": entry["local_size"],
                        "rendezvous_scope": protocol.scope_of(target), **self._store_address}
            target = newer

    def _left(self, deadline, generation):
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timeout_error(f"cerar.elastic: worker {self.id}: generation {generation} "
                                 f"not ready within {self.timeout:g} s (CERAR_ELASTIC_TIMEOUT)")
        return left

    def _barrier(self, generation, size, deadline):
        """Waits until every worker of `generation` has arrived: None then; or the newer
        generation to join instead when `latest` moves on first."""
        if self.generation is None:  # the first arrival: this process started and reached us
            self.store.set(protocol.joined_key(self.id), b"1")
        key = protocol.ready_key(generation)
        count = self.store.add(key, 1)
        while count != size:
            if count >= ABANDONED:  # another member gave it up
                return max(generation + 1, self.latest())
            newest = self.latest()
            expired = time.monotonic() >= deadline
            if newest > generation or expired:
                if self.store.add(key, ABANDONED) - ABANDONED == size:
                    return None  # everyone had arrived after all: the generation stands
                if expired:
                    self._left(deadline, generation)
                return newest
            time.sleep(POLL_SECONDS)
            count = self.store.add(key, 0)
        return None

    def _leave(self, plan):
        print(f"cerar.elastic: worker {self.id} is not in generation {plan['generation']} "
              f"({plan.get('reason') or 'membership changed'}); leaving", flush=True)
        raise SystemExit(0)

    def newer_only_removed(self, newest):
        """True when the generations after the current one up to `newest` only removed
        workers (the survivors' states are equal, so no sync is needed)."""
        return all(not self.read_plan(g)["added"]
                   for g in range(self.generation + 1, newest + 1))

    # -- starts and resets ------------------------------------------------------------
    def start(self, start, process_sets, overrides):
        """cerar.init() in an elastic worker: joins a generation and starts the runtime with
        its identity; a start that fails for want of a peer reports it and waits for the
        next generation."""
        from cerar._cerar import CerarError, InvalidArgumentError
        self._start = (start, process_sets, dict(overrides))
        while True:
            identity = self.join()
            try:
                return start(process_sets, **{**overrides, **identity})  # the plan's wins
            except CerarError as error:
                if isinstance(error, InvalidArgumentError):
                    raise
                self.report_failure(error)
                self.wait_newer()

    def restart(self):
        """The reset after the runtime was shut down: the next generation, then a start."""
        if self._start is None:
            raise RuntimeError("cerar.elastic: reset before cerar.init()")
        self.wait_newer()
        self.start(*self._start)

    def wait_newer(self):
        """Waits (CERAR_ELASTIC_TIMEOUT) until the driver has published a generation after
        the current one."""
        if self.generation is None:
            return
        try:
            self.store.get(protocol.plan_key(self.generation + 1), self.timeout)
        except Exception as error:
            raise _timeout_error(f"cerar.elastic: worker {self.id}: no generation after "
                                 f"{self.generation} within {self.timeout:g} s "
                                 f"(CERAR_ELASTIC_TIMEOUT): {error}") from error

    def report_failure(self, error):
        """Tells the driver that this worker's generation failed and whom it blamed (a silent
        host whose processes still run is known only this way)."""
        if self.generation is None:
            return
        data = protocol.encode_failure(self.rank, getattr(error, "peer", None), error)
        try:
            self.store.set(protocol.failed_key(self.generation, self.id), data)
        except Exception as lost:  # the driver's store gone: the wait that follows says so
            print(f"cerar.elastic: worker {self.id}: could not report the failure: {lost}",
                  file=sys.stderr, flush=True)

    def mark_running(self):
        """Once per generation, after its state is synced: rank 0 tells the driver that
        training runs (the driver measures the time to resume with it)."""
        if self._running_marked == self.generation:
            return
        self._running_marked = self.generation
        if self.rank == 0:
            self.store.set(protocol.running_key(self.generation), f"{time.time():.3f}".encode())
