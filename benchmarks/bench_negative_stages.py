"""CPU per trajectory of the negatives and critics stages alone, and the work they do per call.

    .venv/bin/python benchmarks/bench_negative_stages.py --n 200 --rounds 2     # us per trajectory
    .venv/bin/python benchmarks/bench_negative_stages.py --n 150 --counts       # calls per gold call

The same oracle trajectories (the built-in environments, `configs/demo.yaml`'s negatives and
critics settings: three kinds, the execution check) go through `NegativeStage.run` and
`CriticStage.run` `--rounds` times after a warm-up (the critics with the negatives stage's
reports of the same trajectories, as in a chunk); the best CPU time of each is printed. Under
load compare two checkouts by running this in each, interleaved, several times. `--counts`
instead runs the negatives stage once under cProfile and prints how often the costly
operations ran per gold call (environment steps, SQLite restores and new connections,
validations, sampled values): unlike times, these do not depend on the load.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

COUNTED = {  # function name -> file(s) it must come from (None: a C function)
    "step": "_toolkit.py", "restore": "sql_sandbox.py", "validate_with": "validate.py",
    "load_tool": "validate.py", "sample_value": "sample.py",
    "group_properties": "hallucinated_key.py",
    "<built-in method _sqlite3.connect>": None,
    "<method 'backup' of 'sqlite3.Connection' objects>": None,
    "<method 'deserialize' of 'sqlite3.Connection' objects>": None,
    # every environment's snapshot (the outcome check takes none for a read-only call)
    "snapshot": ("fs.py", "enterprise.py", "envs/sql.py"),
    "<method 'serialize' of 'sqlite3.Connection' objects>": None,
}


def stages():
    from datagen.config import CriticsConfig, NegativesConfig
    from datagen.pipeline.stages.critics import CriticStage
    from datagen.pipeline.stages.negatives import NegativeStage, StepReports

    reports = StepReports()  # as a chunk worker wires them: the critics reuse these
    return {"negatives": NegativeStage(NegativesConfig(), run_seed=0, reports=reports),
            "critics": CriticStage(CriticsConfig(), run_seed=0, reports=reports)}


def best_seconds(trajectories, rounds: int) -> dict[str, float]:
    from datagen.teachers import EnvPool

    envs, best = EnvPool(), {}
    for name, stage in stages().items():
        stage.run(trajectories[:50], envs)  # warm-up: compiled schemas, kept verdicts
        for _ in range(rounds):
            started = time.process_time()
            stage.run(trajectories, envs)
            best[name] = min(best.get(name, float("inf")), time.process_time() - started)
    return best


def counts(trajectories) -> None:
    from datagen.teachers import EnvPool

    profiler = cProfile.Profile()
    profiler.enable()
    stages()["negatives"].run(trajectories, EnvPool())
    profiler.disable()
    calls = sum(1 for t in trajectories if t.success for s in t.steps if s.call is not None)
    print(f"{calls} gold calls of {len(trajectories)} trajectories; per gold call:")
    for (file, _, function), (_, ncalls, *_) in sorted(pstats.Stats(profiler).stats.items()):
        if function in COUNTED and (COUNTED[function] is None
                                    or file.endswith(COUNTED[function])):
            label = function if not isinstance(COUNTED[function], tuple) else \
                f"{function} ({file.rsplit('/', 2)[-2]}/{file.rsplit('/', 1)[-1]})"
            print(f"  {label:<56}{ncalls / calls:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="oracle trajectories")
    parser.add_argument("--rounds", type=int, default=2, help="timed runs per stage (best)")
    parser.add_argument("--seed", type=int, default=5, help="task seed of the trajectories")
    parser.add_argument("--counts", action="store_true", help="operations per gold call")
    args = parser.parse_args()
    from tests.datagen.helpers import oracle_trajectories

    trajectories = oracle_trajectories(args.n, seed=args.seed)
    if args.counts:
        counts(trajectories)
        return
    best = best_seconds(trajectories, args.rounds)
    print(f"load {os.getloadavg()[0]:.1f}  " + "  ".join(
        f"{name} {seconds * 1e6 / args.n:,.0f} us/traj" for name, seconds in best.items()))


if __name__ == "__main__":
    main()
