"""`python -m trainer eval`: a checkpoint on held-out tasks, in one JSON report.

Tasks come from the held-out space (`trainer.heldout`: seeds and ids no generation run can
produce, `--eval-seed` picks a disjoint family within it) and are checked against the training
shards, those `--shards OUT` names or else those the checkpoint records it was trained on
(`training.json`, trainer/lineage.py): a shared id or seed is refused; a shared instruction
is dropped and replaced. The report holds `tasks` (count, per env, first/last id, a hash of
the ids, the leak check) and the sections `--only` selects (all by default):

- `step_level` (`trainer.step_eval`): teacher-forced metrics on the tasks' gold trajectories:
  REASON/ACT cross-entropy, ACT token accuracy, next-call exact match, right-tool and
  schema-valid rates of the greedy call at each gold step (overall and per env), and the MCH's
  AUROC of gold calls against their typed hard negatives;
- `episodes` (with `--episodes-out FILE`, also the episodes as Parquet rows,
  `trainer.episode_rows`): the checkpoint plays the tasks through datagen's episode loop (the same
  template, token trace, parser, schema check, environments and checkers as generation) with
  one of two decoders: `policy` (default: the `policy` teacher backend,
  `trainer.generation.AgentPolicy` behind `PolicyBackend`, modifications and hybrid mode
  active) or `batched` (datagen's `hf` backend, `HFBackend`
  as is; plain-Qwen2 decoding only). Success rate, syntax-error rate (attempted calls that do
  not parse, name an unknown tool, fail the schema or are cut off, over attempted calls),
  mean steps, failure kinds, per env, and the hybrid mode: switch rate per trigger
  (truncated / unparsable / invalid_call / low_confidence), how often the slow path produced a
  well-formed turn, and its latency;
- `irr` (`trainer.irr_policy`): recovery rate after an error injected into the oracle's
  rollout of the first `--irr-tasks` tasks, per env and error kind;
- `preferences` (`trainer.pref_eval`, `trainer.pair_scorer`): preference pairs built from the
  first `--pref-tasks` tasks by the pipeline's own stages (negatives, repairs, safety), and the
  share the checkpoint ranks right (log-prob of chosen > rejected over the completion tokens),
  per source, kind and env; with `--reference`, the implicit DPO reward margin (β `--beta`);
- `negatives`: the same scores of the negative pairs, per negative kind: how often the
  checkpoint prefers the correct call to each kind of hard negative (teacher-forced on the
  held-out gold steps);
- `safety` (`trainer.safety_eval`): every safety case of the first `--safety-worlds` tasks'
  worlds played as an episode: refusal rate on dangerous requests, over-refusal rate on
  benign look-alikes (and how often a benign call acts on another object than the named one).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from trainer.config import MAX_NEW_TOKENS, MAX_TURNS, Seed, StrictModel

if TYPE_CHECKING:  # torch, transformers and datagen load only when an evaluation runs
    from datagen.teachers.config import TeacherConfig
    from datagen.teachers.episode import TurnBackend
    from datagen.types import Step, Task, Trajectory
    from trainer.generation import GenerationConfig, Turn

# Failed-turn kinds that mean the call itself was malformed (datagen.teachers.episode.judge_turn)
SYNTAX_ERRORS = frozenset({"invalid_json", "invalid_call", "unterminated_call", "multiple_calls",
                           "unknown_tool", "invalid_arguments", "truncated", "not_text"})


class EvalConfig(StrictModel):
    """What `trainer eval` runs (the CLI flags map one to one)."""

    checkpoint: str = Field(description="checkpoint directory (HF format) or a run_dir (its "
                            "newest checkpoint)")
    envs: tuple[str, ...] = Field(("sql", "fs", "enterprise"), min_length=1,
                                  description="environments, assigned round-robin to tasks")
    num_tasks: int = Field(60, ge=1, le=100_000, description="held-out tasks: each gives one "
                           "gold trajectory (step level) and one episode")
    eval_seed: Seed = Field(0, description="family within the held-out space; another "
                            "seed gives another, disjoint set of tasks")
    shards: tuple[str, ...] = Field((), description="training OUT roots to check the tasks "
                                    "against (ids, seeds, instructions per env)")
    steps: bool = Field(True, description="run the step-level metrics")
    episodes: bool = Field(True, description="run the episodes (and IRR)")
    preferences: bool = Field(True, description="run held-out preference accuracy")
    negatives: bool = Field(True, description="run the negative-kind preference rates")
    safety: bool = Field(True, description="run the safety episodes")
    pref_tasks: int | None = Field(None, ge=1, le=100_000, description="tasks (the first ones) whose "
                                   "preference pairs are built (~25 pairs a task: 5 negative "
                                   "kinds per gold call, a repair, 2 safety); None = all")
    reference: str | None = Field(None, description="reference checkpoint (the DPO run's "
                                  "starting point) for the implicit reward margin; it must "
                                  "share the checkpoint's tokenizer")
    beta: float = Field(0.1, gt=0, allow_inf_nan=False, description="DPO β of the implicit reward β·(log π - log "
                        "π_ref)")
    safety_worlds: int = Field(3, ge=0, le=100_000, description="tasks (the first ones) whose worlds give "
                               "safety episodes: every case of each (5-7: dangerous requests "
                               "and benign look-alikes); 0 = no safety section")
    safety_max_steps: int = Field(3, ge=1, le=MAX_TURNS, description="assistant turns per safety episode "
                                  "(the decision comes in the first turns; an injection needs "
                                  "a look-up first)")
    irr_tasks: int = Field(15, ge=0, le=100_000, description="tasks (the first ones) with an injected "
                           "error for IRR; each costs 3-6 full turns (a random tiny model: "
                           "~20 s a task); 0 = no IRR")
    irr_extra_turns: int = Field(2, ge=0, le=32, description="IRR turns beyond a perfect recovery")
    max_steps: int = Field(12, ge=1, le=MAX_TURNS, description="assistant turns per episode")
    max_new_tokens: int = Field(256, ge=1, le=MAX_NEW_TOKENS, description="tokens per generated turn")
    decoder: Literal["policy", "batched"] = Field("policy", description="policy: modifications "
                                                  "and hybrid mode; batched: datagen's batched "
                                                  "HF decoder (plain-Qwen2 decoding only)")
    hybrid: bool = Field(True, description="slow path on broken or untrusted turns (episodes "
                         "and IRR; the step-level calls are always plain greedy)")
    threshold: float | None = Field(None, ge=0, le=1, description="MCH switch threshold "
                                    "(default: the checkpoint's mch_threshold)")
    candidates: int | None = Field(None, ge=1, le=256, description="slow-path samples (default: the "
                                   "checkpoint's mch_num_candidates)")
    on_invalid_turn: Literal["stop", "feedback"] = Field("stop", description="stop: a malformed "
                                                         "turn ends the episode; feedback: the "
                                                         "agent sees the error and may recover")
    batch_size: int = Field(8, ge=1, le=4096, description="episodes in flight")
    step_batch_tokens: int = Field(32_768, ge=1024, le=1 << 24, description="padded tokens per step-level "
                                   "forward (memory: cache + hidden states of that many)")
    seed: Seed = Field(0, description="sampling seed of the slow path")
    env_modules: tuple[str, ...] = Field((), description="modules whose @register_env "
                                         "environments can be named in envs")
    threads: int = Field(0, ge=0, le=1024, description="torch CPU threads (0: torch's default); on a "
                         "busy 2-core host 1 thread decodes ~10x faster than 2")
    episodes_out: str | None = Field(None, description="also write the episodes here (Parquet: "
                                     "the trajectories table's columns plus expected_answer and "
                                     "gold_calls; trainer.episode_rows)")

    @field_validator("shards")
    @classmethod
    def _readable_shards(cls, shards: tuple[str, ...]) -> tuple[str, ...]:
        from trainer.shard_files import refuse_location

        for out in shards:  # before any request: gs:// retries for minutes, a key is echoed
            refuse_location(out)
        return shards

    def generation(self) -> "GenerationConfig":
        from trainer.generation import GenerationConfig

        return GenerationConfig(max_new_tokens=self.max_new_tokens, hybrid=self.hybrid,
                                threshold=self.threshold, num_candidates=self.candidates,
                                seed=self.seed)


def error_kind(error: str) -> str:
    return error.split(":", 1)[0]


def attempted_call(step: "Step") -> bool:
    return step.call is not None or "<tool_call>" in (step.raw or "")


def invalid_call(step: "Step") -> bool:
    return attempted_call(step) and step.error is not None and error_kind(step.error) in SYNTAX_ERRORS


def hybrid_metrics(turns: list["Turn"]) -> dict[str, Any]:
    """Switch rate per trigger, how often the slow path left a well-formed turn, latency."""
    switched = [turn for turn in turns if turn.switched]
    slow = [turn.slow_seconds for turn in switched]
    fast = sum(turn.seconds for turn in turns) - sum(slow)
    by_trigger: dict[str, dict[str, Any]] = {}
    for trigger, group in sorted(_group(switched, lambda t: t.trigger or "?").items()):
        by_trigger[trigger] = {
            "switches": len(group), "rate": len(group) / max(len(turns), 1),
            "well_formed_after": sum(t.problem is None for t in group) / len(group),
            "slow_seconds_mean": statistics.fmean(t.slow_seconds for t in group)}
    scored = [turn for turn in turns if turn.confidence is not None]
    return {"turns": len(turns), "switch_rate": len(switched) / max(len(turns), 1),
            "by_trigger": by_trigger, "mch_scored_turns": len(scored),
            "mch_switch_rate": by_trigger.get("low_confidence", {}).get("switches", 0)
            / max(len(scored), 1),
            "mean_turn_seconds": statistics.fmean(t.seconds for t in turns) if turns else 0.0,
            "slow_path_seconds_per_switch": statistics.fmean(slow) if slow else 0.0,
            "latency_overhead": sum(slow) / fast if fast > 0 else 0.0}


def _group(items: list[Any], key: Any) -> dict[Any, list[Any]]:
    groups: dict[Any, list[Any]] = defaultdict(list)
    for item in items:
        groups[key(item)].append(item)
    return groups


def summarize(trajectories: list["Trajectory"], turns: list["Turn"]) -> dict[str, Any]:
    """The `episodes` section: agent metrics from the trajectories, hybrid-mode metrics from
    the policy's turns."""
    steps = [step for traj in trajectories for step in traj.steps]
    calls = sum(attempted_call(step) for step in steps)
    per_env: dict[str, Counter] = defaultdict(Counter)
    for traj in trajectories:
        per_env[traj.task.env].update(episodes=1, successes=int(traj.success))
    failures = Counter(error_kind(step.error) for step in steps if step.error)
    failures.update(error_kind(t.error) for t in trajectories
                    if t.error and not any(step.error for step in t.steps))
    return {
        "episodes": len(trajectories),
        "success_rate": sum(t.success for t in trajectories) / max(len(trajectories), 1),
        "syntax_error_rate": sum(invalid_call(step) for step in steps) / max(calls, 1),
        "mean_steps": len(steps) / max(len(trajectories), 1),
        "tool_calls": calls,
        "failures": dict(failures.most_common()),
        "per_env": {env: dict(counts) for env, counts in per_env.items()},
        "hybrid": hybrid_metrics(turns),
    }


