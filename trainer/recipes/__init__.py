"""Training recipes: each a self-contained training loop per worker with its own config
section, chosen by `recipe:` in the config (torchtune-style; the shared pieces - building
the student, engines/ZeRO, checkpoints and resume, metrics, data readers - are library
modules of `trainer`).

    sad   trainer/recipes/sad.py   span-level distillation on trajectories (+ repairs, MCH)
    dpo   trainer/recipes/dpo.py   preference training on preferences/ pairs
    ppo   trainer/recipes/ppo.py   RL in the environments: PPO (value head) or GRPO/RLOO

A recipe module provides:
    build_dataset(cfg) -> (ray.data.Dataset, info)   the driver's data stream (one row per
                                                     micro-batch); may run a preparatory pass;
                                                     None when the recipe makes its own (ppo);
                                                     a dict {name: dataset} for several streams
                                                     ("train" + dpo's "anchor")
    train_loop_per_worker(loop_config)               what every Ray Train worker runs;
                                                     loop_config["train"] is the TrainConfig
    loop_extras(cfg, dataset) -> dict                more entries for loop_config (optional)

A new recipe starts as one module here and one name in RECIPES and in TrainConfig.recipe.
"""

from __future__ import annotations

import importlib
from types import ModuleType

RECIPES = {"sad": "trainer.recipes.sad", "dpo": "trainer.recipes.dpo",
           "ppo": "trainer.recipes.ppo"}


def load_recipe(name: str) -> ModuleType:
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; known: {sorted(RECIPES)}")
    return importlib.import_module(RECIPES[name])
