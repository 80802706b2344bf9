"""cerar.elastic and cerar.torch.elastic: the sampler, the states, the worker's protocol with a
store in memory, and whole jobs of local workers against a fake driver."""
import os
import threading
import time

import pytest
import torch

import cerar.elastic as elastic
from cerar.elastic import protocol
from cerar.elastic import worker as _elastic_worker
from cerar.torch.elastic import ElasticSampler, TorchState
from elastic_fake_driver import FakeDriver, needs_store_client


# -- ElasticSampler (no runtime: shards are set with _shard) -----------------------------
def _epoch_batches(sampler, size, batch_size):
    """Every rank's shard for the current record, as `size` ranks would see them."""
    shards = []
    for rank in range(size):
        sampler._shard(rank, size)
        shards.append(list(sampler))
    return shards


@pytest.mark.parametrize("shuffle", [False, True])
def test_sampler_reshards_the_rest_after_a_size_change(shuffle):
    sampler = ElasticSampler(list(range(48)), shuffle=shuffle, seed=3)
    sampler._shard(0, 4)
    assert len(sampler) == 12
    for batch in range(2):  # 2 committed batches of 3 samples on each of 4 ranks
        sampler.record_batch(batch, 3)
    done = set(sampler.processed_indices)
    assert len(done) == 24
    shards = _epoch_batches(sampler, 2, 3)  # the job goes on with 2 ranks
    rest = [i for shard in shards for i in shard]
    assert sorted(rest) == sorted(set(range(48)) - done)  # each once, none processed twice
    assert len(shards[0]) == len(shards[1]) == 12


def test_sampler_records_every_ranks_batch():
    sampler = ElasticSampler(list(range(20)), shuffle=True, seed=1)
    size, batch_size = 4, 2
    shards = _epoch_batches(sampler, size, batch_size)
    for rank in range(size):
        sampler.processed_indices = set()
        sampler._shard(rank, size)
        sampler.record_batch(1, batch_size)
        expected = {i for shard in shards for i in shard[2:4]}  # batch 1 of every rank
        assert sampler.processed_indices == expected, rank
        assert sampler.get_indices(1, batch_size) == shards[rank][2:4]


def test_sampler_pads_by_repetition_and_round_trips():
    sampler = ElasticSampler(list(range(10)), shuffle=False)
    shards = _epoch_batches(sampler, 4, 1)
    assert [len(s) for s in shards] == [3, 3, 3, 3]
    assert sorted(set(i for s in shards for i in s)) == list(range(10))
    sampler.set_epoch(2)
    sampler.record_indices([1, 5])
    saved = sampler.state_dict()
    other = ElasticSampler(list(range(10)), shuffle=False)
    other.load_state_dict(saved)
    assert other.epoch == 2 and other.processed_indices == {1, 5}
    assert list(other) == [0, 2, 3, 4, 6, 7, 8, 9]  # one rank without a runtime
    sampler.set_epoch(3)
    assert sampler.processed_indices == set() and saved["processed_indices"] == {1, 5}


def test_sampler_with_fewer_samples_than_ranks():
    sampler = ElasticSampler(list(range(3)), shuffle=False)
    sampler.record_indices([0, 1])
    assert _epoch_batches(sampler, 4, 1) == [[2], [2], [2], [2]]
    sampler.record_indices([2])
    assert _epoch_batches(sampler, 4, 1) == [[], [], [], []]


# -- State on one rank, no runtime ---------------------------------------------------------
def test_object_state_commit_and_restore():
    state = elastic.ObjectState(epoch=0, weights=[1.0, 2.0])
    state.epoch = 3
    state.weights.append(3.0)
    state.commit()  # no elastic driver: a save only
    state.epoch = 5
    state.weights[0] = -1.0  # changed in place after the commit
    state.restore()
    assert state.epoch == 3 and state.weights == [1.0, 2.0, 3.0]
    state.weights.append(4.0)
    state.restore()  # a second restore gives the commit again
    assert state.weights == [1.0, 2.0, 3.0]


def test_reset_callbacks_run_in_order_after_reset():
    calls = []
    state = elastic.ObjectState(x=1)
    state.register_reset_callbacks([lambda: calls.append("a"), lambda: calls.append("b")])
    state.on_reset()
    assert calls == ["a", "b"]


def _model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    return model, optimizer


