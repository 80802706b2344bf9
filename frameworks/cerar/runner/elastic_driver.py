"""cerarrun's elastic driver: keeps a job training while workers fail and hosts come and go.

The launcher hosts the rendezvous store (it outlives every worker) and numbers the job's
memberships: generation G's plan says which worker process has which rank (_elastic_protocol).
A new generation is made when a worker of the current plan exits with an error (its host is
blacklisted), when a worker reports that G failed (a blamed peer's host is blacklisted), or
when discovery adds slots (up to --max-np) or drops a host. Survivors keep their relative
order, so rank 0 of the new generation is the lowest surviving rank. Once a worker of the plan
is done (exit 0) the job only ends: 0 when they all are, else the first failure's code. It
fails (every worker terminated, exit 1) below --min-np for longer than --elastic-timeout, past
--reset-limit resets, or when a failure leaves no survivor (no state to go on from).

Each worker's output lines are prefixed with its id: generation 1's workers have their ranks as
ids (as without elastic mode), later ones the next numbers, so a prefix is never reused.
"""
import collections
import functools
import os
import signal
import sys
import threading
import time

from cerar.elastic import protocol
from cerar.runner.elastic_blame import judge
from cerar.runner.elastic_metrics import serve_driver_metrics
from cerar.runner.elastic_hosts import DiscoveryPoller, HostManager, discovery_of, place
from cerar.runner.hosts import is_local, is_loopback, route_source
from cerar.runner.launch import Stopped, exit_code, exported, knob_env, terminate
from cerar._store import HostedStore
from cerar.runner.elastic_generations import Generations, JobEnded, _failed  # noqa: F401

TICK = 0.1             # seconds between looks at exits, failure reports and discovery
SETTLE_SECONDS = 2.0   # how long the other events of one failure are awaited


_is_local = functools.lru_cache(maxsize=None)(is_local)  # name resolution, once a host


def _stderr(text):
    print(text, file=sys.stderr, flush=True)


