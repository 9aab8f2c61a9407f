"""What checking tool arguments costs inside the environments: CPU microseconds per gold call
for the check `step` runs before a tool (the mutators' validator, `datagen/envs/_arguments.py`)
plus the integer conversion handlers get, per family.

    .venv/bin/python benchmarks/bench_env_arguments.py [--tasks 300] [--rounds 40]

Each round runs every gold call of `--tasks` tasks once; the fastest round is kept (CPU time of
this thread, so other jobs on a shared machine count little).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datagen.envs import make_env  # noqa: E402
from datagen.envs._arguments import argument_check, handler_arguments  # noqa: E402

FAMILIES = ("sql", "fs", "enterprise")


def fastest_us(function: Callable[[dict], Any], calls: list[dict], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        for call in calls:
            function(call)
        best = min(best, time.thread_time() - start)
    return best / len(calls) * 1e6


def measure(family: str, tasks: int, rounds: int) -> tuple[int, float]:
    env = make_env(family)
    checks = {spec["function"]["name"]: (argument_check(spec["function"]["parameters"]),
                                         handler_arguments(spec["function"]["parameters"]))
              for spec in env.tools()}
    calls = [gold.call.as_dict() for seed in range(tasks)
             for gold in env.generate_task(seed, "t").gold]

    def check(call: dict) -> Any:
        first_problem, convert = checks[call["name"]]
        error = first_problem(call["arguments"])
        return error or (convert(call["arguments"]) if convert else call["arguments"])

    assert all(checks[c["name"]][0](c["arguments"]) is None for c in calls), family
    return len(calls), fastest_us(check, calls, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=300, help="tasks per family")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    for family in FAMILIES:
        count, per_call = measure(family, args.tasks, args.rounds)
        print(f"{family:<11} {count:>5} gold calls  {per_call:6.2f} us per call")
    print(f"load average (1 min): {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus")


if __name__ == "__main__":
    main()
