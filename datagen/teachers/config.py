"""Typed configuration of the teachers: which backend, how it samples, how episodes run.

`TeacherConfig.backend` picks the backend (a name in the registry, datagen.teachers.registry);
the sub-section that backend reads (`hf`, `openai`, `vllm`) holds what only it needs and must
be present, and the others must be absent, so a config that names one backend and configures
another fails before any work starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, field_validator, model_validator
from pydantic_core import core_schema

from datagen.config_model import ConfigModel
from datagen.teachers.registry import SECTIONS, backend_spec

TEACHER_BACKENDS = ("oracle", "hf", "openai", "vllm")  # datagen's own; more can be registered
LLM_BACKENDS = SECTIONS


# A positive temperature below vLLM's own greedy threshold is greedy there and, where logits
# are divided by it in float32 (hf, the trainer's sampler), inf and then NaN probabilities
# (1e-300 crashed torch.multinomial); above MAX the distribution is uniform noise.
MIN_TEMPERATURE = 1e-5
MAX_TEMPERATURE = 100.0
MAX_TOKENS_PER_TURN = 1 << 20  # longer than any model's context


def sane_temperature(value: float) -> float:
    """0 or within [MIN, MAX]; inf and nan are left to the configs' finite-number check."""
    if value != 0 and math.isfinite(value) and not MIN_TEMPERATURE <= value <= MAX_TEMPERATURE:
        raise ValueError(f"{value:g} is neither 0 (greedy) nor within [{MIN_TEMPERATURE:g}, "
                         f"{MAX_TEMPERATURE:g}]")
    return value


# Bounds a validator enforces are also written into the JSON schema (`json_schema_extra`, or
# `Within` below), where tests/datagen/test_config_bounds.py checks every number has a maximum.
Temperature = Annotated[float, AfterValidator(sane_temperature),
                        Field(json_schema_extra={"maximum": MAX_TEMPERATURE})]


@dataclass(frozen=True)
class Within:
    """Annotated metadata: a number in [low, high], checked after its type (inf and nan are
    left to the configs' finite-number check) and shown in the JSON schema."""

    low: float
    high: float
    unit: str

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return {**handler(schema), "minimum": self.low, "maximum": self.high}

    def _check(self, value: float) -> float:
        if math.isfinite(value) and not self.low <= value <= self.high:
            raise ValueError(f"{value:g} is outside [{self.low:g}, {self.high:g}] ({self.unit})")
        return value


def within(low: float, high: float, unit: str) -> Within:
    """A number in [low, high]: `Annotated[float, within(0, 1, "a share")]`."""
    return Within(low, high, unit)


# Timeouts and backoffs: below a millisecond every request times out (timeout_s 1e-300: every
# row `generation_failed`, exit 0) or retries without pause; past a week it bounds nothing
# (backoff_base_s 1e300 slept forever on the first 503: the run hung).
MIN_SECONDS = 1e-3
MAX_SECONDS = 7 * 86_400
Seconds = Annotated[float, within(MIN_SECONDS, MAX_SECONDS, "seconds: 1 ms to a week")]
# The backoff doubles per retry: 2**attempt leaves a float's range at attempt 1,024
# (max_retries 1100 made every row `OverflowError` once the endpoint kept failing).
MAX_RETRIES = 1_000
# OpenAI's API takes biases in [-100, 100] (-100 bans a token, 100 all but forces it); hf adds
# the bias to float32 logits, where 1e300 became inf and every turn failed in torch.multinomial.
LogitBias = Annotated[float, within(-100, 100, "the OpenAI API's range")]
# hf indexes the logits with it: -1 is the last token; past 2^24 it is past any vocabulary
# (the largest are ~256K), though an id between the model's vocabulary and that still fails
# each hf turn (IndexError) - only the model's tokenizer knows its size.
MAX_TOKEN_ID = (1 << 24) - 1
TokenId = Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]
# USD per million tokens: the priciest list price is $600 (o1-pro output); above 10^6 the cost
# columns stop being accounting (1e308: each row's cost_usd was inf, written as null).
MAX_USD_PER_MILLION_TOKENS = 1e6
Price = Annotated[float, within(0, MAX_USD_PER_MILLION_TOKENS, "USD per million tokens")]