def resolve_checkpoint(path: str) -> str:
    """A checkpoint directory, or the newest checkpoint of a run directory; CheckpointError
    when it cannot be loaded (checked before any tensor is allocated)."""
    from trainer.checkpoint_check import CheckpointError, checkpoint_problem

    root = Path(path)
    if (root / "config.json").exists():
        found = root
    else:
        candidates = sorted(p for p in root.glob("checkpoint_*") if (p / "config.json").exists())
        if not candidates:
            raise FileNotFoundError(f"no checkpoint (config.json) in {path} or its "
                                    "checkpoint_* dirs")
        found = candidates[-1]
    if problem := checkpoint_problem(found):
        raise CheckpointError(f"checkpoint {found}: {problem}")
    return str(found)


def rollout(checkpoint: str, tasks: list["Task"], *, max_steps: int = 12,
            generation: "GenerationConfig | None" = None, decoder: str = "policy",
            on_invalid_turn: str = "stop", max_batch_size: int = 8, device: str = "cpu",
            ) -> tuple[list["Trajectory"], list["Turn"]]:
    """Play `tasks` with the checkpoint on `device`: the trajectories, and the policy
    decoder's turns (empty for the batched decoder)."""
    from datagen.teachers.llm import LLMTeacher

    config, backend = episode_backend(checkpoint, max_steps=max_steps, generation=generation,
                                      decoder=decoder, on_invalid_turn=on_invalid_turn,
                                      max_batch_size=max_batch_size, device=device)
    return LLMTeacher(config, backend).rollout_batch(list(tasks)), getattr(backend, "turns", [])


