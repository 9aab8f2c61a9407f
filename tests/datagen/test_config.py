"""Configs fail before work starts, naming the field and the allowed values."""

from __future__ import annotations

import re

import pytest

from datagen.config import ConfigError, GenerateConfig, fingerprint, load_config, parse_override


def _write(tmp_path, text: str):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_demo_config_loads():
    config = load_config("configs/demo.yaml")
    assert [env.name for env in config.envs] == ["sql", "fs", "enterprise"]


@pytest.mark.parametrize("text, expected", [
    ("num_trajectoriez: 5\n", ["num_trajectoriez: unknown field"]),
    ("num_trajectories: many\n", ["num_trajectories:", "integer"]),
    ("num_trajectories: 0\n", ["num_trajectories:", "greater than or equal to 1"]),
    # pydantic's lax mode read `true` as 1: chunks of one trajectory
    ("chunk_size: true\n", ["chunk_size:", "a number is expected, not true/false"]),
    ("teacher:\n  sampling:\n    temperature: true\n", ["teacher.sampling.temperature:",
                                                          "a number is expected"]),
    ("envs:\n  - name: sql\n  - name: nosuch\n", ["envs.1.name:", "unknown environment 'nosuch'",
                                                   "allowed:", "enterprise, fs, sql"]),
    ("envs:\n  - name: sql\n    weight: -1\n", ["envs.0.weight:"]),
    ("teacher:\n  backend: gpt\n", ["teacher.backend:", "'oracle'"]),
    ("env_modules: [no.such.module]\n", ["env_modules:", "cannot import 'no.such.module'"]),
    ("- just a list\n", ["must be a YAML mapping"]),
    # bounds (issue 12): each used to pass and fail later with a MemoryError or a traceback
    ("num_trajectories: 1000000000000\n", ["num_trajectories:", "less than or equal to "
                                           "10000000000"]),
    ("num_trajectories: 10000000000\nchunk_size: 1\n", ["10,000,000,000 in chunks of 1 is",
                                                        "over the limit of 1,000,000",
                                                        "raise chunk_size"]),
    ("seed: 100000000000000000000000000000\n", ["seed:", "less than or equal to "
                                                "9223372036854775807"]),
    ("seed: -1\n", ["seed:", "greater than or equal to 0"]),
    ("envs:\n  - name: sql\n    weight: .inf\n", ["envs.0.weight:", "finite number"]),
    ("envs:\n  - name: sql\n    weight: .nan\n", ["envs.0.weight:", "finite number"]),
    ("envs:\n  - name: sql\n    weight: 0\n", ["envs.0.weight:", "0 is outside "
                                                   "[2.22507e-308, 1.79769e+308]"]),
    ("envs:\n  - {name: sql, weight: 1e308}\n  - {name: fs, weight: 1e308}\n",
     ["envs:", "add up to infinity"]),
    ("env_modules: ['.foo']\n", ["env_modules:", "cannot import '.foo'", "TypeError"]),
    ("envs:\n  - name: .foo:Bar\n", ["envs.0.name:", "unknown environment '.foo:Bar'"]),
    ("out: ''\n", ["out:", "at least 1 character"]),
    ("seed: [1\n", ["not valid YAML", "line 2"]),
    ("seed: !!python/object/apply:os.system [echo hi]\n", ["not valid YAML",
                                                          "could not determine a constructor"]),
    # found by tests/datagen/test_fuzz_cli.py: each used to pass validation and crash later
    # (fingerprint, worker transport) or to raise a traceback while parsing
    ("teacher:\n  name: " + "[" * 5000 + "]" * 5000 + "\n", ["not valid YAML",
                                                          "exceeded maximum nesting depth"]),
    ("teacher:\n  episode:\n    system_prompt: " + "[" * 40 + "]" * 40 + "\n",
     ["nested deeper than 32 levels"]),
    ("seed: " + "1" * 5000 + "\n", ["not valid YAML", "Exceeds the limit (4300 digits)"]),
    ("teacher:\n  sampling: {seed: 100000000000000000000000000000}\n",
     ["teacher.sampling.seed: Input should be less than or equal to 9223372036854775807"]),
    ("teacher:\n  openai: {base_url: u, model: m, extra_body: {n: 100000000000000000000}}\n"
     "  backend: openai\n", ["teacher.openai.extra_body.n: an integer outside the 64-bit range"]),
    ("teacher:\n  sampling: {temperature: .inf}\n",
     ["teacher.sampling.temperature: inf is not a finite number"]),
    # divided by in float32: inf, then NaN probabilities in the hf teacher and the trainer
    ("teacher:\n  sampling: {temperature: 1.0e-300}\n",
     ["teacher.sampling.temperature: 1e-300 is neither 0 (greedy) nor within [1e-05, 100]"]),
    ("teacher:\n  sampling: {max_tokens_per_turn: 100000000000}\n",
     ["teacher.sampling.max_tokens_per_turn: Input should be less than or equal to 1048576"]),
    ("teacher:\n  sampling: {logit_bias: {1: .nan}}\n",
     ["teacher.sampling.logit_bias.1: nan is not a finite number"]),
    ("teacher: {backend: openai, openai: {base_url: u, model: m, timeout_s: .inf}}\n",
     ["teacher.openai.timeout_s: inf is not a finite number"]),
    ("teacher: {backend: openai, openai: {base_url: u, model: m, extra_body: {a: !!binary /w==}}}"
     "\n", ["teacher.openai.extra_body.a: binary data that is not UTF-8 text (byte 0xff)"]),
    ("teacher: {backend: vllm, vllm: {model: m, engine_kwargs: {a: [1, 100000000000000000000]}}}"
     "\n", ["teacher.vllm.engine_kwargs.a.1: an integer outside the 64-bit range"]),
    # negative kinds are the mutators' registry's names; extra_kinds was folded into kinds
    ("negatives:\n  kinds: [type_error, typo_error]\n", [
        "negatives.kinds:", "unknown negative kind 'typo_error'", "registry has: type_error, "
        "hallucinated_key, logical_error, wrong_function, missing_required"]),
    ("negatives:\n  extra_kinds: true\n", ["negatives:", "extra_kinds was folded into kinds"]),
    ("negatives:\n  kinds: []\n", ["negatives.kinds:", "at least 1 item"]),
    ("critics:\n  kinds: [wrong_function, wrong_function]\n", ["critics.kinds:",
                                                              "listed twice"]),
    # 10 aliases of 10 aliases ... : a 1 KB file that expands to 10^8 values
    ("a: &a [0,0,0,0,0,0,0,0,0,0]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
        for i in range(7)), ["over 100,000 values once YAML aliases are expanded"]),
])
def test_bad_configs_name_the_field(tmp_path, text, expected):
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text))
    for fragment in expected:
        assert fragment in str(info.value)


