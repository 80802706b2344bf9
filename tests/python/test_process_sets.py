"""Process sets (Horovod's): disjoint and overlapping sets at once, sets added and removed
while others reduce, CERAR in sets of 2 and 3, non-member calls and mismatches confined to a
set (workers/process_sets_job.py, 4 ranks)."""
import pytest

from conftest import assert_ok, needs_runtime, run_job

pytestmark = needs_runtime


def test_process_sets_static_dynamic_cerar_and_errors():
    env = {"CERAR_ALGORITHM": "cerar", "CERAR_COMPONENTS": "4",
           "CERAR_DYNAMIC_PROCESS_SETS": "1"}
    assert_ok(run_job("process_sets_job.py", np=4, timeout=300, env=env), "process sets OK")


def test_changes_need_the_dynamic_switch():
    assert_ok(run_job("process_sets_static.py", np=2, timeout=120), "static only OK", np=2)


class _Runtime:
    """What _register_static asks of a runtime, for one rank of a job of `size`."""

    def __init__(self, size):
        self.size, self.sets = size, {0: list(range(size))}

    def process_set_ids(self):
        return list(self.sets)

    def process_set_ranks(self, i):
        return self.sets[i]

    def add_process_set(self, ranks):
        if any(r >= self.size for r in ranks):
            raise ValueError(f"rank beyond {self.size}")
        i = len(self.sets)
        self.sets[i] = list(ranks)
        return type("Added", (), {"process_set_id": lambda _, i=i: i})()


def test_elastic_starts_register_static_sets_for_the_new_size():
    from cerar._process_sets import ProcessSet, _register_static
    evens, tail = ProcessSet([0, 2, 4]), ProcessSet([4, 5])
    _register_static(_Runtime(6), [evens, tail], elastic=True)
    assert (evens.ranks, tail.ranks) == ([0, 2, 4], [4, 5]) and tail.process_set_id == 2
    _register_static(_Runtime(4), [evens, tail], elastic=True)  # a reset: 6 -> 4
    assert evens.ranks == [0, 2] and evens.process_set_id == 1
    assert tail.ranks == [] and tail.process_set_id is None  # nothing left: invalidated
    _register_static(_Runtime(6), [evens, tail], elastic=True)  # grown back
    assert (evens.ranks, tail.ranks, tail.process_set_id) == ([0, 2, 4], [4, 5], 2)
    with pytest.raises(ValueError, match="beyond"):  # outside elastic jobs: the error stays
        _register_static(_Runtime(4), [ProcessSet([4, 5])])
