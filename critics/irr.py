"""IRR (incorrect-step recovery rate): inject an error into an episode and see if the agent
recovers.

For each held-out task: the oracle rolls it out, one step is replaced with a hard negative
(`inject.inject_error`, executed in the real environment), and the agent under test continues
from there, seeing the wrong call and its real observation. The episode counts as recovered
when it passes the checker within the turns a perfect recovery needs (redo the step, the
remaining gold steps, the answer) plus `extra_turns` (2 by default). Any agent fits: a policy
is a callable `(task, tools, steps, rng) -> Step`; `oracle_policy` is the reference, a teacher
backend is wrapped the same way. Everything is seeded: the same seed gives the same numbers.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from critics.inject import inject_error
from datagen.envs import DEFAULT_ENVS, Environment, make_env
from datagen.teachers import OracleTeacher
from datagen.teachers.phrasing import final_reasoning, step_reasoning
from datagen.types import Step, Task, stable_seed
from mutators import ALL_KINDS, Rejected

Policy = Callable[[Task, list[dict[str, Any]], list[Step], random.Random], Step]


def oracle_policy(task: Task, tools: list[dict[str, Any]], steps: list[Step],
                  rng: random.Random) -> Step:
    """The next gold step not yet done successfully (matched in order), or the answer."""
    done = 0
    for step in steps:
        if (done < len(task.gold) and step.call is not None and step.observation is not None
                and not step.observation.error
                and step.call.as_dict() == task.gold[done].call.as_dict()):
            done += 1
    last = steps[-1] if steps else None
    previous = (last.call, last.observation) if last and last.call and last.observation else None
    if done < len(task.gold):
        return Step(step_reasoning(rng, task.gold[done], previous), call=task.gold[done].call)
    return Step(final_reasoning(rng, previous), answer=task.answer or "Done.")


@dataclass(slots=True)
class Episode:
    """One IRR episode: where the error went, and whether the agent recovered."""

    env: str
    kind: str
    error_step: int
    recovered: bool
    turns: int
    error: str | None = None


@dataclass
class IRRReport:
    episodes: list[Episode] = field(default_factory=list)
    skipped: int = 0

    def summary(self) -> dict[str, Any]:
        """IRR overall, per environment and per error kind (n and rate)."""
        def rate(items: list[Episode]) -> dict[str, Any]:
            return {"n": len(items), "irr": round(sum(e.recovered for e in items) /
                                                 max(len(items), 1), 4)}
        by_env, by_kind = defaultdict(list), defaultdict(list)
        for episode in self.episodes:
            by_env[episode.env].append(episode)
            by_kind[episode.kind].append(episode)
        return {"overall": rate(self.episodes), "skipped": self.skipped,
                "per_env": {k: rate(v) for k, v in sorted(by_env.items())},
                "per_kind": {k: rate(v) for k, v in sorted(by_kind.items())}}


def run_episode(env: Environment, task: Task, policy: Policy, seed: int,
                kinds: Sequence[str], extra_turns: int) -> Episode | None:
    """Inject one error into the oracle rollout of `task`, let `policy` continue."""
    traj = OracleTeacher().rollout(task, env)
    if not traj.success:
        return None
    injection = inject_error(traj, env, seed, kinds)
    if isinstance(injection, Rejected):
        return None
    steps = traj.steps[: injection.step] + [
        Step(traj.steps[injection.step].reasoning, call=injection.wrong_call,
             observation=injection.observation)]
    budget = (len(task.gold) - injection.step) + 1 + extra_turns
    rng = random.Random(seed)
    episode = Episode(task.env, injection.kind, injection.step, False, 0)
    for turn in range(1, budget + 1):
        episode.turns = turn
        try:
            step = policy(task, traj.tools, steps, rng)
            if step.call is not None:
                step.observation = env.step(step.call.as_dict())
            elif step.answer is not None:
                episode.recovered = env.check(task, step.answer)
                break
        except Exception as exc:  # noqa: BLE001 - an agent or env failure is a failed episode
            episode.error = f"{type(exc).__name__}: {exc}"
            break
        steps.append(step)
    return episode


def evaluate_irr(policy: Policy = oracle_policy, envs: Sequence[str] = DEFAULT_ENVS,
                 num_tasks: int = 60, seed: int = 0, kinds: Sequence[str] = ALL_KINDS,
                 extra_turns: int = 2) -> IRRReport:
    """IRR over `num_tasks` held-out tasks (round-robin over `envs`, ids `irr-<seed>-<i>`,
    seeds derived from `seed` and disjoint in name from the generation task ids)."""
    report = IRRReport()
    pool = {name: make_env(name) for name in envs}
    for index in range(num_tasks):
        name = envs[index % len(envs)]
        task_seed = stable_seed("irr", seed, index)
        try:
            task = pool[name].generate_task(task_seed, f"irr-{seed}-{index}")
            episode = run_episode(pool[name], task, policy, task_seed, kinds, extra_turns)
        except Exception:  # noqa: BLE001 - a broken task is skipped and counted
            episode = None
        if episode is None:
            report.skipped += 1
        else:
            report.episodes.append(episode)
    return report