@pytest.mark.parametrize("resources, expected", [
    ("{CPU: 1}", "worker_resources: 'CPU': CPU is not a custom resource (a chunk worker takes 1"),
    ("{GPU: 1}", "'GPU': GPU is not a custom resource"),
    ("{memory: 100}", "'memory': memory is not a custom resource"),
    ("{object_store_memory: 1}", "'object_store_memory': object_store_memory is not a custom"),
    ("{bundle: 1}", "'bundle': bundle is not a custom resource"),
    ("{'': 1}", "worker_resources: '': a resource needs a name"),
    ("{datagen: 0.000001}", "'datagen': Ray counts resources in units of 0.0001"),
    ("{datagen: 0}", "'datagen': the amount must be finite and above 0"),
    ("{datagen: .inf}", "'datagen': the amount must be finite and above 0"),
])
def test_worker_resources_ray_would_refuse_fail_at_load(resources, expected):
    # each used to pass and raise a traceback when the first worker was created, after OUT
    # was set up (or, with an empty name, wait worker_start_timeout_s for it)
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_config(None, dict([parse_override(f"worker_resources={resources}")]))


def test_custom_worker_resources_load():
    config = load_config(None, {"worker_resources": {"datagen": 0.5, "bundle_pool": 2}})
    assert config.worker_resources == {"datagen": 0.5, "bundle_pool": 2}


def test_user_environment_by_module_and_by_path(tmp_path):
    config = load_config(_write(tmp_path, "env_modules: [tests.datagen.toy_envs]\n"
                                          "envs:\n  - name: toy_counter\n"))
    assert config.envs[0].name == "toy_counter"
    config = load_config(_write(tmp_path, "envs:\n  - name: tests.datagen.toy_envs:CounterEnv\n"))
    assert config.envs[0].name.endswith(":CounterEnv")


