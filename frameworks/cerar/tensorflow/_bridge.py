"""How a TensorFlow tensor reaches the runtime: through numpy, in host memory.

Eagerly, a collective converts its inputs with `.numpy()`, runs the host function (cerar.numpy's
calls) and converts the results back. Inside `tf.function` it is one `tf.numpy_function` op,
stateful, so TensorFlow's automatic control dependencies run a function's collectives one after
another in program order: every rank issues its blocking collectives in the same order, as it
would running the step op by op. The op's results get the shapes the caller declares (a `None`
dimension where only the run knows it, as an allgather's first).

In a TF1 graph run by a session there are no automatic control dependencies, and a session may
start independent ops in any order on each rank: with more collectives than inter-op threads,
two ranks can block on different ones for good. There the collectives made between two runs of
the graph (a segment, in one control flow context) form a chain of control dependencies, so
they run in creation order, which every rank shares; fetching one also runs those of its
segment made before it. A collective made after the graph has run starts a new segment, so
graphs that grow between runs do not re-run what came before. One run may still fetch the
collectives of several segments, in no shared order: where the CerarWait op is at hand
(status_op.py), a collective in a session holds none of its threads while it waits.

A failed collective raises TensorFlow's error class as Horovod's op kernels do (MismatchError as
tf.errors.FailedPreconditionError, InvalidArgumentError as tf.errors.InvalidArgumentError, ...):
eagerly an exception of both classes, in a graph through the CerarStatus op after the Python op
(status_op.py; without it, TensorFlow's UnknownError).

Inside `tf.function(jit_compile=True)` no Python op can run (XLA compiles the whole graph), so
a collective refuses at trace time with an error that names jit_compile.
"""
import functools
import itertools
import os
import threading
import weakref

import numpy as np
import tensorflow as tf

from cerar._cerar import (CerarError, CerarTimeoutError, InvalidArgumentError, MismatchError,
                          ShutDownError)
from cerar._frontend import auto_name
from cerar.tensorflow import status_op

try:  # whether a gradient tape is recording (eagerly, a collective then skips custom_gradient)
    from tensorflow.python.eager import record as _record
except ImportError:  # pragma: no cover - a TensorFlow that moved it
    _record = None
try:  # TF's record of an XLA compilation context during tracing (jit_compile=True)
    from tensorflow.python.ops import control_flow_util as _flow_util
except ImportError:  # pragma: no cover - a TensorFlow that moved it
    _flow_util = None


class JitCompileError(InvalidArgumentError):
    """A collective inside tf.function(jit_compile=True). Exception's own constructor, so that
    autograph, which rebuilds an error raised while tracing from its message when it can, gives
    the user this class and not its StagingError."""
    __init__ = Exception.__init__


def in_xla():
    """True while tracing a function that XLA will compile (jit_compile=True)."""
    if _flow_util is None or tf.executing_eagerly():
        return False
    return bool(_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))


def check_not_xla(what):
    if in_xla():
        raise JitCompileError(
            f"cerar.tensorflow.{what} cannot run inside tf.function(jit_compile=True): XLA "
            "compiles the whole function and cannot call the Python op that carries the "
            "collective; call it from a function without jit_compile (e.g. compute the "
            "gradients in a jit_compile function and reduce them outside it)")


def untaped():
    """True when running eagerly with no gradient tape recording: no gradient can be asked
    for, so a collective runs without tf.custom_gradient's bookkeeping."""
    return (_record is not None and tf.executing_eagerly()
            and not _record.could_possibly_record())


def op_name(kind, name):
    """The runtime's name of a collective: the user's, or "<kind>.noname.<n>" in call order
    (inside tf.function, fixed when tracing: every rank traces the same calls in one order)."""
    return auto_name(kind, name)


def host(tensor):
    """A tensor (or anything tf.convert_to_tensor takes) as a numpy array, eagerly."""
    if isinstance(tensor, np.ndarray):
        return tensor
    return tf.convert_to_tensor(tensor).numpy()


def call(what, host_function, inputs, outputs):
    """host_function(*numpy arrays) -> list of numpy arrays, on tensors. `outputs`: one
    (dtype, shape) per result (shape a list, None for a dimension known only when it runs).
    Eagerly it runs now; in a graph it is a stateful numpy_function op."""
    inputs = [tf.convert_to_tensor(t) for t in inputs]
    if tf.executing_eagerly():
        try:
            results = host_function(*[t.numpy() for t in inputs])
        except CerarError as error:
            raise as_tf_error(error) from None
        return [tf.convert_to_tensor(np.asarray(r, dtype=d.as_numpy_dtype))
                for r, (d, _) in zip(results, outputs)]
    check_not_xla(what)

    graph = tf.compat.v1.get_default_graph()
    segment, previous = _segment_for(graph)
    status = status_op.library()

    def outcome(*arrays):
        """The op's values: the results, then (CerarStatus following) the code and message."""
        try:
            results = host_function(*arrays)
        except CerarError as error:
            _remember(error)
            if status is None:
                raise
            # Placeholders: CerarStatus fails with the error's code before anything reads them.
            return ([np.zeros(0, d.as_numpy_dtype) for d, _ in outputs]
                    + [np.int32(_tf_error_of(error)[1]),
                       np.bytes_(_message(error).encode())])
        arrays = [np.asarray(r, dtype=d.as_numpy_dtype) for r, (d, _) in zip(results, outputs)]
        return arrays + ([np.int32(0), np.bytes_(b"")] if status is not None else [])

    def run(*arrays):
        if segment is not None:
            segment.ran = True
        return outcome(*arrays)
    types = [d for d, _ in outputs] + ([tf.int32, tf.string] if status is not None else [])
    with tf.control_dependencies(previous):
        if segment is not None and status is not None:
            tensors = _without_a_thread(what, run, inputs, types, status)
        else:
            tensors = tf.numpy_function(run, inputs, types, stateful=True, name=f"cerar_{what}")
        if not isinstance(tensors, (list, tuple)):
            tensors = [tensors]
        if status is not None:  # the code rides along as a value: the op has an output
            code, message = tensors[-2:]
            tensors = status.cerar_status(code, message, list(tensors[:-2]) + [code],
                                          name=f"cerar_{what}_status")[:-1]
    for tensor, (_, shape) in zip(tensors, outputs):
        tensor.set_shape(shape)
    if segment is not None:
        segment.last = tensors[0].op.name  # a name: the segment holds no reference to the graph
    return list(tensors)