# Ray's rules for an actor's resource amount (ray/_common/ray_option_utils.py, ray_constants):
# it counts in units of 1/10,000 and takes GPUs above 1 only whole (both raised in the chunk
# worker, failing every chunk), and no node may offer more than 10^14 of a resource, so a larger
# request is never placed (vllm.num_cpus 1e300 hung the run).
RAY_RESOURCE_UNIT = 1e-4
RAY_MAX_RESOURCE = 100e12
RayAmount = Annotated[float, Field(json_schema_extra={"maximum": RAY_MAX_RESOURCE})]  # the
# schema's view of ray_amount_problem: its validator keeps Ray's own message

# Upper bounds of the integer settings (the walk in tests/datagen/test_config_bounds.py checks
# every int has one): far past any real run, low enough that a typo fails at load, naming the
# field, instead of inside a worker. The types carry no lower bound (pydantic applies only the
# last of two `ge`s): each field keeps its own.
# Tokens of a context: 16M is past the longest any model takes (10M). vLLM refuses a
# max_model_len past its model's only when the engine starts (2^31: every chunk FAILED with
# pydantic's "For further information visit ..." line, exit 1); below 2^24 it still does.
MAX_CONTEXT_TOKENS = 1 << 24
ContextTokens = Annotated[int, Field(le=MAX_CONTEXT_TOKENS)]
# Requests, episodes or batch rows in flight in one process: each request holds a connection,
# and one address has 65,535 ports to an endpoint; each episode holds an environment.
MAX_IN_FLIGHT = 65_536
InFlight = Annotated[int, Field(le=MAX_IN_FLIGHT)]
MAX_TURNS = 1_024  # a gold solution is ~10 calls; every turn adds a reply and a tool response,
# so a thousand outgrow any context
MAX_ENGINES = 100_000  # engine actors of a run, each a process with its GPUs: more than any
# cluster holds GPUs (2^31: the chunk worker created actors one by one; the run hung)
MAX_TENSOR_PARALLEL = 1_024  # GPUs of one engine, its ranks packed on one node (STRICT_PACK);
# 2^63-1 built [bundle] * size: every chunk FAILED with MemoryError, exit 1
MAX_KV_CACHE_GIB = 1 << 20  # a PiB: more memory than any node has
INT64 = (-2**63, 2**63 - 1)  # a seed the backends take: vLLM's and OpenAI's are 64-bit


def ray_amount_problem(amount: float, gpus: bool = False) -> str | None:
    """Why Ray would refuse `amount` of a resource or never place it, or None (0 = none);
    inf and nan are left to the configs' finite-number check."""
    if not math.isfinite(amount) or amount == 0:
        return None
    if amount < RAY_RESOURCE_UNIT:
        return f"Ray counts resources in units of {RAY_RESOURCE_UNIT:g}; ask for at least that"
    if amount > RAY_MAX_RESOURCE:
        return f"over {RAY_MAX_RESOURCE:g}, more than Ray lets a node offer: never placed"
    if gpus and amount > 1 and not amount.is_integer():
        return "Ray takes more than 1 GPU only as a whole number"
    return None


class LogitBiasOutsideVocab(ValueError):
    """`logit_bias` token ids past the model's logits, named under the config field that set
    them; `under` names another section's field (the critics' `critics.llm` model loads through
    the teacher backends, which know only `teacher.`)."""

    def __init__(self, field: str, outside: list[int], vocab_size: int) -> None:
        super().__init__(f"{field}: token id(s) {outside[:5]} outside the model's "
                         f"{vocab_size:,} logits")
        self.field, self.outside, self.vocab_size = field, outside, vocab_size

    def __reduce__(self) -> tuple:  # raised in a vLLM engine actor: Ray pickles it to the caller
        return type(self), (self.field, self.outside, self.vocab_size)

    def under(self, field: str) -> "LogitBiasOutsideVocab":
        return LogitBiasOutsideVocab(field, self.outside, self.vocab_size)


