"""Collectives on TensorFlow tensors, Horovod's signatures (imported by cerar.tensorflow).

Each runs eagerly or inside tf.function (_bridge.py says how) and has Horovod's gradient:
allreduce's is the allreduce of the gradient with the same op and scales; allgather's is this
rank's rows of the summed gradient; broadcast's is the summed gradient on the root and zero
elsewhere; alltoall's sends the gradient back; reducescatter's is the allgathered gradient.
"""
import tensorflow as tf

from cerar import Average, Sum
from cerar._cerar import InvalidArgumentError
from cerar._frontend import resolve_op
from cerar._process_sets import _membership, global_process_set
from cerar._process_sets import set_argument as _set
from cerar.tensorflow import _host
from cerar.tensorflow._bridge import call, op_name, untaped
from cerar.tensorflow.compression import Compression


def _grad_name(name):
    return None if name is None else f"{name}.grad"


# --- allreduce ----------------------------------------------------------------------------------
def _grouped_allreduce(tensors, op, name, prescale, postscale, process_set):
    """The tensors reduced as one fused unit ("<name>.<i>"), with their gradient."""
    base = op_name("grouped_allreduce" if len(tensors) > 1 else "allreduce", name)
    names = [base] if len(tensors) == 1 else [f"{base}.{i}" for i in range(len(tensors))]

    def host(*arrays):
        return _host.grouped_allreduce(list(arrays), op, names, prescale, postscale,
                                       process_set)
    if untaped():
        return call("allreduce", host, tensors, [(x.dtype, x.shape) for x in tensors])

    @tf.custom_gradient
    def forward(*xs):
        ys = call("allreduce", host, xs, [(x.dtype, x.shape) for x in xs])

        def grad(*dys):
            return _grouped_allreduce(list(dys), op, _grad_name(name), prescale, postscale,
                                      process_set)
        return ys, grad
    return list(forward(*tensors))


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set, ignore_name_scope=False):
    """Reduces `tensor` across the set's ranks; a tf.IndexedSlices is allgathered (values and
    indices: a sum of the slices, Average divides it by the size), as Horovod's."""
    op = resolve_op(op, average, "cerar.tensorflow")
    _host.check_op(op, "allreduce")
    if isinstance(tensor, tf.IndexedSlices):
        return _sparse_allreduce(tensor, op, name, process_set, prescale_factor,
                                 postscale_factor)
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    (out,) = _grouped_allreduce([compressed], op, name, float(prescale_factor),
                                float(postscale_factor), _set(process_set))
    return compression.decompress(out, ctx)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, name=None, process_set=global_process_set,
                      ignore_name_scope=False):
    """allreduce of a list of tensors as one fused unit per dtype; returns the list."""
    op = resolve_op(op, average, "cerar.tensorflow")
    _host.check_op(op, "grouped_allreduce")
    tensors = list(tensors)
    if not tensors:
        return []
    if any(isinstance(t, tf.IndexedSlices) for t in tensors):
        return [allreduce(t, op=op, compression=compression, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor, process_set=process_set)
                for t in tensors]
    pairs = [compression.compress(tf.convert_to_tensor(t)) for t in tensors]
    outs = _grouped_allreduce([c for c, _ in pairs], op, name, float(prescale_factor),
                              float(postscale_factor), _set(process_set))
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, pairs)]


class SlicesUnsupportedError(InvalidArgumentError, NotImplementedError):
    """What a tf.IndexedSlices cannot take (an op other than Average and Sum, scale factors):
    an InvalidArgumentError, and the NotImplementedError Horovod raises there."""
    __init__ = Exception.__init__


