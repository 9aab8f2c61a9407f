"""The training runs of the loop: `trainer fit` configs derived from the loop's sections.

Round 0 trains the recipe's config as written on the teacher data (its own `model` section:
from scratch or `init_from`). Round r >= 1 continues from round r-1's checkpoint on the round's
mix (trajectory-shaped rows only, trainer.loop.mix) for `steps_per_round` steps; with DPO on,
a DPO run then starts from that SAD checkpoint on the round's repair pairs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from trainer.config import TrainConfig, load_config
from trainer.loop.config import LoopConfig


def round0_train_config(config: LoopConfig, data: Path, run_dir: Path) -> TrainConfig:
    steps = [f"run.max_steps={config.train.round0_steps}"] if config.train.round0_steps else []
    return load_config(config.train.config, [*config.train.set, f"run_dir={run_dir}",
                                             f"shards={data}", *steps])


def student_train_config(config: LoopConfig, mix: Path, run_dir: Path,
                         checkpoint: str) -> TrainConfig:
    return load_config(config.train.config, [
        *config.train.set, f"run_dir={run_dir}", f"shards={mix}",
        f"model.init_from={checkpoint}", f"run.max_steps={config.train.steps_per_round}",
        "data.tables=[trajectories]", "data.table_weights={}"])


def dpo_train_config(config: LoopConfig, data: Path, run_dir: Path,
                     checkpoint: str) -> TrainConfig:
    # no trajectory anchor: the round's trajectories are the student's own rollouts, and an
    # anchor would distill them, mistakes included
    return load_config(config.dpo.config, [
        "dpo.anchor_weight=0", *config.dpo.set, f"run_dir={run_dir}", f"shards={data}",
        f"model.init_from={checkpoint}", f"run.max_steps={config.dpo.steps}",
        "dpo.sources=[repair]", "dpo.source_weights={}", "dpo.reference_model=null"])


def run_fit(cfg: TrainConfig) -> dict[str, Any]:
    """Run (or resume) one training run; its record (checkpoint, last metrics, seconds)."""
    from trainer.fit import fit

    started = time.perf_counter()
    result = fit(cfg)
    if result.checkpoint is None:
        raise RuntimeError(f"training into {cfg.run_dir} ended without a checkpoint")
    keep = ("step", "lm_loss", "reason", "act", "tokens_per_s", "mch_auroc", "loss",
            "accuracy", "margin")
    return {"run_dir": result.run_dir, "checkpoint": result.checkpoint,
            "steps": cfg.run.max_steps, "seconds": time.perf_counter() - started,
            "metrics": {k: v for k, v in result.metrics.items() if k in keep},
            "data": result.data}