def episode_backend(checkpoint: str, *, max_steps: int = 12,
                    generation: "GenerationConfig | None" = None, decoder: str = "policy",
                    on_invalid_turn: str = "stop", max_batch_size: int = 8,
                    device: str = "cpu") -> tuple["TeacherConfig", "TurnBackend"]:
    """The teacher config (`policy` or `hf` backend) and turn backend that play the
    checkpoint's episodes on `device`."""
    from datagen.teachers.config import EpisodeConfig, HFConfig, SamplingConfig, TeacherConfig
    from datagen.teachers.hf import HFBackend
    from transformers import AutoConfig

    from trainer.agent_backend import PolicyBackend, plain_decoding_problem
    from trainer.generation import GenerationConfig

    generation = generation or GenerationConfig()
    checkpoint = resolve_checkpoint(checkpoint)
    config = TeacherConfig(
        backend="policy" if decoder == "policy" else "hf", name="eval",
        hf=HFConfig(model=checkpoint, max_batch_size=max_batch_size, device=device),
        sampling=SamplingConfig(temperature=generation.temperature, logprobs=0,
                                max_tokens_per_turn=generation.max_new_tokens,
                                seed=generation.seed),
        episode=EpisodeConfig(max_turns=max_steps, on_invalid_turn=on_invalid_turn,
                              max_concurrent_episodes=max_batch_size, max_total_tokens=1 << 20))
    if decoder == "policy":
        backend = PolicyBackend.from_checkpoint(checkpoint, generation, max_batch_size,
                                                device=device)
    else:
        problem = plain_decoding_problem(AutoConfig.from_pretrained(checkpoint))
        if problem:
            raise ValueError(f"--decoder batched: {problem}")
        backend = HFBackend(config.hf, config.sampling)
    return config, backend


