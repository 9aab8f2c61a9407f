"""Training configuration: the shipped recipes validate, overrides apply, mistakes are named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.schema_numbers import schema_numbers
from trainer.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["train_tiny.yaml", "train_tiny_safety.yaml",
                                  "train_smollm2_gpu.yaml", "train_qwen2_5_32b_zero3.yaml",
                                  "dpo_tiny.yaml", "dpo_qwen2_5_32b_zero3.yaml"])
def test_shipped_recipes_validate(name):
    cfg = load_config(ROOT / "configs" / name)
    assert cfg.run.max_steps > 0
    assert cfg.recipe == ("dpo" if name.startswith("dpo") else "sad")
    if cfg.scaling.strategy == "deepspeed":
        assert (ROOT / cfg.scaling.deepspeed_config).exists()


def test_safety_recipe_is_train_tiny_plus_the_safety_table():
    """configs/train_tiny_safety.yaml differs from train_tiny.yaml only where its header says
    (the safety table, 4,000 steps), so the tiny recipe's tuning carries over."""
    base = load_config(ROOT / "configs" / "train_tiny.yaml").model_dump()
    safety = load_config(ROOT / "configs" / "train_tiny_safety.yaml").model_dump()
    assert safety["data"]["tables"] == ("trajectories", "safety")
    assert safety["run"]["max_steps"] == 4000
    for section in ("data", "run"):
        for key in ("tables", "table_weights", "max_steps", "save_every"):
            base[section].pop(key, None), safety[section].pop(key, None)
    base.pop("run_dir"), safety.pop("run_dir")
    assert safety == base


def test_overrides_are_typed_and_dotted():
    cfg = load_config(ROOT / "configs" / "train_tiny.yaml",
                      ["run.max_steps=7", "loss.objective=token_kd", "model.use_landmark=false"])
    assert cfg.run.max_steps == 7 and cfg.loss.objective == "token_kd" and not cfg.model.use_landmark


@pytest.mark.parametrize("override,message", [
    ("loss.teacher=online", "teacher 'online' needs teacher_model"),
    ("loss.objective=bogus", "loss.objective"),
    ("model.landmark_block_size=0", "model.landmark_block_size"),
    ("scaling.strategy=deepspeed", "needs deepspeed_config"),
    ("data.batch_size=0", "data.batch_size"),
    ("data.mch_rows=-1", "data.mch_rows"),
    ("data.tables=[]", "data.tables"),
    ("data.tables=[trajectories, bogus]", "data.tables"),
    ("data.tables=[repairs, repairs]", "lists a table twice"),
    ("data.table_weights={repairs: 0.5}", "names \\['repairs'\\], not in tables"),
    ("data.table_weights={trajectories: 0}", "must be >= 1e-06"),
    ("data.table_weights={trajectories: 1e-300}", "must be >= 1e-06"),  # 0 in float32
    ("run.max_steps=true", "run.max_steps: a number is expected, not true/false"),
    ("optim.lr=false", "optim.lr: a number is expected"),
    ("loss.lambda_reason=0", None),  # one term left: trains
    ("loss.lambda_act=0", None),
    ("run.max_failures=-1", "run.max_failures"),  # -1 (Ray's "retry forever") is not offered
    ("run.max_failures=1000", "run.max_failures"),
])
def test_invalid_values_are_reported_with_their_field(override, message):
    if message is None:
        load_config(ROOT / "configs" / "train_tiny.yaml", [override])
        return
    with pytest.raises(ConfigError, match=message):
        load_config(ROOT / "configs" / "train_tiny.yaml", [override])


@pytest.mark.parametrize("use_mch,mch_weight,trains", [(False, 0.5, False), (True, 0, False),
                                                         (True, 0.5, True)])
def test_a_sad_run_whose_every_loss_term_is_weighted_0_is_refused(use_mch, mch_weight, trains):
    """All weights 0: the loss was 0 at every step and the run reported max_steps of
    training that moved nothing."""
    overrides = ["loss.lambda_reason=0", "loss.lambda_act=0", f"model.use_mch={use_mch}",
                 f"loss.mch_weight={mch_weight}"]
    if trains:
        load_config(ROOT / "configs" / "train_tiny.yaml", overrides)
        return
    with pytest.raises(ConfigError, match="every step's loss would be 0"):
        load_config(ROOT / "configs" / "train_tiny.yaml", overrides)


