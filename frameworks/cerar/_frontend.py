"""What cerar.numpy, cerar.torch and cerar.jax do alike before they call the runtime: names for
unnamed operations, the check that a name is not already in flight, and the checks of the
user's arguments, so that one misuse raises one class whichever framework it comes through
(the user's wrong arguments raise InvalidArgumentError, a ValueError; a name in flight raises
ValueError, as Horovod's); and barrier and join, which all three offer alike."""
import itertools

from cerar import _state
from cerar._cerar import InvalidArgumentError
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


# Operations still in flight on this rank, by (process set id, name): a second one with the
# same name would make the result ambiguous, so it is refused before anything is sent. Handles
# are held here (a caller may drop its own) until they are seen done.
_inflight = {}
_PRUNE_AT = 1024  # unnamed calls add names without end: past this, finished ones are forgotten
# The next size that prunes: twice what the last pruning kept, so that more than _PRUNE_AT
# operations really in flight cost one scan per doubling, not one per call.
_prune_at = _PRUNE_AT


def begin(kind, name=None, process_set=None):
    """(the operation's name, its process set's id) for a new operation of `kind`; raises
    ValueError while an operation of that name is in flight in that set."""
    name = auto_name(kind, name)
    process_set_id = _set_id(process_set)
    check_not_in_flight(name, process_set_id)
    return name, process_set_id


def check_not_in_flight(name, process_set_id=0):
    """Raises ValueError while an operation named `name` is in flight in that set."""
    held = _inflight.get((process_set_id, name))
    if held is not None and not held.poll():
        raise ValueError(f"cerar: an operation named {name!r} is already in flight on rank "
                         f"{_state.current().rank}; names must be unique among pending "
                         "operations")


def track(name, handle, process_set_id=0):
    """`handle`, remembered as in flight under `name` until it is done."""
    global _prune_at
    if len(_inflight) > _prune_at:
        for key, held in list(_inflight.items()):
            if held.poll():
                del _inflight[key]
        _prune_at = max(_PRUNE_AT, 2 * len(_inflight))
    _inflight[(process_set_id, name)] = handle
    return handle


def barrier(process_set=None):
    """Returns once every rank of the set (default: the job) has called barrier()."""
    _state.current().barrier(_set_id(process_set)).wait()


def join():
    """Declares that this rank has no more data; returns the rank that joined last once every
    rank has joined (meanwhile this rank contributes the identity to the others' collectives)."""
    handle = _state.current().join()
    handle.wait()
    return handle.last_joined_rank()


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
