"""Recipe `ppo`: reinforcement on function-call correctness. The policy plays tasks in the
environments through datagen's episode loop; rewards come from the checker, the parser and
the tool schemas; the learner updates the policy (and its critic) in the same job.

Supports: PPO with a value head on the modified model (GAE(gamma, lambda) over generated
tokens only - prompt, observations and template glue masked -, clipped surrogate, clipped
value loss, advantage whitening, minibatch epochs); critic-free GRPO and RLOO (group baseline
over `group_size` rollouts of each task); the KL to the reference (the starting weights,
frozen) with the k1 or k3 estimator, folded into the rewards or added to the loss; an entropy
bonus; per-call penalties by error class and a per-turn cost (trainer.rl.rewards); several
learner workers (DDP; each plays its own tasks); resume (the value head is saved beside the
weights). Starts from a SAD or DPO checkpoint with `model.init_from`.
Config: `ppo` (with `ppo.reward`), `data.max_seq_len` (the episode's token budget), `model`,
`optim`, `run` (max_steps counts iterations), `scaling` (ddp only).

Per iteration, on every learner worker:
  1. the policy's weights -> `ppo.rollout_workers` Ray actors (trainer.rl.rollout) that play
     `tasks_per_iteration` x `group_size` episodes with Transformers on CPU (modifications
     active, hybrid mode off) and return the trajectories with token traces;
  2. rewards per episode and per turn -> token tensors (generated-token mask, turn ends);
  3. no-grad scoring: rollout log-probs and values, the reference's log-probs; advantages;
  4. `epochs` x minibatches of `minibatch_size` episodes: forward through the model's own
     forward (value head on its hidden states), loss, backward, clip + AdamW;
  5. the rollouts as Parquet (run_dir/rollouts/iter-*-rank*.parquet: trajectories/' columns
     + rewards and advantages), a metrics.jsonl record, a checkpoint every run.save_every.

On GPUs the same loop would hand the weights to vLLM engines instead of Transformers actors
(README, "PPO"): not built here; only CPU decoding runs.

Cost per iteration: rollouts dominate on CPU (token-by-token decoding: ~tasks x turns x
max_tokens_per_turn forward steps); the learner pays 1 forward for scoring (+1 for the
reference when kl_coef > 0) and `epochs` forward + backward passes over the rollout tokens.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from trainer.checkpoints import Position, StepReports, load_state, resume_directory
from trainer.config import CALL_CLASSES, TrainConfig
from trainer.distributed import any_rank, reduce_metrics, start_worker
from trainer.engines import DDPEngine, TrainingDiverged, world_size
from trainer.rl.advantages import masked_mean
from trainer.rl.batches import build_batch
from trainer.rl.losses import kl_penalty
from trainer.rl.rewards import episode_reward
from trainer.rl.rollout import iteration_tasks, play, start_actors
from trainer.rl.rollout_table import rollout_table, write_rollouts
from trainer.rl.update import minibatches_per_epoch, score_rollouts, update
from trainer.rl.value_head import PolicyWithValue, ValueHead, load_value_head
from trainer.student import Student, build_student, freeze, round_up
from trainer.tokens import load_tokenizer, special_ids

# metrics summed over ranks (counts); the others are averaged
SUMMED = {"episodes", "successes", "attempted_calls", "syntax_errors", "generated_tokens",
          "dropped", *(f"class/{name}" for name in CALL_CLASSES)}


# -- driver side ---------------------------------------------------------------------------

def build_dataset(cfg: TrainConfig) -> tuple[Any, dict[str, Any]]:
    """No dataset: the rollouts are the data (played inside the training loop)."""
    return None, {"recipe": "ppo", "envs": list(cfg.ppo.envs), "task_seed": cfg.ppo.task_seed}


def loop_extras(cfg: TrainConfig, dataset: Any) -> dict[str, Any]:
    return {}


# -- setup ---------------------------------------------------------------------------------

def start_learner(cfg: TrainConfig, resume_dir: str | None) -> tuple[Student, PolicyWithValue]:
    """The policy (resumed, from init_from, or random), its value head (resumed, from a
    checkpoint that has one, or new) and a DDP engine over both."""
    tokenizer = load_tokenizer(cfg.tokenizer)
    special = special_ids(tokenizer)
    policy = build_student(cfg, special, round_up(len(tokenizer)), resume_dir, None)
    head = None
    if cfg.ppo.advantage == "gae":
        hidden = policy.config.hidden_size
        head = load_value_head(resume_dir or cfg.model.init_from, hidden) or ValueHead(hidden)
    model = PolicyWithValue(policy, head)
    updates_per_iteration = cfg.ppo.epochs * minibatches_per_epoch(cfg.ppo)
    engine = DDPEngine(model, cfg.optim, cfg.run.max_steps * updates_per_iteration)
    state = load_state(resume_dir)
    position = Position(**state["position"]) if state else Position()
    if state:
        engine.load_state_dict(state["engine"])
    return Student(tokenizer, special, engine, position, False), model


def build_reference(cfg: TrainConfig, special: dict[str, int], vocab: int,
                    device: torch.device) -> PolicyWithValue | None:
    """The starting weights, frozen (not the resumed ones: the KL anchors the whole run)."""
    if cfg.ppo.kl_coef <= 0:
        return None
    policy = build_student(cfg, special, vocab, None, None)
    return PolicyWithValue(freeze(policy, device), None)


# -- one iteration -------------------------------------------------------------------------

def _rollout_metrics(trajectories: list, rewards: list) -> dict[str, float]:
    n = max(len(rewards), 1)
    metrics = {"episodes": float(len(rewards)),
               "successes": float(sum(t.success for t in trajectories)),
               "attempted_calls": float(sum(r.attempted_calls for r in rewards)),
               "syntax_errors": float(sum(r.syntax_errors for r in rewards)),
               "reward": sum(r.total for r in rewards) / n}
    for name in rewards[0].components if rewards else ():
        metrics[f"reward/{name}"] = sum(r.components[name] for r in rewards) / n
    for name in CALL_CLASSES:
        metrics[f"class/{name}"] = float(sum(r.classes[name] for r in rewards))
    return metrics


def _kl_metrics(scored: Any, mask: torch.Tensor) -> dict[str, float]:
    if scored.ref_logprobs is None:
        return {}
    return {f"kl_{kind}": float(masked_mean(kl_penalty(scored.old_logprobs, scored.ref_logprobs,
                                                       kind), mask))
            for kind in ("k1", "k3")}


def iteration_seed(cfg: TrainConfig, step: int, rank: int, stream: int) -> int:
    """A seed from (run seed, iteration, rank, stream) alone - stream 0: the rollouts'
    sampling, 1: the minibatch order - so a resumed run draws what the uninterrupted one
    would have drawn, with no generator state to checkpoint."""
    import numpy as np

    return int(np.random.SeedSequence([cfg.run.seed, step, rank, stream]).generate_state(1)[0])


def iteration(cfg: TrainConfig, learner: Student, model: PolicyWithValue,
              reference: PolicyWithValue | None, actors: list, rank: int,
              device: torch.device) -> dict[str, float]:
    """Rollouts -> rewards -> scoring -> updates -> Parquet; returns this rank's metrics."""
    step = learner.position.step
    started = time.perf_counter()
    tasks, groups = iteration_tasks(cfg, step, rank, world_size())
    state = {name: tensor.detach().cpu() for name, tensor in model.policy.state_dict().items()}
    trajectories = play(actors, state, tasks, step, seed=iteration_seed(cfg, step, rank, 0))
    rollout_seconds = time.perf_counter() - started
    rewards = [episode_reward(traj, cfg.ppo.reward) for traj in trajectories]
    batch = build_batch(trajectories, rewards, groups, learner.special["pad"],
                        cfg.data.max_seq_len)
    learner_started = time.perf_counter()
    metrics = _rollout_metrics(trajectories, rewards)
    metrics.update(generated_tokens=float(batch.mask.sum()),
                   dropped=float(sum(batch.dropped.values())))
    # every rank updates or none does (DDP's collectives must match)
    if not any_rank(len(batch) == 0, device):
        model.train()
        scored = score_rollouts(model, reference, batch, cfg.ppo, device)
        metrics.update(_kl_metrics(scored, batch.mask))
        metrics["behaviour_logprob_gap"] = float(masked_mean(
            (scored.old_logprobs - batch.behaviour_logprobs).abs(), batch.mask))
        generator = torch.Generator().manual_seed(iteration_seed(cfg, step, rank, 1))
        try:
            metrics.update(update(learner.engine, batch, scored, cfg.ppo, device, generator))
        except TrainingDiverged as exc:  # the engine counts minibatch updates, not iterations
            exc.args = (f"iteration {step + 1}, optimizer {exc}",)
            raise
        advantages = scored.advantages
        kl_penalties = ((batch.rewards - scored.rewards) * batch.mask).sum(1)
    else:
        advantages, kl_penalties = torch.zeros(0, 1), None
    metrics["learner_time"] = time.perf_counter() - learner_started
    metrics["rollout_time"] = rollout_seconds
    table = rollout_table(trajectories, rewards, groups, step, batch, advantages, kl_penalties)
    write_rollouts(table, cfg.run_dir, step, rank)
    return metrics


