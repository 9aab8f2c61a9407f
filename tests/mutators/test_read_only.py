"""Read-only calls in the outcome check: an environment that declares `read_only(call)` has
its lookups probed on the live state (no snapshot, no restore), with the same negatives, and
a declaration that lies is caught by `CHECK_READ_ONLY`."""

from __future__ import annotations

import pytest

from mutators import mutate_report
from mutators import outcome
from mutators.outcome import OutcomeProbe, ReadOnlyViolation, is_read_only
from tests.mutators.fake_crm_env import (CRM_TOOLS, GET_CUSTOMER, LIST_TICKETS,
                                         FakeCrmEnvForTests, FakeObservation)

KINDS = ["type_error", "hallucinated_key", "logical_error"]
LOOKUPS = [
    ({"name": "get_customer", "arguments": {"customer_id": "C-1001"}}, GET_CUSTOMER),
    ({"name": "list_tickets", "arguments": {"customer_id": "C-1001", "status": "open"}},
     LIST_TICKETS),
    ({"name": "list_tickets", "arguments": {"customer_id": "C-1002", "limit": 5}},
     LIST_TICKETS),
]


class ReadOnlyCrmEnv(FakeCrmEnvForTests):
    """The toy CRM declaring its two lookups read-only (they are)."""

    def read_only(self, call: dict) -> bool:
        return call.get("name") in ("get_customer", "list_tickets")


class LyingCrmEnv(ReadOnlyCrmEnv):
    """Declares a lookup read-only, but the lookup counts its own calls in the state."""

    def step(self, call: dict) -> FakeObservation:
        if call.get("name") == "get_customer":
            self.state["lookups"] = self.state.get("lookups", 0) + 1
        return super().step(call)


@pytest.fixture
def checked(monkeypatch):
    monkeypatch.setattr(outcome, "CHECK_READ_ONLY", True)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("call,tool", LOOKUPS)
def test_a_read_only_lookup_gives_the_same_negatives_without_snapshots(call, tool, seed):
    # each class's first probe of a tool checks determinism: done once here for both
    for env_class in (FakeCrmEnvForTests, ReadOnlyCrmEnv):
        mutate_report(call, tool, seed, env=env_class(), other_tools=CRM_TOOLS, kinds=KINDS)
    plain, live = FakeCrmEnvForTests(), ReadOnlyCrmEnv()
    expected = mutate_report(call, tool, seed, env=plain, other_tools=CRM_TOOLS, kinds=KINDS,
                             advance=True)
    found = mutate_report(call, tool, seed, env=live, other_tools=CRM_TOOLS, kinds=KINDS,
                          advance=True)
    assert [n.to_dict() for n in found.negatives] == [n.to_dict() for n in expected.negatives]
    assert found.impossible == expected.impossible
    assert found.get("logical_error").outcome_changed is True
    assert live.calls["snapshot"] == live.calls["restore"] == 0
    assert plain.calls["snapshot"] > 0 and plain.calls["restore"] > 0
    # the original and every executed candidate once each, no step to advance
    assert live.calls["step"] == plain.calls["step"]
    assert live.state == plain.state == FakeCrmEnvForTests().state


def test_a_read_only_call_is_not_stepped_to_advance_when_no_check_ran_it():
    call, tool = LOOKUPS[0]
    env, plain = ReadOnlyCrmEnv(), FakeCrmEnvForTests()
    mutate_report(call, tool, 0, env=env, kinds=["type_error"], advance=True)
    mutate_report(call, tool, 0, env=plain, kinds=["type_error"], advance=True)
    assert env.calls["step"] == 0 and plain.calls["step"] == 1


def test_a_writing_call_is_still_probed_from_a_snapshot():
    create = {"name": "create_ticket", "arguments": {"customer_id": "C-1001", "title": "Login"}}
    env = ReadOnlyCrmEnv()
    assert not is_read_only(env, create)
    report = mutate_report(create, CRM_TOOLS[2], 0, env=env, kinds=["logical_error"],
                           advance=True)
    assert report.get("logical_error").outcome_changed is True
    assert env.calls["snapshot"] > 0 and env.state["next_ticket"] == 5


def test_the_check_catches_a_declared_read_only_tool_that_writes(checked):
    call, tool = LOOKUPS[0]
    probe = OutcomeProbe(LyingCrmEnv(), call)
    with pytest.raises(ReadOnlyViolation, match="get_customer"):
        probe.changes_outcome({"name": "get_customer", "arguments": {"customer_id": "C-1002"}})
    # through mutate_report the violation is the kind's reason, never a silent pass
    report = mutate_report(call, tool, 0, env=LyingCrmEnv(), kinds=["logical_error"])
    assert report.get("logical_error") is None
    assert report.impossible["logical_error"].kind == "mutator_failed"
    assert "ReadOnlyViolation" in report.impossible["logical_error"].detail


def test_the_check_passes_honest_declarations(checked):
    for call, tool in LOOKUPS:
        for seed in range(3):
            report = mutate_report(call, tool, seed, env=ReadOnlyCrmEnv(), kinds=KINDS)
            assert report.get("logical_error") is not None


def test_a_writing_candidate_of_a_read_only_original_runs_from_a_snapshot_put_back():
    # (the built-in kinds keep the tool; a caller's own probe may try another one)
    call, tool = LOOKUPS[0]
    env = ReadOnlyCrmEnv()
    probe = OutcomeProbe(env, call)
    write = {"name": "create_ticket", "arguments": {"customer_id": "C-1001", "title": "x"}}
    assert probe.changes_outcome(write) is True
    assert probe.last_change == "observation differs"
    assert env.state == FakeCrmEnvForTests().state  # the ticket it created was undone
    assert probe.close(advance=True) is True
    assert env.state == FakeCrmEnvForTests().state


def test_a_read_only_candidate_with_the_same_observation_is_not_a_changed_outcome():
    # a lookup cannot change the state, so only its observation can differ
    env = ReadOnlyCrmEnv()
    probe = OutcomeProbe(env, {"name": "list_tickets", "arguments": {"customer_id": "C-1003"}})
    same = {"name": "list_tickets", "arguments": {"customer_id": "C-1003", "status": "closed"}}
    assert probe.changes_outcome(same) is False
    assert probe.changes_outcome({"name": "list_tickets",
                                  "arguments": {"customer_id": "C-1001"}}) is True


def test_a_failing_declaration_counts_as_not_read_only():
    class Broken(FakeCrmEnvForTests):
        def read_only(self, call):
            raise RuntimeError("no")

    assert is_read_only(Broken(), LOOKUPS[0][0]) is False
    assert is_read_only(object(), LOOKUPS[0][0]) is False
    assert is_read_only(ReadOnlyCrmEnv(), LOOKUPS[0][0]) is True
