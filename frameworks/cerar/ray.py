"""cerar jobs on a Ray cluster: the ranks are Ray actors, the driver hosts the rendezvous.

    from cerar.ray import RayExecutor

    def train(steps):
        import cerar.torch as hvd
        hvd.init()
        ...
        return hvd.rank()

    ray.init()
    executor = RayExecutor(num_workers=4, cpus_per_worker=1)
    executor.start()
    ranks = executor.run(train, args=[100])   # one result per rank, in rank order
    executor.shutdown()

The API follows Horovod's ``horovod.ray.RayExecutor`` (start, run, execute, execute_single,
run_remote, shutdown). The driver hosts the job's rendezvous store (the one ``cerarrun``
hosts, with a fresh secret) and hands each actor its rank, size, local rank and size, the
store's address and the secret as ``CERAR_*`` variables, which ``init()`` reads as under
``cerarrun``. A worker's exception stops the job (every actor is killed) and reaches the driver
as ``WorkerError`` naming the rank; so does an actor's death. Ctrl-C in the driver, and
``shutdown()``, leave no actor behind. Needs ``pip install cerar[ray]`` (docs/ray.md).
"""
import os
import socket
import traceback

try:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("cerar.ray needs Ray: pip install 'cerar[ray]' (or pip install ray)") \
        from error

from cerar._store import HostedStore, rank_identity

__all__ = ["RayExecutor", "Settings", "WorkerError", "plan_ranks"]

# How often the driver looks at the workers' results; between looks Ctrl-C is handled.
_POLL_SECONDS = 0.2


class WorkerError(RuntimeError):
    """A worker failed: its function raised (``cause`` is that exception, also chained as
    ``__cause__``), or its actor died (``cause`` is Ray's error). ``rank`` names the worker.
    The job has been stopped when this is raised."""

    def __init__(self, rank, cause, detail=""):
        self.rank = rank
        self.cause = cause
        kind = type(cause).__name__
        message = f"cerar.ray: rank {rank} failed: {kind}: {cause}"
        if detail:
            message += f"\n{detail}"
        super().__init__(message)


def plan_ranks(nodes):
    """Ranks for actors on `nodes` (each actor's node id, in creation order): the actors of one
    node get consecutive ranks (nodes in order of first appearance), as a host's slots under
    cerarrun. Returns [(rank, local_rank, local_size)] per actor."""
    order = []
    for node in nodes:
        if node not in order:
            order.append(node)
    by_node = {node: [i for i, n in enumerate(nodes) if n == node] for node in order}
    plan = [None] * len(nodes)
    rank = 0
    for node in order:
        members = by_node[node]
        for local_rank, actor in enumerate(members):
            plan[actor] = (rank, local_rank, len(members))
            rank += 1
    return plan


class _Worker:
    """One rank: a Ray actor that runs the driver's functions in its own process."""

    def node(self):
        return ray.get_runtime_context().get_node_id(), socket.gethostname(), os.getpid()

    def setup(self, env, executable_cls=None, args=None, kwargs=None):
        os.environ.update(env)
        self.executable = executable_cls(*(args or []), **(kwargs or {})) \
            if executable_cls is not None else None

    def run(self, fn, args, kwargs):
        return _guarded(fn, *(args or []), **(kwargs or {}))

    def execute(self, fn):
        return _guarded(fn, self.executable)

    def close(self):
        """Stops this process's cerar runtime, if a function started one."""
        import sys
        cerar = sys.modules.get("cerar")
        if cerar is not None and cerar.is_initialized():
            cerar.shutdown()


def _guarded(fn, *args, **kwargs):
    """fn's result; its exception travels with the worker's traceback as text, since a
    traceback does not survive pickling."""
    try:
        return fn(*args, **kwargs)
    except BaseException as error:
        error.cerar_traceback = traceback.format_exc()
        raise


class Settings:
    """Job settings, as Horovod's ``RayExecutor.create_settings`` makes them."""

    def __init__(self, timeout_s=None, placement_group_timeout_s=100, nics=None):
        self.timeout_s = timeout_s
        self.placement_group_timeout_s = placement_group_timeout_s
        self.nics = nics

    def env(self):
        """The ranks' variables these settings stand for."""
        env = {}
        if self.timeout_s is not None:
            env["CERAR_RENDEZVOUS_TIMEOUT_SECONDS"] = repr(float(self.timeout_s))
        if self.nics:
            env["CERAR_IFACE"] = ",".join(sorted(self.nics))
        return env