_tickets = itertools.count(1)
_finished = {}  # ticket -> what its finish op returns (a callable: values, or raises)


def _without_a_thread(what, run, inputs, types, status):
    """run(*inputs) in a TF1 session without holding one of its threads while it waits: a
    Python op starts it on a thread of its own and returns at once, CerarWait (an asynchronous
    kernel) waits for the pipe that thread writes when done, and a last Python op hands over
    its values. A session may start the ops of graph segments in any order on each rank (one
    run can fetch collectives of several segments); a rank blocked in one collective on each of
    its threads could otherwise wait for good on one the other ranks have not started."""
    def submit(*arrays):
        ticket = next(_tickets)
        read_end, write_end = os.pipe()

        def work():
            try:
                values = run(*arrays)
                _finished[ticket] = lambda: values
            except BaseException as error:  # raised again by the finishing op
                _finished[ticket] = functools.partial(_raise, error)
            finally:
                os.write(write_end, b".")
                os.close(write_end)
        threading.Thread(target=work, name=f"cerar {what}", daemon=True).start()
        return np.int32(read_end), np.int64(ticket)

    def finish(ticket, read_end):
        os.close(int(read_end))
        return _finished.pop(int(ticket))()
    fd, ticket = tf.numpy_function(submit, inputs, [tf.int32, tf.int64], stateful=True,
                                   name=f"cerar_{what}_start")
    done = status.cerar_wait(fd, ticket, name=f"cerar_{what}_wait")
    return tf.numpy_function(finish, [done, fd], types, stateful=True, name=f"cerar_{what}")


def _raise(error):
    raise error


# TensorFlow's error class and code for a cerar error, as Horovod's op kernels report them; the
# first row that matches; UnknownError for the rest.
_TF_ERRORS = ((MismatchError, tf.errors.FailedPreconditionError, tf.errors.FAILED_PRECONDITION),
              (InvalidArgumentError, tf.errors.InvalidArgumentError, tf.errors.INVALID_ARGUMENT),
              (ShutDownError, tf.errors.AbortedError, tf.errors.ABORTED),
              (CerarTimeoutError, tf.errors.DeadlineExceededError, tf.errors.DEADLINE_EXCEEDED))


def _tf_error_of(error):
    """(TensorFlow's class, its code) for a cerar error."""
    return next((row[1:] for row in _TF_ERRORS if isinstance(error, row[0])),
                (tf.errors.UnknownError, tf.errors.UNKNOWN))


def _message(error):
    return f"{type(error).__name__}: {error}"


_both = {}  # (cerar class, TensorFlow class) -> the class of both


def as_tf_error(error):
    """`error` as an exception of its cerar class and of TensorFlow's (_tf_error_of), with its
    message and attributes: `except cerar.MismatchError` and `except
    tf.errors.FailedPreconditionError` both catch it."""
    classes = (type(error), _tf_error_of(error)[0])
    both = _both.get(classes)
    if both is None:
        both = _both[classes] = type(classes[0].__name__, classes,
                                     {"__module__": classes[0].__module__,
                                      "__str__": lambda self: self.message})
    raised = both.__new__(both)
    raised.__dict__.update(error.__dict__)
    classes[1].__init__(raised, None, None, str(error))
    raised.args = error.args
    return raised


class _Segment:
    """A TF1 graph's collectives made since it last ran one of them (module docstring)."""

    def __init__(self, context):
        self.context, self.last, self.ran = context, None, False


_segments = weakref.WeakKeyDictionary()  # graph -> its current segment


def _segment_for(graph):
    """The segment a new collective in `graph` joins, and the op it must follow: none inside
    tf.function (its automatic control dependencies order stateful ops)."""
    if graph.building_function:
        return None, []
    context = graph._get_control_flow_context()
    segment = _segments.get(graph)
    if segment is None or segment.ran or segment.context is not context:
        segment = _segments[graph] = _Segment(context)
    if segment.last is None:
        return segment, []
    return segment, [graph.get_operation_by_name(segment.last)]


# The cerar errors raised lately inside graph ops, by message: TensorFlow hands the caller its
# own OpError, whose message holds the cerar error's; cerar_error_of finds the original.
_raised, _raised_lock = {}, threading.Lock()
_REMEMBERED = 16


def _remember(error):
    with _raised_lock:
        _raised[str(error)] = error
        while len(_raised) > _REMEMBERED:
            del _raised[next(iter(_raised))]


def cerar_error_of(error):
    """The cerar error (its class, its peer) behind `error`: itself, or the one a collective
    raised inside a graph when `error` is the tf.errors.OpError that reports it; else None."""
    if isinstance(error, CerarError):
        return error
    if isinstance(error, tf.errors.OpError):
        with _raised_lock:
            for message, raised in reversed(list(_raised.items())):
                if message and message in error.message:
                    return raised
    return None
