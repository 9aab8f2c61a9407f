"""New weights into a running vLLM engine (RL: the learner's policy after each iteration),
without restarting it.

Both ways go through `AsyncLLM.collective_rpc("reload_weights", ...)`, which every engine
worker runs (each tensor-parallel rank takes its own shard), then reset the prefix cache:
KV blocks computed with the old weights would otherwise be reused for any prompt sharing a
prefix with an earlier one (every episode of a task shares its system prompt).

    in memory  (name, tensor) pairs in checkpoint (Hugging Face) names, e.g. a
               `state_dict()`: vLLM serialises the tensors to its engine-core process(es);
               nothing touches the disk
    from disk  a directory of safetensors the learner wrote (`save_pretrained`): every
               worker reads it, so several nodes need it on a shared filesystem; the
               fallback for weights too large to pass through the engine's RPC

On GPUs the cheaper path is a NCCL broadcast from the learner into the engine workers (vLLM's
weight-transfer engines; README "PPO"): not built here. Kept apart from vllm_engine.py (the
engine actor and its restarts) so the two change independently.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from datagen.teachers.vllm_engine import VLLMEngineActor


async def load_weights(engine: Any, weights: Iterable[tuple[str, Any]] | None = None,
                       path: str | None = None) -> float:
    """Replace the weights of `engine` (a vLLM AsyncLLM) by `weights` or the safetensors in
    `path` (exactly one); returns the seconds it took. Names and shapes must be the served
    model's (a missing or misshapen tensor raises, leaving the engine as vLLM leaves it)."""
    if (weights is None) == (path is None):
        raise ValueError("load_weights takes exactly one of weights (name, tensor pairs) or "
                         "path (a directory of safetensors)")
    started = time.perf_counter()
    if weights is not None:
        named = [(name, tensor.detach().cpu().contiguous()) for name, tensor in weights]
        await engine.collective_rpc("reload_weights", kwargs={"weights_iterator": named})
    else:
        await engine.collective_rpc("reload_weights", kwargs={"weights_path": str(path)})
    await engine.reset_prefix_cache()
    return time.perf_counter() - started


class SyncedVLLMEngineActor(VLLMEngineActor):
    """The `vllm` teacher's engine actor plus a weight update (a Ray async actor: call
    `load_weights` between rollout batches; a batch running meanwhile would mix weights)."""

    async def load_weights(self, weights: list[tuple[str, Any]] | None = None,
                           path: str | None = None) -> float:
        await self.backend.start()
        return await load_weights(self.backend.engine, weights, path)
