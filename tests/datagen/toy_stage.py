"""A stage defined outside the package, as a user would add one: this file is all it takes
(plus `env_modules: [tests.datagen.toy_stage]` in the config). It overrides nothing of the
reporting, so the defaults show it in the summary, `datagen inspect` and the card."""

from __future__ import annotations

import pyarrow as pa

from datagen.pipeline.stages.base import Stage, StageBatch, Table, register_stage

TOOL_CALLS = Table("toy_tool_calls", pa.schema([
    ("trajectory_id", pa.string()), ("step", pa.int16()), ("tool", pa.string()),
]), "one row per tool call of a successful trajectory", {
    "trajectory_id": "the trajectory", "step": "assistant turn", "tool": "the tool it called",
})


@register_stage
class ToolCallStage(Stage):
    name = "toy_tool_calls"
    tables = (TOOL_CALLS,)

    @classmethod
    def build(cls, config, context):
        return cls()

    def run(self, trajectories, envs):
        batch = StageBatch()
        for traj in trajectories:
            if not traj.success:
                batch.count("skipped", "failed")
                continue
            for index, step in enumerate(traj.steps):
                if step.call is not None:
                    batch.add("toy_tool_calls", {"trajectory_id": traj.id, "step": index,
                                                 "tool": step.call.name})
                    batch.count("calls", traj.task.env)
        return batch.output(self.tables)
