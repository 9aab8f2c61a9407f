"""The iterative distillation loop (`python -m trainer loop --config configs/loop_tiny.yaml`):
round 0 distils teacher data into a student; every later round lets the previous student play
fresh tasks, turns its failures into repairs (critique + fix from its first wrong step), trains
on them plus a replay share of earlier rounds, and evaluates on the same held-out tasks.
trainer.loop.run has the topology; trainer.loop.rounds the on-disk layout and resume."""

from trainer.loop.config import LoopConfig, load_loop_config
from trainer.loop.run import LoopResult, run_loop

__all__ = ["LoopConfig", "LoopResult", "load_loop_config", "run_loop"]
