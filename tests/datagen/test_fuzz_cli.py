"""Fuzzing what a user can hand the CLI (issue 12): YAML configs valid-looking and broken
(wrong types, huge numbers, NaN/inf, deep nesting, unicode, non-UTF-8 bytes, unknown fields,
environment and module names, YAML syntax in `--set`) and argv for `datagen generate / verify /
inspect` (paths that are files, missing, foreign, damaged). Whatever comes in: an exit code
0/1/2 or argparse's exit 2, one `datagen: ...` line for a user error, no traceback, within a
time and memory budget; a config that validates is one JSON carries unchanged (what the chunk
workers and the manifest receive).

How the budget is kept: most examples call `load_config` or `main(argv)` in this process;
a generate whose config is valid stops where the run would contact Ray (`ReachedRay`, a guard
like tests/datagen/test_cli_errors.py's, after the lock, the claim of OUT and the chunk plan).
A handful run the real CLI in a subprocess (non-UTF-8 argv bytes, an unreachable Ray address)
with a wall-clock timeout and their peak RSS measured, and one odd-but-valid config is
generated for real on the session's Ray head, then verified and inspected under fuzzed argv.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import orjson
import polars as pl
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import datagen.pipeline.driver
from datagen.pipeline.cli import main
from datagen.config import (ConfigError, GenerateConfig, fingerprint, load_config,
                            parse_override, public_dump)
from tests.conftest import ROOT

FUZZ = settings(max_examples=250, deadline=timedelta(seconds=5), derandomize=False,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
LOAD_PEAK_BYTES = 64 << 20     # Python allocations of one load_config
RSS_GROWTH_BYTES = 512 << 20   # the whole in-process fuzz
SUBPROCESS_RSS_BYTES = 1 << 30
SUBPROCESS_TIMEOUT_S = 90

# Names that import only harmless modules: a random name could import any module on the path.
MODULES = ["tests.datagen.toy_envs", "fuzz_no_such_module", ".foo", "", "json", "a..b", "a\x00b"]
ENV_NAMES = ["sql", "fs", "enterprise", "toy_counter", "SQL", "sql ", "nosuch", ":", "a:b:c",
             "tests.datagen.toy_envs:CounterEnv", "json:loads", ".foo:Bar", "datagen.envs:Nope"]
HUGE_INTS = [2**63 - 1, 2**63, -2**63 - 1, 2**64, 10**29, 10**300]
ODD_FLOATS = [float("nan"), float("inf"), float("-inf"), 1e308, 5e-324, -0.0]
# YAML syntax a hand-edited file or a --set value can carry
YAML_FRAGMENTS = ["[", "]", "{", "}", "&a", "*a", "*nosuch", "!!binary /w==", "!!set {a}",
                  "!!python/object/apply:os.system [id]", "!!float", "? ", "<<: *a", "|\n  x",
                  "\t", "%YAML 1.1\n---\n", "---\n", "...\n", "'", '"', "\\ud800", "#", ": ",
                  "- ", "~", "0x1F", "1_000", "0o17", ".nan", "-.inf", "2001-12-14", "é",
                  "\u202e", "🙂", "\ufeff"]
OVERRIDE_KEYS = ["seed", "num_trajectories", "chunk_size", "out", "overwrite", "progress",
                 "teacher.name", "teacher.backend", "teacher.sampling.seed",
                 "teacher.sampling.temperature", "teacher.openai.base_url", "envs", "envs.0.name",
                 "negatives.kinds", "critics.inject_rate", "worker_resources.gpu", "seed.x",
                 "nosuch", "", ".", "a..b", "teacher", "tokenizer"]


class ReachedRay(Exception):
    """The run got past every check to where it would contact Ray."""


@contextmanager
def stop_before_ray():
    def refuse(*args, **kwargs):
        raise ReachedRay()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datagen.pipeline.driver, "init_ray", refuse)
        yield


# strategies -------------------------------------------------------------------------------

text = st.text(st.characters(codec=None, exclude_categories=()), max_size=16)  # surrogates too
scalars = (st.none() | st.booleans() | st.integers() | st.sampled_from(HUGE_INTS)
           | st.floats() | st.sampled_from(ODD_FLOATS) | text | st.binary(max_size=6))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(text, inner, max_size=3), max_leaves=8)
# where a list of strings would be imported as module names: no lists
no_lists = values.filter(lambda value: not isinstance(value, list))


def numbers(valid: list, keys: bool = False) -> st.SearchStrategy:
    """A number field's value: valid, extreme, or of the wrong type (hashable ones for keys)."""
    wrong = [0, -1, "many", "1e3", 1.5, True] + ([] if keys else [[], {}])
    return (st.sampled_from(valid) | st.sampled_from(HUGE_INTS + ODD_FLOATS)
            | st.sampled_from(wrong))