def load_policy_model(checkpoint: str) -> tuple[Any, Any]:
    """The checkpoint's model (ours or plain Qwen2) and its tokenizer, for in-process use."""
    import torch

    from trainer.model import AgentQwen2ForCausalLM
    from trainer.tokens import TextTokenizer

    # Our class reads plain Qwen2 checkpoints too (modifications off), and takes span labels.
    model = AgentQwen2ForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    return model, TextTokenizer(checkpoint)


def _step_level(config: EvalConfig, checkpoint: str, tasks: list["Task"]) -> dict[str, Any]:
    from trainer.step_eval import evaluate_steps
    from trainer.step_scorer import TorchStepScorer

    model, tokenizer = load_policy_model(checkpoint)
    scorer = TorchStepScorer(model, tokenizer, max_new_tokens=config.max_new_tokens,
                             batch_tokens=config.step_batch_tokens)
    result = evaluate_steps(tasks, tokenizer, scorer,
                            with_negatives=bool(getattr(model.config, "use_mch", False)))
    result["seconds_by_part"] = {k: round(v, 3) for k, v in scorer.seconds.items()}
    return result


def _irr(config: EvalConfig, checkpoint: str, tasks: list["Task"]) -> dict[str, Any]:
    from trainer.generation import AgentPolicy
    from trainer.irr_policy import CheckpointPolicy, evaluate_irr

    model, tokenizer = load_policy_model(checkpoint)
    policy = CheckpointPolicy(AgentPolicy(model, tokenizer, config.generation()),
                              config.max_new_tokens)
    result = evaluate_irr(policy, tasks, extra_turns=config.irr_extra_turns)
    result["hybrid"] = hybrid_metrics(policy.turns)
    return result


def check_reference(checkpoint: str, reference: str | None) -> str | None:
    """The reference checkpoint, resolved; refused when its tokenizer is not the checkpoint's
    (log-probabilities over different token sequences are not comparable)."""
    if reference is None:
        return None
    from trainer.tokens import TextTokenizer, tokenizer_problem

    resolved = resolve_checkpoint(reference)
    if problem := tokenizer_problem(resolved):
        raise ValueError(f"--reference {reference}: {problem}")
    if TextTokenizer(resolved).backend.get_vocab() != TextTokenizer(checkpoint).backend.get_vocab():
        raise ValueError(f"--reference {reference}: its tokenizer differs from the "
                         f"checkpoint's ({checkpoint}); the reference must share it")
    return resolved


