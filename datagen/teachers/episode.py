"""The episode loop every LLM backend shares: prompt -> turn -> parse -> tool -> ... -> answer.

An episode is a coroutine; a teacher runs many at once (`run_episodes`), so while one waits for
its next turn the others do too and the backend sees a full batch (vLLM's continuous batching,
the HF micro-batcher, concurrent HTTP requests). Backends only generate turns (`TurnBackend`);
everything else - the template, parsing, validation, tools, limits, accounting - happens here
once, identically for every backend.

Errors are data. Each assistant turn is parsed with the never-raising parser, then checked:
a truncated turn, an unparsable one, an unknown tool or arguments that fail `mutators.validate`
make a failed step whose `error` says why (`kind: detail`); with `on_invalid_turn: feedback` the
model is shown that error as a tool response and may recover. A generation that fails after the
backend's retries, a tool that raises, or a bug here ends that episode with the reason on the
row; the other episodes of the batch are unaffected.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, TypeVar

from datagen.chat import (DEFAULT_SYSTEM_PROMPT, generation_prompt, observation_turn,
                          parse_assistant, system_turn, turn_act_offset, user_turn)
from datagen.envs import Environment
from datagen.teachers.base import describe_exception, failed_trajectory
from datagen.teachers.config import TeacherConfig
from datagen.teachers.trace import TraceBuilder
from datagen.types import Observation, Step, Task, Trajectory, trajectory_id
from mutators import Rejected, validate

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(slots=True)
class TurnRequest:
    """What an episode asks for: the conversation so far as OpenAI-style messages (assistant
    content is the raw generated text) and, for token backends, as the exact prompt ids."""

    messages: list[dict[str, Any]]
    prompt_ids: list[int] | None
    tools: list[dict[str, Any]]
    max_tokens: int
    key: str  # trajectory id + turn: tells apart episodes whose prompts coincide (request cache)
    # span kind id per prompt token (token backends): a student policy whose embedding depends
    # on the span (split embeddings) reads the prompt the way it was trained
    prompt_span_ids: list[int] | None = None


@dataclass(slots=True)
class Generation:
    """One generated turn. `text` is the raw turn without the closing <|im_end|>; `token_ids`
    are the exact generated ids (with that <|im_end|> when the model emitted it) and the top-k
    lists are aligned with them; None where the backend cannot provide them."""

    text: str = ""
    token_ids: list[int] | None = None
    topk_ids: list[list[int]] | None = None
    topk_logprobs: list[list[float]] | None = None
    finish_reason: str = "stop"  # stop | length
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0  # wall time of the model call, retries included
    cost_usd: float = 0.0
    cached: bool = False
    retries: int = 0
    error: str | None = None  # the turn could not be generated at all
    # the engine's weight version the whole turn ran under (backends that swap weights
    # mid-run, vllm: see datagen/teachers/weight_gate.py); None where weights never change
    weights_version: int | None = None


class TurnBackend:
    """Generates assistant turns. Token backends set `tokenizer` (and return exact ids);
    `start`/`stop` bracket each batch of episodes (one event loop), and the episode hooks let a
    batching backend know how many episodes are live."""

    tokenizer: Any = None
    tokenizer_name: str | None = None

    def describe(self) -> dict[str, Any]:
        """Backend and model, recorded on every trajectory."""
        return {}

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def generate(self, request: TurnRequest) -> Generation:
        raise NotImplementedError

    def episode_started(self) -> None:
        pass

    def episode_finished(self) -> None:
        pass


class EnvLeases:
    """A free list of environment instances per family: each concurrent episode holds its own
    instance, and instances are reused by later episodes (construction can be costly)."""

    def __init__(self, make: Callable[[str], Environment]) -> None:
        self._make = make
        self._free: dict[str, list[Environment]] = defaultdict(list)

    def acquire(self, name: str) -> Environment:
        free = self._free[name]
        return free.pop() if free else self._make(name)

    def release(self, env: Environment, name: str) -> None:
        self._free[name].append(env)


async def run_sessions(backend: TurnBackend, items: list[Item],
                       play: Callable[[Item], Awaitable[Result]], limit: int,
                       return_exceptions: bool = False,
                       gate: asyncio.Semaphore | None = None) -> list[Result | BaseException]:
    """`play(item)` for every item as concurrent sessions on `backend`, at most `limit` at a
    time (or as many as `gate`, a semaphore other batches share, lets in), in order. Each
    session is bracketed by episode_started/finished (a batching backend counts the live ones
    to know when a batch is full), the whole batch by start/stop."""
    gate = gate or asyncio.Semaphore(limit)

    async def one(item: Item) -> Result:
        async with gate:
            backend.episode_started()
            try:
                return await play(item)
            finally:
                backend.episode_finished()

    await backend.start()
    try:
        return list(await asyncio.gather(*(one(item) for item in items),
                                         return_exceptions=return_exceptions))
    finally:
        await backend.stop()


@dataclass
class EpisodeRunner:
    """Runs episodes of one teacher against one backend."""

    backend: TurnBackend
    config: TeacherConfig
    teacher: str
    envs: EnvLeases
    encode_cache: dict[str, list[int]] = field(default_factory=dict)
    _gate: tuple[Any, asyncio.Semaphore] | None = field(default=None, init=False, repr=False)

    async def run_batch(self, tasks: list[Task], round_: int = 0) -> list[Trajectory]:
        """All tasks as concurrent episodes. At most `max_concurrent_episodes` of this runner
        are in flight at a time, across batches that run at once on its event loop: a vLLM
        engine actor holds one runner and serves every chunk worker of the run, so the limit
        is per engine, and a later batch takes the slots an earlier one's episodes free (first
        come, first served: workers' chunks finish one after another, so one worker's stages
        run while the engine serves another's episodes, rather than all finishing together)."""
        limit = self.config.episode.max_concurrent_episodes
        return await run_sessions(self.backend, tasks, lambda task: self.run(task, round_),
                                  limit, gate=self._loop_gate(limit))

    def _loop_gate(self, limit: int) -> asyncio.Semaphore:
        """The runner's semaphore on the running event loop (a teacher that runs each batch
        with `asyncio.run` gets a fresh one per loop: a semaphore is bound to one loop)."""
        loop = asyncio.get_running_loop()
        if self._gate is None or self._gate[0] is not loop:
            self._gate = (loop, asyncio.Semaphore(limit))
        return self._gate[1]

    async def run(self, task: Task, round_: int = 0) -> Trajectory:
        """One episode; never raises (a failure becomes the trajectory's error)."""
        env = self.envs.acquire(task.env)
        try:
            return await Episode(self, task, env, round_).play()
        except Exception as exc:  # a bug or a broken environment: record it, keep the batch
            tools = _safe_tools(env)
            return failed_trajectory(task, self.teacher, round_, exc, tools=tools)
        finally:
            self.envs.release(env, task.env)