def test_overrides_and_fingerprint(tmp_path):
    path = _write(tmp_path, "num_trajectories: 10\n")
    key, value = parse_override("teacher.name=oracle-v2")
    config = load_config(path, {key: value, "seed": 4})
    assert config.teacher.name == "oracle-v2" and config.seed == 4
    # an override of null is applied (None used to mean "not given" and was dropped)
    with_tokenizer = _write(tmp_path, "tokenizer: some/dir\n")
    assert load_config(with_tokenizer, dict([parse_override("tokenizer=null")])).tokenizer is None
    with pytest.raises(ConfigError, match="out: Input should be a valid string"):
        load_config(path, {"out": None})
    base = GenerateConfig(num_trajectories=10)
    assert fingerprint(base) == fingerprint(base.model_copy(update={"out": "x", "num_workers": 3}))
    assert fingerprint(base) != fingerprint(GenerateConfig(num_trajectories=10, seed=1))
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("seed")


def test_one_error_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, "seed: -1\n"))
    assert "\n" not in str(info.value) and "seed:" in str(info.value)


def test_a_config_that_is_not_utf8_names_the_byte(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("teacher:\n  name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(byte 0xe9 at offset 20\)"):
        load_config(path)


def test_an_oversized_config_is_refused_before_parsing(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text("# padding\n" * 200_000)
    with pytest.raises(ConfigError, match="is over 1,048,576 bytes"):
        load_config(path)


@pytest.mark.parametrize("item, expected", [
    ("seed=[1", "override seed: not a YAML value: did not find expected ',' or ']'"),
    ("seed=!!python/object/apply:os.system [id]", "could not determine a constructor"),
    ("seed={a: 1", "override seed: not a YAML value"),
    ("seed=!!float", "override seed: not a YAML value: cannot be read (IndexError"),
    ("teacher.name=\udce9", "override teacher.name: not a YAML value: not UTF-8 text"),
    ("=3", "must look like key=value"),
])
def test_malformed_overrides_name_the_key(item, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)) as info:
        parse_override(item)
    assert "\n" not in str(info.value)


def test_kind_lists_default_to_the_mutators_registry():
    from mutators import KINDS, SPECS

    config = load_config(None)
    assert config.negatives.kinds == list(KINDS)
    assert config.critics.kinds == list(SPECS)
    extra = load_config(None, {"negatives.kinds": [*KINDS, "wrong_function"]})
    assert extra.negatives.kinds[-1] == "wrong_function"
    assert fingerprint(extra) != fingerprint(config)


# A key given twice: PyYAML kept the last value and dropped the first without a word -------

@pytest.mark.parametrize("text, expected", [
    ("num_trajectories: 40\nseed: 1\nchunk_size: 10\nseed: 2\n",
     "duplicate key seed (line 4; first given on line 2)"),
    ("teacher:\n  backend: oracle\n  name: a\n  name: b\n",
     "duplicate key teacher.name (line 4; first given on line 3)"),
    ("envs:\n  - name: sql\n  - name: fs\n    weight: 1\n    weight: 2\n",
     "duplicate key envs.1.weight (line 5; first given on line 4)"),
    ("seed: 1\n'seed': 2\n", "duplicate key seed (line 2; first given on line 1)"),  # one key
    ("teacher: {name: a, name: b}\n", "duplicate key teacher.name (line 1; first given on line 1)"),
])
def test_a_key_given_twice_is_refused_naming_it(tmp_path, text, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)) as info:
        load_config(_write(tmp_path, text))
    assert "\n" not in str(info.value)


def test_merge_keys_and_aliases_are_not_duplicates(tmp_path):
    """`<<` merges an anchored mapping, the mapping's own keys override it, and PyYAML takes
    `<<` more than once; an anchor used twice is one node. All load as before."""
    from datagen.config_files import read_yaml

    text = ("sampling: &base {temperature: 0.7, top_p: 0.9}\n"
            "extra: &more {max_tokens_per_turn: 64}\n"
            "teacher:\n  name: merged\n  sampling:\n    <<: *base\n    <<: *more\n"
            "    top_p: 0.5\n"
            "again: [*base, *base]\n")
    data = read_yaml(_write(tmp_path, text))
    assert data["teacher"]["sampling"] == {"temperature": 0.7, "top_p": 0.5,
                                           "max_tokens_per_turn": 64}
    assert data["again"] == [data["sampling"]] * 2
    config = load_config(_write(tmp_path, "teacher:\n  sampling: &s {top_p: 0.9}\n"
                                          "critics:\n  backend: llm\n  llm:\n"
                                          "    backend: openai\n    openai: {base_url: u, "
                                          "model: m}\n    sampling:\n      <<: *s\n"
                                          "      temperature: 0.1\n"))
    assert config.critics.llm.sampling.top_p == 0.9
    assert config.critics.llm.sampling.temperature == 0.1


def test_a_key_given_twice_in_an_override_value_is_refused():
    with pytest.raises(ConfigError, match=re.escape("override teacher: not a YAML value: "
                                                    "duplicate key name (line 1")):
        parse_override("teacher={name: a, name: b}")


