"""The elastic driver's and workers' shared encodings (frameworks/cerar/elastic/protocol.py)."""
import pytest

from cerar.elastic import protocol


def test_a_plan_round_trips_with_its_membership_changes():
    workers = {"node01:0#1": {"rank": 0, "local_rank": 0, "local_size": 1, "host": "node01"},
               "node02:0#4": {"rank": 1, "local_rank": 0, "local_size": 1, "host": "node02"}}
    data = protocol.encode_plan(3, workers, added=["node02:0#4"], removed=["node03:0#2"],
                                reason="node03 removed")
    plan = protocol.decode_plan(data)
    assert plan["generation"] == 3 and plan["size"] == 2 and plan["workers"] == workers
    assert plan["added"] == ["node02:0#4"] and plan["removed"] == ["node03:0#2"]


def test_a_plan_whose_ranks_are_not_0_to_n_minus_1_is_refused():
    workers = {"a": {"rank": 0, "local_rank": 0, "local_size": 1, "host": "h"},
               "b": {"rank": 2, "local_rank": 0, "local_size": 1, "host": "g"}}
    with pytest.raises(ValueError, match="not 0..1"):
        protocol.encode_plan(1, workers)


def test_keys_are_per_generation_and_failures_round_trip():
    assert protocol.plan_key(2) != protocol.plan_key(3)
    assert protocol.failed_key(2, "w1").startswith(protocol.PREFIX)
    assert protocol.scope_of(5) == "elastic/5"
    report = protocol.decode_failure(protocol.encode_failure(3, 1, RuntimeError("peer 1 lost")))
    assert report == {"rank": 3, "peer": 1, "error": "peer 1 lost", "silent": 0.0}
    assert protocol.decode_failure(protocol.encode_failure(3, 1, "t", 10))["silent"] == 10.0
    assert protocol.joined_key("w1").startswith(protocol.PREFIX)