def _safe_tools(env: Environment) -> list[dict[str, Any]]:
    try:
        return env.tools()
    except Exception:  # noqa: BLE001 - the row is already a failure; keep it writable
        return []


def judge_turn(gen: Generation, tools: dict[str, dict[str, Any]], max_tokens: int) -> Step:
    """Parse and check one generated turn; a failed check sets `error` (`kind: detail`) and
    `error_kind`, and leaves `call` None, so only valid calls ever reach an environment or a
    mutator."""
    parsed = parse_assistant(gen.text)
    if gen.finish_reason == "length":
        return _failed_turn(parsed.reasoning, gen.text, "truncated",
                            f"the turn hit the {max_tokens}-token limit before it ended")
    if parsed.error is not None:
        return _failed_turn(parsed.reasoning, gen.text, parsed.error_kind, parsed.error)
    if parsed.call is None:
        return Step(reasoning=parsed.reasoning, answer=parsed.answer, raw=gen.text)
    tool = tools.get(parsed.call.name)
    if tool is None:
        return _failed_turn(parsed.reasoning, gen.text, "unknown_tool",
                            f"no tool named {parsed.call.name[:80]!r}; available: "
                            f"{', '.join(sorted(tools))}")
    problems = validate(parsed.call.as_dict(), tool)
    if problems:
        return _failed_turn(parsed.reasoning, gen.text, "invalid_arguments",
                            "; ".join(problems[:5]))
    return Step(reasoning=parsed.reasoning, call=parsed.call, raw=gen.text)


def _failed_turn(reasoning: str, raw: str, kind: str, detail: str) -> Step:
    return Step(reasoning=reasoning, raw=raw, error=f"{kind}: {detail}", error_kind=kind)