def _step(model, optimizer):
    loss = model(torch.randn(16, 4)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def _snapshot(model, optimizer):
    params = [p.detach().clone() for p in model.parameters()]
    moments = [t.clone() for s in optimizer.state.values() for t in s.values()
               if torch.is_tensor(t)]
    return params, moments


def test_torch_state_restores_model_and_optimizer_bit_for_bit():
    model, optimizer = _model_and_optimizer()
    sampler = ElasticSampler(list(range(8)), shuffle=False)
    state = TorchState(model, optimizer, sampler=sampler, epoch=0)
    for _ in range(3):
        _step(model, optimizer)
    sampler.record_indices([0, 1])
    state.epoch = 1
    state.commit()
    params, moments = _snapshot(model, optimizer)
    for _ in range(2):
        _step(model, optimizer)
    sampler.record_indices([2, 3])
    state.epoch = 2
    assert not torch.equal(params[0], next(model.parameters()))
    state.restore()
    after, after_moments = _snapshot(model, optimizer)
    assert all(torch.equal(a, b) for a, b in zip(params, after))
    assert len(moments) == len(after_moments) > 0
    assert all(torch.equal(a, b) for a, b in zip(moments, after_moments))
    assert state.epoch == 1 and sampler.processed_indices == {0, 1}
    assert list(sampler) == [2, 3, 4, 5, 6, 7]
    assert state.model is model and state.optimizer is optimizer and state.sampler is sampler


def test_hosts_updated_interrupt_is_not_a_cerar_error():
    assert issubclass(elastic.HorovodInternalError, RuntimeError)
    assert not issubclass(elastic.HostsUpdatedInterrupt, elastic.HorovodInternalError)
    assert elastic.HostsUpdatedInterrupt(True).skip_sync is True
    import cerar.jax  # noqa: F401  (when jax is installed)
    import cerar.numpy as cn
    import cerar.torch as ct
    assert cn.elastic is elastic and ct.elastic.ObjectState is elastic.ObjectState
    assert ct.elastic.HorovodInternalError is ct.HorovodInternalError


# -- run's loop, with the worker and the reset stubbed -------------------------------------
class RecordingState(elastic.ObjectState):
    def __init__(self, calls):
        super().__init__(step=0)
        self.calls = calls
        self.register_reset_callbacks([lambda: calls.append("callback")])

    def sync(self):
        self.calls.append("sync")

    def restore(self):
        self.calls.append("restore")
        super().restore()


class StubWorker:
    def __init__(self, calls):
        self.calls = calls

    def mark_running(self):
        self.calls.append("running")

    def report_failure(self, error):
        self.calls.append(f"report {error}")


def _run_with(monkeypatch, outcomes):
    """Runs a function that raises `outcomes` in turn, then returns; the calls in order."""
    import cerar
    calls = []
    monkeypatch.setattr(_elastic_worker, "current", lambda: StubWorker(calls))
    monkeypatch.setattr(cerar, "size", lambda: 1)  # the votes need no collective

    def func(state):
        calls.append("func")
        if outcomes:
            raise outcomes.pop(0)
        return "done"
    result = elastic.run_fn(func, lambda: calls.append("reset"))(RecordingState(calls))
    return result, calls


def test_run_restores_after_a_failure_and_not_after_an_interrupt(monkeypatch):
    import cerar
    result, calls = _run_with(monkeypatch, [cerar.PeerLostError("rank 2 lost"),
                                            elastic.HostsUpdatedInterrupt(skip_sync=True),
                                            elastic.HostsUpdatedInterrupt(skip_sync=False)])
    assert result == "done"
    assert calls == ["sync", "running", "func",
                     "report rank 2 lost", "restore", "reset", "callback", "sync", "running",
                     "func", "reset", "callback", "running",  # removals only: no sync
                     "func", "reset", "callback", "sync", "running", "func"]


def test_run_lets_program_errors_through(monkeypatch):
    import cerar
    for error in (cerar.InvalidArgumentError("bad"), cerar.MismatchError("shapes"),
                  KeyError("x")):
        with pytest.raises(type(error)):
            _run_with(monkeypatch, [error])


def test_run_outside_the_elastic_mode_calls_once_and_propagates():
    import cerar
    calls = []
    state = RecordingState(calls)
    assert elastic.run(lambda s: calls.append("func") or 7)(state) == 7

    @elastic.run
    def fails(state):
        calls.append("func")
        raise cerar.PeerLostError("lost")
    with pytest.raises(cerar.PeerLostError):
        fails(state)
    assert calls == ["sync", "func", "sync", "func"]  # no restore, no second try


# -- the worker's protocol, with a store in memory -------------------------------------
class MemoryStore:
    """StoreClient's calls on a dict: get waits for the key, add is atomic."""

    def __init__(self):
        self.data = {}
        self.changed = threading.Condition()

    def set(self, key, value):
        with self.changed:
            self.data[key] = bytes(value)
            self.changed.notify_all()

    def get(self, key, timeout_seconds=None):
        with self.changed:
            if not self.changed.wait_for(lambda: key in self.data, timeout_seconds or 5):
                from cerar import CerarTimeoutError
                raise CerarTimeoutError(f"no key {key}")
            return self.data[key]

    def add(self, key, delta):
        with self.changed:
            value = int(self.data.get(key, b"0")) + delta
            self.data[key] = str(value).encode()
            self.changed.notify_all()
            return value


def _publish(store, generation, ids, removed=(), added=()):
    workers = {w: {"rank": r, "local_rank": r, "local_size": len(ids), "host": "localhost"}
               for r, w in enumerate(ids)}
    store.set(protocol.plan_key(generation),
              protocol.encode_plan(generation, workers, added=added, removed=removed))
    store.set(protocol.LATEST, str(generation).encode())


def _worker(store, worker_id, generation=1, timeout=5.0):
    env = {protocol.ENV_ID: worker_id, protocol.ENV_GENERATION: str(generation),
           protocol.ENV_TIMEOUT: str(timeout)}
    return _elastic_worker.Worker(env, store=store)


def _join_all(workers):
    """Each worker's join() (or the exception it raised), joined side by side."""
    results = {}

    def join(worker):
        try:
            results[worker.id] = worker.join()
        except BaseException as error:  # noqa: B902 (SystemExit is an outcome here)
            results[worker.id] = error
    threads = [threading.Thread(target=join, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    return threads, results


def _wait(threads, limit=10):
    for thread in threads:
        thread.join(limit)
        assert not thread.is_alive(), "join() did not return"


def test_workers_pass_the_barrier_with_their_plans_identity():
    store = MemoryStore()
    _publish(store, 1, ["a", "b"])
    threads, results = _join_all([_worker(store, "a"), _worker(store, "b")])
    _wait(threads)
    assert results["b"] == {"rank": 1, "size": 2, "local_rank": 1, "local_size": 2,
                            "rendezvous_scope": protocol.scope_of(1), "rendezvous_addr": "",
                            "rendezvous_port": 0, "host_store": False}
    assert int(store.data[protocol.ready_key(1)]) == 2


def test_a_newer_plan_replaces_a_generation_whose_member_never_arrives():
    store = MemoryStore()
    _publish(store, 1, ["a", "b", "c"])
    a, b = _worker(store, "a"), _worker(store, "b")
    threads, results = _join_all([a, b])
    time.sleep(0.3)
    assert all(t.is_alive() for t in threads)  # waiting for "c"
    _publish(store, 2, ["b", "a"], removed=["c"])
    _wait(threads)
    assert (a.generation, results["a"]["rank"], results["b"]["rank"]) == (2, 1, 0)
    assert int(store.data[protocol.ready_key(1)]) >= _elastic_worker.ABANDONED
    # "c" arrives late at generation 1: it finds it given up, and generation 2 without it.
    late = _worker(store, "c")
    with pytest.raises(SystemExit) as leaving:
        late.join()
    assert leaving.value.code == 0


def test_a_reset_joins_the_newest_generation_skipping_those_between():
    store = MemoryStore()
    _publish(store, 1, ["a"])
    a = _worker(store, "a")
    a.join()
    _publish(store, 2, ["a", "b"], added=["b"])
    _publish(store, 3, ["a"], removed=["b"])
    a.wait_newer()
    assert a.join()["size"] == 1 and a.generation == 3
    assert protocol.ready_key(2) not in store.data


def test_barrier_waits_at_most_the_elastic_timeout():
    store = MemoryStore()
    _publish(store, 1, ["a", "b"])
    started = time.monotonic()
    with pytest.raises(elastic.CerarError, match="CERAR_ELASTIC_TIMEOUT"):
        _worker(store, "a", timeout=0.5).join()
    assert time.monotonic() - started < 3


def test_host_updates_failure_reports_and_running_mark():
    store = MemoryStore()
    _publish(store, 1, ["a", "b"])
    threads, _ = _join_all([_worker(store, "a"), _worker(store, "b")])
    _wait(threads)
    a = _worker(store, "a")
    a.generation, a.plan = 1, protocol.decode_plan(store.data[protocol.plan_key(1)])
    _publish(store, 2, ["a"], removed=["b"])
    assert a.newer_only_removed(2)
    _publish(store, 3, ["a", "c"], added=["c"])
    assert not a.newer_only_removed(3)
    error = elastic.CerarError("rank 1 lost")
    error.peer = 1
    a.report_failure(error)
    report = protocol.decode_failure(store.data[protocol.failed_key(1, "a")])
    assert report == {"rank": 0, "peer": 1, "error": "rank 1 lost", "silent": 0.0}
    from cerar._cerar import CerarTimeoutError, RuntimeConfig
    a.report_failure(CerarTimeoutError("rank 1 silent"))  # dated a timeout back
    report = protocol.decode_failure(store.data[protocol.failed_key(1, "a")])
    assert report["silent"] == RuntimeConfig.from_environment().timeout_seconds > 0
    a.mark_running()
    assert protocol.running_key(1) in store.data
    a.wait_newer()  # generation 2 exists: no wait


# -- whole jobs: local workers and a fake driver -----------------------------------------
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers",
                      "elastic_api_job.py")


@pytest.fixture
def driver(tmp_path):
    fake = FakeDriver(tmp_path, WORKER)
    yield fake
    fake.stop()


def _check_training(results, size, padding=0):
    """Equal replicas, every sample once per epoch in committed steps (plus at most `padding`
    repeats: the sampler pads the rest of an epoch when the new size does not divide it)."""
    first = results[0]
    for result in results:
        assert result["size"] == size
        assert result["parameters"] == first["parameters"], "replicas differ"
        assert result["momenta"] == first["momenta"], "optimizer states differ"
        for epoch, processed in result["log"].items():
            assert sorted(set(processed)) == list(range(48)), f"epoch {epoch}: {processed}"
            assert len(processed) - 48 <= padding, f"epoch {epoch}: {processed}"


def _started(driver, worker_id, steps=3):
    return lambda: driver.output(worker_id).count("step ") >= steps


@needs_store_client
def test_a_killed_worker_is_replaced_by_a_smaller_generation(driver):
    import signal
    driver.publish(1, ["w0", "w1", "w2"])
    for worker_id in ("w0", "w1", "w2"):
        driver.start(worker_id, ELASTIC_DISTRIBUTED="1")
    driver.wait_for(_started(driver, "w0"), "training at 3 ranks")
    assert driver.has(protocol.running_key(1))
    driver.processes["w0"].send_signal(signal.SIGKILL)  # rank 0: a new rank 0 takes over
    killed_at = time.monotonic()
    driver.wait_for(lambda: any(driver.has(protocol.failed_key(1, w)) for w in ("w1", "w2")),
                    "a survivor's failure report", 15)
    reported = time.monotonic() - killed_at
    report = protocol.decode_failure(driver.hosted._server.try_get(protocol.failed_key(1, "w1"))
                                     or driver.hosted._server.try_get(protocol.failed_key(1, "w2")))
    assert report["peer"] == 0, report
    published_at = time.monotonic()
    driver.publish(2, ["w1", "w2"], removed=["w0"], reason="w0 failed")
    driver.wait_for(lambda: driver.has(protocol.running_key(2)), "training at 2 ranks", 15)
    resumed = time.monotonic() - published_at
    print(f"kill -9 -> failure report: {reported:.2f} s; 2-worker plan -> training at size 2: "
          f"{resumed:.2f} s")
    codes = driver.finish()
    assert codes == {"w0": -signal.SIGKILL, "w1": 0, "w2": 0}, driver.all_output()
    results = [driver.result("w1"), driver.result("w2")]
    _check_training(results, 2)
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["restores"] == 1 and r["resets"] == 1 for r in results)
    assert resumed < 10, resumed


@needs_store_client
def test_a_dropped_worker_leaves_at_commit_and_a_new_one_is_synced(driver):
    driver.publish(1, ["w0", "w1", "w2"])
    for worker_id in ("w0", "w1", "w2"):
        driver.start(worker_id)
    driver.wait_for(_started(driver, "w2"), "training at 3 ranks")
    driver.publish(2, ["w0", "w1"], removed=["w2"], reason="host removed")
    driver.wait_for(lambda: driver.has(protocol.running_key(2)), "training at 2 ranks", 15)
    driver.publish(3, ["w0", "w1", "w3"], added=["w3"], reason="host added")
    driver.start("w3", generation=3)
    codes = driver.finish()
    assert codes == {"w0": 0, "w1": 0, "w2": 0, "w3": 0}, driver.all_output()
    assert "not in generation 2 (host removed); leaving" in driver.output("w2")
    results = [driver.result(w) for w in ("w0", "w1", "w3")]
    _check_training(results, 3, padding=2)  # w3's replica and record: rank 0's, synced
    assert [(r["restores"], r["resets"]) for r in results] == [(0, 2), (0, 2), (0, 0)]
    assert driver.has(protocol.running_key(3))