class ElasticDriver(Generations):
    def __init__(self, args, poller, hosts, log=_stderr, clock=time.monotonic):
        self.args, self.poller, self.hosts, self.log, self.clock = args, poller, hosts, log, clock
        self.extra = exported(args.export, os.environ)
        self.knobs = knob_env(args)
        self.workers = {}    # id -> Worker: every one started
        self.plan = {}       # id -> {"rank", "local_rank", "local_size", "host"} of generation G
        self.generation, self.resets, self.next_id = 0, 0, 0
        self.resets_by_reason = collections.Counter()  # "failure" | "membership" -> resets
        self.resume_seconds = []  # per reset: from its event to the new generation's training
        self.reported = set()    # ids whose failure report of G was read
        self.blames = []         # [(reporter id, blamed id)] of G, judged once it settles
        self.died = set()        # ids of G that exited with an error or never joined
        self.resume = None       # (G, time of its event) until G's rank 0 says it runs
        self.store = self.client = self.address = None
        self.stoppers = []       # threads terminating workers in the background
        self.output = threading.Lock()
        self.refused = set()     # remote hosts a loopback store cannot serve (logged once)
        self.deadline = clock() + args.max_time if args.max_time else None

    # -- the job ------------------------------------------------------------------------------

    def run(self):
        self.poller.start()
        available = self._wait_for_slots(self.args.min_np)
        self._open_store(available)
        target = min(self.args.np, sum(slots for _, slots in available))
        self._new_generation(place(available, [], target), "start", self.clock())
        while True:
            self._check_time()
            added, _ = self._refresh()
            self._reap_leavers()
            self._note_resumed()  # before the end: a short last generation still counts
            if self._finishing():
                code = self._finish()
                if code is not None:
                    return code
                time.sleep(TICK)
                continue
            events = self._failures()
            if events or self.blames:
                started = self.clock()
                events += self._settle(started)
                events += self._judge_blames()
                self._reset(_summary(events), started, failure=True)
                continue
            change = self._membership_change(added)
            if change:
                self._reset(change, self.clock(), failure=False)
                continue
            time.sleep(TICK)

    def close(self):
        """Stops discovery and every worker still running, on every host."""
        self.poller.stop()
        terminate([w.proc for w in self.workers.values() if w.proc is not None])
        for thread in self.stoppers:
            thread.join()
        for worker in self.workers.values():
            if worker.pump is not None:
                worker.pump.join(timeout=2.0)
        if self.store is not None:
            self.store.close()

    def _check_time(self):
        if self.deadline is not None and self.clock() >= self.deadline:
            raise JobEnded(f"cerarrun: the job ran past --max-time {self.args.max_time:g} s; "
                           "terminating it", 124)

    # -- hosts --------------------------------------------------------------------------------

    def _usable(self, host):
        """A remote host cannot reach a store that the launcher put on loopback (no
        --rendezvous-addr): it is left out (said once)."""
        if self.address is None or self.args.rendezvous_addr or not is_loopback(self.address) \
                or _is_local(host):
            return True
        if host not in self.refused:
            self.refused.add(host)
            self.log(f"cerarrun: leaving out host {host}: the job's store is on loopback "
                     "(give --rendezvous-addr to use remote hosts found later)")
        return False

    def _refresh(self):
        """Takes discovery's latest list; (hosts added, hosts removed)."""
        listed = self.poller.hosts() or []
        return self.hosts.update([(host, slots) for host, slots in listed if self._usable(host)])

    def _wait_for_slots(self, need):
        """The available hosts once they have `need` slots; fails after --elastic-timeout."""
        start = self.clock()
        while True:
            self._check_time()
            self._refresh()
            available = self.hosts.available()
            slots = sum(count for _, count in available)
            if slots >= need:
                return available
            if self.clock() - start >= self.args.elastic_timeout:
                plural = "" if slots == 1 else "s"
                raise _failed(f"only {slots} slot{plural} (below --min-np {self.args.min_np}) for "
                              f"{self.args.elastic_timeout:g} s (--elastic-timeout)")
            self._failures()  # survivors that die meanwhile take their hosts out
            self._judge_blames()
            time.sleep(TICK)

    def _blacklist(self, host):
        if self.hosts.is_blacklisted(host):
            return
        self.hosts.blacklist(host)
        doomed = [w for w in self.workers.values() if w.host == host and not w.exited()]
        for worker in doomed:
            worker.handled = True
        self._stop_in_background(doomed)

    def _stop_in_background(self, workers):
        procs = [w.proc for w in workers if w.proc is not None]
        if procs:
            thread = threading.Thread(target=terminate, args=(procs,), daemon=True)
            thread.start()
            self.stoppers.append(thread)

    # -- events -------------------------------------------------------------------------------

    def _ranked(self):
        return sorted(self.plan, key=lambda worker: self.plan[worker]["rank"])

    def _failures(self):
        """Why G failed, a line an event, from the exits and failure reports not seen yet;
        the hosts to blame are blacklisted on the way."""
        events = []
        by_rank = {entry["rank"]: worker for worker, entry in self.plan.items()}
        for worker_id in self._ranked():
            worker, rank = self.workers[worker_id], self.plan[worker_id]["rank"]
            if worker.handled:
                continue
            if worker.exited():
                if worker.code != 0:
                    worker.handled = True
                    how = ": ssh could not run it there" \
                        if worker.code == 255 and not _is_local(worker.host) else ""
                    events.append(f"rank {rank} on {worker.host} exited with code "
                                  f"{worker.code}{how}")
                    self.died.add(worker_id)
                    self._blacklist(worker.host)
                continue
            if self.store is None:
                continue
            late = self._late_start(worker)
            if late:
                events.append(f"rank {rank} on {worker.host} {late}")
                worker.handled = True
                self.died.add(worker_id)
                self._blacklist(worker.host)
                continue
            if worker_id in self.reported:
                continue
            data = self.store._server.try_get(protocol.failed_key(self.generation, worker_id))
            if data is None:
                continue
            self.reported.add(worker_id)
            report = protocol.decode_failure(data)
            blamed = by_rank.get(report.get("peer"))
            if blamed is not None and blamed != worker_id:
                self.blames.append((worker_id, blamed))  # judged with the others: _judge_blames
            else:
                events.append(f"rank {rank} reported: {report.get('error', '')}")
        return events

    def _judge_blames(self):
        """The hosts the settled failure's blames take out (elastic_blame.judge), as events;
        a generation whose blames are all set aside still fails (its reports say how)."""
        out, ignored = judge(self.blames, self.died, self.reported)
        events = []
        rank = {w: entry["rank"] for w, entry in self.plan.items()}
        for reporter, blamed, why in ignored:
            self.log(f"cerarrun: not blacklisting {self.workers[blamed].host}: rank "
                     f"{rank[blamed]} blamed by rank {rank[reporter]}, but {why}")
        for reporter, blamed in self.blames:
            if blamed in out:
                host = self.workers[blamed].host
                events.append(f"rank {rank[blamed]} on {host} blamed by rank {rank[reporter]}")
                self._blacklist(host)
        if self.blames and not events and not self.died:
            events.append("ranks " + ", ".join(str(rank[r]) for r, _ in self.blames) +
                          " reported failures, each blaming a peer that is alive")
        self.blames = []
        return events

    def _late_start(self, worker):
        """Why a started worker counts as failed for not joining in time, or None."""
        if worker.join_by is None:
            return None
        if self.store._server.try_get(protocol.joined_key(worker.id)) is not None:
            worker.join_by = None
            return None
        if self.clock() < worker.join_by:
            return None
        return (f"did not join within {self.args.elastic_start_timeout:g} s "
                "(--elastic-start-timeout)")

    def _settled(self):
        blamed = {b for _, b in self.blames}
        return all(self.workers[w].exited() or w in self.reported or w in blamed
                   or self.hosts.is_blacklisted(self.workers[w].host) for w in self.plan)

    def _settle(self, started):
        """The other events of the same failure, so that it makes one generation."""
        events = []
        while not self._settled() and self.clock() - started < SETTLE_SECONDS:
            time.sleep(TICK)
            events += self._failures()
        return events

    def _finishing(self):
        """Whether a worker of the plan is done (exited 0): then the job only ends."""
        return any(self.workers[w].exited() and self.workers[w].code == 0 for w in self.plan)

    def _finish(self):
        """Once a worker is done the job only ends (as Horovod's): 0 when every worker of the
        plan exits 0, else the first failure's code, the others terminated; None meanwhile."""
        running = False
        for worker_id in self._ranked():
            worker, rank = self.workers[worker_id], self.plan[worker_id]["rank"]
            if worker.exited():
                if worker.code != 0 and not worker.handled:
                    raise JobEnded(f"cerarrun: rank {rank} on {worker.host} exited with code "
                                   f"{worker.code} after others finished; terminating the "
                                   "others", exit_code(worker.code))
                continue
            running = True
            # a worker that waits for a new generation would wait in vain
            report = self.store._server.try_get(protocol.failed_key(self.generation, worker_id))
            if report is not None:
                error = protocol.decode_failure(report).get("error", "")
                raise JobEnded(f"cerarrun: rank {rank} on {worker.host} reported a failure "
                               f"after others finished ({error}); terminating the others")
        return None if running else 0

    def _membership_change(self, added):
        """Why discovery changes the membership, or None."""
        slots = dict(self.hosts.available())
        on_host = collections.Counter(self.workers[w].host for w in self.plan)
        gone = sorted(host for host in on_host if host not in slots)
        shrunk = sorted(host for host in on_host if host in slots and on_host[host] > slots[host])
        if gone or shrunk:
            return "; ".join(([f"hosts removed: {', '.join(gone)}"] if gone else []) +
                             ([f"fewer slots on {', '.join(shrunk)}"] if shrunk else []))
        if added and len(self.plan) < self.args.max_np and sum(slots.values()) > len(self.plan):
            return f"hosts added: {', '.join(added)}"
        return None

    def _open_store(self, available):
        """The store, on loopback when the first hosts are all this one (and no
        --rendezvous-addr), else where the first remote host reaches this one."""
        try:
            from cerar._cerar import StoreClient
        except ImportError:
            raise JobEnded("cerarrun: elastic mode needs cerar._cerar.StoreClient, "
                           "which this build lacks", 2) from None
        address = self.args.rendezvous_addr
        if not address:
            remote = [host for host, _ in available if not _is_local(host)]
            address = route_source(remote[0]) if remote else "127.0.0.1"
        self.store = HostedStore(address, local=is_loopback(address))
        self.address = address
        self.client = StoreClient("127.0.0.1", self.store.port, self.store.secret)


def _summary(events, most=4):
    unique = list(dict.fromkeys(events))
    more = f" (and {len(unique) - most} more)" if len(unique) > most else ""
    return "; ".join(unique[:most]) + more


def run_elastic(args):
    """cerarrun in elastic mode: the job's exit code."""
    poller = DiscoveryPoller(discovery_of(args))
    driver = ElasticDriver(args, poller, HostManager(args.blacklist_cooldown_range))
    exporter = None
    try:
        exporter = serve_driver_metrics(driver, args.elastic_metrics_port)
        code = driver.run()
    except JobEnded as end:
        _stderr(end.text)
        code = end.code
    except KeyboardInterrupt:
        code = 130
    except Stopped as stop:
        code = stop.code
    finally:  # also on an unexpected error: no worker may outlive the launcher
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)  # the clean-up must not be cut short
        driver.close()
        if exporter is not None:
            exporter.close()
    return code