def _sparse_allreduce(slices, op, name, process_set, prescale_factor=1.0,
                      postscale_factor=1.0):
    if op not in (Average, Sum):
        raise SlicesUnsupportedError("cerar.tensorflow.allreduce: a tf.IndexedSlices reduces "
                                     "with Average or Sum only")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise SlicesUnsupportedError("cerar.tensorflow.allreduce: a tf.IndexedSlices takes no "
                                     "prescale_factor or postscale_factor (scale its values)")
    base = op_name("sparse_allreduce", name)
    values = allgather(slices.values, name=f"{base}.values", process_set=process_set)
    indices = allgather(slices.indices, name=f"{base}.indices", process_set=process_set)
    if op == Average:
        values = values / tf.cast(_membership(_set(process_set))[2], values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


# --- allgather, broadcast -----------------------------------------------------------------------
def _gathered_shape(x):
    return [None] + list(x.shape[1:]) if x.shape.rank else [None]


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates every rank's tensor along the first dimension (sizes may differ; a scalar
    counts as one row)."""
    process_set = _set(process_set)
    name = op_name("allgather", name)

    @tf.custom_gradient
    def forward(x):
        (y,) = call("allgather", lambda a: [_host.allgather(a, name, process_set)], [x],
                    [(x.dtype, _gathered_shape(x))])

        def grad(dy):
            return _allgather_grad(x, dy, name, process_set)
        return y, grad
    return forward(tf.convert_to_tensor(tensor))


def _allgather_grad(x, dy, name, process_set):
    """This rank's rows of the gradient averaged over the ranks (Horovod's, cerar.torch's)."""
    summed = allreduce(dy, op=Average, name=f"{name}.grad", process_set=process_set or
                       global_process_set)
    rows = tf.reshape(tf.shape(x)[0] if x.shape.rank else tf.constant(1), [1])
    sizes = allgather(rows, name=f"{name}.grad.rows", process_set=process_set or
                      global_process_set)
    set_rank = _membership(process_set)[1]
    start = tf.reduce_sum(sizes[:set_rank])
    piece = summed[start:start + sizes[set_rank]]
    return tf.reshape(piece, tf.shape(x))


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """allgather of each tensor (names "<name>.<i>"); returns the list."""
    base = op_name("grouped_allgather", name)
    return [allgather(t, name=f"{base}.{i}", process_set=process_set)
            for i, t in enumerate(tensors)]


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """root_rank's tensor (a global rank, also in a process set) on every rank of the set."""
    process_set, root_rank = _set(process_set), int(root_rank)
    name = op_name("broadcast", name)

    @tf.custom_gradient
    def forward(x):
        (y,) = call("broadcast", lambda a: [_host.broadcast(a, root_rank, name, process_set)],
                    [x], [(x.dtype, x.shape)])

        def grad(dy):  # Horovod's, cerar.torch's: the averaged gradient on the root
            averaged = allreduce(dy, op=Average, name=f"{name}.grad",
                                 process_set=process_set or global_process_set)
            return averaged if _rank() == root_rank else averaged * 0
        return y, grad
    return forward(tf.convert_to_tensor(tensor))


def _rank():
    import cerar
    return cerar.rank()


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Assigns root_rank's values to the variables (in place); returns their values after it,
    as Horovod's. In a graph each value is read after its assignment, so evaluating it runs the
    broadcast (a TF1 session runs nothing it does not fetch)."""
    variables = list(variables)
    base = op_name("broadcast_", name)
    values = []
    for i, variable in enumerate(variables):
        assigned = variable.assign(broadcast(variable, root_rank, name=f"{base}.{i}",
                                             process_set=process_set))
        with tf.control_dependencies([assigned]):
            values.append(tf.identity(variable.read_value()))
    return values


# --- alltoall, reducescatter --------------------------------------------------------------------
def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends splits[j] rows of `tensor` to rank j of the set (equal parts without splits);
    returns the rows received, in rank order, and with `splits` also the received splits
    (int32), as Horovod's: (rows, received_splits)."""
    process_set = _set(process_set)
    name = op_name("alltoall", name)
    x = tf.convert_to_tensor(tensor)
    if x.shape.rank == 0:
        raise InvalidArgumentError("cerar.tensorflow.alltoall: a scalar has no first dimension "
                                   "to divide")
    inputs = [x] if splits is None else [x, tf.cast(splits, tf.int32)]

    def host(array, splits_array=None):
        return _host.alltoall(array, None if splits_array is None else splits_array.tolist(),
                              name, process_set)

    @tf.custom_gradient
    def forward(x):
        out, received = call("alltoall", host, [x, *inputs[1:]],
                             [(x.dtype, [None, *x.shape[1:]]), (tf.int32, [None])])

        def grad(dy, _):
            back, _ = alltoall(dy, splits=received, name=f"{name}.grad",
                               process_set=process_set or global_process_set)
            return tf.reshape(back, tf.shape(x))
        return (out, received), grad
    out, received = forward(x)
    return out if splits is None else (out, received)


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces `tensor` across ranks; returns this rank's share of the first dimension (the
    first rows % size ranks one row more)."""
    process_set = _set(process_set)
    name = op_name("reducescatter", name)
    op = Average if op is None else op
    prescale, postscale = float(prescale_factor), float(postscale_factor)
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))

    @tf.custom_gradient
    def forward(x):
        shape = [None, *x.shape[1:]] if x.shape.rank else []
        (y,) = call("reducescatter",
                    lambda a: [_host.reducescatter(a, op, name, prescale, postscale,
                                                   process_set)],
                    [x], [(x.dtype, shape)])

        def grad(dy):
            # Horovod's: the allgathered gradient, times the set's size for Sum.
            gathered = allgather(dy, name=f"{name}.grad",
                                 process_set=process_set or global_process_set)
            if op == Sum:
                gathered = gathered * tf.cast(_membership(process_set)[2], gathered.dtype)
            return gathered * tf.cast(prescale * postscale, gathered.dtype)
        return y, grad
    return compression.decompress(forward(compressed), ctx)


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          name=None, process_set=global_process_set, ignore_name_scope=False,
                          prescale_factor=1.0, postscale_factor=1.0):
    base = op_name("grouped_reducescatter", name)
    return [reducescatter(t, compression=compression, op=op, name=f"{base}.{i}",
                          process_set=process_set, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor) for i, t in enumerate(tensors)]
