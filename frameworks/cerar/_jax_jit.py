"""cerar.jax's collectives inside jax.jit: each is one ordered host callback.

`jax.experimental.io_callback(..., ordered=True)` makes the compiled program call back into
Python, which runs the same host collective as outside jit. "ordered" threads an effect token
through every callback of the program, so XLA runs them in program order: every rank issues
its blocking collectives in one order, as it would running the step op by op.

Names are fixed when the function is traced, from the program itself: the user's name, or
the kind of collective and the caller's source position (function, file name, line), so every
rank tracing the same program gets the same names and a recompile gets the same ones again.
Shapes stay out of the names, so ranks that disagree on a shape meet under one name and get
MismatchError rather than waiting for each other's names. One name may be issued many times
(a call site in a Python loop, a helper called twice, a recompile for other shapes): the
callbacks run one at a time, in program order on every rank, so two operations of one name
are never in flight together, and the runtime takes a name again with another shape.
"""
import os
import sys

import jax
import numpy as np
from jax._src import core as _jax_core
from jax.experimental import io_callback

from cerar._cerar import InvalidArgumentError
from cerar._process_sets import _membership

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_JAX = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep


def traced(*trees):
    """True when the call is being traced (by jit or another transform), also for operands
    that are constants of the traced function: run then and there, their collective would
    run once, when tracing, and its result stay in the compiled program."""
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(trees)):
        return True
    context = getattr(_jax_core, "trace_ctx", None)  # jax >= 0.4.36: O(1)
    if context is not None:
        return not context.is_top_level()
    return isinstance(jax.lax.full((), 0, np.int8), jax.core.Tracer)  # a primitive is traced


def _call_site():
    """'function@file:line' of the innermost caller outside cerar and jax."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not (path.startswith(_HERE) or path.startswith(_JAX)):
            return (f"{frame.f_code.co_name}@{os.path.basename(path)}:{frame.f_lineno}")
        frame = frame.f_back
    return "unknown"


def traced_name(kind, name):
    """The name of a collective traced inside jit (see the module's docstring)."""
    return f"jit.{name}" if name is not None else f"jit.{kind}@{_call_site()}"


def _shape_of(leaf):
    return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype)


def host_call(host_function, leaves, results):
    """Calls host_function(*numpy arrays) -> list of numpy arrays from compiled code, in
    program order; `results` are the ShapeDtypeStructs it returns."""
    def callback(*arrays):
        out = host_function(*arrays)
        for got, want in zip(out, results):
            if tuple(got.shape) != tuple(want.shape):
                raise InvalidArgumentError(
                    f"cerar.jax inside jit: a result of shape {tuple(got.shape)} where the "
                    f"traced program expects {tuple(want.shape)}")
        return [np.asarray(o, dtype=w.dtype) for o, w in zip(out, results)]
    return io_callback(callback, list(results), *leaves, ordered=True)


def allreduce(host_allreduce, x, name):
    """host_allreduce(numpy array, name) -> numpy array, called from compiled code."""
    name = traced_name("allreduce", name)
    return host_call(lambda a: [host_allreduce(a, name)], [x], [_shape_of(x)])[0]


def tree(kind, host_tree, leaves, name):
    """host_tree(list of numpy arrays, base name) -> the list of results (of the same shapes),
    from compiled code: one callback for a whole pytree."""
    base = traced_name(kind, name)
    return host_call(lambda *arrays: host_tree(list(arrays), base), leaves,
                     [_shape_of(leaf) for leaf in leaves])


def allgather(host_allgather, x, name, process_set):
    """The result's shape is fixed when tracing: every rank's first dimension must be this
    rank's (checked when it runs)."""
    name = traced_name("allgather", name)
    set_size = _membership(process_set)[2]
    shape = (set_size * (x.shape[0] if x.ndim else 1), *x.shape[1:])
    result = jax.ShapeDtypeStruct(shape, x.dtype)
    return host_call(lambda a: [host_allgather(a, name)], [x], [result])[0]


def broadcast(host_broadcast, x, name):
    name = traced_name("broadcast", name)
    return host_call(lambda a: [host_broadcast(a, name)], [x], [_shape_of(x)])[0]