def _record(metrics: dict[str, float], step: int, lr: float) -> dict[str, Any]:
    episodes = max(metrics.pop("episodes"), 1)
    calls, syntax_errors = metrics.pop("attempted_calls"), metrics.pop("syntax_errors")
    record: dict[str, Any] = {
        "step": step, "loss": round(metrics.pop("loss", 0.0), 6), "lr": lr,
        "episodes": int(episodes), "success_rate": round(metrics.pop("successes") / episodes, 4),
        # as trainer eval: malformed attempted calls / attempted calls (None: no call tried)
        "syntax_error_rate": round(syntax_errors / calls, 4) if calls else None,
        "attempted_calls": int(calls),
        "error_classes": {name.removeprefix("class/"): int(metrics.pop(name))
                          for name in list(metrics) if name.startswith("class/")}}
    record.update({name: round(value, 6) for name, value in metrics.items()})
    return record


# -- the loop ------------------------------------------------------------------------------

def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """Entry point of every worker; `loop_config` = {"train": TrainConfig as JSON}."""
    import ray

    cfg, _, rank, device = start_worker(loop_config)
    with resume_directory() as resume_dir:
        learner, model = start_learner(cfg, resume_dir)
    reference = build_reference(cfg, learner.special, round_up(len(learner.tokenizer)), device)
    reports = StepReports(cfg, rank, learner, "ppo")
    if rank == 0:
        discard_lost_rollouts(cfg.run_dir, learner.position.step)
    actors = start_actors(cfg, model.policy.config.to_dict(), cfg.ppo.rollout_workers)
    try:
        while learner.position.step < cfg.run.max_steps:
            lr = learner.engine.lr
            started = time.perf_counter()
            metrics = iteration(cfg, learner, model, reference, actors, rank, device)
            metrics["iteration_time"] = time.perf_counter() - started
            summed = SUMMED | {"updates"}
            metrics = reduce_metrics(metrics, device, summed & set(metrics))
            learner.position.step += 1
            reports.step(_record(metrics, learner.position.step, lr))
    finally:
        for actor in actors:
            ray.kill(actor)
    reports.close()


def rollout_files(run_dir: str) -> list[Path]:
    return sorted((Path(run_dir) / "rollouts").glob("iter-*.parquet"))


def discard_lost_rollouts(run_dir: str, first_step: int) -> list[Path]:
    """Delete the rollout files of iterations >= `first_step` (where a resumed run starts):
    a killed run wrote them after its last checkpoint and their updates died with it. The
    resumed run plays those iterations again, possibly with another worker count (other file
    names), so overwriting alone could leave duplicates. Finished iterations stay as written;
    half-written temporary files go. Runs on rank 0 before the first iteration, whose
    collective every rank waits for before writing."""
    lost = [path for path in rollout_files(run_dir)
            if int(path.name.split("-")[1]) >= first_step]
    lost += (Path(run_dir) / "rollouts").glob("iter-*.parquet.tmp")  # a write the kill cut
    for path in lost:
        path.unlink()
    return lost
