"""`python -m trainer eval`: run a checkpoint as an agent and report how it does.

The trainer never imports the generation side, so the environments come in through a small
interface: an adapter (named `path/to/file.py:factory` or `module:factory`, default
`scripts/eval_agent.py:make_adapter`, which wraps datagen's built-in environments and
renders conversations with the same chat template the shards were written with) yields
episodes; an episode renders its conversation so far (text + spans) and takes the agent's
turn. This module owns the agent loop and the metrics:

- success rate: episodes the environment's checker accepts;
- syntax-error rate: tool calls that fail to parse or fail the tool's JSON Schema, over all
  calls the agent attempted;
- mean steps: assistant turns per episode;
- MCH: how often the hybrid mode switched to the slow path and what that cost in latency.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Protocol

if TYPE_CHECKING:  # torch and transformers load only when an evaluation runs
    from trainer.generation import AgentPolicy, GenerationConfig, Turn

DEFAULT_ADAPTER = "scripts/eval_agent.py:make_adapter"


@dataclass
class StepOutcome:
    done: bool                          # the episode ended (final answer, or a fatal error)
    attempted_call: bool = False        # the turn tried to call a tool
    call_valid: bool = True             # ... and the call parsed and passed the schema


class Episode(Protocol):
    env: str

    def context(self) -> tuple[str, list[dict]]:
        """The conversation so far, ending with the assistant header, and its spans."""

    def step(self, assistant_text: str) -> StepOutcome:
        """Parse and execute the agent's turn."""

    @property
    def success(self) -> bool:
        """Whether the environment's checker accepted the outcome."""


class EnvironmentAdapter(Protocol):
    def episodes(self, count: int, seed: int) -> Iterable[Episode]:
        """`count` fresh episodes, deterministic in `seed`."""


@dataclass
class EvalReport:
    episodes: int = 0
    successes: int = 0
    calls: int = 0
    invalid_calls: int = 0
    steps: int = 0
    scored_turns: int = 0
    switches: int = 0
    turn_seconds: list[float] = field(default_factory=list)
    slow_seconds: list[float] = field(default_factory=list)
    per_env: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))

    def add_turn(self, turn: "Turn", outcome: StepOutcome) -> None:
        self.steps += 1
        self.calls += int(outcome.attempted_call)
        self.invalid_calls += int(outcome.attempted_call and not outcome.call_valid)
        self.scored_turns += int(turn.confidence is not None)
        self.switches += int(turn.switched)
        self.turn_seconds.append(turn.seconds)
        if turn.switched:
            self.slow_seconds.append(turn.slow_seconds)

    def summary(self) -> dict[str, Any]:
        fast = sum(self.turn_seconds) - sum(self.slow_seconds)
        return {
            "episodes": self.episodes,
            "success_rate": self.successes / max(self.episodes, 1),
            "syntax_error_rate": self.invalid_calls / max(self.calls, 1),
            "mean_steps": self.steps / max(self.episodes, 1),
            "tool_calls": self.calls,
            "mch_scored_turns": self.scored_turns,
            "mch_switch_rate": self.switches / max(self.scored_turns, 1),
            "mean_turn_seconds": statistics.fmean(self.turn_seconds) if self.turn_seconds else 0.0,
            "slow_path_seconds_per_switch": statistics.fmean(self.slow_seconds) if self.slow_seconds else 0.0,
            "latency_overhead": sum(self.slow_seconds) / fast if fast > 0 else 0.0,
            "per_env": {env: dict(counts) for env, counts in self.per_env.items()},
        }


def evaluate(policy: "AgentPolicy", adapter: EnvironmentAdapter, num_episodes: int,
             max_steps: int = 12, seed: int = 0) -> EvalReport:
    """Run `num_episodes` episodes, each up to `max_steps` assistant turns."""
    report = EvalReport()
    for episode in adapter.episodes(num_episodes, seed):
        report.episodes += 1
        for _ in range(max_steps):
            text, spans = episode.context()
            turn = policy.act(text, spans)
            outcome = episode.step(turn.text)
            report.add_turn(turn, outcome)
            if outcome.done:
                break
        success = bool(episode.success)
        report.successes += int(success)
        counts = report.per_env[episode.env]
        counts["episodes"] += 1
        counts["successes"] += int(success)
    return report


def load_adapter(spec: str, **options: Any) -> EnvironmentAdapter:
    """`file.py:factory` or `package.module:factory`, called with `options`."""
    target, _, name = spec.rpartition(":")
    if target.endswith(".py"):
        path = Path(target)
        if not path.exists():  # relative to the repository, as the default is written
            path = Path(__file__).resolve().parents[1] / target
        path = path.resolve()
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[path.stem] = module
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    return getattr(module, name)(**options)


def resolve_checkpoint(path: str) -> str:
    """A checkpoint directory, or the newest checkpoint of a run directory."""
    root = Path(path)
    if (root / "config.json").exists():
        return str(root)
    candidates = sorted(p for p in root.glob("checkpoint_*") if (p / "config.json").exists())
    if not candidates:
        raise FileNotFoundError(f"no checkpoint (config.json) in {path} or its checkpoint_* dirs")
    return str(candidates[-1])


def load_policy(checkpoint: str, config: "GenerationConfig") -> "AgentPolicy":
    from trainer.generation import AgentPolicy
    from trainer.model import AgentQwen2ForCausalLM
    from trainer.tokens import TextTokenizer

    checkpoint = resolve_checkpoint(checkpoint)
    model = AgentQwen2ForCausalLM.from_pretrained(checkpoint)
    return AgentPolicy(model, TextTokenizer(checkpoint), config)


def _run(args: argparse.Namespace) -> int:
    from trainer.generation import GenerationConfig

    config = GenerationConfig(max_new_tokens=args.max_new_tokens, hybrid=not args.no_hybrid,
                              threshold=args.threshold, num_candidates=args.candidates,
                              seed=args.seed)
    policy = load_policy(args.checkpoint, config)
    adapter = load_adapter(args.adapter, envs=args.envs.split(","))
    summary = evaluate(policy, adapter, args.num_episodes, args.max_steps, args.seed).summary()
    summary["checkpoint"] = args.checkpoint
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
    parser.add_argument("--num-episodes", type=int, default=20)
    parser.add_argument("--max-steps", type=int, default=12, help="assistant turns per episode")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--no-hybrid", action="store_true", help="never switch to the slow path")
    parser.add_argument("--threshold", type=float, default=None, help="MCH switch threshold")
    parser.add_argument("--candidates", type=int, default=None, help="slow-path samples")
    parser.add_argument("--adapter", default=DEFAULT_ADAPTER, help="file.py:factory or module:factory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="also write the report (JSON) here")
    parser.set_defaults(handler=_run)
