"""Rollouts: the policy plays tasks through datagen's episode loop, in Ray actors.

Topology of one iteration (trainer/recipes/ppo.py runs it on every learner worker):

    learner worker --(ray.put of the policy's state dict)--> RolloutActor x ppo.rollout_workers
    RolloutActor: loads the weights into its own copy of the model, then plays its share of
                  the tasks with datagen's LLMTeacher + EpisodeRunner over a PolicyBackend
                  (trainer.agent_backend; Transformers decoding on CPU, the modifications
                  active, hybrid mode off: RL samples from the policy itself) and returns the
                  trajectories with their token traces and behaviour log-probs
    learner worker <-- trajectories

Tasks come from datagen's TaskSource (the generation task space, `ppo.task_seed`); each task is
played `ppo.group_size` times, the copies told apart by a `#k` suffix on the task id (so the
trajectory ids differ; the group is the original id).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datagen.types import Task, Trajectory
    from trainer.config import TrainConfig


def iteration_tasks(cfg: "TrainConfig", iteration: int, rank: int, world: int,
                    ) -> tuple[list["Task"], list[str]]:
    """This worker's tasks of an iteration, each repeated group_size times, and their
    group (the original task id). Deterministic: a resumed iteration plays the same tasks."""
    from datagen.tasks import TaskError, TaskSource
    from datagen.teachers.base import EnvPool

    ppo = cfg.ppo
    per_worker = ppo.tasks_per_iteration
    start = (iteration * world + rank) * per_worker
    source = TaskSource(tuple(ppo.envs), tuple(1.0 for _ in ppo.envs), ppo.task_seed,
                        count=1 << 40)
    tasks, groups = [], []
    for task in source.generate(start, start + per_worker, EnvPool()):
        if isinstance(task, TaskError):
            continue  # a generator bug: no task to play (the next iteration draws others)
        for copy in range(ppo.group_size):
            tasks.append(dataclasses.replace(task, id=f"{task.id}#{copy}"))
            groups.append(task.id)
    return tasks, groups


def teacher_config(cfg: "TrainConfig", checkpoint_hint: str) -> Any:
    """The `policy` teacher's config of the rollouts (recorded on every row)."""
    from datagen.teachers.config import EpisodeConfig, HFConfig, SamplingConfig, TeacherConfig

    import trainer.agent_backend  # noqa: F401 - registers the `policy` backend

    ppo = cfg.ppo
    return TeacherConfig(
        backend="policy", name="ppo",
        hf=HFConfig(model=checkpoint_hint, tokenizer=cfg.tokenizer,
                    max_batch_size=max(1, ppo.tasks_per_iteration * ppo.group_size)),
        sampling=SamplingConfig(temperature=ppo.temperature, logprobs=1,
                                max_tokens_per_turn=ppo.max_tokens_per_turn),
        episode=EpisodeConfig(max_turns=ppo.max_turns, on_invalid_turn=ppo.on_invalid_turn,
                              max_total_tokens=cfg.data.max_seq_len,
                              max_concurrent_episodes=max(1, ppo.tasks_per_iteration
                                                          * ppo.group_size)))


class RolloutWorker:
    """A copy of the policy that plays episodes (the body of the Ray actor; usable
    in-process too)."""

    def __init__(self, model_config: dict[str, Any], tokenizer: str, teacher: Any) -> None:
        import torch

        from datagen.teachers.llm import LLMTeacher
        from trainer.agent_backend import PolicyBackend
        from trainer.generation import GenerationConfig
        from trainer.model import AgentQwen2Config, AgentQwen2ForCausalLM

        torch.set_num_threads(1)
        model = AgentQwen2ForCausalLM(AgentQwen2Config.from_dict(model_config)).eval()
        model.requires_grad_(False)
        sampling = teacher.sampling
        generation = GenerationConfig(max_new_tokens=sampling.max_tokens_per_turn,
                                      temperature=sampling.temperature, hybrid=False)
        self.backend = PolicyBackend(model, tokenizer, generation, teacher.hf.max_batch_size,
                                     record_logprobs=True, describe={"model": "ppo-policy"})
        self.teacher = LLMTeacher(teacher, self.backend)

    def rollout(self, state: dict[str, Any], tasks: list["Task"], iteration: int,
                seed: int) -> list["Trajectory"]:
        """Load the learner's weights, then play `tasks` (one trajectory each, in order)."""
        policy = self.backend.policy
        policy.model.load_state_dict(state)
        policy.generator.manual_seed(seed)
        self.backend.turns.clear()
        return self.teacher.rollout_batch(tasks, round_=iteration)


def start_actors(cfg: "TrainConfig", model_config: dict[str, Any], count: int) -> list[Any]:
    """`count` rollout actors. Scheduled outside the learner's placement group (the learner
    worker's bundle holds only its own CPUs)."""
    import ray

    actor = ray.remote(RolloutWorker).options(num_cpus=cfg.ppo.rollout_cpus,
                                             scheduling_strategy="DEFAULT")
    teacher = teacher_config(cfg, cfg.model.init_from or "random-init")
    actors = [actor.remote(model_config, cfg.tokenizer, teacher) for _ in range(count)]
    # placed (and their models built) within the learners' own bound, or the fit fails
    # naming it: an actor the cluster cannot place would otherwise be waited for forever
    timeout = cfg.scaling.worker_start_timeout_s
    ready, _ = ray.wait([a.__ray_ready__.remote() for a in actors], num_returns=len(actors),
                        timeout=timeout)
    if len(ready) < len(actors):
        for handle in actors:
            ray.kill(handle)
        raise RuntimeError(f"{len(actors) - len(ready)} of {len(actors)} PPO rollout actors "
                           f"(ppo.rollout_cpus={cfg.ppo.rollout_cpus:g} each) were not placed "
                           f"within {timeout:g}s (scaling.worker_start_timeout_s)")
    ray.get(ready)  # an actor whose constructor raised fails the fit with its error
    return actors


def play(actors: list[Any], state: dict[str, Any], tasks: list["Task"], iteration: int,
         seed: int) -> list["Trajectory"]:
    """Split `tasks` over the actors (whole groups stay together: contiguous slices of
    copies), play them, return the trajectories in task order."""
    import ray

    state_ref = ray.put(state)
    size = -(-len(tasks) // len(actors))
    futures = [actor.rollout.remote(state_ref, tasks[i * size:(i + 1) * size], iteration,
                                    seed + i)
               for i, actor in enumerate(actors) if tasks[i * size:(i + 1) * size]]
    return [traj for part in ray.get(futures) for traj in part]