def check_logit_bias(sampling: SamplingConfig, vocab_size: int,
                     field: str = "teacher.sampling.logit_bias") -> None:
    """LogitBiasOutsideVocab (a ValueError) naming the `logit_bias` token ids past the model's
    logits, which a config cannot know (TokenId stops at 2^24): hf would index past its logits
    (IndexError in every row, the run "complete"), vLLM refuses each request. Chunk workers
    check a local model's config.json (datagen.pipeline.preflight); the hf backend checks again
    when its model loads, the vllm engine actor when its engine starts."""
    if outside := sorted(token for token in sampling.logit_bias if token >= vocab_size):
        raise LogitBiasOutsideVocab(field, outside, vocab_size)


def _has_userinfo(url: str) -> bool:
    """Whether `url` carries user[:password]@ (sent as Basic auth)."""
    return "@" in urlsplit(url).netloc


class _Strict(ConfigModel):
    """Unknown keys refused, frozen, no true/false for a number (datagen/config_model.py)."""


class SamplingConfig(_Strict):
    """How each assistant turn is sampled (all backends)."""

    temperature: Temperature = Field(0.7, ge=0, description="0 = greedy; higher = more diverse "
                               "trajectories, more failed turns")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling mass")
    max_tokens_per_turn: int = Field(512, ge=1, le=MAX_TOKENS_PER_TURN, description="generation cap per assistant turn; "
                                     "a turn that hits it is recorded as failed (truncated)")
    stop: list[str] = Field(default_factory=list, description="extra stop strings; turns always "
                            "end at <|im_end|>")
    logprobs: int = Field(5, ge=0, le=20, description="top-k logprobs recorded per generated "
                          "token for distillation (0 = none; 20 is the OpenAI API's maximum)")
    seed: int | None = Field(None, ge=INT64[0], le=INT64[1], description="sampling seed "
                             "passed to the backend (None = backend default; 64-bit); greedy "
                             "decoding is deterministic regardless")
    logit_bias: dict[TokenId, LogitBias] = Field(default_factory=dict, description="token id "
                                                 "-> bias in [-100, 100] added to the logits "
                                                 "before sampling (ban or favour tokens); "
                                                 "recorded logprobs stay the model's raw ones")


class EpisodeConfig(_Strict):
    """Limits of one episode (task rollout) and how failed turns are handled."""

    max_turns: int = Field(8, ge=1, le=MAX_TURNS, description="assistant turns before the "
                           "episode is cut off (at most 1,024)")
    max_total_tokens: ContextTokens = Field(8192, ge=64, description="cap on prompt + "
                                            "generated tokens of the whole conversation (keep "
                                            "<= the model's context; at most 2^24)")
    on_invalid_turn: Literal["feedback", "stop"] = Field(
        "feedback", description="feedback = record the failed turn and show the model the error "
        "as a tool response, so it can recover (recovery data); stop = end the episode there")
    max_concurrent_episodes: InFlight = Field(64, ge=1, description="episodes in flight per "
                                              "teacher process (vllm: per engine, shared by "
                                              "every chunk worker's batches); keeps the batch "
                                              "full (at most 65,536)")
    system_prompt: str | None = Field(None, description="system prompt before the tools block "
                                      "(None = datagen.chat.DEFAULT_SYSTEM_PROMPT)")


class HFConfig(_Strict):
    """Transformers model in the worker process, batched across episodes (small models)."""

    model: str = Field(description="local model directory (or hub name where downloads work)")
    tokenizer: str | None = Field(None, description="tokenizer directory (None = `model`)")
    device: str = Field("cpu", description="torch device: cpu, cuda, cuda:1, ...")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="weights "
                                                             "dtype; bfloat16 on GPU")
    max_batch_size: InFlight = Field(32, ge=1, description="episodes per forward pass; a turn "
                                     "batch starts when every live episode waits or this many "
                                     "do (at most 65,536)")


