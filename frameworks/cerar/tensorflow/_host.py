"""cerar.tensorflow's collectives on numpy arrays: Horovod's semantics around cerar.numpy.

The runtime reduces float16/bfloat16/float32/float64, int32/int64 and uint8. What TensorFlow
users may pass beyond that is done here, in numpy, around cerar.numpy's calls:
- int8, int16 and uint16 travel as int32 and are cast back (a wrapping sum); bool as uint8;
- integer Average and integer pre/postscale scale in float64 and truncate toward zero, as
  Horovod's CPU path (Average is the sum scaled by 1/size);
- Product multiplies the allgathered arrays, in rank order.
Every function takes and returns numpy arrays; the names are the runtime's.
"""
import numpy as np

import cerar.numpy as cn
from cerar import Average, Max, Min, Product, Sum
from cerar._cerar import InvalidArgumentError
from cerar._process_sets import _membership

_WIDENED = {np.dtype(np.int8): np.int32, np.dtype(np.int16): np.int32,
            np.dtype(np.uint16): np.int32, np.dtype(np.bool_): np.uint8}
REDUCE_OPS = (Sum, Average, Min, Max, cn.Adasum, Product)


def wire(array):
    """A C-contiguous copy of `array` in a dtype the runtime carries (at least 1-D)."""
    array = np.asarray(array)
    dtype = _WIDENED.get(array.dtype, array.dtype)
    return np.array(array, dtype=dtype, order="C", copy=True, ndmin=1)


def back(array, dtype, shape):
    """A wire result as the caller's dtype and shape (int32 -> int8 wraps, as the narrow sum
    would)."""
    return np.asarray(array).astype(dtype, copy=False).reshape(shape)


def _integer(dtype):
    return not (np.issubdtype(dtype, np.floating) or dtype.name == "bfloat16")


def _scaled(array, factor):
    """array * factor in float64, truncated toward zero (integer dtypes)."""
    return np.trunc(array.astype(np.float64) * factor).astype(array.dtype)


def check_op(op, what):
    if op not in REDUCE_OPS:
        raise InvalidArgumentError(f"cerar.tensorflow.{what}: unknown op {op!r} (Average, Sum, "
                                   "Min, Max, Product or Adasum)")


def grouped_allreduce(arrays, op, names, prescale, postscale, process_set):
    """Every array reduced across the set's ranks; the list of results (input dtypes)."""
    check_op(op, "allreduce")
    if not arrays:
        return []
    dtypes = [np.asarray(a).dtype for a in arrays]
    shapes = [np.shape(a) for a in arrays]
    wires = [wire(a) for a in arrays]
    if op is Product:
        return [back(_product(w, n, prescale, postscale, process_set), d, s)
                for w, n, d, s in zip(wires, names, dtypes, shapes)]
    integer = [_integer(d) for d in dtypes]
    if any(integer) and not all(integer):
        raise InvalidArgumentError("cerar.tensorflow: a grouped call needs all-floating or "
                                   "all-integer tensors")
    post_integer = 1.0
    if integer[0]:
        if prescale != 1.0:
            wires = [_scaled(w, prescale) for w in wires]
        set_size = _membership(process_set)[2]
        post_integer = postscale / set_size if op == Average else postscale
        op = Sum if op == Average else op
        prescale = postscale = 1.0
    if len(wires) == 1:
        cn.allreduce_(wires[0], op, names[0], prescale, postscale, process_set)
    else:
        _grouped_by_name(wires, op, names, prescale, postscale, process_set)
    if post_integer != 1.0:
        wires = [_scaled(w, post_integer) for w in wires]
    return [back(w, d, s) for w, d, s in zip(wires, dtypes, shapes)]


def _grouped_by_name(wires, op, names, prescale, postscale, process_set):
    """One fused grouped all-reduce per dtype ("<base>.<dtype>", names "<base>.<dtype>.<i>")."""
    by_dtype = {}
    for index, array in enumerate(wires):
        by_dtype.setdefault(array.dtype.name, []).append(index)
    base = names[0].rsplit(".", 1)[0]
    handles = [cn.grouped_allreduce_async_([wires[i] for i in by_dtype[key]], op,
                                           f"{base}.{key}", prescale, postscale, process_set)
               for key in sorted(by_dtype)]
    for handle in handles:
        handle.wait()


def _product(array, name, prescale, postscale, process_set):
    if prescale != 1.0:
        array = array * np.asarray(prescale).astype(array.dtype)
    rows = cn.allgather(array.reshape(1, -1), f"{name}.product", process_set)
    out = np.prod(rows.astype(np.float32) if array.dtype.name in ("float16", "bfloat16")
                  else rows, axis=0).astype(array.dtype)
    return out * np.asarray(postscale).astype(array.dtype) if postscale != 1.0 else out


def allgather(array, name, process_set):
    dtype = np.asarray(array).dtype
    out = cn.allgather(wire(array), name, process_set)
    return out.astype(dtype, copy=False)


def grouped_allgather(arrays, base, process_set):
    handles = [cn.allgather_async(wire(a), f"{base}.{i}", process_set)
               for i, a in enumerate(arrays)]
    return [h.wait().astype(np.asarray(a).dtype, copy=False) for h, a in zip(handles, arrays)]


def broadcast(array, root_rank, name, process_set):
    dtype, shape = np.asarray(array).dtype, np.shape(array)
    return back(cn.broadcast_(wire(array), root_rank, name, process_set), dtype, shape)


def alltoall(array, splits, name, process_set):
    dtype = np.asarray(array).dtype
    out, received = cn.alltoall_async(wire(array), splits, name, process_set).wait()
    return out.astype(dtype, copy=False), received


def reducescatter(array, op, name, prescale, postscale, process_set):
    if op not in (Sum, Average, Min, Max):
        raise InvalidArgumentError(f"cerar.tensorflow.reducescatter supports Sum, Average, "
                                   f"Min and Max, not {op!r}")
    dtype = np.asarray(array).dtype
    source = wire(array) if np.ndim(array) else np.asarray(array)
    post_integer = 1.0
    if _integer(dtype):
        if prescale != 1.0:
            source = _scaled(source, prescale)
        post_integer = postscale / _membership(process_set)[2] if op == Average else postscale
        op = Sum if op == Average else op
        prescale = postscale = 1.0
    out = cn.reducescatter(source, op, name, prescale, postscale, process_set)
    if post_integer != 1.0:
        out = _scaled(out, post_integer)
    return out.astype(dtype, copy=False)