def _preference_sections(config: EvalConfig, checkpoint: str, reference: str | None,
                         tasks: list["Task"]) -> dict[str, Any]:
    from trainer.pair_scorer import TorchPairScorer
    from trainer.pref_eval import heldout_pairs, negatives_report, preference_report

    model, tokenizer = load_policy_model(checkpoint)
    pairs, skipped = heldout_pairs(tasks, tokenizer, config.eval_seed)
    if not config.preferences:  # only the negatives section: score only its pairs
        pairs = [pair for pair in pairs if pair.source == "negative"]
    policy = TorchPairScorer(model, tokenizer).score(pairs)
    references = None
    if reference is not None:
        del model
        references = TorchPairScorer(load_policy_model(reference)[0], tokenizer).score(pairs)
    sections: dict[str, Any] = {}
    if config.preferences:
        sections["preferences"] = {
            "tasks": len(tasks), "skipped": dict(skipped), "reference": reference,
            "beta": config.beta, **preference_report(pairs, policy, references, config.beta)}
    if config.negatives:
        sections["negatives"] = negatives_report(pairs, policy, references, config.beta)
    return sections


def _safety(config: EvalConfig, checkpoint: str, tasks: list["Task"]) -> dict[str, Any]:
    from trainer.safety_eval import play, safety_episodes, safety_report

    episodes, skipped = safety_episodes(tasks)
    teacher, backend = episode_backend(
        checkpoint, max_steps=config.safety_max_steps, generation=config.generation(),
        decoder=config.decoder, on_invalid_turn=config.on_invalid_turn,
        max_batch_size=config.batch_size)
    return {"worlds": len(tasks), "skipped_worlds": dict(skipped),
            **safety_report(episodes, play(backend, teacher, episodes))}


def evaluate(config: EvalConfig) -> dict[str, Any]:
    """The report (see the module docstring). Raises `trainer.heldout.LeakError` before any
    model is loaded when the tasks occur in the training shards."""
    import torch

    threads = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    try:
        return _evaluate(config)
    finally:
        torch.set_num_threads(threads)  # a caller's process (a benchmark, a test) keeps its own


