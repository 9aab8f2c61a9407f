"""GPU self-check of the learning effect: a soft teacher is fine-tuned on oracle
trajectories, students smaller than it are distilled from it with `sft`, `token_kd` and
`sad` at an equal token budget (2 seeds each), and every model is scored on held-out tasks
(step-level metrics and episodes). Prints the table and exits non-zero when a check fails.

    python tests/gpu/selfcheck_learning.py --teacher-init runs/smollm2-135m   # ~10 min on one H100/H200
    python tests/gpu/selfcheck_learning.py                                     # random-init teacher
    python tests/gpu/selfcheck_learning.py --device cpu --smoke                # seconds (the CPU suite)

Teacher: with `--teacher-init` the pretrained SmolLM2-135M-Instruct converted by
scripts/convert_smollm2.py (its tokenizer is then everyone's; students are `small`-shaped,
hidden 256 x 4 layers, with its 49k vocabulary), all layers fine-tuned with SFT; without
it, a random-init model of 512 x 8 layers trained with SFT, on a `lines` BPE built here
(scripts/build_tokenizer.py). Students: random init, split embeddings on, MCH off.

Standalone: torch, transformers, tokenizers, pydantic and orjson, and this repository's
datagen (oracle, environments, template), trainer.model / losses / tokens / step_eval.
No Ray, vLLM, DeepSpeed or downloads; pyarrow only for the episodes (datagen's episode
runner imports it; without it the episodes are reported as skipped). The training step is
driven here from library functions (trainer.losses.make_loss_fn inside the model's
forward, trainer.engines.DDPEngine without Ray's wrapper), with bf16 autocast on CUDA.

Checks: every loss finite; each model's training loss falls; the trained teacher beats an
untrained student on held-out nats per character; every distilled student beats it too.
Reported, not checked: the arms' order (whether SAD >= token-KD >= SFT), episode success.
Not collected by pytest (no test_ prefix); tests/trainer/test_selfcheck_learning_cpu.py runs
the --smoke version.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from datagen.tokenizer import build_bpe_tokenizer  # noqa: E402
from trainer.config import OptimConfig  # noqa: E402
from trainer.engines import DDPEngine  # noqa: E402
from trainer.losses import LossSettings, TeacherSignal, make_loss_fn  # noqa: E402
from trainer.model import AgentQwen2ForCausalLM, BUILDERS  # noqa: E402
from trainer.tokens import TextTokenizer, special_ids, tokenize_with_spans  # noqa: E402

ENVS = ("sql", "fs", "enterprise")
OBJECTIVES = ("sft", "token_kd", "sad")
SIZES = {  # (train tasks, held-out tasks, teacher steps, student steps, batch, max_len,
    #         tokens per generated turn, episode turns). A demo turn is at most ~230 tokens
    #         with SmolLM2's tokenizer, ~70 with the 8k `lines` BPE (measured on out/demo).
    "full": (2000, 45, 400, 300, 8, 4096, 256, 12),
    "smoke": (24, 3, 3, 3, 2, 4096, 12, 1),
}
EPISODE_BUDGET = 0.75  # past this share of --budget-s, later models skip their episodes


def oracle_texts(count: int, seed: int) -> tuple[list[str], list[list[dict]], set[str]]:
    """Rendered oracle trajectories of training tasks 0..count-1 of run seed `seed` (the
    generation id space; held-out tasks come from trainer.heldout's disjoint one)."""
    from datagen.chat import render_trajectory
    from datagen.teachers import EnvPool, OracleTeacher

    pool = EnvPool()
    tasks = generated_tasks(count, seed, pool)
    texts, spans = [], []
    for trajectory in OracleTeacher().rollout_batch(tasks, pool):
        if trajectory.success:
            text, span_objects = render_trajectory(trajectory)
            texts.append(text)
            spans.append(span_dicts(span_objects))
    return texts, spans, {t.instruction for t in tasks}


def generated_tasks(count: int, seed: int, pool=None) -> list:
    """Tasks 0..count-1 of run seed `seed`, as a generation run draws them (ids
    `{env}-{seed}-{i}`); tasks that failed to generate (no gold) are left out."""
    from datagen.tasks import TaskSource
    from datagen.teachers import EnvPool

    source = TaskSource(ENVS, (1.0,) * len(ENVS), seed, count)
    return [t for t in source.generate(0, count, pool or EnvPool()) if hasattr(t, "gold")]


def span_dicts(spans) -> list[dict]:
    """datagen Span objects as the dicts trainer.tokens.tokenize_with_spans reads."""
    return [{"kind": s.kind, "start": s.start, "end": s.end, "step": s.step} for s in spans]


def heldout(count: int, training_instructions: set[str]) -> list:
    """Held-out tasks (disjoint ids and seeds by construction), minus any whose instruction
    a training task has."""
    from trainer.heldout import heldout_tasks

    return [t for t in heldout_tasks(ENVS, count).tasks if t.instruction not in training_instructions]


def build_tokenizer(texts: list[str], directory: Path) -> Path:
    build_bpe_tokenizer(texts, 8000, directory, pretokenizer="lines")
    return directory


def encode(tokenizer: TextTokenizer, texts: list[str], spans: list[list[dict]], max_len: int,
           ) -> list[tuple[np.ndarray, np.ndarray]]:
    ids, labels = tokenize_with_spans(tokenizer, texts, spans)
    docs = [(np.asarray(i[:max_len]), np.asarray(s[:max_len], dtype=np.int64))
            for i, s in zip(ids, labels)]
    return [d for d in docs if np.isin(d[1], (1, 2)).any()]


def batches(docs: list, batch: int, steps: int, seed: int, pad: int):
    """`steps` padded batches, length-bucketed in pools of 8 batches; the same for every
    arm of a seed (an equal token budget)."""
    rng = random.Random(seed)
    out: list[tuple[torch.Tensor, torch.Tensor]] = []
    while len(out) < steps:
        order = list(range(len(docs)))
        rng.shuffle(order)
        for start in range(0, len(order), batch * 8):
            pool = sorted(order[start:start + batch * 8], key=lambda i: len(docs[i][0]))
            runs = [pool[i:i + batch] for i in range(0, len(pool), batch)]
            rng.shuffle(runs)
            out.extend(_pad([docs[i] for i in run], pad) for run in runs)
    return out[:steps]


def _pad(docs: list, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in docs)
    ids = torch.full((len(docs), width), pad, dtype=torch.long)
    spans = torch.full((len(docs), width), -1, dtype=torch.long)
    for row, (row_ids, row_spans) in enumerate(docs):
        ids[row, :len(row_ids)] = torch.from_numpy(row_ids.astype(np.int64))
        spans[row, :len(row_spans)] = torch.from_numpy(row_spans)
    return ids, spans


def new_model(shape: str, vocab: int, special: dict, seed: int) -> AgentQwen2ForCausalLM:
    sizes = {"teacher": dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=8,
                             num_attention_heads=8, num_key_value_heads=4),
             "student": {}, "tiny": {}}[shape]
    builder = BUILDERS["tiny" if shape == "tiny" else "small"]
    config = builder(vocab_size=-(-vocab // 64) * 64, split_embeddings=True,
                     tool_call_start_id=special["tool_call_start"], im_end_id=special["im_end"],
                     pad_token_id=special["pad"], **sizes)
    torch.manual_seed(seed)
    return AgentQwen2ForCausalLM(config)


def train(model, data: list, objective: str, teacher, lr: float, device: torch.device) -> dict:
    """One pass over `data` (padded batches); the losses and the time it took."""
    model.to(device).train()
    engine = DDPEngine(model, OptimConfig(lr=lr, warmup_steps=max(len(data) // 20, 1)), len(data),
                       wrap=False)  # AdamW, warmup + cosine, clipping: as `trainer fit`
    settings = LossSettings(objective, chunk_size=1024)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    losses, tokens, started = [], 0, time.perf_counter()
    for ids, spans in data:
        ids, spans = ids.to(device), spans.to(device)
        with autocast:
            signal = TeacherSignal("onehot")  # SAD without a teacher: span-weighted CE
            if objective != "sft" and teacher is not None:
                with torch.no_grad():
                    out = teacher(input_ids=ids, span_ids=spans, use_cache=False,
                                  return_hidden=True, logits_to_keep=1)
                signal = TeacherSignal("online", hidden=out.hidden, head=teacher.lm_head)
            out = model(input_ids=ids, span_ids=spans, use_cache=False,
                        loss_fn=make_loss_fn(ids, spans, signal, settings))
        engine.backward(out.loss)
        engine.step()
        losses.append(float(out.loss.detach()))
        tokens += int((spans >= 0).sum())
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    return {"losses": losses, "seconds": round(seconds, 1), "tokens_per_s": round(tokens / max(seconds, 1e-9))}


def evaluate(model, tokenizer_dir: Path, tasks: list, workdir: Path, name: str,
             device: torch.device, episodes: bool, turn_tokens: int, turns: int) -> dict:
    """Step-level metrics (+ nats per REASON/ACT character) and, when possible, episodes."""
    from trainer.step_eval import evaluate_steps
    from trainer.step_scorer import TorchStepScorer

    tokenizer = TextTokenizer(tokenizer_dir)
    model.eval()
    result = evaluate_steps(tasks, tokenizer, TorchStepScorer(model, tokenizer, max_new_tokens=turn_tokens),
                            with_negatives=False)
    nll = result["act_ce"] * result["act_tokens"] + result["reason_ce"] * result["reason_tokens"]
    record = {k: result[k] for k in ("next_call_exact_match", "right_tool_rate", "schema_valid_rate",
                                     "act_ce", "reason_ce")}
    record["nats_per_char"] = nll / max(span_chars(tasks), 1)
    if episodes:
        record.update(play(model, tokenizer, tasks, workdir / name, device, turn_tokens, turns))
    return record


def span_chars(tasks: list) -> int:
    from datagen.chat import render_trajectory
    from datagen.teachers import EnvPool, OracleTeacher

    pool, chars = EnvPool(), 0
    for task in tasks:
        trajectory = OracleTeacher().safe_rollout(task, pool)
        if trajectory.success:
            chars += sum(s.end - s.start for s in render_trajectory(trajectory)[1]
                         if s.kind in ("REASON", "ACT"))
    return chars


def play(model, tokenizer: TextTokenizer, tasks: list, directory: Path, device: torch.device,
         turn_tokens: int, turns: int) -> dict:
    try:
        from trainer.eval import summarize
        summary = summarize(*rollouts(model, tokenizer, tasks, directory, device, turn_tokens, turns))
    except ImportError as exc:  # pyarrow missing: the step-level metrics stand alone
        return {"episodes_skipped": f"{type(exc).__name__}: {exc}"}
    return {"success_rate": summary["success_rate"], "syntax_error_rate": summary["syntax_error_rate"]}


def rollouts(model, tokenizer: TextTokenizer, tasks: list, directory: Path, device: torch.device,
             turn_tokens: int, turns: int, temperature: float = 0.0, seed: int = 0,
             on_invalid_turn: str = "stop") -> tuple[list, list]:
    """`model` plays `tasks` (saved to `directory` first: trainer.eval plays checkpoints);
    the trajectories and the decoder's turns. ImportError when pyarrow is missing."""
    from trainer.eval import rollout
    from trainer.generation import GenerationConfig

    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(directory))
    tokenizer.save(directory)
    return rollout(str(directory), tasks, max_steps=turns, device=device.type,
                   generation=GenerationConfig(max_new_tokens=turn_tokens, temperature=temperature,
                                               seed=seed),
                   on_invalid_turn=on_invalid_turn, max_batch_size=16)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--teacher-init", default=None, help="converted SmolLM2 checkpoint")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CPU suite)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--no-episodes", dest="episodes", action="store_false")
    parser.add_argument("--budget-s", type=float, default=600.0, help="wall-clock target: "
                        f"models evaluated after {EPISODE_BUDGET:.0%} of it skip their episodes "
                        "(reported as skipped; the step-level metrics always run)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("FAIL: no CUDA device", file=sys.stderr)
        return 1
    device = torch.device(args.device)
    n_train, n_heldout, teacher_steps, student_steps, batch, max_len, turn_tokens, turns = \
        SIZES["smoke" if args.smoke else "full"]
    if args.teacher_init is None:  # the `lines` BPE: a demo turn is at most ~70 tokens
        turn_tokens = min(turn_tokens, 128)
    decode = dict(turn_tokens=turn_tokens, turns=turns)
    started, failures, rows = time.perf_counter(), [], {}

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.0f} s] {message}", flush=True)

    def episodes_now() -> bool:
        return args.episodes and time.perf_counter() - started < EPISODE_BUDGET * args.budget_s

    def scored(model, name: str, fitted: dict | None) -> dict:
        play_now = episodes_now()
        record = evaluate(model, tokenizer_dir, tasks, workdir, name, device,
                          play_now and fitted is not None, **decode)
        if args.episodes and fitted is not None and not play_now:
            record["episodes_skipped"] = "time budget (--budget-s)"
        if fitted is not None:
            record |= {"train_s": fitted["seconds"], "tokens_per_s": fitted["tokens_per_s"]}
        log(f"{name}: " + json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                      for k, v in record.items()}))
        return record

    workdir = Path(tempfile.mkdtemp(prefix="selfcheck-learning-"))
    texts, spans, instructions = oracle_texts(n_train, seed=0)
    tasks = heldout(n_heldout, instructions)
    tokenizer_dir = Path(args.teacher_init) if args.teacher_init else build_tokenizer(texts, workdir / "tokenizer")
    tokenizer = TextTokenizer(tokenizer_dir)
    special = special_ids(tokenizer)
    docs = encode(tokenizer, texts, spans, max_len)
    log(f"{len(docs)} training trajectories, {len(tasks)} held-out tasks, vocabulary {len(tokenizer)}")

    if args.teacher_init:
        teacher = AgentQwen2ForCausalLM.from_pretrained(args.teacher_init, dtype=torch.float32)
        teacher_lr = 1e-4
    else:
        teacher, teacher_lr = new_model("tiny" if args.smoke else "teacher", len(tokenizer), special, 0), 1e-3
    student_shape = "tiny" if args.smoke else "student"
    untrained = new_model(student_shape, len(tokenizer), special, args.seeds[0])
    rows["untrained"] = [scored(untrained.to(device), "untrained", None)]
    fitted = train(teacher, batches(docs, batch, teacher_steps, 0, special["pad"]), "sft", None, teacher_lr, device)
    rows["teacher"] = [scored(teacher, "teacher", fitted)]
    check_training("teacher", fitted, failures)
    teacher.eval().requires_grad_(False)
    for objective in OBJECTIVES:
        rows[objective] = []
        for seed in args.seeds:
            student = new_model(student_shape, len(tokenizer), special, seed)
            fitted = train(student, batches(docs, batch, student_steps, seed, special["pad"]),
                           objective, teacher, 3e-3, device)
            check_training(f"{objective} seed {seed}", fitted, failures)
            rows[objective].append(scored(student, f"{objective}-{seed}", fitted))
    floor = rows["untrained"][0]["nats_per_char"]
    for arm in ("teacher",) + OBJECTIVES:
        if not args.smoke and any(r["nats_per_char"] >= floor for r in rows[arm]):
            failures.append(f"{arm}: held-out nats/char not below the untrained student's {floor:.3f}")
    print_table(rows)
    print(json.dumps({"rows": rows, "failures": failures, "seconds": round(time.perf_counter() - started, 1),
                      "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"}))
    print("PASS" if not failures else "FAIL:\n  " + "\n  ".join(failures))
    return 0 if not failures else 1


def check_training(name: str, fitted: dict, failures: list[str]) -> None:
    losses = fitted["losses"]
    if not all(math.isfinite(x) for x in losses):
        failures.append(f"{name}: non-finite training loss")
    elif len(losses) >= 2 and not fmean(losses[-max(len(losses) // 5, 1):]) < fmean(losses[:max(len(losses) // 5, 1)]):
        failures.append(f"{name}: training loss did not fall ({losses[0]:.3f} -> {losses[-1]:.3f})")


def print_table(rows: dict[str, list[dict]]) -> None:
    keys = ("next_call_exact_match", "right_tool_rate", "schema_valid_rate", "nats_per_char",
            "success_rate", "syntax_error_rate")
    print(f"\n{'arm':<10}" + "".join(f"{k[:18]:>20}" for k in keys))
    for arm, results in rows.items():
        cells = []
        for key in keys:
            values = [r[key] for r in results if key in r]
            cells.append(f"{fmean(values):.3f} ± {(max(values) - min(values)) / 2:.3f}" if values else "-")
        print(f"{arm:<10}" + "".join(f"{c:>20}" for c in cells))


if __name__ == "__main__":
    raise SystemExit(main())
