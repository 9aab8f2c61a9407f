"""Small environments defined outside the package, as a user would: they exercise the registry
(`env_modules` / `module:Class` in the config) and the error paths of the pipeline."""

from __future__ import annotations

import random

from datagen.envs import Environment, register_env, tool_spec
from datagen.types import GoldStep, Observation, Task, ToolCall


@register_env
class CounterEnv(Environment):
    """Reach a target value with `add` calls, then report it with `read`."""

    name = "toy_counter"

    def tools(self):
        return [tool_spec("add", "Add an integer to the counter.",
                          {"amount": {"type": "integer"}}, ["amount"]),
                tool_spec("read", "Read the counter.", {})]

    def generate_task(self, seed: int, task_id: str) -> Task:
        rng = random.Random(seed)
        amounts = [rng.randint(1, 9) for _ in range(rng.randint(2, 4))]
        gold = [GoldStep(ToolCall("add", {"amount": a}), f"add {a} to the counter") for a in amounts]
        gold.append(GoldStep(ToolCall("read", {}), "read the counter"))
        return Task(id=task_id, env=self.name, seed=seed, gold=gold, answer=str(sum(amounts)),
                    instruction=f"Add {', '.join(map(str, amounts))} to the counter and report it.")

    def reset(self, task: Task) -> None:
        self.state = {"value": 0}

    def step(self, call) -> Observation:
        if call.get("name") == "add":
            amount = call.get("arguments", {}).get("amount")
            if not isinstance(amount, int):
                return self.fail("amount must be an integer")
            self.state["value"] += amount
            return self.ok({"value": self.state["value"]})
        if call.get("name") == "read":
            return self.ok({"value": self.state["value"]})
        return self.fail(f"unknown tool {call.get('name')!r}")

    def check(self, task: Task, answer: str | None) -> bool:
        return answer is not None and answer.strip() == str(self.state["value"])


@register_env
class FlakyEnv(CounterEnv):
    """Like CounterEnv, but task generation raises for seeds divisible by 5 and `read` raises
    for seeds divisible by 7: a bug in user code must become a failed row, not a crashed job."""

    name = "toy_flaky"

    def generate_task(self, seed: int, task_id: str) -> Task:
        if seed % 5 == 0:
            raise ValueError(f"generator bug for seed {seed}")
        task = super().generate_task(seed, task_id)
        task.env = self.name
        return task

    def reset(self, task: Task) -> None:
        super().reset(task)
        self.seed = task.seed

    def step(self, call) -> Observation:
        if call.get("name") == "read" and self.seed % 7 == 0:
            raise RuntimeError("read exploded")
        return super().step(call)