class OpenAIConfig(_Strict):
    """Any OpenAI-compatible chat-completions endpoint (vLLM / SGLang servers, hosted APIs)."""

    base_url: str = Field(description="endpoint root, e.g. http://10.0.0.5:8000/v1")
    model: str = Field(description="model name sent in each request")
    api_key_env: str | None = Field(None, description="name of the environment variable that "
                                    "holds the API key (the key is never logged or written); "
                                    "None = no key (local servers)")
    tool_format: Literal["template", "native"] = Field(
        "template", description="template = tool calls as <tool_call> text inside the content "
        "(Qwen template servers; exact text); native = the API's tools/tool_calls fields "
        "(hosted APIs that parse calls server-side)")
    token_ids: bool = Field(False, description="vLLM servers: tokens in, tokens out - the exact "
                            "prompt ids go to /v1/completions and the exact generated ids and "
                            "top-k come back (return_tokens_as_token_ids), so rows get input_ids "
                            "and aligned top-k; needs `tokenizer`")
    tokenizer: str | None = Field(None, description="local tokenizer of the served model; "
                                  "needed for token_ids")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="extra request fields "
                                       "(server-specific sampling options)")
    timeout_s: Seconds = Field(120.0, description="per-request timeout (a hang counts as a "
                               "retryable failure); 0.001 s .. 1 week")
    max_retries: int = Field(6, ge=0, le=MAX_RETRIES, description="retries on "
                             "429/5xx/timeouts/malformed bodies (at most 1,000)")
    backoff_base_s: Seconds = Field(0.5, description="first backoff; doubles per retry, "
                                    "full jitter")
    backoff_max_s: Seconds = Field(30.0, description="cap of one backoff sleep")
    initial_concurrency: InFlight = Field(16, ge=1, description="requests in flight at start "
                                          "(AIMD)")
    min_concurrency: InFlight = Field(1, ge=1, description="AIMD floor")
    max_concurrency: InFlight = Field(256, ge=1, description="AIMD ceiling: requests in flight "
                                      "per worker process (at most 65,536)")
    cache_dir: str | None = Field(None, description="request cache directory (SQLite, content "
                                  "fingerprint keys); None = OUT/_cache; resumed runs do not pay "
                                  "twice")
    cache: bool = Field(True, description="use the request cache")
    usd_per_million_input_tokens: Price = Field(0.0, description="for cost accounting "
                                                "(0 .. 10^6)")
    usd_per_million_output_tokens: Price = Field(0.0, description="for cost accounting "
                                                 "(0 .. 10^6)")

    @model_validator(mode="after")
    def _token_ids_need_tokenizer(self) -> OpenAIConfig:
        if self.token_ids and not self.tokenizer:
            raise ValueError("openai.token_ids needs openai.tokenizer (the served model's "
                             "tokenizer directory)")
        if self.token_ids and self.tool_format == "native":
            raise ValueError("openai.token_ids needs openai.tool_format 'template' (the prompt "
                             "is our own rendering of the template, as token ids)")
        if self.min_concurrency > self.max_concurrency:
            raise ValueError("openai.min_concurrency must be <= openai.max_concurrency")
        if self.api_key_env is not None and _has_userinfo(self.base_url):
            # aiohttp refuses to send both (ValueError "Cannot combine AUTHORIZATION header
            # with ... credentials encoded in URL") on every request of the run
            raise ValueError("openai.base_url carries user:password@ and openai.api_key_env "
                             "names an API key: an endpoint takes one of them (Basic auth from "
                             "the URL, or the key as a Bearer token); remove the other")
        return self


