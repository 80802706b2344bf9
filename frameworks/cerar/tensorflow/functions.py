"""Broadcasting variables and arbitrary objects; gathering objects. The object calls run
eagerly (pickled bytes through cerar.numpy), as Horovod's do under TensorFlow 2."""
import pickle

import numpy as np
import tensorflow as tf

import cerar
import cerar.numpy as cn
from cerar._frontend import auto_name
from cerar._process_sets import global_process_set, set_argument as _set
from cerar.tensorflow._bridge import check_not_xla


def broadcast_variables(variables, root_rank, process_set=global_process_set,
                        name="broadcast_variables"):
    """Assigns root_rank's values to every rank's variables (the same list, in the same order,
    on every rank), e.g. a model's after building it. In a TF1 graph it returns the op that
    assigns (run it in the session); eagerly and in tf.function None."""
    from cerar.tensorflow.ops import broadcast
    variables = list(variables)
    if not tf.executing_eagerly():
        # In tf.function the assignments run in order; a TF1 graph runs the returned op.
        check_not_xla("broadcast_variables")
        assigned = tf.group(*[v.assign(broadcast(v, root_rank, name=f"{name}.{i}",
                                                 process_set=process_set))
                              for i, v in enumerate(variables)])
        return None if tf.compat.v1.get_default_graph().building_function else assigned
    set_ = _set(process_set)
    arrays = [np.array(v.numpy(), order="C", copy=True, ndmin=1) for v in variables]
    handles = [cn.broadcast_async_(a, root_rank, f"{name}.{i}", set_)
               for i, a in enumerate(arrays)]
    for variable, array, handle in zip(variables, arrays, handles):
        handle.wait()
        variable.assign(array.reshape(variable.shape))
    return None


def _bytes(obj):
    return np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8).copy()


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=global_process_set):
    """root_rank's `obj` on every rank of the set (pickled: its size, then its bytes).
    `session` is Horovod's TF1 argument, unused."""
    name = auto_name("broadcast_object", name)
    set_ = _set(process_set)
    root = cerar.rank() == int(root_rank)
    payload = _bytes(obj) if root else None
    length = np.array([payload.size if root else 0], np.int64)
    cn.broadcast_(length, root_rank, f"{name}.size", set_)
    if not root:
        payload = np.zeros(int(length[0]), np.uint8)
    cn.broadcast_(payload, root_rank, f"{name}.data", set_)
    return obj if root else pickle.loads(payload.tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function that broadcasts its argument as broadcast_object does."""
    return lambda obj: broadcast_object(obj, root_rank, session, name, process_set)


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """The list of every rank's (of the set's) `obj`, in rank order."""
    name = auto_name("allgather_object", name)
    set_ = _set(process_set)
    payload = _bytes(obj)
    sizes = cn.allgather(np.array([payload.size], np.int64), f"{name}.size", set_)
    data = cn.allgather(payload, f"{name}.data", set_).tobytes()
    out, at = [], 0
    for size in sizes.tolist():
        out.append(pickle.loads(data[at:at + size]))
        at += size
    return out


def _number_op(what, value):
    """An int32 scalar read when it runs (inside a graph: at each run, so it follows an elastic
    reset), as Horovod's rank_op and friends."""
    if tf.executing_eagerly():
        return tf.constant(value(), tf.int32)
    check_not_xla(what)
    tensor = tf.numpy_function(lambda: np.int32(value()), [], tf.int32, stateful=True,
                               name=f"cerar_{what}")
    tensor.set_shape([])
    return tensor


def rank_op(name=None):
    return _number_op("rank_op", cerar.rank)


def local_rank_op(name=None):
    return _number_op("local_rank_op", cerar.local_rank)


def size_op(name=None):
    return _number_op("size_op", cerar.size)


def local_size_op(name=None):
    return _number_op("local_size_op", cerar.local_size)
