"""Critics throughput and quality: repairs/s, safety pairs/s, the refusal vs benign ratio, and
IRR of the oracle per environment and error kind.

    python benchmarks/bench_critics.py [--trajectories 150] [--irr-tasks 90] [--seed 0]

Runs on one CPU core without Ray: the stage is the same code a chunk worker runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from critics.irr import evaluate_irr  # noqa: E402
from critics.llm_critic import LLMCritic  # noqa: E402
from datagen.config import CriticsConfig, GenerateConfig  # noqa: E402
from datagen.pipeline.chunk import task_source  # noqa: E402
from datagen.pipeline.stages.critics import CriticStage  # noqa: E402
from datagen.teachers import EnvPool, OracleTeacher  # noqa: E402
from tests.critics.fakes import GoldCriticFake  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trajectories", type=int, default=150)
    parser.add_argument("--irr-tasks", type=int, default=90)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    pool = EnvPool()
    tasks = task_source(GenerateConfig(num_trajectories=args.trajectories, seed=args.seed)
                        ).generate(0, args.trajectories, pool)
    trajectories = OracleTeacher().rollout_batch(tasks, pool)

    repairs_only = CriticsConfig(inject_rate=1.0, safety_rate=0.0)
    CriticStage(repairs_only, args.seed + 1).run(trajectories[:30], pool)  # warm-up: caches
    batch = CriticStage(repairs_only, args.seed).run(trajectories, pool)
    print(f"repairs: {len(batch.repairs)} from {len(trajectories)} injected trajectories in "
          f"{batch.seconds:.2f}s = {len(batch.repairs) / batch.seconds:.0f} repairs/s "
          f"(yield {len(batch.repairs) / len(trajectories):.1%})")
    print(f"  per kind: {dict(sorted(batch.repaired.items()))}")
    print(f"  not emitted: {dict(batch.rejected)}")

    # The llm backend's own cost: a FAKE model that answers at once (the gold call, tagged), so
    # the figure is the dry run + prompt rendering + reply parsing, not a model's latency.
    critic = LLMCritic(GoldCriticFake([traj.task for traj in trajectories]))
    llm_only = CriticsConfig(backend="llm", inject_rate=1.0, safety_rate=0.0)
    llm_batch = CriticStage(llm_only, args.seed, critic).run(trajectories, pool)
    print(f"llm critic, instant FAKE model: {len(llm_batch.repairs)} repairs in "
          f"{llm_batch.seconds:.2f}s = {len(llm_batch.repairs) / llm_batch.seconds:.0f} repairs/s "
          f"({(llm_batch.seconds - batch.seconds) / len(trajectories) * 1e3:.2f} ms per "
          f"trajectory over the rule critic; model calls: {critic.complete.batches})")

    safety_only = CriticsConfig(inject_rate=0.0, safety_rate=1.0, safety_per_trajectory=2)
    batch = CriticStage(safety_only, args.seed).run(trajectories, pool)
    stats = batch.stats()
    print(f"safety: {len(batch.preferences)} pairs in {batch.seconds:.2f}s = "
          f"{len(batch.preferences) / batch.seconds:.0f} pairs/s; dangerous "
          f"{stats['safety_dangerous']} : benign {stats['safety_benign']} "
          f"(benign share {stats['safety_benign'] / max(len(batch.preferences), 1):.1%})")
    print(f"  per kind: {dict(sorted(batch.safety.items()))}")

    started = time.perf_counter()
    summary = evaluate_irr(num_tasks=args.irr_tasks, seed=args.seed).summary()
    seconds = time.perf_counter() - started
    print(f"IRR (oracle, {summary['overall']['n']} episodes, {seconds:.2f}s): "
          f"{summary['overall']['irr']:.3f}")
    for title in ("per_env", "per_kind"):
        print(f"  {title}: " + ", ".join(f"{k} {v['irr']:.3f} (n={v['n']})"
                                         for k, v in summary[title].items()))


if __name__ == "__main__":
    main()
