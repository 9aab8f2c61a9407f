"""A trained checkpoint's meta-cognitive head as the consistency filter's confidence scorer.

Importing this module registers the scorer `mch` in datagen's scorer registry
(`datagen.scorers`), so a generation config uses it without datagen importing the trainer:

    env_modules: [trainer.mch_scorer]
    consistency: {enabled: true, k: 5, scorer: mch,
                  scorer_options: {checkpoint: runs/tiny/checkpoint}, min_confidence: 0.5}

Each rollout is rendered and tokenised as the trainer reads it (the trajectory contract's text
and spans, `trainer.tokens`), and the MCH scores every tool-call step (the last token of each
ACT run holding a `<tool_call>`, as in training). The rollout's confidence is its weakest
step's, sigmoid of the head's logit: one doubtful call is enough to doubt the rollout. A rollout
without a tool call (or whose first call lies past `max_tokens`) gets None.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from datagen.rows import render
from datagen.scorers import register_scorer
from datagen.types import Trajectory
from trainer import tokens


class MCHScorer:
    """`scorer(trajectories) -> confidences` with one checkpoint loaded on CPU (or `device`)."""

    def __init__(self, checkpoint: str, tokenizer: str | None = None, device: str = "cpu",
                 max_tokens: int = 4096) -> None:
        from trainer.checkpoint_check import CheckpointError, checkpoint_problem
        from trainer.model.modeling import AgentQwen2ForCausalLM

        # from_pretrained waits forever on a config.json that is a FIFO and allocates whatever
        # shapes a config names: checked first, in a chunk worker as in `trainer eval`
        if problem := checkpoint_problem(checkpoint):
            raise CheckpointError(f"scorer_options.checkpoint {checkpoint}: {problem}")
        self.model = AgentQwen2ForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
        self.model.to(device).eval()
        if not self.model.config.use_mch:
            raise ValueError(f"checkpoint {checkpoint} has no meta-cognitive head (use_mch off)")
        self.tokenizer = tokens.TextTokenizer(tokenizer or checkpoint)
        self.call_id = tokens.special_ids(self.tokenizer)["tool_call_start"]
        self.device, self.max_tokens = device, max_tokens

    def __call__(self, trajectories: list[Trajectory]) -> list[float | None]:
        return [self.score(traj) for traj in trajectories]

    def score(self, traj: Trajectory) -> float | None:
        text, spans = render(traj)
        ids, labels = tokens.tokenize_with_spans(
            self.tokenizer, [text], [[{"kind": s.kind, "start": s.start, "end": s.end}
                                      for s in spans]])
        ids_row, span_row = np.asarray(ids[0][:self.max_tokens]), labels[0][:self.max_tokens]
        ends = tokens.tool_call_step_ends(ids_row, span_row, self.call_id)
        if not ends:
            return None
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor(ids_row[None], device=self.device),
                             span_ids=torch.tensor(span_row[None].astype(np.int64),
                                                   device=self.device),
                             mch_positions=torch.tensor([ends], device=self.device),
                             logits_to_keep=1)
        return float(torch.sigmoid(out.mch_logits[0].float()).min())


def make_mch_scorer(options: dict[str, Any]) -> MCHScorer:
    """`scorer_options`: checkpoint (required), tokenizer, device, max_tokens."""
    if "checkpoint" not in options:
        raise ValueError("scorer mch needs scorer_options.checkpoint (a trained checkpoint "
                         "with use_mch)")
    return MCHScorer(**options)


register_scorer("mch", make_mch_scorer)
