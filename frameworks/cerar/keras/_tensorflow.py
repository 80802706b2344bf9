"""cerar.keras on Keras's TensorFlow backend: cerar.tensorflow's collectives and its
GradientReducer, which inside Keras's compiled train step (a tf.function) are one Python op per
fused group (cerar/tensorflow/_bridge.py)."""
import cerar.tensorflow as _tf_layer
from cerar.tensorflow.compression import Compression  # noqa: F401
from cerar.tensorflow.gradient_tape import GradientReducer

barrier, join, shutdown = _tf_layer.barrier, _tf_layer.join, _tf_layer.shutdown


def make_reducer(compression, op, gradient_predivide_factor, process_set):
    return GradientReducer(compression=compression, op=op,
                           gradient_predivide_factor=gradient_predivide_factor,
                           process_set=process_set)


def allreduce(tensor, op, name, process_set, compression, prescale_factor, postscale_factor):
    return _tf_layer.allreduce(tensor, op=op, name=name, process_set=process_set,
                               compression=compression, prescale_factor=prescale_factor,
                               postscale_factor=postscale_factor)


def allgather(tensor, name, process_set):
    return _tf_layer.allgather(tensor, name=name, process_set=process_set)


def broadcast(tensor, root_rank, name, process_set):
    return _tf_layer.broadcast(tensor, root_rank, name=name, process_set=process_set)


def wait():
    """Nothing pending: a TensorFlow step has finished its collectives when it returns."""