def config_docs(small: bool) -> st.SearchStrategy:
    """Config mappings: known fields with plausible, wrong or extreme values, unknown fields.
    `small`: valid counts stay tiny (a valid config may be planned, never run)."""
    counts = [1, 3, 7] if small else [1, 1000, 10**9, 10**10, 10**10 + 1]
    env = st.fixed_dictionaries({"name": st.sampled_from(ENV_NAMES) | text.map(
        lambda s: "fuzz_" + s.replace(":", "_"))}, optional={"weight": numbers([1, 0.5, 1e300])})
    openai = st.fixed_dictionaries({"base_url": st.sampled_from(
        ["http://127.0.0.1:9/v1", "http://u:pw-secret@h/v1", "https://h/v1?key=abc", ""]) | text,
        "model": st.just("m") | values}, optional={
        "extra_body": st.dictionaries(st.sampled_from(["api_key", "top_k", "nested"]), values),
        "timeout_s": numbers([1.0, 30]), "max_concurrency": numbers([1, 4]),
        "api_key_env": st.sampled_from(["HOME", "NO_SUCH_VAR", "", "A=B", "\x00"]) | values})
    teacher = st.fixed_dictionaries({}, optional={
        "backend": st.sampled_from(["oracle", "hf", "openai", "vllm", "gpt"]) | values,
        "name": text | values, "openai": openai | values,
        "sampling": st.fixed_dictionaries({}, optional={
            "temperature": numbers([0.0, 0.7]), "seed": numbers([0, 1]),
            "logit_bias": st.dictionaries(numbers([1, 5], keys=True), numbers([-100.0, 1.0]),
                                          max_size=2),
            "stop": st.lists(text, max_size=2)}) | values,
        "episode": st.fixed_dictionaries({}, optional={
            "max_turns": numbers([1, 8]), "system_prompt": text | values}) | values})
    fields = {
        "num_trajectories": numbers(counts), "seed": numbers([0, 1, 2**63 - 1]),
        "chunk_size": numbers([1, 2, 1000]), "envs": st.lists(env, max_size=3) | no_lists,
        "env_modules": st.lists(st.sampled_from(MODULES), max_size=2) | no_lists,
        "teacher": teacher | values,
        "negatives": st.fixed_dictionaries({}, optional={
            "enabled": st.booleans() | values, "kinds": st.lists(st.sampled_from(
                ["type_error", "logical_error", "nosuch"]), max_size=2)}) | values,
        "critics": st.fixed_dictionaries({}, optional={
            "backend": st.sampled_from(["rule", "llm"]), "inject_rate": numbers([0, 0.5, 1]),
            "llm": values}) | values,
        "tokenizer": st.none() | text, "num_workers": numbers([0, 1]),
        "worker_resources": st.dictionaries(text, numbers([1, 0.5]), max_size=2),
        "worker_start_timeout_s": numbers([1.0, 300.0]),
    }
    unknown = st.dictionaries(text.filter(lambda k: k not in fields), values, max_size=2)
    return st.builds(lambda known, extra: {**known, **extra},
                     st.fixed_dictionaries({}, optional=fields), unknown | st.just({}))