class RayExecutor:
    """Starts a cerar job whose ranks are Ray actors, runs functions on every rank, stops it.

    Placement (Horovod's two forms): ``num_workers`` actors anywhere, packed onto as few nodes
    as fit; or ``num_hosts`` nodes with ``num_workers_per_host`` actors each (one placement
    bundle per node, strictly spread). Each actor reserves ``cpus_per_worker`` CPUs (and
    ``gpus_per_worker`` GPUs when ``use_gpu``). ``settings`` (``create_settings``): the ranks'
    rendezvous timeout, their network interfaces, and how long to wait for the resources.
    ``env`` adds variables to every rank (cerar's knobs, e.g. ``{"CERAR_ALGORITHM": "ring"}``).
    """

    @classmethod
    def create_settings(cls, timeout_s=None, ssh_identity_file=None, ssh_str=None,
                        placement_group_timeout_s=100, nics=None):
        """Horovod's signature. ``timeout_s``: the ranks' rendezvous timeout
        (CERAR_RENDEZVOUS_TIMEOUT_SECONDS; None: cerar's default); ``nics``: the interfaces of
        the data links (CERAR_IFACE; the first is used); ``placement_group_timeout_s``: the
        wait for the cluster's resources. The ssh arguments are accepted and unused: Ray
        starts the ranks."""
        del ssh_identity_file, ssh_str
        return Settings(timeout_s, placement_group_timeout_s, nics)

    def __init__(self, settings=None, num_workers=None, num_hosts=None, num_workers_per_host=1,
                 cpus_per_worker=1, use_gpu=False, gpus_per_worker=None, env=None):
        if (num_workers is None) == (num_hosts is None):
            raise ValueError("cerar.ray: give either num_workers, or num_hosts with "
                             "num_workers_per_host")
        for name, value in (("num_workers", num_workers), ("num_hosts", num_hosts),
                            ("num_workers_per_host", num_workers_per_host)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"cerar.ray: {name} must be a positive integer, got {value!r}")
        if cpus_per_worker <= 0:
            raise ValueError(f"cerar.ray: cpus_per_worker must be positive, got "
                             f"{cpus_per_worker!r}")
        self.settings = settings if settings is not None else Settings()
        self.num_hosts = num_hosts
        self.num_workers_per_host = num_workers_per_host
        self.num_workers = num_workers if num_workers is not None \
            else num_hosts * num_workers_per_host
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.env = dict(env or {})
        self.workers = []  # in rank order once started
        self._hosts = []
        self._placement = None
        self._store = None

    def job_env(self, extra_env_vars=None):
        """The variables every rank gets besides its identity and the rendezvous: the
        settings', then ``env``'s, then ``extra_env_vars``' (later ones win)."""
        return {**self.settings.env(), **self.env, **(extra_env_vars or {})}

    # --- life cycle ---------------------------------------------------------------------------
    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None,
              extra_env_vars=None):
        """Creates the actors, assigns ranks (a node's actors get consecutive ranks), hosts the
        rendezvous store here and hands every actor its CERAR_* variables; with
        ``executable_cls``, builds one instance of it on every actor (for ``execute``)."""
        if self.workers:
            raise RuntimeError("cerar.ray: this executor has already started")
        try:
            self._start(executable_cls, executable_args, executable_kwargs, extra_env_vars)
        except BaseException:
            self._stop(graceful=False)
            raise

    def _bundles(self):
        unit = {"CPU": self.cpus_per_worker}
        if self.gpus_per_worker:
            unit["GPU"] = self.gpus_per_worker
        if self.num_hosts is None:
            return [dict(unit) for _ in range(self.num_workers)], "PACK", list(
                range(self.num_workers))
        per_host = {k: v * self.num_workers_per_host for k, v in unit.items()}
        bundles = [dict(per_host) for _ in range(self.num_hosts)]
        return bundles, "STRICT_SPREAD", [i // self.num_workers_per_host
                                           for i in range(self.num_workers)]

    def _start(self, executable_cls, executable_args, executable_kwargs, extra_env_vars):
        bundles, strategy, bundle_of = self._bundles()
        self._placement = placement_group(bundles, strategy=strategy)
        limit = self.settings.placement_group_timeout_s
        ready, _ = ray.wait([self._placement.ready()], timeout=limit)
        if not ready:
            raise TimeoutError(
                f"cerar.ray: the cluster did not grant {len(bundles)} bundles of {bundles[0]} "
                f"({strategy}) within {limit} s; ray.cluster_resources() "
                f"says {ray.cluster_resources()}")
        actor_class = ray.remote(_Worker)
        actors = [actor_class.options(
            num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=self._placement, placement_group_bundle_index=bundle_of[i]))
            .remote() for i in range(self.num_workers)]
        self.workers = actors  # known before anything else can fail, so that they are stopped
        nodes = self._gather([actor.node.remote() for actor in actors], "start")
        plan = plan_ranks([node for node, _, _ in nodes])
        ordered = [None] * len(actors)
        for actor, (rank, _, _) in zip(actors, plan):
            ordered[rank] = actor
        self.workers = ordered
        self._hosts = [None] * len(actors)
        for (_, host, _), (rank, _, _) in zip(nodes, plan):
            self._hosts[rank] = host

        # The store: loopback when every rank shares the driver's node, else every interface.
        here = ray.get_runtime_context().get_node_id()
        local = all(node == here for node, _, _ in nodes)
        self._store = HostedStore("127.0.0.1" if local else ray.util.get_node_ip_address(),
                                  local)
        setups = []
        for actor, (rank, local_rank, local_size) in zip(actors, plan):
            env = {**self.job_env(extra_env_vars),
                   **rank_identity(rank, len(actors), local_rank, local_size,
                                   self._store.address, self._store.port, self._store.secret)}
            setups.append(actor.setup.remote(env, executable_cls, executable_args,
                                             executable_kwargs))
        self._gather(setups, "start")

    def shutdown(self):
        """Stops every rank's cerar runtime, kills the actors, frees their placement and the
        store. Idempotent."""
        self._stop(graceful=True)

    def _stop(self, graceful):
        workers, self.workers = self.workers, []
        if graceful and workers:
            # Together, since a runtime's shutdown is collective; bounded, since a rank may be
            # stuck in a collective that will never finish.
            try:
                ray.wait([w.close.remote() for w in workers], num_returns=len(workers),
                         timeout=30)
            except Exception:  # noqa: BLE001 - the actors are killed below in any case
                pass
        for worker in workers:
            try:
                ray.kill(worker, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self._placement is not None:
            try:
                remove_placement_group(self._placement)
            except Exception:  # noqa: BLE001 - the cluster may be gone
                pass
            self._placement = None
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.shutdown()

    # --- running ------------------------------------------------------------------------------
    def run(self, fn, args=None, kwargs=None):
        """fn(*args, **kwargs) on every rank; the results in rank order. A failure stops the
        job and raises WorkerError."""
        self._require_started()
        return self._gather([w.run.remote(fn, args, kwargs) for w in self.workers], "run")

    def execute(self, fn):
        """fn(executable) on every rank, with the instance made by start(executable_cls)."""
        self._require_started()
        return self._gather([w.execute.remote(fn) for w in self.workers], "execute")

    def execute_single(self, fn):
        """fn(executable) on rank 0 alone."""
        self._require_started()
        return self._gather([self.workers[0].execute.remote(fn)], "execute_single")[0]

    def run_remote(self, fn, args=None, kwargs=None):
        """Like run, but returns the ObjectRefs at once (rank order); the caller watches them
        (a failure then stops nothing by itself: call shutdown())."""
        self._require_started()
        return [w.run.remote(fn, args, kwargs) for w in self.workers]

    def _require_started(self):
        if not self.workers:
            raise RuntimeError("cerar.ray: the executor is not running (call start(); a failed "
                               "job or shutdown() stops it)")

    def _gather(self, refs, what):
        """The results of refs (rank order). At the first failure, or on Ctrl-C, every actor is
        killed before the error propagates."""
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        pending, results = list(refs), {}
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=_POLL_SECONDS)
                for ref in done:
                    results[rank_of[ref]] = self._result(ref, rank_of[ref], what)
        except BaseException:
            self._stop(graceful=False)
            raise
        return [results[rank] for rank in range(len(refs))]

    @staticmethod
    def _result(ref, rank, what):
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as error:
            cause = getattr(error, "cause", None) or error
            detail = getattr(cause, "cerar_traceback", "")
            raise WorkerError(rank, cause, detail) from cause
        except ray.exceptions.RayActorError as error:
            raise WorkerError(rank, error, f"the actor of rank {rank} died during {what}") \
                from error

    def hosts(self):
        """The host name of every rank, in rank order (after start)."""
        self._require_started()
        return list(self._hosts)
