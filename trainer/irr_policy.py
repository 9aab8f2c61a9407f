"""A checkpoint as an IRR agent (`critics.irr`): recovery after an injected error, on
held-out tasks.

`critics.irr.run_episode` rolls the oracle out, replaces one call with a typed hard negative
executed in the real environment, and asks the policy for the next steps. `CheckpointPolicy`
answers with `AgentPolicy` (modifications and hybrid mode active): the conversation so far is
rendered with datagen's template (`render_trajectory`: scripted steps as the shards show them,
the model's own turns exactly as generated), tokenised with its span labels, and the turn is
judged by datagen's episode rules (`judge_turn`: parser, unknown tool, schema). A failed turn
gets the error as its tool response, as with `on_invalid_turn: feedback`, and costs a turn of
the budget.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from critics.irr import Episode, IRRReport, run_episode
from datagen.chat import generation_prompt, render_trajectory
from datagen.envs import make_env
from datagen.teachers.episode import Generation, judge_turn
from datagen.types import Observation, Step, Task, Trajectory
from mutators import ALL_KINDS
from trainer.generation import AgentPolicy, Turn


class CheckpointPolicy:
    """`critics.irr.Policy` over an AgentPolicy; keeps its turns for the hybrid metrics."""

    def __init__(self, policy: AgentPolicy, max_new_tokens: int = 256) -> None:
        self.policy = policy
        self.max_new_tokens = max_new_tokens
        self.turns: list[Turn] = []

    def prompt(self, task: Task, tools: list[dict[str, Any]], steps: list[Step],
               ) -> tuple[str, list[dict[str, Any]]]:
        """The conversation so far and the next assistant header, with span labels."""
        traj = Trajectory(id="irr", task=task, tools=tools, steps=steps, success=False,
                          reward=0.0, teacher="eval")
        text, spans = render_trajectory(traj)
        header = generation_prompt()
        labels = [{"kind": s.kind, "start": s.start, "end": s.end, "step": s.step} for s in spans]
        labels.append({"kind": "PROMPT", "start": len(text), "end": len(text) + len(header),
                       "step": len(steps)})
        return text + header, labels

    def __call__(self, task: Task, tools: list[dict[str, Any]], steps: list[Step],
                 rng: random.Random) -> Step:
        text, spans = self.prompt(task, tools, steps)
        turn = self.policy.act(text, spans, tools, self.max_new_tokens)
        self.turns.append(turn)
        closed = bool(turn.ids) and turn.ids[-1] == self.policy.ids["im_end"]
        generation = Generation(text=self.policy.tokenizer.decode(turn.ids[:-1] if closed else turn.ids),
                                finish_reason="stop" if closed else "length")
        step = judge_turn(generation, {t["function"]["name"]: t for t in tools},
                          self.max_new_tokens)
        if step.error is not None:
            step.observation = Observation(content=f"Error: {step.error}", error=step.error)
        return step


def _episode(envs: dict[str, Any], task: Task, policy: CheckpointPolicy,
             kinds: Sequence[str], extra_turns: int) -> Episode | None:
    """One IRR episode (None: the task admits no injection, or it broke)."""
    try:
        env = envs.get(task.env) or envs.setdefault(task.env, make_env(task.env))
        return run_episode(env, task, policy, task.seed, kinds, extra_turns)
    except Exception:  # noqa: BLE001 - a broken task is skipped and counted
        return None


def evaluate_irr(policy: CheckpointPolicy, tasks: Sequence[Task],
                 kinds: Sequence[str] = ALL_KINDS, extra_turns: int = 2) -> dict[str, Any]:
    """IRR of the checkpoint on `tasks` (each task's seed also seeds its injection): overall,
    per environment and per error kind, as `datagen eval irr` reports the oracle's."""
    envs: dict[str, Any] = {}
    episodes = [_episode(envs, task, policy, kinds, extra_turns) for task in tasks]
    report = IRRReport([e for e in episodes if e is not None], sum(e is None for e in episodes))
    return report.summary() | {"extra_turns": extra_turns, "turns": len(policy.turns)}
