"""Elastic training on TensorFlow, Horovod's ``hvd.elastic`` (docs/elastic.md):

    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        ...
        state.commit()

The framework-free pieces (State, ObjectState, the errors) are cerar.elastic's; run is theirs
too, with the cerar error behind a TensorFlow op error raised as such. The states
here keep variables: their values are copied at save (host copies), assigned back at restore,
and broadcast from rank 0 at sync.
"""
import functools

import tensorflow as tf

from cerar.elastic import (HorovodInternalError, HostsUpdatedInterrupt,  # noqa: F401
                           ObjectState, State, _reset)
from cerar.elastic import run_fn as _run_fn

__all__ = ["run", "State", "ObjectState", "TensorFlowState", "TensorFlowKerasState",
           "HostsUpdatedInterrupt", "HorovodInternalError"]


def run(func):
    """cerar.elastic.run for TensorFlow: a collective that fails inside tf.function reaches the
    caller as TensorFlow's OpError; it counts as the cerar error it carries (a lost peer: a
    reset), as eagerly."""
    return run_fn(func, _reset)


def run_fn(func, reset):
    from cerar.tensorflow._bridge import cerar_error_of

    @functools.wraps(func)
    def unwrapped(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except tf.errors.OpError as error:
            cause = cerar_error_of(error)
            if cause is None:
                raise
            raise cause from error
    return _run_fn(unwrapped, reset)


class TensorFlowState(ObjectState):
    """A list of tf.Variables plus plain attributes, kept across resets."""

    def __init__(self, variables=None, **kwargs):
        self._variables_of = lambda: list(variables or [])
        self._saved_values = None
        super().__init__(**kwargs)
        self._save_variables()

    def _save_variables(self):
        self._saved_values = [v.numpy().copy() for v in self._variables_of()]

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        variables = self._variables_of()
        if len(variables) == len(self._saved_values):  # an optimizer built since keeps its own
            for variable, value in zip(variables, self._saved_values):
                variable.assign(value)
        super().restore()

    def sync(self):
        from cerar.tensorflow.functions import broadcast_variables
        variables = self._variables_of()
        if variables:
            broadcast_variables(variables, root_rank=0, name="cerar.elastic.variables")
        self._save_variables()
        super().sync()


class TensorFlowKerasState(TensorFlowState):
    """A Keras model's variables and its optimizer's (those it has built so far), plus plain
    attributes, kept across resets. `optimizer` defaults to the model's compiled one."""

    def __init__(self, model, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer",
                                                                         None)
        super().__init__(**kwargs)
        self._variables_of = self._keras_variables
        self._save_variables()

    def _keras_variables(self):
        variables = list(self.model.variables)
        if self.optimizer is not None:
            variables += list(self.optimizer.variables)
        return variables
