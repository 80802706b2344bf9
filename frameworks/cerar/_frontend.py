"""What cerar.numpy, cerar.torch and cerar.jax do alike before they call the runtime: names for
unnamed operations and the checks of the user's arguments, so that one misuse raises one class
whichever framework it comes through (the user's wrong arguments raise InvalidArgumentError, a
ValueError; a name in flight raises ValueError, as Horovod's: the runtime keeps the names in
flight and refuses one at the call, or when asked first by check_not_in_flight); and barrier and
join, which all three offer alike."""
import itertools

from cerar import _state
from cerar._cerar import InvalidArgumentError, Op
from cerar._process_sets import _set_id

counters = {}  # "<kind>" -> the next unnamed call's number; init() starts them again


def auto_name(kind, name=None):
    """`name`, or a deterministic one: "<kind>.noname.<n>", counted per kind since init().

    Every rank must make its unnamed calls in the same order, as with Horovod.
    """
    if name is not None:
        return str(name)
    with _state.lock:
        counter = counters.setdefault(kind, itertools.count())
        return f"{kind}.noname.{next(counter)}"


def begin(kind, name=None, process_set=None):
    """(the operation's name, its process set's id) for a new operation of `kind`."""
    return auto_name(kind, name), _set_id(process_set)


def check_not_in_flight(names, process_set_id=0):
    """Raises ValueError while an operation of one of `names` (the runtime's names of the
    units about to be enqueued) is in flight in that set: asked of the runtime before work
    that must not start for a call it would refuse (every enqueue checks its own names)."""
    _state.current().check_not_in_flight(names, process_set_id)


def barrier(process_set=None):
    """Returns once every rank of the set (default: the job) has called barrier()."""
    _state.current().barrier(_set_id(process_set)).wait()


def join():
    """Declares that this rank has no more data; returns the rank that joined last once every
    rank has joined (meanwhile this rank contributes the identity to the others' collectives)."""
    handle = _state.current().join()
    handle.wait()
    return handle.last_joined_rank()


def resolve_op(op, average, what):
    """The reduction asked for: `op`, or Horovod's older `average` flag (not both); Average by
    default. `what` names the caller in the error."""
    if average is not None:
        if op is not None:
            raise InvalidArgumentError(f"{what}: pass op or average, not both")
        return Op.Average if average else Op.Sum
    return Op.Average if op is None else op


def check_in_place(contiguous, what):
    """In-place operations write the runtime's result into the caller's memory directly."""
    if not contiguous:
        raise InvalidArgumentError(f"{what}: in-place operations need a writable contiguous "
                                   "array or tensor")


def check_first_dimension(ndim, what):
    """reducescatter and alltoall divide the first dimension among the ranks."""
    if ndim == 0:
        raise InvalidArgumentError(f"{what}: a scalar has no first dimension to divide")


def alltoall_splits(splits, rows, size, what):
    """The runtime's splits (an empty list: equal parts) for sending `rows` rows to `size`
    ranks, checked here so that a bad one fails on the rank that passed it, before anything
    is sent."""
    if splits is None:
        if rows % size != 0:
            raise InvalidArgumentError(f"{what}: without splits the first dimension ({rows}) "
                                       f"must be a multiple of the size ({size})")
        return []
    wanted = [int(v) for v in splits]
    if len(wanted) != size:
        raise InvalidArgumentError(f"{what}: {len(wanted)} splits for {size} ranks")
    if any(v < 0 for v in wanted):
        raise InvalidArgumentError(f"{what}: splits must not be negative")
    if sum(wanted) > rows:
        raise InvalidArgumentError(f"{what}: the splits sum to more than the first dimension "
                                   f"of the tensor ({sum(wanted)} > {rows})")
    return wanted