def _dump(doc: dict) -> bytes:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False).encode("utf-8",
                                                                            "surrogatepass")


@st.composite
def config_bytes(draw, small: bool = False) -> bytes:
    """A config file: a dumped mapping, then maybe broken the way files get broken."""
    raw = _dump(draw(config_docs(small)))
    damage = draw(st.sampled_from(["none", "none", "cut", "insert", "bytes", "nest", "bomb",
                                   "latin1", "scalar"]))
    at = draw(st.integers(0, len(raw)))
    event(f"damage {damage}")
    if damage == "cut":
        raw = raw[:at]
    elif damage == "insert":
        raw = raw[:at] + draw(st.sampled_from(YAML_FRAGMENTS)).encode() + raw[at:]
    elif damage == "bytes":
        raw = raw[:at] + draw(st.binary(min_size=1, max_size=4)) + raw[at:]
    elif damage == "nest":
        depth = draw(st.sampled_from([30, 40, 300, 5000]))
        raw += f"teacher:\n  name: {'[' * depth}{']' * depth}\n".encode()
    elif damage == "bomb":
        raw = b"a: &a [0,0,0,0,0,0,0,0,0,0]\n" + b"".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n".encode()
            for i in range(draw(st.integers(1, 7))))
    elif damage == "latin1":
        raw = raw.decode("utf-8", "replace").encode("latin-1", "replace")
    elif damage == "scalar":
        raw = draw(st.sampled_from([b"42\n", b"- a\n", b"", b"~\n", b"'x'\n"]))
    return raw


override_values = st.sampled_from(YAML_FRAGMENTS) | text | values.map(
    lambda v: yaml.safe_dump(v, default_flow_style=True).strip())
overrides = st.builds(lambda key, sep, value: f"{key}{sep}{value}",
                      st.sampled_from(OVERRIDE_KEYS) | text,
                      st.sampled_from(["=", "=", "", " = "]), override_values)
# For runs that get as far as planning: no key that moves OUT (a random `out` would land in the
# working directory) or makes the plan big (a million chunks take 7 s to list).
run_overrides = st.builds(lambda key, value: f"{key}={value}", st.sampled_from(
    [k for k in OVERRIDE_KEYS if k not in ("out", "num_trajectories", "chunk_size")]),
    override_values)


# checks -----------------------------------------------------------------------------------

def _check_valid(config: GenerateConfig) -> None:
    """What a run does with a valid config works: fingerprint, the public dump, the JSON the
    workers get (same config back), the dump into _run.json and the card."""
    fingerprint(config)
    dump = public_dump(config)
    orjson.dumps(dump)
    yaml.safe_dump(dump)
    again = GenerateConfig.model_validate_json(config.model_dump_json())
    assert again.model_dump(mode="json") == config.model_dump(mode="json")


def _load_checked(path: Path | None, items: list[str]) -> None:
    tracemalloc.start()
    try:
        try:
            config = load_config(path, dict(parse_override(item) for item in items))
        except ConfigError as exc:
            assert str(exc) and "Traceback" not in str(exc)
            event("config error")
            return
        _check_valid(config)
        event("valid config")
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < LOAD_PEAK_BYTES, f"load_config allocated {peak:,} bytes"


@pytest.fixture
def rss_budget():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    yield
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert grown < RSS_GROWTH_BYTES, f"peak RSS grew by {grown:,} bytes"


@FUZZ
@given(raw=config_bytes(), items=st.lists(overrides, max_size=3))
def test_load_config_takes_any_file_and_overrides(tmp_path, rss_budget, raw, items):
    path = tmp_path / "config.yaml"
    path.write_bytes(raw)
    _load_checked(path, items)


