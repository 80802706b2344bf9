"""Elastic training, Horovod's API without a framework (cerar.torch.elastic adds TorchState and
ElasticSampler): the job goes on when ranks are lost or hosts come and go under
``cerarrun --min-np/--max-np/--host-discovery-script`` (docs/elastic.md).

    state = cerar.elastic.ObjectState(epoch=0, weights=w)

    @cerar.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...                 # collectives
            state.commit()      # a failure later goes back here, not to the start

    train(state)

A failed collective restores the last commit, the job resets (shutdown, the driver's new
membership, init), the reset callbacks run, rank 0's state is synced and `train` runs again;
a membership change announced by the driver raises HostsUpdatedInterrupt at the next
commit()/check_host_updates() and resets without restoring. Outside the elastic mode `run`
syncs once and calls the function once; a failure propagates.
"""
import copy
import functools
import pickle

import numpy as np

import cerar
from cerar.elastic import worker as _elastic_worker
from cerar._cerar import CerarError, InvalidArgumentError, MismatchError

__all__ = ["run", "State", "ObjectState", "HostsUpdatedInterrupt", "HorovodInternalError"]

# As in cerar.torch: Horovod raises its error for every failed collective; here every failure
# is a CerarError (PeerLostError, CerarTimeoutError, ...).
HorovodInternalError = CerarError

# Errors that a reset cannot cure ("fix the program", docs/errors.md): they propagate.
_PROGRAM_ERRORS = (InvalidArgumentError, MismatchError)


class HostsUpdatedInterrupt(RuntimeError):
    """The driver announced a new membership; raised on every rank at the same commit.
    `skip_sync`: the change only removed workers, so the survivors' states are equal."""

    def __init__(self, skip_sync=False):
        super().__init__(f"cerar.elastic: the job's hosts changed (skip_sync={skip_sync})")
        self.skip_sync = skip_sync


def _agree_max(value, name):
    """The largest `value` of all ranks (one tiny allreduce), so that a decision is the same
    on every rank."""
    import cerar.numpy as cn
    if cerar.size() == 1:
        return int(value)
    out = cn.allreduce(np.array([int(value)], dtype=np.int64), op=cerar.Max, name=name)
    return int(out[0])


def broadcast_object(obj, root_rank=0, name="cerar.elastic.state"):
    """root_rank's `obj` on every rank (pickled: its size, then its bytes)."""
    import cerar.numpy as cn
    if cerar.size() == 1:
        return obj
    mine = cerar.rank() == root_rank
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if mine else b""
    length = cn.broadcast_(np.array([len(data)], dtype=np.int64), root_rank,
                           name=f"{name}.size")
    payload = np.frombuffer(bytearray(data), dtype=np.uint8) if mine else \
        np.zeros(int(length[0]), dtype=np.uint8)
    cn.broadcast_(payload, root_rank, name=f"{name}.data")
    return obj if mine else pickle.loads(payload.tobytes())


class State:
    """What a job keeps across a reset: save() at commit, restore() after a failure, sync()
    from rank 0 after a reset. Subclasses define save, restore and sync."""

    def __init__(self, bcast_object=None, get_rank=None):
        self._bcast_object = bcast_object or broadcast_object
        self._get_rank = get_rank or cerar.rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called (in order, no arguments) after each reset, before the sync."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """save(), then check_host_updates(): the point a failure later comes back to."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when the driver has published a newer
        membership (the ranks agree on it with one tiny allreduce)."""
        worker = _elastic_worker.current()
        if worker is None or worker.generation is None or not cerar.is_initialized():
            return
        newest = _agree_max(worker.latest(), "cerar.elastic.updates")
        if newest > worker.generation:
            raise HostsUpdatedInterrupt(worker.newer_only_removed(newest))

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError

    def reset(self):
        """Called after a reset, before the callbacks (the size and ranks may have changed)."""


class ObjectState(State):
    """Plain attributes kept across resets: ``ObjectState(epoch=0, batch=0)``. They are copied
    at save (deep copies, so that later changes in place do not alter the commit), set back
    at restore, and synced from rank 0 as one pickled broadcast."""

    def __init__(self, bcast_object=None, get_rank=None, **attrs):
        self._saved_state = attrs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))


def _reset():
    cerar.shutdown()
    _elastic_worker.current().restart()


def run(func):
    """Horovod's decorator: ``func(state, ...)`` runs again after each reset until it
    returns (elastic mode); otherwise once, after a sync."""
    return run_fn(func, _reset)


def run_fn(func, reset):
    """`run` with the framework's reset (shutdown, the next generation, init)."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        worker = _elastic_worker.current()
        if worker is None:
            state.sync()
            return func(state, *args, **kwargs)
        needs_sync = True  # first entry: this process is new to the job, or to this state
        while True:
            try:
                # One rank alone may know that the state differs (it failed, it is new, its
                # generation added workers): the ranks agree before anyone syncs.
                if _agree_max(needs_sync, "cerar.elastic.sync_vote"):
                    state.sync()
                worker.mark_running()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as interrupt:
                needs_sync = not interrupt.skip_sync
            except CerarError as error:
                if isinstance(error, _PROGRAM_ERRORS):
                    raise
                worker.report_failure(error)  # first: the driver learns of it the sooner
                state.restore()
                needs_sync = True
            reset()
            state.on_reset()
    return wrapper
