"""Horovod's process sets: collectives among some of the job's ranks (docs/process-sets.md).

A ProcessSet names global ranks; it gets its id when registered, statically by
``init(process_sets=[...])`` or at run time by ``add_process_set`` (with
CERAR_DYNAMIC_PROCESS_SETS=1 or HOROVOD_DYNAMIC_PROCESS_SETS=1, job-wide). Registering and
removing are collectives of every rank, in the same order on every rank. Every collective takes
``process_set=``; ranks and sizes inside a set are the set's, roots of broadcasts stay global
ranks (as Horovod's).
"""
from cerar import _state
from cerar._cerar import InvalidArgumentError


class ProcessSet:
    """A set of global ranks; ``process_set_id`` is None until it is registered."""

    process_set_id = None
    ranks = None

    def __init__(self, ranks):
        ranks = list(ranks)
        if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
            raise ValueError("ProcessSet takes a list of integer ranks")
        self.ranks = sorted(ranks)

    def _invalidate(self):
        self.process_set_id = None

    def _known(self):
        """This set's global ranks as the runtime knows them (None when not registered)."""
        runtime = _state.runtime
        if self.process_set_id is None or runtime is None:
            return None
        return runtime.process_set_ranks(self.process_set_id)

    def size(self):
        """The number of ranks, or None before the set is registered."""
        ranks = self._known()
        return None if ranks is None else len(ranks)

    def rank(self):
        """This rank's index among the set's ranks (-1 outside it), or None before the set is
        registered. Operations still take global ranks as roots."""
        ranks = self._known()
        if ranks is None:
            return None
        rank = _state.current().rank
        return ranks.index(rank) if rank in ranks else -1

    def included(self):
        """Whether this rank is in the set (None when its ranks are not known)."""
        if self.process_set_id == 0 and _state.runtime is not None:
            return True
        if self.ranks is None:
            return None
        return _state.current().rank in self.ranks

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __str__ = __repr__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def set_argument(process_set):
    """What the layers pass down for `process_set=`: None for the global set (the runtime's
    default), the ProcessSet itself otherwise."""
    return None if process_set is global_process_set else process_set


def _register_static(runtime, process_sets, elastic=False):
    """init(process_sets=[...]): registers each set in order on every rank (the lists must be
    the same everywhere, as Horovod's); a set whose ranks are already registered gets that id
    once, later copies are invalidated. In an elastic job every start (each reset) registers
    them again for the generation's size: a set keeps the ranks it was given that exist now,
    and one left with none is invalidated (its operations raise) until the job grows back."""
    global_process_set.ranks = list(range(runtime.size))
    seen = {0}
    for ps in process_sets:
        if not isinstance(ps, ProcessSet):
            raise ValueError(f"init(process_sets=...) takes ProcessSet objects, got {ps!r}")
        if elastic:
            if getattr(ps, "_given", None) is None:
                ps._given = list(ps.ranks)
            ps.ranks = [r for r in ps._given if r < runtime.size]
            if not ps.ranks:
                ps._invalidate()
                continue
        existing = [i for i in runtime.process_set_ids()
                    if runtime.process_set_ranks(i) == ps.ranks]
        if existing:
            ps.process_set_id = existing[0]
        else:
            ps.process_set_id = runtime.add_process_set(ps.ranks).process_set_id()
        if ps.process_set_id in seen:
            ps._invalidate()
        else:
            seen.add(ps.process_set_id)


def _dynamic():
    runtime = _state.current()
    if not runtime.dynamic_process_sets:
        raise ValueError("process sets can be added or removed after init only with "
                         "CERAR_DYNAMIC_PROCESS_SETS=1 (or HOROVOD_DYNAMIC_PROCESS_SETS=1, "
                         "or init(process_sets='dynamic'))")
    return runtime


def add_process_set(process_set):
    """Registers a ProcessSet (or a list of ranks) on every rank together and returns it.
    A set with the same ranks raises ValueError."""
    runtime = _dynamic()
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    try:
        process_set.process_set_id = runtime.add_process_set(process_set.ranks).process_set_id()
    except InvalidArgumentError as e:
        raise ValueError(f"cannot add {process_set}: {e}") from e
    return process_set


def remove_process_set(process_set):
    """Removes a registered set on every rank together; True when it was removed (False for
    the global set or an unregistered one)."""
    runtime = _dynamic()
    process_set_id = process_set.process_set_id
    if process_set_id is None or process_set_id == 0:
        return False
    process_set._invalidate()
    try:
        runtime.remove_process_set(process_set_id).wait()
    except InvalidArgumentError:
        return False
    return True


def _set_id(process_set):
    """The runtime's id of `process_set` (None: the global set)."""
    if process_set is None:
        return 0
    if isinstance(process_set, int) and not isinstance(process_set, bool):
        return process_set
    process_set_id = getattr(process_set, "process_set_id", None)
    if process_set_id is None:
        raise ValueError(f"{process_set} is not registered: pass it to init(process_sets=...) "
                         "or add_process_set first")
    return process_set_id


def _membership(process_set):
    """(id, this rank's index in the set, the set's size) for a set this rank is in; raises
    the runtime's InvalidArgumentError otherwise (the check every operation on a set makes)."""
    process_set_id = _set_id(process_set)
    rank, size = _state.current().process_set_membership(process_set_id)
    return process_set_id, rank, size