def test_the_trainer_refuses_a_key_given_twice(tmp_path):
    from trainer.config import load_config as load_train_config

    path = _write(tmp_path, "run_dir: r\nshards: s\ntokenizer: t\nrun_dir: q\n")
    with pytest.raises(ConfigError, match=re.escape("duplicate key run_dir (line 4; first "
                                                    "given on line 1)")):
        load_train_config(path)


@pytest.fixture
def no_ray(monkeypatch):
    """A run that gets past the config checks fails the test instead of starting Ray."""
    import datagen.pipeline.driver

    def refuse(*args, **kwargs):
        raise AssertionError("the run reached Ray")

    monkeypatch.setattr(datagen.pipeline.driver, "init_ray", refuse)


def _generate(path, tmp_path, capsys) -> tuple[int, str]:
    from datagen.pipeline.cli import main

    code = main(["generate", "--config", str(path), "--out", str(tmp_path / "out")])
    return code, capsys.readouterr().err


def test_generate_reports_a_key_given_twice_as_a_config_error(tmp_path, capsys, no_ray):
    code, err = _generate(_write(tmp_path, "num_trajectories: 4\nseed: 1\nseed: 2\n"),
                          tmp_path, capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "duplicate key seed (line 3; first given on line 2)" in err
    assert not (tmp_path / "out").exists()


# Local tokenizer directories, checked before Ray starts ------------------------------------
# (a relative path that did not exist went to the workers as a hub repo id: 72 s of hub
# retries, then "no chunk worker can run this config" without the field)

@pytest.mark.parametrize("text, expected", [
    ("tokenizer: no_such_tokenizer_dir\n",
     "tokenizer: no_such_tokenizer_dir does not exist ({cwd}/no_such_tokenizer_dir: a relative "
     "path is read from the current directory); name a local Hugging Face tokenizer directory"),
    ('tokenizer: "a\\0b"\n', "tokenizer: a path cannot contain a NUL character"),
    ("tokenizer: a_file\n", "tokenizer: a_file is not a directory; name a local Hugging Face"),
    ("teacher: {backend: openai, openai: {base_url: u, model: m, token_ids: true, "
     "tokenizer: no_such_dir}}\n", "teacher.openai.tokenizer: no_such_dir does not exist"),
    ("critics:\n  backend: llm\n  llm: {backend: openai, openai: {base_url: u, model: m, "
     "tokenizer: ./nope}}\n", "critics.llm.openai.tokenizer: ./nope does not exist"),
    ('teacher: {backend: hf, hf: {model: "m\\0"}}\n',
     "teacher.hf.model: a path cannot contain a NUL character"),
    ('teacher: {backend: vllm, vllm: {model: m, tokenizer: "t\\0"}}\n',
     "teacher.vllm.tokenizer: a path cannot contain a NUL character"),
])
def test_a_tokenizer_that_is_no_local_directory_names_the_field(tmp_path, monkeypatch, text,
                                                                expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("not a tokenizer")
    with pytest.raises(ConfigError, match=re.escape(expected.format(cwd=tmp_path))) as info:
        load_config(_write(tmp_path, text))
    assert "\n" not in str(info.value)


def test_tokenizer_paths_that_can_work_still_load(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tok").mkdir()
    assert load_config(_write(tmp_path, "tokenizer: tok\n")).tokenizer == "tok"
    # an absolute path may be on storage only the workers mount: their preflight checks it
    assert load_config(None, {"tokenizer": "/shared/no/such/tok"}).tokenizer
    # hf and vllm models may be hub names where downloads work (teachers/config.py)
    hub = load_config(None, {"teacher": {"backend": "hf", "hf": {"model": "Qwen/Qwen2.5-0.5B"}}})
    assert hub.teacher.hf.model == "Qwen/Qwen2.5-0.5B"


def test_generate_refuses_a_missing_relative_tokenizer_before_ray(tmp_path, monkeypatch,
                                                                   capsys, no_ray):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, "num_trajectories: 4\nchunk_size: 2\nnum_workers: 1\n"
                            "progress: false\ntokenizer: no_such_tokenizer_dir\n")
    code, err = _generate(path, tmp_path, capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "tokenizer: no_such_tokenizer_dir does not exist" in err


def test_local_directory_fields_are_model_paths():
    from datagen.config import LOCAL_DIRECTORY_FIELDS, MODEL_PATH_FIELDS

    assert set(LOCAL_DIRECTORY_FIELDS) <= set(MODEL_PATH_FIELDS)
