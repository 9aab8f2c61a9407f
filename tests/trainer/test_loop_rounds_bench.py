"""benchmarks/loop_rounds.py: the student rollouts' turn budget can differ from the evaluation's
(`--student-max-turns`), and without it both follow `--max-turns` as before."""


from trainer.loop import load_loop_config
from tests.conftest import load_script

REQUIRED = ["--start", "ckpt", "--data", "out/demo", "--tokenizer", "tok", "--out", "runs/x"]


def _benchmark():
    return load_script("benchmarks/loop_rounds.py")


def _config(*extra):
    bench = _benchmark()
    args = bench.parse_args(REQUIRED + list(extra))
    return load_loop_config(args.config, bench.loop_overrides(args))


def test_rollout_turns_follow_max_turns_by_default():
    config = _config("--max-turns", "6")
    assert config.student.max_turns == 6
    assert config.eval.max_steps == 8


def test_student_max_turns_sets_the_rollouts_budget_alone():
    config = _config("--max-turns", "6", "--student-max-turns", "8", "--irr-tasks", "15")
    assert config.student.max_turns == 8
    assert config.eval.max_steps == 8  # the evaluation keeps --max-turns + 2
    assert config.eval.irr_tasks == 15