def _run_main(argv: list[str], capsys) -> tuple[object, str]:
    """main(argv) -> (exit code or "ray"), stderr. Anything but 0/1/2, argparse's exit 2 or
    the Ray guard fails the test, and so does a traceback or a multi-line user error."""
    started = time.perf_counter()
    with stop_before_ray():
        try:
            outcome = main(argv)
        except SystemExit as exc:
            outcome = exc.code
            assert outcome in (0, 2), argv
        except ReachedRay:
            outcome = "ray"
    out, err = capsys.readouterr()
    event(f"outcome {outcome}")
    assert outcome in (0, 1, 2, "ray"), (argv, outcome, err)
    assert "Traceback" not in out + err, (argv, err)
    if outcome == 2 and err.startswith("datagen: "):
        assert err.count("\ndatagen: ") == 0, err
    assert time.perf_counter() - started < 30, argv
    return outcome, err


@st.composite
def generate_argv(draw, root: Path) -> list[str]:
    """`generate` with fuzzed options; paths made for this example under `root`."""
    work = Path(tempfile.mkdtemp(dir=root))
    argv = ["generate"]
    config = draw(st.sampled_from(["none", "file", "file", "missing", "dir"]))
    if config == "file":
        (work / "c.yaml").write_bytes(draw(config_bytes(small=True)))
    if config != "none":
        argv += ["--config", str(work / ("c.yaml" if config in ("file", "missing") else ""))]
        if config == "missing":
            (work / "c.yaml").unlink(missing_ok=True)
    out = draw(st.sampled_from(["fresh", "fresh", "file", "under-file", "foreign", "readonly"]))
    (work / "file").write_text("x")
    (work / "foreign").mkdir()
    (work / "foreign" / "notes.txt").write_text("mine")
    (work / "readonly").mkdir(mode=0o555)
    target = {"fresh": work / "out", "file": work / "file", "under-file": work / "file" / "o",
              "foreign": work / "foreign", "readonly": work / "readonly" / "o"}[out]
    argv += ["--out", str(target), "--set", "num_trajectories=3"]
    for option in draw(st.lists(st.sampled_from(["count", "set", "overwrite", "quiet", "junk"]),
                                max_size=4)):
        if option == "count":
            argv += ["--num-trajectories", draw(st.sampled_from(
                ["2", "0", "-5", "abc", "1e3", str(10**12), "", "9" * 5000]))]
        elif option == "set":
            argv += ["--set", draw(run_overrides)]
        elif option in ("overwrite", "quiet"):
            argv.append({"overwrite": "--overwrite", "quiet": "--no-progress"}[option])
        else:
            # (no stray --out: with "extra" after it OUT would be the working directory's)
            argv.append(draw(st.sampled_from(["--bogus", "--set", "-x", "extra", "-h"])))
    return argv


@settings(FUZZ, max_examples=200)
@given(data=st.data())
def test_generate_argv_ends_in_an_exit_code_or_reaches_ray(tmp_path, capsys, rss_budget, data):
    argv = data.draw(generate_argv(tmp_path))
    outcome, err = _run_main(argv, capsys)
    if outcome == 2 and "--out" in argv:
        out = Path(argv[argv.index("--out") + 1])
        if out.name == "foreign":
            assert (out / "notes.txt").read_text() == "mine", "a foreign OUT was touched"


# subprocesses: the real CLI as the OS starts it -----------------------------------------------

def _peak_rss(pid: int) -> int:
    """The process's own high-water RSS in bytes (VmHWM), 0 once it has exited. wait4's
    ru_maxrss would not do: Python starts children with vfork, and exec records the parent's
    (pytest's) high-water mark as the child's."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _datagen(argv: list[bytes]) -> tuple[int, str, int]:
    """Run `python -m datagen ARGV` (argv as bytes, as a shell passes them); returns the exit
    code, stderr and the child's peak RSS in bytes (sampled every 20 ms while it runs)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable.encode(), b"-m", b"datagen", *argv], cwd=ROOT,
                                stdout=out, stderr=err, env={**os.environ,
                                                             "PYTHONPATH": str(ROOT)})
        deadline, rss = time.monotonic() + SUBPROCESS_TIMEOUT_S, 0
        while (done := os.wait4(proc.pid, os.WNOHANG))[0] == 0:
            rss = max(rss, _peak_rss(proc.pid))
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                pytest.fail(f"datagen {argv!r} ran past {SUBPROCESS_TIMEOUT_S} s")
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(done[1])
        err.seek(0)
        return proc.returncode, err.read().decode("utf-8", "replace"), rss


