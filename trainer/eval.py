"""`python -m trainer eval`: run a checkpoint as an agent in datagen's environments and report
how it does.

The episodes go through datagen's `hf` teacher (`datagen.teachers.episode`), so the agent is
evaluated exactly as the data was made: the same chat template and token trace as the shards,
the never-raising parser, the strict JSON-Schema check (`mutators.validate`), the
environments and their checkers, deterministic tasks from the seed. Two decoders:

- `policy` (default): `trainer.generation.AgentPolicy` behind `PolicyBackend` - the model's
  modifications active (split embeddings, landmark retrieval, MCH hybrid mode);
- `batched`: datagen's `HFBackend` as is - live episodes decoded together in left-padded
  batches; for checkpoints whose decoding is plain Qwen2 (refused otherwise).

Metrics:
- success rate: episodes the environment's checker accepts;
- syntax-error rate: attempted tool calls (turns with a `<tool_call>`) that did not parse,
  named an unknown tool, failed the tool's schema, or were cut off, over all attempted calls;
- mean steps: assistant turns per episode;
- MCH (policy decoder): how often the hybrid mode switched to the slow path and its latency;
- failures: the first word of every failed turn's reason, counted (`invalid_arguments`, ...).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch, transformers and datagen load only when an evaluation runs
    from datagen.types import Step, Trajectory
    from trainer.generation import GenerationConfig, Turn

# Failed-turn kinds that mean the call itself was malformed (datagen.teachers.episode.judge_turn)
SYNTAX_ERRORS = frozenset({"invalid_json", "invalid_call", "unterminated_call", "multiple_calls",
                           "unknown_tool", "invalid_arguments", "truncated", "not_text"})


def error_kind(error: str) -> str:
    return error.split(":", 1)[0]


def attempted_call(step: "Step") -> bool:
    return step.call is not None or "<tool_call>" in (step.raw or "")


def invalid_call(step: "Step") -> bool:
    return attempted_call(step) and step.error is not None and error_kind(step.error) in SYNTAX_ERRORS


def summarize(trajectories: list["Trajectory"], turns: list["Turn"]) -> dict[str, Any]:
    """The report: agent metrics from the trajectories, MCH metrics from the policy's turns."""
    steps = [step for traj in trajectories for step in traj.steps]
    calls = sum(attempted_call(step) for step in steps)
    per_env: dict[str, Counter] = defaultdict(Counter)
    for traj in trajectories:
        per_env[traj.task.env].update(episodes=1, successes=int(traj.success))
    failures = Counter(error_kind(step.error) for step in steps if step.error)
    failures.update(error_kind(t.error) for t in trajectories
                    if t.error and not any(step.error for step in t.steps))
    scored = [turn for turn in turns if turn.confidence is not None]
    slow = [turn.slow_seconds for turn in turns if turn.switched]
    fast = sum(turn.seconds for turn in turns) - sum(slow)
    return {
        "episodes": len(trajectories),
        "success_rate": sum(t.success for t in trajectories) / max(len(trajectories), 1),
        "syntax_error_rate": sum(invalid_call(step) for step in steps) / max(calls, 1),
        "mean_steps": len(steps) / max(len(trajectories), 1),
        "tool_calls": calls,
        "failures": dict(failures.most_common()),
        "mch_scored_turns": len(scored),
        "mch_switch_rate": len(slow) / max(len(scored), 1),
        "mean_turn_seconds": statistics.fmean(t.seconds for t in turns) if turns else 0.0,
        "slow_path_seconds_per_switch": statistics.fmean(slow) if slow else 0.0,
        "latency_overhead": sum(slow) / fast if fast > 0 else 0.0,
        "per_env": {env: dict(counts) for env, counts in per_env.items()},
    }


def resolve_checkpoint(path: str) -> str:
    """A checkpoint directory, or the newest checkpoint of a run directory."""
    root = Path(path)
    if (root / "config.json").exists():
        return str(root)
    candidates = sorted(p for p in root.glob("checkpoint_*") if (p / "config.json").exists())
    if not candidates:
        raise FileNotFoundError(f"no checkpoint (config.json) in {path} or its checkpoint_* dirs")
    return str(candidates[-1])


