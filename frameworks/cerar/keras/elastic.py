"""Elastic training with Keras 3's fit, Horovod's ``hvd.elastic`` for Keras (docs/elastic.md):

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        model.fit(x, y, initial_epoch=state.epoch, epochs=epochs, callbacks=[
            hvd.elastic.UpdateBatchStateCallback(state),
            hvd.elastic.UpdateEpochStateCallback(state),
            hvd.elastic.CommitStateCallback(state, batches_per_commit=10)])

    train(state)

A failed collective inside fit's compiled step reaches `run` as its cerar class
(cerar/keras/_errors.py), which restores the last commit, resets the job and calls `train`
again: fit goes on from state.epoch. The framework-free pieces are cerar.elastic's.
"""
import keras
import numpy as np

from cerar import elastic as _elastic
from cerar.elastic import (HorovodInternalError, HostsUpdatedInterrupt,  # noqa: F401
                           ObjectState, State)
from cerar.keras import _errors
from cerar.keras._variables import broadcast_variables, model_variables

__all__ = ["run", "State", "ObjectState", "KerasState", "CommitStateCallback",
           "UpdateBatchStateCallback", "UpdateEpochStateCallback", "HostsUpdatedInterrupt",
           "HorovodInternalError"]


def _reset():
    from cerar.keras import _backend
    _backend.wait()  # JAX: the collectives of dispatched steps first
    _elastic._reset()


def run(func):
    """Horovod's decorator: ``func(state, ...)`` runs again after each reset until it
    returns (cerar.elastic.run, with the backends' errors raised as cerar's)."""
    return _elastic.run_fn(_errors.translating(func), _reset)


class KerasState(ObjectState):
    """A Keras model's variables and its optimizer's (built first if need be), plus plain
    attributes (``epoch=0, batch=0``), kept across resets: host copies at commit, assigned back
    at restore, broadcast from rank 0 at sync. `optimizer` defaults to the compiled one."""

    def __init__(self, model, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer",
                                                                         None)
        self._saved_values = None
        super().__init__(**kwargs)
        self._save_variables()

    def _variables(self):
        # JAX keeps fit's state outside the variables between syncs: bring it back first.
        sync = getattr(self.model, "jax_state_sync", None)
        if sync is not None:
            sync()
        return model_variables(self.model, self.optimizer)

    def _save_variables(self):
        self._saved_values = [np.array(keras.ops.convert_to_numpy(v), copy=True)
                              for v in self._variables()]

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        variables = self._variables()
        if len(variables) == len(self._saved_values):
            for variable, value in zip(variables, self._saved_values):
                variable.assign(value)
        super().restore()

    def sync(self):
        variables = self._variables()
        if variables:
            broadcast_variables(variables, 0, "keras.elastic.variables")
        self._save_variables()
        super().sync()


class CommitStateCallback(keras.callbacks.Callback):
    """state.commit() every `batches_per_commit` batches and at each epoch's end (put it after
    the Update*StateCallbacks, so that the commit holds the batch and epoch reached)."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state, self.batches_per_commit = state, int(batches_per_commit)
        self.batches_remaining = self.batches_per_commit

    def on_train_begin(self, logs=None):
        _errors.install(self.model)

    def on_train_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining <= 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()
        self.batches_remaining = self.batches_per_commit


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """state.batch: the batches done in the current epoch (0 at each epoch's end)."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = batch + 1

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """state.epoch: the epochs done (fit(initial_epoch=state.epoch) goes on after them)."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = epoch + 1
