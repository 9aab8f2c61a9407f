"""Input a user can get wrong ends in one clear line and exit code 2, never a traceback
(issue 12). Each case runs the real CLI (`main([...])`, or a subprocess where permissions or
another process are involved); none of them may reach Ray."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from datagen.pipeline.cli import main
from datagen.pipeline.shards import ShardStore
from tests.conftest import ROOT
from tests.datagen.helpers import start_lock_holder


@pytest.fixture(autouse=True)
def no_ray(monkeypatch):
    """Guard, not a fake: every case here must fail before a Ray cluster is contacted."""
    import datagen.pipeline.driver

    def refuse(*args, **kwargs):
        raise AssertionError("reached Ray: the error was not caught before the run")

    monkeypatch.setattr(datagen.pipeline.driver, "init_ray", refuse)


def _fails_clearly(capsys, argv: list[str], *fragments: str) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("datagen: ")
    for fragment in fragments:
        assert fragment in err, err
    return err


def _config(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "config.yaml"
    if isinstance(text, str):
        text = text.encode()
    path.write_bytes(text)
    return str(path)


def test_a_config_that_is_not_utf8(tmp_path, capsys):
    config = _config(tmp_path, b"seed: 1\nteacher:\n  name: caf\xe9\n")
    _fails_clearly(capsys, ["generate", "--config", config], "is not UTF-8 text", config)


def test_a_config_that_is_a_fifo_is_refused_not_waited_on(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    os.mkfifo(config)
    _fails_clearly(capsys, ["generate", "--config", str(config)], "not a regular file")


def test_a_relative_env_module(tmp_path, capsys):
    config = _config(tmp_path, "env_modules: ['.foo']\n")
    _fails_clearly(capsys, ["generate", "--config", config], "env_modules:",
                   "cannot import '.foo'")


@pytest.mark.parametrize("how", ["config", "set"])
def test_a_seed_beyond_64_bits(tmp_path, capsys, how):
    argv = ["generate", "--out", str(tmp_path / "out")]
    if how == "config":
        argv += ["--config", _config(tmp_path, f"seed: {10**29}\n")]
    else:
        argv += ["--set", f"seed={10**29}"]
    _fails_clearly(capsys, argv, "seed:", "less than or equal to 9223372036854775807")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value, problem", [("[1", "expected ',' or ']'"),
                                            ("!!python/object/apply:os.system [id]",
                                             "could not determine a constructor")])
def test_malformed_yaml_in_set(tmp_path, capsys, value, problem):
    _fails_clearly(capsys, ["generate", "--set", f"teacher.name={value}"],
                   "override teacher.name: not a YAML value", problem)


def test_num_trajectories_beyond_the_bound(capsys):
    _fails_clearly(capsys, ["generate", "--num-trajectories", str(10**12)],
                   "num_trajectories:", "less than or equal to 10000000000")


def test_an_out_that_is_a_file(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    _fails_clearly(capsys, ["generate", "--out", str(tmp_path / "file")],
                   "is a file, not a directory")
    _fails_clearly(capsys, ["generate", "--out", str(tmp_path / "file" / "out")],
                   f"cannot use {tmp_path / 'file' / 'out'}: Not a directory")


def test_a_corrupt_run_record(tmp_path, capsys):
    store = ShardStore(tmp_path / "out")
    store.claim("fp", {}, overwrite=False)
    (tmp_path / "out" / "_run.json").write_bytes(b"{not json")
    _fails_clearly(capsys, ["generate", "--out", str(tmp_path / "out")],
                   "_run.json is not a readable datagen run record", "JSONDecodeError")


def test_overwrite_of_a_directory_datagen_did_not_write(tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "README.md").write_text("my notes")
    _fails_clearly(capsys, ["generate", "--out", str(tmp_path / "mine"), "--overwrite"],
                   "was not written by datagen", "README.md")
    assert (tmp_path / "mine" / "README.md").read_text() == "my notes"


def _unprivileged(tmp_path: Path) -> tuple[list[str], Path]:
    """A command prefix that runs without permission overrides, and a directory it cannot
    write. Root ignores file modes, so as root the capabilities that do so are dropped."""
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "existing").mkdir()
    if os.geteuid() != 0:
        locked.chmod(0o555)
        (locked / "existing").chmod(0o555)
        return [], locked
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot drop CAP_DAC_OVERRIDE")
    for path in (locked, locked / "existing"):
        os.chown(path, 65534, 65534)
        path.chmod(0o555)
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search"], locked


@pytest.mark.parametrize("out", ["new/out", "existing"])
def test_an_out_that_is_not_writable(tmp_path, out):
    prefix, locked = _unprivileged(tmp_path)
    command = [*prefix, sys.executable, "-m", "datagen", "generate", "--out", str(locked / out),
               "--address", "127.0.0.1:9"]  # never reached: the lock is taken before Ray
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    if prefix and "setpriv:" in result.stderr:
        pytest.skip(f"setpriv cannot drop capabilities here: {result.stderr.strip()}")
    assert result.returncode == 2, result.stderr
    err = result.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert f"cannot use {locked / out}: Permission denied" in err, err


def test_a_run_into_an_out_another_run_holds(tmp_path, capsys):
    out = tmp_path / "out"
    holder = start_lock_holder(out, "fp-running")
    try:
        _fails_clearly(capsys, ["generate", "--out", str(out), "--set", "seed=1"],
                       "is in use by another datagen run", f"pid {holder.pid}",
                       "fingerprint fp-running")
    finally:
        holder.kill()
        holder.wait()


def _damaged_out(tmp_path: Path) -> Path:
    store = ShardStore(tmp_path / "out")
    store.claim("fp", {}, overwrite=False)
    records = [store.write_chunk(c, {"trajectories": pa.table({"id": ["a"] * 10})}, {})
               for c in range(2)]
    store.write_manifest("fp", {}, 2, records)
    shard = store.shard_path("trajectories", 1)
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    return store.root


def test_inspect_of_a_damaged_or_foreign_out(tmp_path, capsys):
    out = _damaged_out(tmp_path)
    _fails_clearly(capsys, ["inspect", str(out)], "part-000001.parquet is damaged",
                   "truncated", "datagen verify")
    for samples in ("-1", "1001", "1e12"):
        with pytest.raises(SystemExit) as exit_:
            main(["inspect", str(out), "--samples", samples])
        assert exit_.value.code == 2
        assert "argument --samples: " in capsys.readouterr().err
    (out / "manifest.json").write_text("{")
    _fails_clearly(capsys, ["inspect", str(out)], "manifest.json is unreadable")
    (out / "manifest.json").unlink()
    (out / "manifest.json").symlink_to("/dev/zero")  # was read until memory ran out
    for command in ("inspect", "verify"):
        _fails_clearly(capsys, [command, str(out)], "manifest.json is unreadable",
                       "not a regular file")
    _fails_clearly(capsys, ["inspect", str(tmp_path)], "has no manifest.json")


def test_an_eval_report_that_cannot_be_written(tmp_path, capsys):
    target = tmp_path / "missing" / "irr.json"
    _fails_clearly(capsys, ["eval", "irr", "--num-tasks", "3", "--json", str(target)],
                   f"--json: cannot write {target}")
    _fails_clearly(capsys, ["eval", "irr", "--num-tasks", "3", "--json", str(tmp_path)],
                   f"--json: cannot write {tmp_path}")


@pytest.mark.parametrize("name,why", [
    ("bogus", "unknown environment 'bogus'"),
    ("no_such_module:Env", "No module named 'no_such_module'"),
    ("datagen.envs:resolve_env", "is not an Environment subclass"),
])
def test_eval_refuses_an_unknown_environment_before_any_episode(capsys, name, why):
    _fails_clearly(capsys, ["eval", "irr", "--num-tasks", "3", "--envs", "sql", name],
                   f"--envs: {name!r} is not an environment", why)


@pytest.mark.parametrize("flag,value,why", [
    ("--num-tasks", "0", "must be between 1 and 100,000"),
    ("--num-tasks", "10**20", "is not an integer"),
    ("--num-tasks", str(10**20), "must be between 1 and 100,000"),
    ("--seed", "-1", "must be between 0 and"),
    # an unrecovered episode plays to its budget: a billion extra turns never ended
    ("--extra-turns", "1000000000", "must be between 0 and 32"),
    ("--extra-turns", "-1", "must be between 0 and 32"),
])
def test_eval_bounds_its_numbers(capsys, flag, value, why):
    with pytest.raises(SystemExit) as exited:
        main(["eval", "irr", flag, value])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and why in err and "Traceback" not in err, err


@pytest.mark.parametrize("out", ["foo://bar/x", "http://127.0.0.1:9/x"])
@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_verify_and_inspect_of_a_uri_pyarrow_cannot_open(capsys, command, out):
    # a ValueError traceback; generate said it in one line already
    _fails_clearly(capsys, [command, out], f"cannot use {out}: not an object-store URI")


def test_a_local_path_holding_scheme_like_text_is_a_path(tmp_path, capsys):
    # "://" anywhere made a path a URI: /tmp/x/a://b went to pyarrow, not the filesystem
    from datagen.pipeline.storage import is_uri

    assert is_uri("s3://bucket/out") and is_uri("file:///tmp/out") and is_uri("s3a+x.y-z://b")
    assert not any(map(is_uri, [f"{tmp_path}/a://b", "a b://c", "1s3://b", "://b",
                                tmp_path / "out"]))
    store = ShardStore(tmp_path / "a:" / "b")  # the directory a://b names
    store.claim("fp", {}, overwrite=False)
    store.write_manifest("fp", {}, 1, [])
    assert main(["verify", f"{tmp_path}/a://b"]) == 1  # intact, nothing generated yet
    assert "result: intact but INCOMPLETE" in capsys.readouterr().out