@pytest.mark.parametrize("argv, expected", [
    ([b"generate", b"--out", b"OUT/caf\xe9", b"--address", b"127.0.0.1:9"], "out:"),
    ([b"generate", b"--set", b"teacher.name=caf\xe9", b"--out", b"OUT/o"], "not UTF-8"),
    ([b"generate", b"--set", b"teacher.name=" + b"[" * 100_000, b"--out", b"OUT/o"],
     "nesting depth"),
    ([b"generate", b"--set", b"teacher.openai.extra_body.api_key=sk-fuzz-0123456789",
      b"--set", b"teacher.backend=openai", b"--set", b"teacher.openai.base_url=http://u:pw@h",
      b"--set", b"teacher.openai.model=m", b"--out", b"OUT/o", b"--address", b"127.0.0.1:9"],
     "cannot reach a Ray cluster at 127.0.0.1:9"),
])
def test_the_cli_as_a_shell_starts_it(tmp_path, argv, expected):
    argv = [part.replace(b"OUT", os.fsencode(tmp_path / "out")) for part in argv]
    rc, err, rss = _datagen(argv)
    assert rc == 2, err
    assert err.startswith("datagen: ") and len(err.strip().splitlines()) == 1, err
    assert expected in err, err
    assert rss < SUBPROCESS_RSS_BYTES, f"peak RSS {rss:,} bytes"
    if "cannot reach a Ray cluster" in expected:  # it got as far as claiming OUT
        assert orjson.loads((tmp_path / "out" / "o" / "_run.json").read_bytes())["config"][
            "teacher"]["openai"]["extra_body"] == {"api_key": "[redacted]"}
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert b"sk-fuzz-0123456789" not in path.read_bytes() and b":pw@" not in (
                path.read_bytes()), path


