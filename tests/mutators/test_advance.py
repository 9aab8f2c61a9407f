"""`mutate_report(advance=True)`: the environment is left after the call, as `env.step(call)`
would leave it, with the same negatives, and usually without stepping the call again."""

from __future__ import annotations

import pytest

from mutators import mutate_report
from tests.mutators.fake_crm_env import (CREATE_TICKET, CRM_TOOLS, BrokenHooksEnv,
                                         FakeCrmEnvForTests, NondeterministicEnv,
                                         OpaqueStateEnv)

CREATE = {"name": "create_ticket", "arguments": {"customer_id": "C-1001", "title": "Login"}}
KINDS = ["type_error", "hallucinated_key", "logical_error"]


def _stepped(env_class: type) -> dict:
    env = env_class()
    env.step(CREATE)
    return env.state


@pytest.mark.parametrize("seed", range(4))
def test_advance_leaves_the_state_after_the_call_with_the_same_negatives(seed):
    # the class's first probe of a tool also checks determinism (one run more): done here
    mutate_report(CREATE, CREATE_TICKET, seed, env=FakeCrmEnvForTests(), kinds=KINDS)
    advanced, kept = FakeCrmEnvForTests(), FakeCrmEnvForTests()
    report = mutate_report(CREATE, CREATE_TICKET, seed, env=advanced, other_tools=CRM_TOOLS,
                           kinds=KINDS, advance=True)
    found = mutate_report(CREATE, CREATE_TICKET, seed, env=kept, other_tools=CRM_TOOLS,
                          kinds=KINDS)
    assert [n.to_dict() for n in report.negatives] == [n.to_dict() for n in found.negatives]
    assert report.get("logical_error").outcome_changed is True
    assert advanced.state == _stepped(FakeCrmEnvForTests) != kept.state
    # the outcome check's after-state was restored: the call was not stepped once more
    assert advanced.calls["step"] == kept.calls["step"]


def test_advance_steps_the_call_when_no_check_ran_it_last():
    mutate_report(CREATE, CREATE_TICKET, 1, env=FakeCrmEnvForTests(), kinds=["logical_error"])
    env, kept = FakeCrmEnvForTests(), FakeCrmEnvForTests()
    kinds = ["logical_error", "type_error"]  # a check after the outcome check
    mutate_report(CREATE, CREATE_TICKET, 1, env=env, kinds=kinds, advance=True)
    mutate_report(CREATE, CREATE_TICKET, 1, env=kept, kinds=kinds)
    assert env.state == _stepped(FakeCrmEnvForTests)
    assert env.calls["step"] == kept.calls["step"] + 1
    only_types = FakeCrmEnvForTests()
    mutate_report(CREATE, CREATE_TICKET, 1, env=only_types, kinds=["type_error"], advance=True)
    assert only_types.state == _stepped(FakeCrmEnvForTests) and only_types.calls["step"] == 1


@pytest.mark.parametrize("env_class", [BrokenHooksEnv, NondeterministicEnv])
def test_advance_after_a_failed_outcome_check_still_moves_on(env_class):
    env = env_class()
    report = mutate_report(CREATE, CREATE_TICKET, 0, env=env, kinds=["logical_error"],
                           advance=True)
    assert report.get("logical_error") is None
    assert env.state == _stepped(env_class)


class FreshOpaqueEnv(OpaqueStateEnv):
    """A class of its own: its first probe decides that its states do not compare."""


def test_no_state_is_snapshotted_after_a_candidate_when_states_do_not_compare():
    env = FreshOpaqueEnv()
    mutate_report(CREATE, CREATE_TICKET, 0, env=env, kinds=["logical_error"])
    before = dict(env.calls)
    mutate_report(CREATE, CREATE_TICKET, 0, env=env, kinds=["logical_error"])
    steps = env.calls["step"] - before["step"]
    assert steps >= 2  # the original and at least one candidate
    assert env.calls["snapshot"] - before["snapshot"] == 2  # before and after the original