def test_pcgrad_requires_the_sad_objective():
    with pytest.raises(ConfigError, match="pcgrad"):
        load_config(ROOT / "configs" / "train_tiny.yaml", ["loss.pcgrad=true", "loss.objective=sft"])


def test_repairs_join_with_a_weight():
    cfg = load_config(ROOT / "configs" / "train_tiny.yaml",
                      ["data.tables=[trajectories, repairs]", "data.table_weights={repairs: 0.5}"])
    assert cfg.data.tables == ("trajectories", "repairs") and cfg.data.table_weights == {"repairs": 0.5}


@pytest.mark.parametrize("override,message", [
    ("dpo.label_smoothing=0.1", "label_smoothing applies to loss_type 'sigmoid' only"),
    ("dpo.sources=[negative, negative]", "lists a source twice"),
    ("dpo.sources=[bogus]", "dpo.sources"),
    ("dpo.source_weights={repair: 2}", "names \\['repair'\\], not in sources"),
    ("dpo.beta=0", "dpo.beta"),
    ("data.mch_rows=2", "data.mch_rows is read by recipe 'sad' only"),
    ("data.batch_size=8", "reads dpo.batch_size"),
    ("data.packing=true", "data.packing is not supported by recipe 'dpo'"),
    ("loss.lambda_act=2", "section 'loss' belongs to another recipe"),
    ("dpo.reference=model", "with deepspeed use 'precomputed'"),
    ("dpo.kind_weights={'benign delete': 2}", "dpo.kind_weights: pattern 'benign delete' is not a glob"),
    ("dpo.kind_weights={'benign_[ab': 2}", "dpo.kind_weights: pattern 'benign_\\[ab' is not a glob"),
    ("dpo.kind_weights={benign_*: -1}", "dpo.kind_weights: pattern 'benign_\\*': weight -1.0 must"),
    ("dpo.kind_weights={benign_*: .inf}", "dpo.kind_weights.benign_\\*: Input should be a finite number"),
    ("dpo.kind_weights=[benign_*]", "dpo.kind_weights"),
    ("dpo.anchor_weight=1", "dpo.anchor_weight adds a second backward pass"),
    ("dpo.anchor_weight=-1", "dpo.anchor_weight"),
])
def test_dpo_mistakes_are_named(override, message):
    extra = ["dpo.loss_type=ipo"] if "label_smoothing" in override else []
    extra += ["dpo.sources=[negative]"] if "source_weights" in override else []
    with pytest.raises(ConfigError, match=message):
        load_config(ROOT / "configs" / "dpo_qwen2_5_32b_zero3.yaml", [override, *extra])


def test_a_dpo_section_needs_recipe_dpo():
    with pytest.raises(ConfigError, match="section 'dpo' belongs to another recipe than 'sad'"):
        load_config(ROOT / "configs" / "train_tiny.yaml", ["dpo.beta=0.5"])
    with pytest.raises(ConfigError, match="precomputed' needs a checkpoint"):
        load_config(ROOT / "configs" / "dpo_tiny.yaml",
                    ["model.init_from=null", "dpo.reference=precomputed"])


def test_an_anchored_dpo_reads_the_data_and_loss_sections():
    cfg = load_config(ROOT / "configs" / "dpo_tiny.yaml", [
        "dpo.anchor_weight=0.5", "dpo.anchor_batch_size=3", "data.tables=[trajectories, safety]",
        "data.mch_rows=2", "loss.lambda_act=2"])
    assert cfg.anchored and cfg.dpo.anchor_batch_size == 3 and cfg.loss.lambda_act == 2
    assert cfg.data.mch_rows == 2
    unanchored = load_config(ROOT / "configs" / "dpo_tiny.yaml", ["dpo.anchor_weight=0"])
    assert not unanchored.anchored  # the shipped file's data section is read by the anchor only
    for override, message in [("loss.pcgrad=true", "loss.pcgrad is not supported on the DPO anchor"),
                              ("curriculum.enabled=true", "section 'curriculum' belongs to another"),
                              ("data.batch_size=2", "dpo.anchor_batch_size: the anchor's")]:
        with pytest.raises(ConfigError, match=message):
            load_config(ROOT / "configs" / "dpo_tiny.yaml", ["dpo.anchor_weight=0.5", override])


