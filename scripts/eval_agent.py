"""Environments for `python -m trainer eval`: datagen's built-in environments behind the
trainer's small EnvironmentAdapter interface.

The trainer never imports the generation side; this script is where the two meet. It draws
tasks deterministically (datagen's TaskSource), renders each conversation with the same
chat template and span rules the shards were written with (so the policy sees prompts laid
out exactly as in training), parses the agent's turns with datagen's parser, validates calls
against the tool's JSON Schema (mutators' strict validator), and executes them.

    python -m trainer eval --checkpoint RUN/checkpoint_... --envs sql,fs --num-episodes 20
    python scripts/eval_agent.py --checkpoint ...        (the same command)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datagen.chat import generation_prompt, parse_assistant, render_trajectory  # noqa: E402
from datagen.envs import import_modules  # noqa: E402
from datagen.tasks import TaskSource  # noqa: E402
from datagen.teachers import EnvPool  # noqa: E402
from datagen.types import Step, Task, Trajectory  # noqa: E402
from trainer.eval import StepOutcome  # noqa: E402


def validate_call(call: dict[str, Any], tools: list[dict[str, Any]]) -> bool:
    """True when the call names a tool and its arguments pass the tool's schema."""
    tool = next((t for t in tools if t["function"]["name"] == call["name"]), None)
    if tool is None:
        return False
    try:
        from mutators import validate
    except ImportError:  # the strict validator is optional here; jsonschema is the fallback
        import jsonschema

        return jsonschema.Draft202012Validator(tool["function"]["parameters"]).is_valid(call["arguments"])
    return not validate(call, tool)


class DatagenEpisode:
    """One task in one environment instance; the agent's turns become Steps."""

    def __init__(self, task: Task, env: Any) -> None:
        self.env, self.task, self._world = task.env, task, env
        env.reset(task)
        self.tools = env.tools()
        self.steps: list[Step] = []
        self._success = False

    def context(self) -> tuple[str, list[dict]]:
        trajectory = Trajectory(id="eval", task=self.task, tools=self.tools, steps=self.steps,
                                success=False, reward=0.0, teacher="eval")
        text, spans = render_trajectory(trajectory)
        header = generation_prompt()
        rows = [{"kind": s.kind, "start": s.start, "end": s.end, "step": s.step} for s in spans]
        rows.append({"kind": "PROMPT", "start": len(text), "end": len(text) + len(header),
                     "step": len(self.steps)})
        return text + header, rows

    def step(self, assistant_text: str) -> StepOutcome:
        parsed = parse_assistant(assistant_text)
        attempted = "<tool_call>" in assistant_text
        if parsed.error is not None:
            return StepOutcome(done=True, attempted_call=attempted, call_valid=False)
        if parsed.call is not None:
            call = parsed.call.as_dict()
            valid = validate_call(call, self.tools)
            observation = self._world.step(call)
            self.steps.append(Step(reasoning=parsed.reasoning, call=parsed.call,
                                   observation=observation))
            return StepOutcome(done=False, attempted_call=True, call_valid=valid)
        self.steps.append(Step(reasoning=parsed.reasoning, answer=parsed.answer))
        self._success = bool(self._world.check(self.task, parsed.answer))
        return StepOutcome(done=True)

    @property
    def success(self) -> bool:
        return self._success


class DatagenAdapter:
    def __init__(self, envs: list[str], env_modules: list[str] | None = None) -> None:
        import_modules(list(env_modules or []))
        self.envs = envs

    def episodes(self, count: int, seed: int) -> Iterator[DatagenEpisode]:
        source = TaskSource(envs=tuple(self.envs), weights=(1.0,) * len(self.envs),
                            seed=seed, count=count)
        pool = EnvPool()
        for item in source.generate(0, count, pool):
            if isinstance(item, Task):
                yield DatagenEpisode(item, pool.fresh(item.env))


def make_adapter(envs: list[str], env_modules: list[str] | None = None) -> DatagenAdapter:
    return DatagenAdapter(envs, env_modules)


if __name__ == "__main__":
    from trainer.__main__ import main

    raise SystemExit(main(["eval", *sys.argv[1:]]))
