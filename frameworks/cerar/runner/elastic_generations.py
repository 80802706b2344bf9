"""The elastic driver's generations (cerar/runner/elastic_driver.py runs the loop): after an
event, the next plan of which worker has which rank, its publication in the store, the new
workers' start, and the bookkeeping of who holds the job's state and who must leave."""
from cerar.elastic import protocol
from cerar.runner.elastic_hosts import place
from cerar.runner.launch import Worker, exit_code, rank_env, spawn, spawn_options

LEAVE_SECONDS = 30.0   # how long a worker left out of the plan has to exit by itself


class JobEnded(Exception):
    """The job stops: `text` is the launcher's last line, `code` its exit code."""

    def __init__(self, text, code=1):
        super().__init__(text)
        self.text, self.code = text, code


def _failed(cause):
    return JobEnded(f"cerarrun: {cause}; stopping the job")


class Generations:
    """ElasticDriver's part that makes generations (a mixin: the driver owns the state)."""

    # -- generations --------------------------------------------------------------------------

    def _reset(self, why, started, failure):
        if failure:
            self._check_carriers(why, failure, self.hosts.available())
        limit = self.args.reset_limit
        if limit is not None and self.resets >= limit:
            raise _failed(f"reset {self.resets + 1} ({why}) would pass --reset-limit {limit}")
        available = self.hosts.available()
        target = min(self.args.max_np, sum(slots for _, slots in available))
        if target < self.args.min_np:
            self.log(f"cerarrun: {why}; waiting up to {self.args.elastic_timeout:g} s "
                     f"(--elastic-timeout) for --min-np {self.args.min_np} slots")
            available = self._wait_for_slots(self.args.min_np)
            target = min(self.args.max_np, sum(slots for _, slots in available))
        self._check_carriers(why, failure, available)
        self.resets_by_reason["failure" if failure else "membership"] += 1
        self._new_generation(place(available, self._survivors(), target), why, started)

    def _check_carriers(self, why, failure, available):
        """New workers alone would train afresh, the job's progress gone: then it stops."""
        hosts = dict(available)
        if any(self.workers[w].holds_state and host in hosts for w, host in self._survivors()):
            return
        first = next((self.workers[w].code for w in self._ranked()
                      if self.workers[w].code not in (None, 0)), 1)
        raise JobEnded(f"cerarrun: no worker of generation {self.generation} that holds the "
                       f"job's state survives ({why}); stopping the job",
                       exit_code(first) if failure else 1)

    def _survivors(self):
        """[(worker, host)] of the plan's workers that go on, in rank order."""
        return [(w, self.workers[w].host) for w in self._ranked()
                if not self.workers[w].exited() and not self.workers[w].handled]

    def _new_generation(self, placement, why, started):
        old_size, generation = len(self.plan), self.generation + 1
        plan, new = {}, []
        for rank, (worker_id, host, local_rank, local_size) in enumerate(placement):
            if worker_id is None:
                worker_id, self.next_id = str(self.next_id), self.next_id + 1
                new.append(worker_id)
            plan[worker_id] = {"rank": rank, "local_rank": local_rank,
                               "local_size": local_size, "host": host}
        removed = [w for w in self.plan if w not in plan]
        self.client.set(protocol.plan_key(generation),
                        protocol.encode_plan(generation, plan, new, removed, why))
        self.client.set(protocol.LATEST, str(generation).encode())
        leave_by = self.clock() + LEAVE_SECONDS
        for worker_id in removed:
            if not self.workers[worker_id].exited() and not self.workers[worker_id].handled:
                self.workers[worker_id].leave_by = leave_by
        self.plan, self.generation, self.reported = plan, generation, set()
        self.blames, self.died = [], set()
        self.resume = (generation, started)
        if generation > 1:
            self.resets += 1
            self.log(f"cerarrun: reset {self.resets} -> generation {generation}: {why}; "
                     f"size {old_size} -> {len(plan)}")
        for worker_id in new:
            self._start(worker_id, plan[worker_id], generation)

    def _start(self, worker_id, entry, generation):
        env = rank_env(entry["rank"], len(self.plan), entry["local_rank"], entry["local_size"],
                       self.address, self.store.port, self.store.secret, self.knobs)
        env.update({protocol.ENV_ID: worker_id, protocol.ENV_GENERATION: str(generation),
                    protocol.ENV_TIMEOUT: repr(float(self.args.elastic_timeout))})
        try:
            proc, pump = spawn(worker_id, entry["host"], self.args.command, env, self.extra,
                               self.args.ssh_port, self.output, spawn_options(self.args))
        except OSError as error:
            self.log(f"cerarrun: cannot start worker {worker_id} on {entry['host']}: {error}")
            proc, pump = None, None
        worker = self.workers[worker_id] = Worker(worker_id, entry["host"], proc, pump)
        worker.holds_state = generation == 1  # every one starts alike
        # A host that accepts ssh but never runs the command must not hold the others up.
        worker.join_by = self.clock() + self.args.elastic_start_timeout

    def _note_resumed(self):
        if self.resume is None:
            return
        generation, started = self.resume
        if self.store._server.try_get(protocol.running_key(generation)) is None:
            return
        self.resume = None
        for worker_id in self.plan:  # G's rank 0 synced its state to every worker of G
            self.workers[worker_id].holds_state = True
            self.hosts.worked(self.workers[worker_id].host)  # its failures in a row end
        if generation > 1:
            self.resume_seconds.append(self.clock() - started)
            self.log(f"cerarrun: generation {generation} resumed training "
                     f"{self.resume_seconds[-1]:.1f} s after the event")

    def _reap_leavers(self):
        now = self.clock()
        late = [w for w in self.workers.values()
                if w.leave_by is not None and now >= w.leave_by and not w.exited()]
        for worker in late:
            worker.leave_by, worker.handled = None, True
        self._stop_in_background(late)