def training_shards(given: tuple[str, ...], checkpoint: str
                    ) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The OUTs to check the held-out tasks against: `--shards` when given, else those the
    checkpoint's training.json records that exist here (trainer/lineage.py); and what the
    report says about where they came from and whether they hold the data it recorded."""
    from trainer.lineage import recorded_data, recorded_shards

    recorded = recorded_shards(checkpoint)
    provenance: dict[str, Any] = {"shards_from": "--shards" if given else "checkpoint",
                                  "recorded_in_checkpoint": recorded}
    notes = []
    if given:
        shards = given
    elif recorded is None:
        return (), {"shards_from": None, "recorded_in_checkpoint": None}
    else:
        unreachable: set[str] = set()
        shards = tuple(s for s in recorded if _has_shards(s, unreachable))
        if missing := [s for s in recorded if s not in shards]:
            provenance["recorded_not_found"] = missing
            notes.append(f"{len(missing)} of the {len(recorded)} training OUT(s) the checkpoint "
                         "records are not here: their instruction texts were not checked (pass "
                         "--shards)")
    if data := {out: identity for out, identity in recorded_data(checkpoint).items()
                if given or out in shards}:
        held_by, not_held = _holders(data, shards)
        provenance.update(recorded_data_held_by=held_by, recorded_data_not_held=not_held)
        if not_held and given:
            notes.append(f"{len(not_held)} of the {len(data)} OUT(s) whose shards the checkpoint "
                         "records are held by no --shards OUT (same chunks, names and sizes): "
                         "the instruction texts it was trained on were not all checked")
        elif not_held:
            notes.append(f"{len(not_held)} recorded OUT(s) no longer hold the shards the "
                         "checkpoint read (regenerated or changed since): the check used what "
                         "they hold now")
    if notes:
        provenance["note"] = "; ".join(notes)
    return shards, provenance


def _holders(data: dict[str, dict], shards: tuple[str, ...]
             ) -> tuple[dict[str, str], list[str]]:
    """For each recorded OUT, the OUT of `shards` that holds its identity (itself first), and
    those none holds. Each OUT is listed once."""
    from trainer.data_identity import Holdings, shard_sizes

    holdings = Holdings({out: shard_sizes(out) for out in shards})
    held_by, not_held = {}, []
    for recorded, identity in data.items():
        holders = holdings.holders(identity)  # in the order of `shards`
        if not holders:
            not_held.append(recorded)
        else:
            held_by[recorded] = recorded if recorded in holders else holders[0]
    return held_by, not_held


# pyarrow's words for a request that reached no store (refused, unresolvable host, timeout):
# `AWS Error NETWORK_CONNECTION ... curlCode: 7`. A store that answered (ACCESS_DENIED for
# one prefix, NoSuchBucket) says nothing about the other OUTs of that store.
STORE_UNREACHABLE = ("NETWORK_CONNECTION", "curlCode")


def _has_shards(out: str, unreachable: set[str]) -> bool:
    """Whether a recorded OUT has shards here. A scheme not read here is not probed, nor is
    another OUT of a store `unreachable` holds (each failed connection costs seconds: a loop
    run records an OUT per round); a store that answered with an error is asked again for
    its other OUTs."""
    from trainer.heldout import shard_files
    from trainer.shard_files import location_problem, store_of

    store = store_of(out)  # s3://bucket
    if location_problem(out) or store in unreachable:
        return False
    try:
        return bool(shard_files(out))
    except FileNotFoundError:  # gone or emptied
        return False
    except (OSError, ValueError) as exc:  # a store, or only this prefix, this process cannot
        # read; a path it cannot name
        if store is not None and any(word in str(exc) for word in STORE_UNREACHABLE):
            unreachable.add(store)
        return False


def _evaluate(config: EvalConfig) -> dict[str, Any]:
    from datagen.envs import import_modules

    from trainer.heldout import heldout_tasks
    from trainer.tokens import tokenizer_problem

    if config.episodes_out and not config.episodes:
        raise ValueError("--episodes-out: no episodes to write (--only leaves out episodes)")
    import_modules(list(config.env_modules))
    checkpoint = resolve_checkpoint(config.checkpoint)
    if problem := tokenizer_problem(checkpoint):  # the checkpoint's own, saved beside it
        raise ValueError(f"checkpoint {checkpoint}: {problem}")
    reference = check_reference(checkpoint, config.reference)
    started = time.perf_counter()
    shards, provenance = training_shards(config.shards, checkpoint)
    chosen = heldout_tasks(config.envs, config.num_tasks, config.eval_seed, shards)
    tasks = chosen.describe()
    notes = [n for n in (tasks["leak_check"].get("note"), provenance.pop("note", None)) if n]
    tasks["leak_check"].update(provenance, **({"note": "; ".join(notes)} if notes else {}))
    report: dict[str, Any] = {"checkpoint": checkpoint, "tasks": tasks,
                              "config": config.model_dump(mode="json")}
    seconds = {"tasks": time.perf_counter() - started}
    if config.steps:
        started = time.perf_counter()
        report["step_level"] = _step_level(config, checkpoint, chosen.tasks)
        seconds["step_level"] = time.perf_counter() - started
    if config.episodes:
        started = time.perf_counter()
        played, turns = rollout(
            checkpoint, chosen.tasks, max_steps=config.max_steps, generation=config.generation(),
            decoder=config.decoder, on_invalid_turn=config.on_invalid_turn,
            max_batch_size=config.batch_size)
        report["episodes"] = summarize(played, turns)
        if config.episodes_out:
            from trainer.episode_rows import write_episodes

            write_episodes(played, config.episodes_out)
        seconds["episodes"] = time.perf_counter() - started
        if config.irr_tasks:
            started = time.perf_counter()
            report["irr"] = _irr(config, checkpoint, chosen.tasks[:config.irr_tasks])
            seconds["irr"] = time.perf_counter() - started
    if config.preferences or config.negatives:
        started = time.perf_counter()
        report.update(_preference_sections(config, checkpoint, reference,
                                           chosen.tasks[:config.pref_tasks]))
        seconds["preferences"] = time.perf_counter() - started
    if config.safety and config.safety_worlds:
        started = time.perf_counter()
        report["safety"] = _safety(config, checkpoint, chosen.tasks[:config.safety_worlds])
        seconds["safety"] = time.perf_counter() - started
    report["seconds"] = {k: round(v, 3) for k, v in seconds.items()}
    return report


def add_eval_command(commands: Any) -> None:
    """The `eval` subcommand (its flags and handler live in trainer.eval_cli)."""
    from trainer.eval_cli import add_eval_command as add

    add(commands)