@settings(max_examples=3, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_generate_argv_in_a_subprocess(tmp_path, data):
    """The same argv as above, without the guard: a valid config goes all the way to the
    Ray address, which refuses the connection."""
    argv = data.draw(generate_argv(tmp_path)) + ["--address", "127.0.0.1:9"]
    rc, err, rss = _datagen([os.fsencode(part) for part in argv])
    event(f"exit {rc}")
    assert rc in (0, 2) and "Traceback" not in err, (argv, err)
    assert rss < SUBPROCESS_RSS_BYTES, f"peak RSS {rss:,} bytes"


# one real run of an odd but valid config, then verify / inspect with fuzzed argv ------------

ODD_CONFIG = {
    "num_trajectories": 3, "chunk_size": 1, "seed": 2**63 - 1,
    "envs": [{"name": "sql", "weight": 1e-300}, {"name": "fs", "weight": 1e300},
             {"name": "tests.datagen.toy_envs:CounterEnv", "weight": 1e300}],
    "teacher": {"name": "教師 🙂 \u202e\x00\ttab", "episode": {"system_prompt": "ÿ\u2028 \\ud800"}},
    "negatives": {"kinds": ["logical_error"]}, "critics": {"inject_rate": 1.0},
    "progress": False,
}


@pytest.fixture(scope="module")
def real_out(ray_head, tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-real")
    (root / "odd.yaml").write_text(yaml.safe_dump(ODD_CONFIG, allow_unicode=True))
    rc = main(["generate", "--config", str(root / "odd.yaml"), "--out", str(root / "out")])
    assert rc == 0
    return root / "out"


VARIANTS = ("real", "missing", "file", "empty", "truncated", "bad-manifest", "no-markers",
            "bad-marker", "outside-path", "other-columns")


def _variant(name: str, real: Path, work: Path) -> Path:
    """An OUT to point verify/inspect at: a copy of the real one, damaged or not, or a path
    that is no dataset."""
    path = work / name
    if name == "file":
        path.write_text("not a dataset")
    elif name == "empty":
        path.mkdir()
    if name in ("missing", "file", "empty"):
        return path
    shutil.copytree(real, path)
    shard = sorted((path / "trajectories").glob("*.parquet"))[0]
    if name == "truncated":
        shard.write_bytes(shard.read_bytes()[:100])
    elif name == "bad-manifest":
        (path / "manifest.json").write_bytes(b'{"shards": 1, "fingerprint": "\xff')
    elif name == "no-markers":
        shutil.rmtree(path / "_chunks")
    elif name == "bad-marker":
        next((path / "_chunks").iterdir()).write_bytes(b"[1, 2")
    elif name == "outside-path":
        manifest = orjson.loads((path / "manifest.json").read_bytes())
        manifest["shards"]["trajectories"][0]["file"] = "../../etc/passwd"
        (path / "manifest.json").write_bytes(orjson.dumps(manifest))
    elif name == "other-columns":  # a valid Parquet file with the recorded size and rows
        manifest = orjson.loads((path / "manifest.json").read_bytes())
        other = path / manifest["shards"]["negatives"][0]["file"]
        manifest["shards"]["trajectories"][0] = manifest["shards"]["negatives"][0] | {
            "file": str(shard.relative_to(path))}
        shard.write_bytes(other.read_bytes())
        (path / "manifest.json").write_bytes(orjson.dumps(manifest))
    return path


@settings(max_examples=80, deadline=timedelta(seconds=10),
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_verify_and_inspect_take_any_out(real_out, tmp_path, capsys, rss_budget, data):
    target = data.draw(st.sampled_from(VARIANTS))
    command = data.draw(st.sampled_from(["verify", "inspect"]))
    argv = [command, str(_variant(target, real_out, Path(tempfile.mkdtemp(dir=tmp_path))))]
    if command == "verify":
        argv += data.draw(st.lists(st.sampled_from(["--quick", "--repair"]), max_size=2,
                                   unique=True))
    else:
        argv += ["--samples", data.draw(st.sampled_from(
            ["0", "1", "-1", "100", str(2**64), str(10**30), "x", "9" * 5000]))]
        argv += ["--seed", data.draw(st.sampled_from(
            ["0", "7", str(2**64 - 1), "-1", str(2**64), "x", "1.5"]))]
    outcome, err = _run_main(argv, capsys)
    if target == "real" and outcome == 2 and not err.startswith("usage:"):
        pytest.fail(f"{argv}: {err}")  # only argparse may refuse the intact dataset


def test_the_odd_config_made_a_dataset_verify_accepts(real_out, capsys):
    assert main(["verify", str(real_out)]) == 0, capsys.readouterr().out
    assert main(["inspect", str(real_out), "--samples", "3"]) == 0
    assert "trajectories: 3 rows" in capsys.readouterr().out
    rows = pl.read_parquet(real_out / "trajectories" / "*.parquet")
    assert set(rows["teacher"]) == {ODD_CONFIG["teacher"]["name"]}, "the name, byte for byte"
    assert rows["success"].all() and set(rows["env"]) <= {"fs", "toy_counter"}
    stored = orjson.loads((real_out / "manifest.json").read_bytes())["config"]
    assert stored["teacher"]["name"] == ODD_CONFIG["teacher"]["name"]
    assert stored["seed"] == 2**63 - 1


@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_inspect_with_a_seed_polars_cannot_take(real_out, capsys, seed):
    """Found by this fuzz: polars' sample() raised OverflowError outside 0 .. 2^64-1."""
    with pytest.raises(SystemExit) as exit_info:
        main(["inspect", str(real_out), "--seed", seed])
    assert exit_info.value.code == 2
    assert "must be between 0 and 2^64-1" in capsys.readouterr().err
