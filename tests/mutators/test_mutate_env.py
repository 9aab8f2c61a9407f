"""The environment hook: wrong entities from `alternatives`, outcome checks from one snapshot,
and the environment left exactly as found."""

from __future__ import annotations

import copy

from mutators import mutate, mutate_report, validate
from tests.mutators.fake_crm_env import (CREATE_TICKET, CRM_TOOLS, GET_CUSTOMER, LIST_TICKETS,
                                         BrokenHooksEnv, ExplodingEnv, FakeCrmEnvForTests,
                                         FakeObservation, NondeterministicEnv, OpaqueStateEnv)

GET = {"name": "get_customer", "arguments": {"customer_id": "C-1001"}}


def test_wrong_entity_comes_from_the_environment_and_changes_the_outcome():
    env = FakeCrmEnvForTests()
    for seed in range(5):
        negative = mutate_report(GET, GET_CUSTOMER, seed, env=env,
                                 kinds=["logical_error"]).get("logical_error")
        assert negative.subkind == "wrong_entity"
        assert negative.mutated in ("C-1002", "C-1003")
        assert negative.outcome_changed is True
        assert validate(negative.call, GET_CUSTOMER) == []


def test_environment_is_left_exactly_as_found():
    env = FakeCrmEnvForTests()
    before = copy.deepcopy(env.state)
    call = {"name": "create_ticket", "arguments": {"customer_id": "C-1001", "title": "Login"}}
    negatives = mutate(call, CREATE_TICKET, 0, env=env, other_tools=CRM_TOOLS)
    assert len(negatives) == 3
    assert env.state == before
    # one snapshot to restore from, one after each step (to compare states); a restore
    # before each step but the first (the original runs in the live environment right after
    # the snapshot) and one at the end
    assert env.calls["snapshot"] == env.calls["step"] + 1
    assert env.calls["restore"] == env.calls["step"]


def test_candidates_that_do_not_change_the_observation_are_skipped():
    # status filter: "pending" and "closed" both give an empty list for C-1002 -> only
    # changes that really alter the observation are kept
    env = FakeCrmEnvForTests()
    call = {"name": "list_tickets", "arguments": {"customer_id": "C-1002", "status": "open"}}
    original = env.step(call).content
    for seed in range(10):
        negative = mutate_report(call, LIST_TICKETS, seed, env=env,
                                 kinds=["logical_error"]).get("logical_error")
        assert negative.outcome_changed is True
        assert env.step(negative.call).content != original


def test_a_step_that_raises_is_a_failed_candidate():
    env = ExplodingEnv()
    report = mutate_report(GET, GET_CUSTOMER, env=env, kinds=["logical_error"])
    assert report.get("logical_error") is None
    assert "changed the outcome" in report.impossible["logical_error"]


def test_nondeterministic_environment_cannot_verify():
    report = mutate_report(GET, GET_CUSTOMER, env=NondeterministicEnv(), kinds=["logical_error"])
    assert "not deterministic" in report.impossible["logical_error"]


def test_broken_hooks_are_reasons_not_crashes():
    report = mutate_report(GET, GET_CUSTOMER, env=BrokenHooksEnv())
    assert "snapshot" in report.impossible["logical_error"]
    assert {n.kind for n in report.negatives} == {"type_error", "hallucinated_key"}


def test_env_is_not_needed_for_the_other_kinds():
    env = FakeCrmEnvForTests()
    with_env = mutate(GET, GET_CUSTOMER, 1, env=env, kinds=["type_error", "hallucinated_key"])
    without = mutate(GET, GET_CUSTOMER, 1, kinds=["type_error", "hallucinated_key"])
    assert [n.to_dict() for n in with_env] == [n.to_dict() for n in without]
    assert env.calls["step"] == 0


def retitle(ctx):
    from mutators import Candidate

    yield Candidate("retitled", ("title",), ctx.arguments["title"], "Other",
                    ctx.edited(lambda a: a.__setitem__("title", "Other")))


CREATE = {"name": "create_ticket", "arguments": {"customer_id": "C-1001", "title": "Login"}}


def test_a_changed_state_counts_when_the_observation_is_the_same():
    # "created T-4 for C-1001" whatever the title: only the state tells them apart
    report = mutate_report(CREATE, CREATE_TICKET, env=FakeCrmEnvForTests(),
                           kinds=["logical_error"], operators={"logical_error": [retitle]})
    negative = report.get("logical_error")
    assert negative.outcome_changed is True and "state" in negative.description


def test_opaque_states_fall_back_to_observations():
    report = mutate_report(CREATE, CREATE_TICKET, env=OpaqueStateEnv(),
                           kinds=["logical_error"], operators={"logical_error": [retitle]})
    assert report.get("logical_error") is None


def test_other_tools_default_to_the_environment_tools():
    env = FakeCrmEnvForTests()
    subkinds = {mutate_report(GET, GET_CUSTOMER, seed, env=env,
                              kinds=["hallucinated_key"]).get("hallucinated_key").subkind
                for seed in range(20)}
    assert "borrowed" in subkinds


class AlternativesOnly:
    """An environment that knows other values but cannot execute calls."""

    def alternatives(self, call, path):
        return ["C-1002"] if path == "arguments.customer_id" else []


def test_an_env_that_cannot_execute_still_gives_wrong_entities():
    negative = mutate_report(GET, GET_CUSTOMER, env=AlternativesOnly(),
                             kinds=["logical_error"]).get("logical_error")
    assert (negative.subkind, negative.mutated, negative.outcome_changed) == (
        "wrong_entity", "C-1002", None)


class OnceCheckedCrmEnv(FakeCrmEnvForTests):
    """A class of its own, so the determinism verdict below is its first."""


def test_determinism_is_checked_once_per_environment_class_and_tool():
    # the first probe of a tool runs the original twice (determinism), later ones once
    env = OnceCheckedCrmEnv()
    steps, negatives = [], []
    for _ in range(3):
        before = env.calls["step"]
        negatives.append(mutate_report(GET, GET_CUSTOMER, 7, env=env,
                                       kinds=["logical_error"]).get("logical_error"))
        steps.append(env.calls["step"] - before)
    assert steps[0] == steps[1] + 1 and steps[1] == steps[2]
    # the baseline of one run proves the same: the same negative, executed, outcome changed
    assert all(n.outcome_changed is True for n in negatives)
    assert [n.to_dict() for n in negatives[1:]] == [negatives[0].to_dict()] * 2
    assert OnceCheckedCrmEnv().step(negatives[0].call).content != env.step(GET).content


class ClockOnListEnv(FakeCrmEnvForTests):
    """Deterministic but for one tool, whose answer carries a clock."""

    def step(self, call: dict) -> FakeObservation:
        obs = super().step(call)
        if call.get("name") != "list_tickets":
            return obs
        return FakeObservation(f"{obs.content} at t={self.calls['step']}", obs.error)


def test_a_tool_found_deterministic_vouches_for_no_other_tool():
    env = ClockOnListEnv()
    assert mutate_report(GET, GET_CUSTOMER, env=env,
                         kinds=["logical_error"]).get("logical_error").outcome_changed is True
    listing = {"name": "list_tickets", "arguments": {"customer_id": "C-1002"}}
    for seed in range(3):  # and a nondeterministic tool is checked again on every call
        report = mutate_report(listing, LIST_TICKETS, seed, env=env, kinds=["logical_error"])
        assert "not deterministic" in report.impossible["logical_error"].detail
