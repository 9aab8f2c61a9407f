"""The built-in environments' read-only tools (`READ_ONLY_TOOLS`): the declarations are what
the tools do (checked while the negatives stage probes every lookup and its candidates live),
and probing them live changes no negative but the ones a lazily loaded collection faked."""

from __future__ import annotations

import pytest

from datagen.config import NegativesConfig
from datagen.envs import make_env
from datagen.envs.enterprise import EnterpriseEnv
from datagen.envs.fs import FsEnv
from datagen.envs.sql import SqlEnv
from datagen.pipeline.stages.negatives import NegativeStage
from datagen.teachers import EnvPool
from mutators import outcome
from mutators.outcome import OutcomeProbe
from tests.datagen.helpers import BUILTIN_ENVS, oracle_trajectories

DECLARED = {
    "sql": {"list_tables", "describe_table", "run_query"},
    "fs": {"list_dir", "read_file", "search", "stat"},
    "enterprise": {"search_contacts", "get_contact", "search_accounts", "search_users",
                   "search_tickets", "list_orders", "get_order", "list_events"},
}


@pytest.mark.parametrize("name", BUILTIN_ENVS)
def test_the_declared_tools_are_the_lookups(name):
    env = make_env(name)
    tools = {spec["function"]["name"] for spec in env.tools()}
    assert env.READ_ONLY_TOOLS == DECLARED[name] and DECLARED[name] < tools
    for tool in tools:
        assert env.read_only({"name": tool, "arguments": {}}) is (tool in DECLARED[name])
    assert env.read_only({"name": 3}) is False and env.read_only("run_query") is False


def _stage_rows(trajectories, monkeypatch=None, declared=True):
    if not declared:
        for env_class in (SqlEnv, FsEnv, EnterpriseEnv):
            monkeypatch.setattr(env_class, "READ_ONLY_TOOLS", frozenset())
    batch = NegativeStage(NegativesConfig(), run_seed=0).run(trajectories, EnvPool())
    return batch.rows("negatives"), batch.stats


@pytest.mark.parametrize("name", BUILTIN_ENVS)
def test_no_declared_tool_changes_the_state_while_probed(name, monkeypatch):
    # every live run (originals and executed candidates) bracketed by snapshots
    monkeypatch.setattr(outcome, "CHECK_READ_ONLY", True)
    rows, stats = _stage_rows(oracle_trajectories(60, envs=(name,)))
    assert rows and "replay_errors" not in stats
    assert not any("mutator_failed" in key for key in stats.get("impossible_why", {}))
    live = sum(1 for row in rows if row["kind"] == "logical_error" and row["tool"] in
               DECLARED[name])
    assert live > 20  # the lookups were probed live, not skipped


@pytest.mark.parametrize("name", ["sql", "fs"])
def test_live_probes_give_the_same_negatives(name, monkeypatch):
    trajectories = oracle_trajectories(60, envs=(name,))
    live, live_stats = _stage_rows(trajectories)
    restored, restored_stats = _stage_rows(trajectories, monkeypatch, declared=False)
    assert live == restored and live_stats == restored_stats


def _lazy_pair(env: EnterpriseEnv):
    """(status, a search_tickets call, the states after a call with that status and after
    the call): the same observation, but one of them copied a collection from the world;
    `env` is left in the state both ran from."""
    for seed in range(40):
        env.reset(env.generate_task(seed, f"t{seed}"))
        for account in sorted(env.state["accounts"])[:20]:
            calls = [{"name": "search_tickets", "arguments": {
                "filters": {"account_id": account, "status": status}}}
                for status in ("open", "pending", "resolved", "closed")]
            seen = {}
            for call in calls:
                start = env.snapshot()
                observation = env.step(call).content
                after = env.snapshot()
                env.restore(start)
                for other, (other_observation, other_after) in seen.items():
                    if other_observation == observation and set(other_after) != set(after):
                        return other, call, other_after, after
                seen[call["arguments"]["filters"]["status"]] = (observation, after)
    raise AssertionError("no search_tickets pair that loads different collections")


def test_a_lookup_that_only_loads_a_collection_does_not_change_the_outcome():
    # main's probe compared the state dicts after a lookup: a collection copied from the world
    # by one call and not the other counted as "state after the call differs" (3 of 7,577
    # negatives of 600 demo trajectories); the records are the same, the outcome is too
    env = EnterpriseEnv()
    status, candidate, first_after, second_after = _lazy_pair(env)
    original = {"name": "search_tickets", "arguments": {"filters": {
        "account_id": candidate["arguments"]["filters"]["account_id"], "status": status}}}
    assert first_after != second_after and env.same_state(first_after, second_after)
    probe = OutcomeProbe(env, original)
    assert probe.changes_outcome(candidate) is False