class Conversation:
    """The episode's context, kept as messages (for chat APIs) and, when the backend works on
    tokens, as the exact token trace (the next prompt and, at the end, the row's input_ids)."""

    def __init__(self, runner: EpisodeRunner, task: Task, tools: list[dict[str, Any]]) -> None:
        system_prompt = runner.config.episode.system_prompt or DEFAULT_SYSTEM_PROMPT
        self.tools = tools
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt},
                                               {"role": "user", "content": task.instruction}]
        self.trace: TraceBuilder | None = None
        self.context_tokens = 0  # prompt + generated so far (from usage when there is no trace)
        self._header_at: int | None = None
        self.retokenised = 0  # turns whose ids had to be rebuilt from text (should stay 0)
        backend = runner.backend
        if backend.tokenizer is not None:
            self.trace = TraceBuilder(backend.tokenizer, backend.tokenizer_name or "",
                                      runner.encode_cache)
            self.trace.add_template(system_turn(tools, system_prompt), "PROMPT")
            self.trace.add_template(user_turn(task.instruction), "PROMPT")
            self.context_tokens = len(self.trace.ids)

    def request(self, key: str, max_tokens: int) -> TurnRequest:
        prompt_ids = span_ids = None
        if self.trace is not None:
            self._header_at = len(self.trace.ids)
            self.trace.add_template(generation_prompt(), "PROMPT")
            prompt_ids, span_ids = list(self.trace.ids), list(self.trace.trace.span_ids)
        return TurnRequest(self.messages, prompt_ids, self.tools, max_tokens, key, span_ids)

    def abandon_turn(self) -> None:
        """The turn was never generated: drop its assistant header from the trace."""
        if self.trace is not None and self._header_at is not None:
            trace = self.trace.trace  # the header is template text: it has no top-k entries
            for column in (trace.ids, trace.span_ids, trace.topk_counts):
                del column[self._header_at:]

    def add_turn(self, step: Step, gen: Generation) -> None:
        self.messages.append({"role": "assistant", "content": gen.text})
        if self.trace is None:
            self.context_tokens = gen.prompt_tokens + gen.completion_tokens
            return
        if gen.token_ids is None:  # the endpoint sent no ids this time: re-tokenise, no top-k
            self.retokenised += 1
            gen.token_ids, gen.topk_ids, gen.topk_logprobs = self.trace.encode(gen.text), None, None
        self.trace.add_generated(gen.token_ids, gen.topk_ids, gen.topk_logprobs,
                                 turn_act_offset(step))
        self.context_tokens = len(self.trace.ids)

    def add_observation(self, observation: Observation) -> None:
        self.messages.append({"role": "tool", "content": observation.content})
        if self.trace is not None:
            self.trace.add_template(observation_turn(observation.content), "OBS")
            self.context_tokens = len(self.trace.ids)


