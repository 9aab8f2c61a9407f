"""The `vllm` teacher: vLLM's async engine in-process in a Ray actor (CPU build), episodes
running concurrently beside it, trajectories and top-k landing in the shards."""

from __future__ import annotations

import re
import time

import orjson
import pyarrow.parquet as pq
import pytest

from datagen.config import GenerateConfig
from datagen.types import Span
from tests.datagen.teachers.conftest import VLLM_AVAILABLE, VLLM_SKIP_REASON, vllm_actor_config
from tests.datagen.teachers.helpers import (check_row_alignment, check_trajectory_alignment,
                                            make_tasks)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not VLLM_AVAILABLE, reason=VLLM_SKIP_REASON)]
K = 3


@pytest.fixture(scope="module")
def teacher_config() -> dict:
    return vllm_actor_config()


def test_episodes_run_concurrently_in_the_engine_actor(vllm_teacher):
    tasks = make_tasks(12, envs=("sql", "fs"))
    started = time.perf_counter()
    trajectories = vllm_teacher.rollout_batch(tasks)
    wall = time.perf_counter() - started
    assert [t.task.id for t in trajectories] == [t.id for t in tasks]
    for traj in trajectories:
        assert traj.error and traj.meta["backend"] == "vllm"
        assert check_trajectory_alignment(vllm_teacher.tokenizer, traj, K) == \
            traj.meta["completion_tokens"]
    in_model = sum(t.meta["model_s"] for t in trajectories)
    assert in_model > 3 * wall, "turns of different episodes overlap in the engine"


def test_pipeline_with_engine_actor_writes_aligned_topk(vllm_teacher, teacher_config, tmp_path):
    import ray

    from datagen.pipeline import run_generation

    config = GenerateConfig(out=str(tmp_path / "out"), num_trajectories=8, chunk_size=4,
                            envs=[{"name": "sql"}], teacher=teacher_config, num_workers=1,
                            progress=False)
    summary = run_generation(config)
    assert summary.complete and summary.counts["trajectories"] == 8
    engines = [a for a in ray.util.list_named_actors() if a.startswith("datagen-vllm-")]
    assert len(engines) == 1, "the chunk worker used the running engine, not a new one"
    for row in pq.read_table(tmp_path / "out" / "trajectories").to_pylist():
        meta = orjson.loads(row["teacher_meta"])
        assert row["teacher"] == "tiny-vllm" and row["error"] and meta["turns"] >= 1
        generated = check_row_alignment(vllm_teacher.tokenizer, row["text"],
                                        [Span(**s) for s in row["spans"]], row["input_ids"],
                                        row["span_ids"], row["teacher_topk_ids"],
                                        row["teacher_topk_logprobs"], K)
        assert generated == meta["completion_tokens"]


def test_a_killed_engine_is_restarted_and_its_batch_rerun(vllm_teacher, ray_head):
    """Last in the module: it costs one more engine start. SIGKILL of the engine actor's
    process mid-batch: Ray restarts the actor (`max_restarts`), the client resends the batch,
    every episode comes back from the new engine, and the dead engine's own processes (vLLM's
    engine core) do not outlive it. The engine is paused first, so every episode's first turn
    waits in it: the kill lands mid-batch however fast or slow the machine is."""
    import os
    import signal
    import threading

    import psutil
    import ray
    from ray.util.state import list_actors

    (engine,) = vllm_teacher.engines()
    (actor,) = list_actors(address=ray_head.address, filters=[
        ("class_name", "=", "VLLMEngineActor"), ("state", "=", "ALIVE")])
    engine_procs = [psutil.Process(actor.pid), *psutil.Process(actor.pid).children(recursive=True)]
    tasks = make_tasks(4, envs=("sql",))
    ray.get(engine.pause.remote())
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault(
        "value", vllm_teacher.rollout_batch(tasks)), daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while ray.get(engine.requests_in_flight.remote()) < len(tasks):
        assert time.monotonic() < deadline, "the batch's first turns never reached the engine"
        time.sleep(0.2)
    assert thread.is_alive()
    os.kill(actor.pid, signal.SIGKILL)
    thread.join(timeout=400)
    assert not thread.is_alive(), "the batch never came back"
    trajectories = result["value"]
    assert [t.task.id for t in trajectories] == [t.id for t in tasks]
    for traj in trajectories:
        assert traj.error_kind != "engine_lost" and traj.meta["backend"] == "vllm", traj.error
    _, orphans = psutil.wait_procs(engine_procs, timeout=60)
    assert not orphans, f"processes of the killed engine still run: {orphans}"


def _past_the_vocabulary() -> tuple[dict, str]:
    """The tests' vllm teacher with a logit_bias id past its vocabulary, and the reason."""
    from transformers import AutoConfig

    teacher = vllm_actor_config()
    teacher["vllm"]["num_cpus"] = 0
    teacher["sampling"]["logit_bias"] = {1_000_000: 1.0, 5: -1.0}
    vocab_size = AutoConfig.from_pretrained(teacher["vllm"]["model"]).vocab_size
    return teacher, (f"teacher.sampling.logit_bias: token id(s) [1000000] outside the model's "
                     f"{vocab_size:,} logits")


def test_a_logit_bias_past_the_vocabulary_is_refused_before_any_engine_starts(ray_head,
                                                                               tmp_path):
    """Where the chunk worker can read the model's config.json, its setup refuses the config
    (the CLI's exit 2, datagen.pipeline.preflight): no engine is started and no chunk runs.
    Before, each chunk failed with this reason once an engine had started (~50 s here)."""
    import ray

    from datagen.pipeline import run_generation
    from datagen.pipeline.cluster import ClusterError

    teacher, reason = _past_the_vocabulary()
    model = teacher["vllm"]["model"]
    config = GenerateConfig(out=str(tmp_path / "out"), num_trajectories=8, chunk_size=4,
                            envs=[{"name": "sql"}], teacher=teacher, num_workers=1,
                            progress=False)
    engines = set(ray.util.list_named_actors())
    with pytest.raises(ClusterError) as refused:
        run_generation(config)
    assert re.fullmatch(rf"no chunk worker can run this config:\n  - on \S+: "
                        rf"{re.escape(reason)} \(teacher\.vllm\.model "
                        rf"{re.escape(model)}/config\.json\)", str(refused.value)), refused.value
    assert set(ray.util.list_named_actors()) == engines


def test_a_logit_bias_past_the_vocabulary_fails_the_engine_start_in_one_line(ray_head):
    """Where only the engine's node has the model (a GPU node), the engine refuses the config
    as it starts, before loading the weights, and each chunk fails with its one line (exit 1
    from the CLI). Before, the engine started and vLLM refused every request: every row
    failed and the run was "complete". One more engine start (num_cpus 0: beside the module's
    engine on the 2-CPU head); killed at the end."""
    import ray

    from datagen.teachers.config import TeacherConfig
    from datagen.teachers.vllm_engine import EngineNotReady, VLLMTeacher

    teacher, reason = _past_the_vocabulary()
    client = VLLMTeacher(TeacherConfig(**teacher))
    try:
        with pytest.raises(EngineNotReady) as refused:
            client.engines()
    finally:
        for engine in client.start_engines():
            ray.kill(engine)
    assert str(refused.value) == (f"a vLLM engine failed to start: LogitBiasOutsideVocab: {reason} "
                                  f"(loading {teacher['vllm']['model']})"), refused.value
