"""Task diversity and speed of the built-in environments.

    python benchmarks/task_diversity.py                 # 10,000 tasks per family
    python benchmarks/task_diversity.py --count 2000 --envs sql fs --json out.json

Diversity, per family over `--count` tasks (seeds derived like a real run's TaskSource):
- exact: distinct instructions / tasks;
- templates: distinct task templates hit (`params["template"]`);
- skeletons and near_dup_ratio: distinct instructions after replacing quoted strings, emails,
  paths, tokens with digits and capitalised words by placeholders (what is left is phrasing),
  as a count and as a ratio to tasks;
- tool_sequences: distinct sequences of gold tool names;
- gold steps: mean / min / max.

Speed, per family: generate_task + reset + every gold step + check, averaged over
`--timed` tasks after `--warmup` tasks (the SQL environment builds one connection per schema
variant on first use). Reported as the plain mean and as a quiet-core estimate (each task
run by `--repeat` separately warmed environments, fastest run kept), with the share of each
phase, the host's load average and a reference workload's speed (to normalise runs made
on busy or different machines).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
import timeit
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datagen.envs import make_env  # noqa: E402
from datagen.types import stable_seed  # noqa: E402

FAMILIES = ("sql", "fs", "enterprise")
_PLACEHOLDERS = (
    (re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`"), "Q"),
    (re.compile(r"\S+@\S+"), "E"),
    (re.compile(r"[~/][\w./\-]+"), "P"),
    (re.compile(r"[\w\-.:]*\d[\w\-.:]*"), "N"),
    (re.compile(r"\b[A-Z][\w\-]*"), "C"),
)


def skeleton(instruction: str) -> str:
    """The phrasing of an instruction with its content replaced by placeholders."""
    for pattern, placeholder in _PLACEHOLDERS:
        instruction = pattern.sub(placeholder, instruction)
    return re.sub(r"(C\s*)+", "C ", instruction)


def diversity(family: str, count: int) -> dict:
    env = make_env(family)
    tasks = [env.generate_task(stable_seed("diversity", family, i), f"{family}-{i}")
             for i in range(count)]
    instructions = [t.instruction for t in tasks]
    steps = [len(t.gold) for t in tasks]
    skeletons = {skeleton(text) for text in instructions}
    return {
        "tasks": count,
        "exact_distinct_ratio": round(len(set(instructions)) / count, 4),
        "templates": len({t.params["template"] for t in tasks}),
        "skeletons": len(skeletons),
        "near_dup_distinct_ratio": round(len(skeletons) / count, 4),
        "tool_sequences": len({tuple(g.call.name for g in t.gold) for t in tasks}),
        "gold_steps_mean": round(statistics.fmean(steps), 3),
        "gold_steps_min": min(steps),
        "gold_steps_max": max(steps),
        "params_bytes_max": max(len(orjson.dumps(t.params)) for t in tasks),
    }


def _run_chunks(env, family: str, timed: int, chunk: int) -> list[tuple[float, ...]]:
    """Seconds in generate_task, reset, gold steps and check per task, processed like the
    pipeline does: a chunk of tasks is generated first, then rolled out one by one."""
    phases = []
    for start in range(0, timed, chunk):
        tasks, generate = [], []
        for index in range(start, min(start + chunk, timed)):
            t0 = time.perf_counter()
            tasks.append(env.generate_task(stable_seed("speed", family, index), f"t{index}"))
            generate.append(time.perf_counter() - t0)
        for task, gen in zip(tasks, generate):
            t1 = time.perf_counter()
            env.reset(task)
            t2 = time.perf_counter()
            for gold in task.gold:
                env.step(gold.call.as_dict())
            t3 = time.perf_counter()
            ok = env.check(task, task.answer)
            t4 = time.perf_counter()
            assert ok, task.id
            phases.append((gen, t2 - t1, t3 - t2, t4 - t3))
    return phases


def _warm(family: str, warmup: int):
    env = make_env(family)
    for i in range(warmup):
        task = env.generate_task(stable_seed("warmup", family, i), "w")
        env.reset(task)
        for gold in task.gold:
            env.step(gold.call.as_dict())
    return env


def speed(family: str, warmup: int, timed: int, repeat: int, chunk: int = 333) -> dict:
    """Microseconds per task for the whole cycle.

    Tasks are processed in chunks of `chunk` (a 1000-task pipeline chunk holds ~333 tasks
    of each of three families), and every task is run by `repeat` separately warmed
    environments (so caches, such as SQLite's
    prepared statements, are as cold as in a real run). `us_per_task` is the plain mean of
    the first run; `us_per_task_quiet` keeps each task's fastest run before averaging, which
    filters out time stolen by other processes on a shared machine (as timeit's minimum
    does). Phase shares come from the quiet runs."""
    runs = []
    for _ in range(repeat):
        env = _warm(family, warmup)
        runs.append(_run_chunks(env, family, timed, chunk))
    plain = sum(sum(phases) for phases in runs[0]) / timed
    quiet = [min((run[i] for run in runs), key=sum) for i in range(timed)]
    totals = [sum(phase[k] for phase in quiet) for k in range(4)]
    return {"us_per_task": round(plain * 1e6, 1),
            "us_per_task_quiet": round(sum(totals) / timed * 1e6, 1),
            **{f"share_{name}": round(part / sum(totals), 3)
               for name, part in zip(("generate", "reset", "steps", "check"), totals)}}


def reference_ns() -> float:
    """A fixed pure-Python workload (best of 5), to compare runs across machines and loads:
    speed numbers scale roughly with it (~450 ns on an idle 2.4 GHz EPYC core)."""
    timer = timeit.Timer("[i for i in range(10)]")
    return round(min(timer.repeat(repeat=5, number=100_000)) / 100_000 * 1e9, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000, help="tasks per family")
    parser.add_argument("--envs", nargs="+", default=list(FAMILIES))
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--timed", type=int, default=2000, help="tasks per timed round")
    parser.add_argument("--repeat", type=int, default=3,
                        help="environments that run every timed task (fastest run is kept)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = {}
    for family in args.envs:
        results[family] = {**diversity(family, args.count),
                           **speed(family, args.warmup, args.timed, args.repeat)}
        print(family, orjson.dumps(results[family]).decode(), flush=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    reference = reference_ns()
    print(f"host load average (1 min): {load:.2f} on {os.cpu_count()} cpus; reference "
          f"workload {reference} ns (~450 ns on an idle 2.4 GHz EPYC core)")
    if args.json:
        args.json.write_bytes(orjson.dumps({"results": results, "load_average": load,
                                            "reference_ns": reference},
                                           option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
