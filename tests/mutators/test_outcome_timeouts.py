"""The outcome probe and time limits: an outcome the environment's clock decided (a `sql`
statement stopped by its 1 s watchdog) is no evidence of a changed outcome, either way."""

from __future__ import annotations

import time

from mutators import mutate_report
from tests.mutators.fake_crm_env import GET_CUSTOMER, FakeCrmEnvForTests, FakeObservation

GET = {"name": "get_customer", "arguments": {"customer_id": "C-1001"}}
STOPPED = "query stopped: it ran too long"


class SlowCustomerEnv(FakeCrmEnvForTests):
    """Lookups of the customers in `slow` are stopped by a time limit; declares it."""

    def __init__(self, slow: set[str]) -> None:
        super().__init__()
        self.slow = slow

    def step(self, call: dict) -> FakeObservation:
        if call.get("arguments", {}).get("customer_id") in self.slow:
            self.calls["step"] += 1
            return FakeObservation(f"Error: {STOPPED}", STOPPED)
        return super().step(call)

    def timed_out(self, observation: FakeObservation) -> bool:
        return observation.error == STOPPED


def logical_error(env):
    return mutate_report(GET, GET_CUSTOMER, 0, env=env, kinds=["logical_error"])


def test_an_original_that_timed_out_is_run_once_and_its_logical_error_refused():
    # HEAD: replayed once per candidate (each ~1 s in `sql`), and a candidate that merely
    # finished in time was counted as a changed outcome
    env = SlowCustomerEnv({"C-1001"})
    report = logical_error(env)
    assert report.negatives == []
    assert "time limit" in report.impossible["logical_error"].detail
    assert env.calls["step"] == 1


def test_a_candidate_that_timed_out_is_not_a_changed_outcome():
    env = SlowCustomerEnv({"C-1002", "C-1003"})
    report = logical_error(env)
    negative = report.get("logical_error")
    assert negative is None or negative.mutated not in ("C-1002", "C-1003")


def test_the_sql_env_declares_its_watchdog_stop_and_nothing_else():
    from datagen.envs.sql import SqlEnv
    env = SqlEnv()
    env.reset(env.generate_task(1, "t"))
    slow = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 100000) "
            "SELECT sum(instr(hex(zeroblob(49999 - x % 2)), substr(hex(zeroblob(25000)), 1, "
            "49999 - x % 2) || '1')) FROM c, clients")
    started = time.monotonic()
    stopped = env.step({"name": "run_query", "arguments": {"sql": slow}})
    assert time.monotonic() - started < 3 and env.timed_out(stopped)
    for sql in ("SELECT 1", "SELECT * FROM nowhere", "DELETE FROM clients"):
        assert not env.timed_out(env.step({"name": "run_query", "arguments": {"sql": sql}}))