class VLLMConfig(_Strict):
    """vLLM engines held in-process by Ray actors; episodes run inside the engine actor."""

    model: str = Field(description="local model directory or hub name")
    tokenizer: str | None = Field(None, description="tokenizer directory (None = `model`)")
    num_engines: int = Field(1, ge=1, le=MAX_ENGINES, description="engine actors (data "
                             "parallel replicas; at most 100,000)")
    tensor_parallel_size: int = Field(1, ge=1, le=MAX_TENSOR_PARALLEL, description="GPUs per "
                                      "engine (at most 1,024); >1 uses a Ray placement group "
                                      "with one GPU bundle per rank")
    num_gpus: RayAmount = Field(1.0, ge=0, description="GPUs per engine actor when "
                            "tensor_parallel_size is 1 (0 = CPU build of vLLM; else at least "
                            "0.0001, whole above 1, as Ray takes them)")
    num_cpus: RayAmount = Field(1.0, ge=0, description="CPUs reserved per engine actor (0 or at "
                            "least 0.0001, as Ray takes them)")
    dtype: str = Field("auto", description="auto, bfloat16, float16, float32 (CPU: float32)")
    max_model_len: ContextTokens = Field(8192, ge=128, description="context length the engine "
                                         "reserves (at most 2^24)")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="GPU memory share")
    enforce_eager: bool = Field(False, description="skip CUDA graphs / compilation (faster "
                                "start, slower decode; CPU tests)")
    cpu_kv_cache_gib: int | None = Field(None, ge=1, le=MAX_KV_CACHE_GIB, description=
                                         "VLLM_CPU_KVCACHE_SPACE for the CPU build (GiB, at "
                                         "most 2^20)")
    engine_kwargs: dict[str, Any] = Field(default_factory=dict, description="extra "
                                          "AsyncEngineArgs fields")
    place_timeout_s: Seconds = Field(300.0, description="how long each chunk worker waits, "
                                     "once, for Ray to place the engine actors (other jobs "
                                     "holding the resources, an autoscaler adding a node); past "
                                     "it the worker's chunks fail (EngineNotReady, no marker: a "
                                     "rerun retries them). Raise it on a cluster that scales up "
                                     "slowly; 0.001 s .. 1 week")
    start_timeout_s: Seconds = Field(1800.0, description="how long each chunk worker then "
                                     "waits, once, for the placed engines to load the model and "
                                     "start; past it the worker's chunks fail as above. Raise "
                                     "it for large models on slow storage or the CPU build; "
                                     "0.001 s .. 1 week")

    @field_validator("num_gpus", "num_cpus")
    @classmethod
    def _ray_amount(cls, amount: float, info: Any) -> float:
        if problem := ray_amount_problem(amount, gpus=info.field_name == "num_gpus"):
            raise ValueError(problem)
        return amount


class TeacherConfig(_Strict):
    backend: str = Field(
        "oracle", description="a registered backend (datagen.teachers.registry): oracle = "
        "scripted gold-solution teacher (CPU); hf = Transformers model in the worker; openai "
        "= OpenAI-compatible endpoint; vllm = vLLM engine actors; others registered by the "
        "package that provides them (policy: trainer.agent_backend, reads `hf`)")
    name: str | None = Field(None, description="name recorded on rows; defaults to the backend")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    episode: EpisodeConfig = Field(default_factory=EpisodeConfig)
    hf: HFConfig | None = None
    openai: OpenAIConfig | None = None
    vllm: VLLMConfig | None = None

    @field_validator("backend")
    @classmethod
    def _registered(cls, backend: str) -> str:
        backend_spec(backend)  # raises, listing the registered backends
        return backend

    @model_validator(mode="after")
    def _one_backend_section(self) -> TeacherConfig:
        wanted = backend_spec(self.backend).section
        for name in SECTIONS:
            section = getattr(self, name)
            if name == wanted and section is None:
                raise ValueError(f"teacher.{name} is required when teacher.backend is "
                                 f"{self.backend!r}")
            if name != wanted and section is not None:
                raise ValueError(f"teacher.{name} is set but teacher.backend is "
                                 f"{self.backend!r}; remove it or set a backend that reads it")
        return self

    def teacher_tokenizer(self) -> str | None:
        """The tokenizer the teacher generates with (None for oracle and text-only endpoints)."""
        section_name = backend_spec(self.backend).section
        if section_name in ("hf", "vllm"):
            section = getattr(self, section_name)
            return section.tokenizer or section.model
        if section_name == "openai" and self.openai.token_ids:
            return self.openai.tokenizer
        return None