@dataclass
class Tally:
    """Per-episode accounting, written to `Trajectory.meta`."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_seconds: float = 0.0
    cost_usd: float = 0.0
    retries: int = 0
    cache_hits: int = 0
    # turns where the endpoint counted a different prompt length than our token trace (a
    # server-side template or tokenisation that differs from ours; should stay 0)
    prompt_mismatches: int = 0
    finish_reasons: list[str] = field(default_factory=list)
    weights_versions: list[int] = field(default_factory=list)  # per turn, where recorded

    def add(self, gen: Generation, request: TurnRequest) -> None:
        if request.prompt_ids is not None and gen.prompt_tokens and gen.error is None:
            self.prompt_mismatches += gen.prompt_tokens != len(request.prompt_ids)
        self.prompt_tokens += gen.prompt_tokens
        self.completion_tokens += gen.completion_tokens
        self.model_seconds += gen.seconds
        self.cost_usd += gen.cost_usd
        self.retries += gen.retries
        self.cache_hits += int(gen.cached)
        self.finish_reasons.append("error" if gen.error else gen.finish_reason)
        if gen.weights_version is not None:
            self.weights_versions.append(gen.weights_version)


class Episode:
    """One task rolled out turn by turn (see the module docstring for the failure rules)."""

    def __init__(self, runner: EpisodeRunner, task: Task, env: Environment, round_: int):
        self.runner, self.task, self.env, self.round = runner, task, env, round_
        self.id = trajectory_id(task.id, runner.teacher, round_)
        self.steps: list[Step] = []
        self.failures: list[Rejected] = []  # failed turns, in order
        self.tally = Tally()

    async def play(self) -> Trajectory:
        started = time.perf_counter()
        self.env.reset(self.task)
        tools = self.env.tools()
        convo = Conversation(self.runner, self.task, tools)
        failure = await self._turns(convo, {t["function"]["name"]: t for t in tools})
        return Trajectory(id=self.id, task=self.task, tools=tools, steps=self.steps,
                          success=failure is None, reward=1.0 if failure is None else 0.0,
                          teacher=self.runner.teacher, round=self.round,
                          error=failure and failure.detail, error_kind=failure and failure.kind,
                          meta=self._meta(time.perf_counter() - started, convo),
                          tokens=convo.trace.trace if convo.trace is not None else None)

    async def _turns(self, convo: Conversation, tools: dict[str, dict]) -> Rejected | None:
        """Play turns until an answer, a stop, or a limit; returns why the episode failed, or
        None when it succeeded."""
        limits, sampling = self.runner.config.episode, self.runner.config.sampling
        for turn in range(limits.max_turns):
            max_tokens = min(sampling.max_tokens_per_turn,
                             limits.max_total_tokens - convo.context_tokens)
            if max_tokens < 1:
                return self._first("context_exhausted", f"{convo.context_tokens} tokens used of "
                                   f"max_total_tokens={limits.max_total_tokens}")
            request = convo.request(f"{self.id}:{turn}", max_tokens)
            gen = await self.runner.backend.generate(request)
            self.tally.add(gen, request)
            if gen.error is not None:
                convo.abandon_turn()
                return self._first("generation_failed", f"turn {turn}: {gen.error}")
            step = judge_turn(gen, tools, max_tokens)
            self.steps.append(step)
            convo.add_turn(step, gen)
            if step.error is not None:
                self.failures.append(Rejected(step.error_kind, f"turn {turn}: {step.error}"))
                if gen.finish_reason == "length" or limits.on_invalid_turn == "stop":
                    return self.failures[0]
                step.observation = Observation(content=f"Error: {step.error}", error=step.error)
                convo.add_observation(step.observation)
            elif step.call is None:
                if self.env.check(self.task, step.answer):
                    return None
                return self._first("wrong_answer", "the checker rejected the final answer")
            elif not self._execute(step, turn, convo):
                return self.failures[0]
        return self._first("max_turns", f"no final answer after {limits.max_turns} turns")

    def _execute(self, step: Step, turn: int, convo: Conversation) -> bool:
        """Run a valid call; a tool that raises is an environment bug: end the episode."""
        try:
            step.observation = self.env.step(step.call.as_dict())
        except Exception as exc:
            step.error = f"tool_raised: {step.call.name} raised {describe_exception(exc)}"
            step.error_kind = "tool_raised"
            self.failures.append(Rejected("tool_raised", f"turn {turn}: {step.error}"))
            return False
        convo.add_observation(step.observation)
        return True

    def _first(self, kind: str, detail: str) -> Rejected:
        """The episode's error: its first failed turn if any, else `kind: detail`."""
        return self.failures[0] if self.failures else Rejected(kind, f"{kind}: {detail}")

    def _meta(self, seconds: float, convo: Conversation) -> dict[str, Any]:
        tally, backend = self.tally, self.runner.backend
        return {**backend.describe(), "tokenizer": backend.tokenizer_name,
                "sampling": self.runner.config.sampling.model_dump(mode="json"),
                "turns": len(tally.finish_reasons), "prompt_tokens": tally.prompt_tokens,
                "completion_tokens": tally.completion_tokens, "latency_s": round(seconds, 4),
                "model_s": round(tally.model_seconds, 4), "cost_usd": tally.cost_usd,
                "retries": tally.retries, "cache_hits": tally.cache_hits,
                "prompt_token_mismatches": tally.prompt_mismatches,
                "retokenised_turns": convo.retokenised,
                "finish_reasons": tally.finish_reasons,
                "failed_turns": [failure.detail for failure in self.failures],
                **({"weights_versions": tally.weights_versions}
                   if tally.weights_versions else {})}