def rollout(checkpoint: str, envs: list[str], num_episodes: int, *, max_steps: int = 12,
            seed: int = 0, generation: "GenerationConfig | None" = None,
            decoder: str = "policy", on_invalid_turn: str = "stop",
            env_modules: tuple[str, ...] = (), max_batch_size: int = 8,
            ) -> tuple[list["Trajectory"], list["Turn"]]:
    """Roll out `num_episodes` tasks (deterministic in `seed`) with the checkpoint (a
    directory, or a run directory's newest checkpoint): the trajectories, and the policy
    decoder's turns (empty for the batched decoder)."""
    from datagen.envs import import_modules
    from datagen.tasks import TaskSource
    from datagen.teachers import EnvPool
    from datagen.teachers.config import EpisodeConfig, HFConfig, SamplingConfig, TeacherConfig
    from datagen.teachers.hf import HFBackend
    from datagen.teachers.llm import LLMTeacher
    from datagen.types import Task
    from transformers import AutoConfig

    from trainer.agent_backend import PolicyBackend, plain_decoding_problem
    from trainer.generation import GenerationConfig

    generation = generation or GenerationConfig()
    checkpoint = resolve_checkpoint(checkpoint)
    import_modules(list(env_modules))
    config = TeacherConfig(
        backend="hf", name="eval",
        hf=HFConfig(model=checkpoint, max_batch_size=max_batch_size),
        sampling=SamplingConfig(temperature=generation.temperature, logprobs=0,
                                max_tokens_per_turn=generation.max_new_tokens,
                                seed=generation.seed),
        episode=EpisodeConfig(max_turns=max_steps, on_invalid_turn=on_invalid_turn,
                              max_concurrent_episodes=max_batch_size, max_total_tokens=1 << 20))
    if decoder == "policy":
        backend = PolicyBackend(config.hf, config.sampling, generation)
    else:
        problem = plain_decoding_problem(AutoConfig.from_pretrained(checkpoint))
        if problem:
            raise ValueError(f"--decoder batched: {problem}")
        backend = HFBackend(config.hf, config.sampling)
    source = TaskSource(envs=tuple(envs), weights=(1.0,) * len(envs), seed=seed,
                        count=num_episodes)
    tasks = [item for item in source.generate(0, num_episodes, EnvPool())
             if isinstance(item, Task)]
    return LLMTeacher(config, backend).rollout_batch(tasks), getattr(backend, "turns", [])


def evaluate(checkpoint: str, envs: list[str], num_episodes: int, *, decoder: str = "policy",
             seed: int = 0, **options: Any) -> dict[str, Any]:
    """`rollout` summarised (see the module docstring for the metrics)."""
    checkpoint = resolve_checkpoint(checkpoint)
    summary = summarize(*rollout(checkpoint, envs, num_episodes, decoder=decoder, seed=seed,
                                 **options))
    summary.update(checkpoint=checkpoint, envs=envs, decoder=decoder, seed=seed)
    return summary


def _run(args: argparse.Namespace) -> int:
    from trainer.generation import GenerationConfig

    generation = GenerationConfig(max_new_tokens=args.max_new_tokens, hybrid=not args.no_hybrid,
                                  threshold=args.threshold, num_candidates=args.candidates,
                                  seed=args.seed)
    summary = evaluate(args.checkpoint, args.envs.split(","), args.num_episodes,
                       max_steps=args.max_steps, seed=args.seed, generation=generation,
                       decoder=args.decoder, on_invalid_turn=args.on_invalid_turn,
                       env_modules=tuple(args.env_modules), max_batch_size=args.batch_size)
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


def add_eval_command(commands: Any) -> None:
    parser = commands.add_parser("eval", help="run a checkpoint as an agent in environments")
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint directory (HF format) or a run_dir (newest checkpoint)")
    parser.add_argument("--envs", default="sql,fs,enterprise", help="comma-separated env names")
    parser.add_argument("--env-modules", nargs="*", default=[],
                        help="modules to import so their @register_env environments can be named")
    parser.add_argument("--num-episodes", type=int, default=20)
    parser.add_argument("--max-steps", type=int, default=12, help="assistant turns per episode")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--decoder", choices=("policy", "batched"), default="policy",
                        help="policy: the model's modifications and MCH active; batched: "
                             "datagen's batched HF decoder (plain-Qwen2 decoding only)")
    parser.add_argument("--on-invalid-turn", choices=("stop", "feedback"), default="stop",
                        help="stop: a malformed turn ends the episode; feedback: the agent sees "
                             "the error and may recover")
    parser.add_argument("--batch-size", type=int, default=8, help="episodes in flight")
    parser.add_argument("--no-hybrid", action="store_true", help="never switch to the slow path")
    parser.add_argument("--threshold", type=float, default=None, help="MCH switch threshold")
    parser.add_argument("--candidates", type=int, default=None, help="slow-path samples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="also write the report (JSON) here")
    parser.set_defaults(handler=_run)
