"""Tables, the conclusion sentence and the plot of benchmarks/learning_effect.py: arms of
several seeds summarised as mean +- half the range."""

from __future__ import annotations

from pathlib import Path
from statistics import fmean
from typing import Any

# (key, header, higher is better)
METRICS = (("next_call_exact_match", "next-call exact", True),
           ("right_tool_rate", "right tool", True),
           ("schema_valid_rate", "schema-valid", True),
           ("nats_per_char", "nats/char", False),
           ("act_ce", "ACT CE", False),
           ("success_rate", "episode success", True),
           ("syntax_error_rate", "syntax errors", False))
IRR = ("irr", "IRR", True)


def spread(values: list[float]) -> tuple[float, float]:
    """Mean and half the range."""
    return fmean(values), (max(values) - min(values)) / 2


def cell(results: list[dict[str, Any]], key: str) -> str:
    values = [r[key] for r in results if r.get(key) is not None]
    if not values:
        return "-"
    mean, half = spread(values)
    return f"{mean:.3f}" if len(values) == 1 else f"{mean:.3f} ± {half:.3f}"


def markdown_table(arms: dict[str, list[dict[str, Any]]], with_irr: bool = False) -> str:
    metrics = METRICS + ((IRR,) if with_irr else ())
    header = ["arm", "seeds", "steps", "train CPU s"] + [name for _, name, _ in metrics]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for arm, results in arms.items():
        cpu = fmean(r["cpu_s"] for r in results)
        lines.append("| " + " | ".join([arm, str(len(results)), str(results[0]["steps"]),
                                        f"{cpu:.0f}"] +
                                       [cell(results, key) for key, _, _ in metrics]) + " |")
    return "\n".join(lines) + "\n"


def _order_holds(results: dict[str, list[dict]], key: str, higher: bool) -> str:
    means = {arm: spread([r[key] for r in results[arm]]) for arm in ("sad", "token_kd", "sft")}
    sign = 1 if higher else -1
    holds = sign * means["sad"][0] >= sign * means["token_kd"][0] >= sign * means["sft"][0]
    ranked = sorted(means, key=lambda arm: -sign * means[arm][0])
    gaps = [abs(means[a][0] - means[b][0]) for a, b in zip(ranked, ranked[1:])]
    within = all(gap <= means[a][1] + means[b][1] for gap, a, b in zip(gaps, ranked, ranked[1:]))
    values = ", ".join(f"{arm} {means[arm][0]:.3f}" for arm in ("sad", "token_kd", "sft"))
    verdict = "holds" if holds else "does not hold"
    note = " (every gap is within the seeds' spread: not resolved at this size)" if within else ""
    return f"{verdict} on {key} ({values}){note}"


def conclusion(results: dict[str, list[dict]]) -> str:
    """Whether SAD >= token-KD >= SFT (the SAD paper's direction for a small student)."""
    if not all(results.get(arm) for arm in ("sad", "token_kd", "sft")):
        return "The SAD / token-KD / SFT order is not decided: an arm has no finished seed."
    return ("The SAD paper's direction (SAD >= token-KD >= SFT for a small student) "
            + _order_holds(results, "next_call_exact_match", True) + "; it "
            + _order_holds(results, "nats_per_char", False) + ".")


def plot(arms: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """Bars per arm (mean, whiskers at min and max over seeds) for four held-out metrics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [m for m in METRICS if m[0] in ("next_call_exact_match", "right_tool_rate",
                                            "schema_valid_rate", "nats_per_char")]
    figure, axes = plt.subplots(1, len(shown), figsize=(4 * len(shown), 3.6))
    names = list(arms)
    for axis, (key, title, higher) in zip(axes, shown):
        values = [[r[key] for r in arms[arm] if r.get(key) is not None] or [0.0] for arm in names]
        means = [fmean(v) for v in values]
        errors = [[m - min(v) for m, v in zip(means, values)],
                  [max(v) - m for m, v in zip(means, values)]]
        axis.bar(range(len(names)), means, yerr=errors, capsize=3, color="#4a7ab5")
        axis.set_xticks(range(len(names)), names, rotation=40, ha="right", fontsize=8)
        axis.set_title(f"{title} ({'higher' if higher else 'lower'} is better)", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
