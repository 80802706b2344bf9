"""TF1 graphs run by sessions (tf.compat.v1): Horovod's broadcast of the global variables, its
session hook, and its DistributedOptimizer for tf.compat.v1.train optimizers. Collectives in
such a graph run in the order they were made (_bridge.py), the same on every rank."""
import tensorflow as tf

from cerar._cerar import InvalidArgumentError
from cerar.tensorflow.functions import broadcast_variables


class EagerGlobalVariablesError(InvalidArgumentError, RuntimeError):
    """broadcast_global_variables called eagerly: an InvalidArgumentError, and the RuntimeError
    Horovod raises there."""
    __init__ = Exception.__init__


def broadcast_global_variables(root_rank):
    """An op that assigns root_rank's values to every global variable of the default graph
    (tf.compat.v1.global_variables(), the same on every rank). TF1 graphs only: eagerly (and
    in tf.function) there is no such collection; pass the variables to broadcast_variables."""
    if tf.executing_eagerly() or tf.compat.v1.get_default_graph().building_function:
        raise EagerGlobalVariablesError(
            "cerar.tensorflow.broadcast_global_variables works in TF1 graphs (sessions); "
            "eagerly and in tf.function call broadcast_variables(model.variables, root_rank)")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank,
                               name="global_variables")


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Broadcasts root_rank's global variables once the session is created (after their
    initialisation), so that every rank starts from the same values, e.g. in
    tf.compat.v1.train.MonitoredTrainingSession(hooks=[...])."""

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank, self.device = root_rank, device  # device: Horovod's, unused here
        self.bcast_op = None
        self._graph = None

    def begin(self):
        graph = tf.compat.v1.get_default_graph()
        if self.bcast_op is None or self._graph is not graph:
            self.bcast_op = broadcast_global_variables(self.root_rank)
            self._graph = graph

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)


class _DistributedV1Optimizer(tf.compat.v1.train.Optimizer):
    """`optimizer` whose compute_gradients() returns the gradients reduced across ranks."""

    def __init__(self, optimizer, reducer, name, use_locking):
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}",
                         use_locking=use_locking)
        self._optimizer, self._reducer = optimizer, reducer

    def compute_gradients(self, *args, **kwargs):
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        grads = self._reducer.reduce([g for g, _ in pairs], [v for _, v in pairs])
        return list(zip(grads, [v for _, v in pairs]))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def is_v1_optimizer(optimizer):
    return isinstance(optimizer, tf.compat.v1.train.Optimizer)


def distributed_v1_optimizer(optimizer, reducer, name=None, use_locking=False,
                             backward_passes_per_step=1):
    """Horovod's wrapper of a tf.compat.v1.train optimizer (minimize() and compute_gradients()
    reduce the gradients). Gradient accumulation (backward_passes_per_step > 1) is refused."""
    if backward_passes_per_step != 1:
        raise InvalidArgumentError("cerar.tensorflow.DistributedOptimizer: "
                                   "backward_passes_per_step > 1 is not supported")
    return _DistributedV1Optimizer(optimizer, reducer, name, use_locking)
