"""FAKE critic models for tests - not models. `GoldCriticFake` reads the task and the failed
step out of a critic prompt (critics.llm_critic.render_prompt) and answers with the gold call."""

from __future__ import annotations

import re
from typing import Any

from datagen.chat import render_call
from datagen.types import Task

_TASK = re.compile(r"# Task\n(.*?)\n\n# Tools", re.S)
_STEP = re.compile(r"# Failed call \(step (\d+)\)")


class GoldCriticFake:
    """FAKE critic: a tagged reply whose corrected call is the gold call of the failed step.
    Called with a list of prompts (the `complete` protocol) or, as a FaultServer reply, with
    a chat-completions body."""

    def __init__(self, tasks: list[Task]) -> None:
        self.by_instruction = {task.instruction: task for task in tasks}
        self.batches: list[int] = []  # prompts per call

    def reply(self, prompt: str) -> str:
        task = self.by_instruction[_TASK.search(prompt).group(1)]
        gold = task.gold[int(_STEP.search(prompt).group(1))].call
        return (f"<critique>The call to `{gold.name}` was wrong; the response shows it. "
                f"Use the arguments the task needs.</critique>\n{render_call(gold)}")

    def __call__(self, prompts: list[str] | dict[str, Any]) -> list[str] | str:
        if isinstance(prompts, dict):  # a chat-completions request body
            return self.reply(prompts["messages"][-1]["content"])
        self.batches.append(len(prompts))
        return [self.reply(prompt) for prompt in prompts]


def garbage_critic(prompts: list[str]) -> list[str]:
    """FAKE critic that never follows the reply format."""
    return ["I think it was fine." for _ in prompts]