def test_kind_weights_keep_the_order_written():
    cfg = load_config(ROOT / "configs" / "dpo_tiny.yaml",
                      ["dpo.kind_weights={benign_contrast_*: 0, benign_*: 3.0, destroy_data: 2}"])
    assert cfg.dpo.kind_weight_items() == (("benign_contrast_*", 0.0), ("benign_*", 3.0),
                                           ("destroy_data", 2.0))


HOSTILE_FILES = {
    "an explicit tag PyYAML cannot build": (b"a: !!float\n", "not valid YAML"),
    "nesting past the parser's limit": (b"a: " + b"[" * 100_000, "not valid YAML"),
    "bytes that are not UTF-8": (b"\xff\xfe", "not UTF-8 text"),
    "a top level that is no mapping": (b"- 1\n- 2\n", "must be a YAML mapping"),
    "aliases that expand past the bound": (
        b"a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + b"".join(b"%c: &%c [%s]\n" % (c, c, b", ".join([b"*" + bytes([c - 1])] * 10))
                   for c in b"bcde")
        + b"f: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
        "over 100,000 values"),
    "a file of over a MiB": (b"a: 1\n" + b"#" * (1 << 20), "over 1,048,576 bytes"),
}


@pytest.mark.parametrize("name", list(HOSTILE_FILES))
def test_hostile_config_files_end_in_one_config_error(tmp_path, name):
    """The trainer reads its YAML as `datagen generate` does: bounded, one named error each."""
    content, message = HOSTILE_FILES[name]
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("override,message", [
    ("run.max_steps=[1", "override run.max_steps: not a YAML value"),
    ("run.max_steps", "must look like key=value"),
    ("run.max_steps.x=1", "override run.max_steps.x: max_steps is not a section"),
])
def test_bad_overrides_end_in_one_config_error(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(ROOT / "configs" / "train_tiny.yaml", [override])


@pytest.mark.parametrize("override,message", [
    ("optim.lr=.inf", "optim.lr: Input should be a finite number"),
    ("loss.lambda_act=.nan", "loss.lambda_act: Input should be a finite number"),
    ("data.batch_size=1000000000", "data.batch_size: Input should be less than or equal to"),
    ("data.max_seq_len=10000000000", "data.max_seq_len: Input should be less than or equal to"),
    ("loss.chunk_size=10000000000", "loss.chunk_size: Input should be less than or equal to"),
    # each of these passed validation and failed in the workers, with a traceback and the
    # advice to rerun: torch's "Invalid beta parameter", numpy's "Overflow when unpacking long
    # long", deque's OverflowError
    ("optim.betas=[2, 3]", "optim.betas.0: Input should be less than 1\n  optim.betas.1: "),
    ("optim.betas=[0.9, -0.1]", "optim.betas.1: Input should be greater than or equal to 0"),
    ("run.seed=100000000000000000000000", "run.seed: Input should be less than or equal to "
     "9223372036854775807"),
    ("run.seed=-1", "run.seed: Input should be greater than or equal to 0"),
    ("run.mch_auroc_window=100000000000000000000", "run.mch_auroc_window: Input should be less "
     "than or equal to 2147483647"),
    ("optim.warmup_steps=100000000000000000000", "optim.warmup_steps: Input should be less"),
    ("scaling.num_workers=1000000", "scaling.num_workers: Input should be less than or equal "
     "to 100000"),
    # finite, and trained on NaN from the first steps (trainer.engines now stops such a run)
    ("optim.lr=1e300", "optim.lr: Input should be less than or equal to 1$"),
    ("optim.lr=2", "optim.lr: Input should be less than or equal to 1$"),
    ("optim.weight_decay=11", "optim.weight_decay: Input should be less than or equal to 10"),
    ("optim.grad_clip=1e300", "optim.grad_clip: Input should be less than or equal to 1000000"),
    ("loss.lambda_reason=1e300", "loss.lambda_reason: Input should be less than or equal to "
     "1000000"),
    ("loss.mch_weight=1e7", "loss.mch_weight: Input should be less than or equal to 1000000"),
    ("data.table_weights={trajectories: 1e300}", "data.table_weights.trajectories: Input "
     "should be less than or equal to 1000000"),
    ("curriculum.weights=[1, -1e300, 1]", "curriculum.weights.1: Input should be greater than "
     "or equal to -1000000"),
])
def test_non_finite_and_unbounded_values_are_refused_before_any_work(override, message):
    """A NaN learning rate trains on NaN; a billion-document batch is allocated, not run."""
    with pytest.raises(ConfigError, match=message):
        load_config(ROOT / "configs" / "train_tiny.yaml", [override])


@pytest.mark.parametrize("model,nested", [("trainer.config.TrainConfig", "model.train_layers"),
                                          ("trainer.eval.EvalConfig", "pref_tasks"),
                                          ("trainer.loop.config.LoopConfig",
                                           "train.round0_steps")])
def test_every_integer_field_has_an_upper_bound_inside_int64(model, nested):
    """Checked for every field, not the ones an audit named: an unbounded count or seed
    reaches torch, numpy or Ray and overflows there, in a worker, after the run started."""
    import importlib

    module, name = model.rsplit(".", 1)
    integers = schema_numbers(getattr(importlib.import_module(module), name), ("integer",))
    assert nested in integers  # the walk reaches into sections and `int | None`
    unbounded = [path for path, item in integers.items()
                 if not item.get("maximum", 2**64) <= 2**63 - 1]
    assert unbounded == []


@pytest.mark.parametrize("model,nested", [("trainer.config.TrainConfig", "ppo.reward.penalties"),
                                          ("trainer.loop.config.LoopConfig", "stop.min_gain")])
def test_every_float_field_has_an_upper_bound(model, nested):
    """`optim.lr: 1e300` was finite, so valid, and trained on NaN; a loss weight or reward of
    1e300 overflows the same way. Temperatures are bounded by datagen's sane_temperature
    (<= 100), a validator the schema does not show: checked by loading one."""
    import importlib

    module, name = model.rsplit(".", 1)
    numbers = schema_numbers(getattr(importlib.import_module(module), name), ("number",))
    assert nested in numbers  # the walk reaches into sections, dicts and `float | None`
    unbounded = [path for path, item in numbers.items()
                 if "maximum" not in item and "exclusiveMaximum" not in item
                 and not path.endswith("temperature")]
    assert unbounded == []
    with pytest.raises(ConfigError, match="loss.temperature: Value error, 1000 is neither|"
                                          "loss.temperature: 1000 is neither"):
        load_config(ROOT / "configs" / "train_tiny.yaml", ["loss.temperature=1000"])


def test_decay_weights_and_rewards_of_every_recipe_are_bounded():
    from trainer.loop import load_loop_config

    with pytest.raises(ConfigError, match=r"optim: lr \* weight_decay = 2: AdamW multiplies"):
        load_config(ROOT / "configs" / "train_tiny.yaml", ["optim.lr=0.5", "optim.weight_decay=4"])
    for override, field in [("dpo.beta=1000", "dpo.beta"), ("dpo.rpo_alpha=1e300", "dpo.rpo_alpha"),
                            ("dpo.kind_weights={benign_*: 1e300}", "dpo.kind_weights.benign_*"),
                            ("dpo.source_weights={negative: 1e300}", "dpo.source_weights.negative")]:
        with pytest.raises(ConfigError, match=f"{re.escape(field)}: Input should be less than"):
            load_config(ROOT / "configs" / "dpo_tiny.yaml", [override])
    for override, field in [("ppo.reward.success=-1e300", "ppo.reward.success"),
                            ("ppo.reward.penalties={truncated: 1e300}",
                             "ppo.reward.penalties.truncated"),
                            ("ppo.clip_ratio=100", "ppo.clip_ratio"),
                            ("ppo.kl_coef=1e300", "ppo.kl_coef")]:
        with pytest.raises(ConfigError, match=f"{re.escape(field)}: Input should be"):
            load_config(ROOT / "configs" / "ppo_tiny.yaml", [override])
    with pytest.raises(ConfigError, match="stop.min_gain: Input should be less than or equal to 1"):
        load_loop_config(ROOT / "configs" / "loop_tiny.yaml", ["stop.min_gain=5"])


@pytest.mark.parametrize("field", ["run_dir", "shards", "tokenizer", "model.init_from",
                                   "loss.teacher_model", "scaling.deepspeed_config"])
def test_an_empty_path_is_refused_naming_its_field(field):
    """`run_dir: ""` ended in Ray's `ArrowInvalid: URI has empty scheme` on the driver; an
    empty shards or tokenizer resolved to the working directory."""
    with pytest.raises(ConfigError, match=f"\n  {field}: String should have at least 1 "
                                          f"character$"):
        load_config(ROOT / "configs" / "train_tiny.yaml", [f"{field}=''"])


def test_ppo_sizes_are_bounded():
    with pytest.raises(ConfigError, match="ppo.max_turns: Input should be less than or equal to 256"):
        load_config(ROOT / "configs" / "ppo_tiny.yaml", ["ppo.max_turns=1000000"])
    with pytest.raises(ConfigError, match="ppo.reward.success: Input should be a finite number"):
        load_config(ROOT / "configs" / "ppo_tiny.yaml", ["ppo.reward.success=.inf"])
    with pytest.raises(ConfigError, match="ppo.task_seed: Input should be less than or equal "
                                          "to 9223372036854775807"):
        load_config(ROOT / "configs" / "ppo_tiny.yaml", ["ppo.task_seed=100000000000000000000000"])


def test_fit_refuses_a_tokenizer_directory_without_a_tokenizer_before_ray(tmp_path, capsys,
                                                                          monkeypatch):
    import trainer.fit
    from trainer.__main__ import main

    def refuse(*args, **kwargs):  # a guard, not a fake: the check must come before Ray
        raise AssertionError("reached Ray: the tokenizer was not checked first")

    monkeypatch.setattr(trainer.fit, "init_ray", refuse)

    (tmp_path / "tok").mkdir()
    assert main(["fit", "--config", str(ROOT / "configs" / "train_tiny.yaml"),
                 "--set", f"tokenizer={tmp_path / 'tok'}", "--set", f"run_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"cannot train: tokenizer {tmp_path / 'tok'} has no tokenizer.json " \
                          f"(build one: scripts/build_tokenizer.py)"
    (tmp_path / "tok" / "tokenizer.json").write_text("{not json")
    assert main(["fit", "--config", str(ROOT / "configs" / "train_tiny.yaml"),
                 "--set", f"tokenizer={tmp_path / 'tok'}", "--set", f"run_dir={tmp_path / 'run'}"]) == 2
    assert "cannot be used: Exception" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_missing_start_checkpoint_is_named_before_ray(tmp_path, capsys, monkeypatch):
    """`model.init_from` that is no checkpoint or run directory: Transformers would take it
    for a hub id inside a worker; refused on the driver, naming the field."""
    import trainer.fit
    from trainer.__main__ import main

    monkeypatch.setattr(trainer.fit, "init_ray", lambda *a, **k: pytest.fail("reached Ray"))
    assert main(["fit", "--config", str(ROOT / "configs" / "dpo_tiny.yaml"),
                 "--set", f"model.init_from={tmp_path / 'none'}"]) == 2
    assert capsys.readouterr().err.strip() == (f"cannot train: model.init_from: no checkpoint "
                                               f"(config.json) in {tmp_path / 'none'} or its "
                                               f"checkpoint_* dirs")


def test_a_failed_training_is_one_line_naming_the_first_workers_cause():
    """Ray's WorkerGroupError text is a truncated traceback ending in retry advice; the CLI
    and the loop say the cause (`trainer.fit.failure_cause`), here built from Ray's own classes."""
    from ray.exceptions import RayTaskError
    from ray.train import ControllerError, WorkerGroupError

    from trainer.fit import failure_cause
    from trainer.loop.run import PhaseFailed

    advice = "Failed to reading batches after 1/10 attempts.\nTo change retry attempts, ..."
    task_error = RayTaskError("read", "Traceback ...", OSError(
        f"ZSTD decompression failed: Data corruption detected\n{advice}"))
    failed = WorkerGroupError("Training failed due to worker errors: ... (Output truncated)",
                              {1: ValueError("rank 1 saw it later"), 0: task_error})
    assert failure_cause(failed) == "OSError: ZSTD decompression failed: Data corruption detected"
    assert str(PhaseFailed(0, "train", failed)) == (
        "round 0, phase train: OSError: ZSTD decompression failed: Data corruption detected "
        "(rerun the same command to continue from here)")
    assert failure_cause(ControllerError(RuntimeError("placement group timed out\nmore"))) \
        == "RuntimeError: placement group timed out"


def test_a_second_fit_into_a_held_run_dir_is_refused_naming_the_holder(tmp_path, capsys,
                                                                       monkeypatch,
                                                                       tiny_tokenizer_dir):
    """Two fits in one run directory would interleave checkpoints and metrics: the second is
    refused before Ray, naming the first; once the first is gone (killed: the kernel frees
    its flock) the directory can be taken again."""
    import trainer.fit
    from tests.datagen.helpers import start_lock_holder
    from trainer.__main__ import main

    monkeypatch.setattr(trainer.fit, "init_ray", lambda *a, **k: pytest.fail("reached Ray"))
    tokenizer = tiny_tokenizer_dir
    run_dir = tmp_path / "run"
    holder = start_lock_holder(run_dir, "f" * 16, "first-fit")
    try:
        argv = ["fit", "--config", str(ROOT / "configs" / "train_tiny.yaml"),
                "--set", f"tokenizer={tokenizer}", "--set", f"run_dir={run_dir}"]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"cannot train: {run_dir} is in use by another trainer run (pid "
                              f"{holder.pid} on ") and "first-fit" in err, err
    finally:
        holder.kill()
        holder.wait()
    cfg = trainer.fit.absolute_paths(load_config(ROOT / "configs" / "train_tiny.yaml",
                                                 [f"tokenizer={tokenizer}", f"run_dir={run_dir}"]))
    with trainer.fit.run_dir_lock(cfg):
        assert (run_dir / "_run.lock").exists()
    assert not (run_dir / "_run.lock").exists()


def test_an_address_where_no_ray_answers_fails_in_seconds(tmp_path, capsys, monkeypatch,
                                                           tiny_tokenizer_dir):
    """`ray.init` alone retried for minutes; the trainer checks the address as datagen does."""
    import time

    import ray

    from trainer.__main__ import main

    # in the full suite this process is connected to the session's head; the check must run
    # as in a fresh `trainer fit` process (it raises before ray.init, so nothing is replaced)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    started = time.monotonic()
    assert main(["fit", "--config", str(ROOT / "configs" / "train_tiny.yaml"),
                 "--set", f"tokenizer={tiny_tokenizer_dir}", "--set", f"run_dir={tmp_path / 'run'}",
                 "--set", "ray_address=127.0.0.1:1"]) == 2
    assert time.monotonic() - started < 30
    assert capsys.readouterr().err.startswith("cannot train: cannot reach a Ray cluster at "
                                              "127.0.0.1:1 (--address / RAY_ADDRESS): ")


def test_ppo_episodes_in_flight_stay_within_what_the_rollouts_play():
    """tasks_per_iteration x group_size becomes the policy teacher's batch size and episodes in
    flight (trainer/rl/rollout.py), which datagen bounds: refused at load, not in the worker."""
    with pytest.raises(ConfigError, match=r"ppo: tasks_per_iteration x group_size "
                                          r"= 131,072 episodes in flight per worker, more than "
                                          r"65,536"):
        load_config(ROOT / "configs" / "ppo_tiny.yaml",
                    ["ppo.tasks_per_iteration=1024", "ppo.group_size=128"])
    from trainer.rl.rollout import teacher_config

    cfg = load_config(ROOT / "configs" / "ppo_tiny.yaml",
                      ["ppo.tasks_per_iteration=512", "ppo.group_size=128"])
    assert teacher_config(cfg, "checkpoint").hf.max_batch_size == 65_536
