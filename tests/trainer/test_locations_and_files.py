"""Where the trainer reads from, decided before any request or read: which OUT locations it
reads (a URI by datagen's rule, no credentials, no query), the one `--shards` refusal, files
that are not regular files (a FIFO waited forever), and which failures mark a whole store
unreachable for the recorded OUTs `trainer eval` probes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.s3server import pq_bytes, s3  # noqa: F401 - s3 is a fixture
from trainer.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
ROW = {"task_id": ["sql-0-00000000"], "task_seed": [7], "env": ["sql"], "task": ["x"]}
# pyarrow's messages, as it raised them against moto (ACCESS_DENIED) and a closed port
ACCESS_DENIED = ("When listing objects under key 'loop/round-0/out/trajectories/' in bucket "
                 "'store': AWS Error ACCESS_DENIED during ListObjectsV2 operation: Access Denied")
NO_CONNECTION = ("When listing objects under key 'out/' in bucket 'store': AWS Error "
                 "NETWORK_CONNECTION during ListObjectsV2 operation: curlCode: 7, Could not "
                 "connect to server")


def _fit_config(shards: str):
    return load_config(ROOT / "configs" / "train_tiny.yaml",
                       ["run_dir=/runs/x", "tokenizer=/runs/tokenizer", f"shards={shards}"])


def _out(root: Path) -> Path:
    (root / "trajectories").mkdir(parents=True)
    pq.write_table(pa.table(ROW), root / "trajectories" / "part-000000.parquet")
    return root


# -- locations -------------------------------------------------------------------------------

def test_a_local_path_holding_scheme_like_text_is_a_path(tmp_path):
    """`"://" in path` made /tmp/x/a://b a URI of scheme "/tmp/x/a", refused as not read here;
    datagen writes such an OUT as a directory."""
    from datagen.pipeline.storage import is_uri as datagen_is_uri
    from trainer.eval import EvalConfig
    from trainer.heldout import shard_files
    from trainer.shard_files import is_uri, location_problem

    out = _out(tmp_path / "a://b")
    for location in (str(out), "relative/a://b", "s3://bucket/out", "file:///data/out", "://x"):
        assert is_uri(location) == datagen_is_uri(location), location
    assert not is_uri(str(out))
    assert location_problem(str(out)) is None
    assert shard_files(str(out)) == [str(out / "trajectories" / "part-000000.parquet")]
    assert EvalConfig(checkpoint="c", shards=(str(out),)).shards == (str(out),)
    assert _fit_config(str(out)).shards == str(out)


def test_store_of_a_uri_is_its_scheme_and_bucket():
    from trainer.shard_files import store_of

    assert store_of("s3://bucket/loop/round-3/out") == "s3://bucket"
    assert store_of("s3://bucket") == "s3://bucket"
    assert store_of("file:///data/out") == "file://"
    assert store_of("/data/out") is None
    assert store_of("/tmp/x/a://b") is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("uri", ["s3://bucket/out?endpoint_override=evil.example:9000",
                                 "s3://bucket/out?scheme=http", "s3://bucket/out#part"])
def test_a_uri_with_a_query_or_fragment_is_refused_before_any_request(uri, monkeypatch):
    """pyarrow's from_uri takes endpoint_override from the query: every request, signed with
    the environment's credentials, went to that host."""
    from trainer.eval import EvalConfig
    from trainer.heldout import shard_files
    from trainer.shard_files import location_problem

    monkeypatch.setattr("trainer.shard_files._fs", lambda uri: pytest.fail(f"probed {uri}"))
    assert "query string or fragment" in location_problem(uri)
    with pytest.raises(ValueError, match=re.escape(f"--shards {uri}: a URI with a query")):
        shard_files(uri)
    with pytest.raises(ValueError, match="query string or fragment"):
        EvalConfig(checkpoint="c", shards=(uri,))
    with pytest.raises(ConfigError, match=r"\n  shards: a URI with a query string or fragment"):
        _fit_config(uri)


def test_fit_refuses_the_locations_eval_refuses_naming_the_field():
    with pytest.raises(ConfigError, match=r"\n  shards: gs:// is not read here"):
        _fit_config("gs://bucket/out")
    with pytest.raises(ConfigError, match=r"\n  shards: a URI with credentials") as refused:
        _fit_config("s3://AKIAFAKE:S3cretKey@bucket/out")
    assert "S3cretKey" not in str(refused.value)


@pytest.mark.parametrize("field", ["run_dir", "tokenizer", "model.init_from",
                                   "dpo.reference_model", "loss.teacher_model",
                                   "scaling.deepspeed_config"])
@pytest.mark.parametrize("uri", ["s3://AKIAFAKE:S3cretKey@bucket/x", "file:///runs/x"])
def test_fields_read_as_paths_refuse_a_uri_naming_the_field_not_the_secret(field, uri):
    """A URI run_dir became a relative directory named `s3:`; a URI checkpoint was refused
    later as "no checkpoint in s3://AKIAFAKE:S3cretKey@..." (the secret printed back)."""
    with pytest.raises(ConfigError, match=rf"\n  {field}: a filesystem path is expected here, "
                                          rf"not a URI \((s3|file)://\.\.\.\)") as refused:
        load_config(ROOT / "configs" / "dpo_tiny.yaml",
                    ["run_dir=/runs/x", "tokenizer=/runs/tokenizer", "shards=/runs/out",
                     "dpo.reference=precomputed", f"{field}={uri}"])
    assert "S3cretKey" not in str(refused.value)


def test_a_local_path_holding_scheme_like_text_is_still_a_path_in_every_path_field():
    cfg = load_config(ROOT / "configs" / "dpo_tiny.yaml",
                      ["run_dir=/runs/a://b", "tokenizer=/tok/a://b", "shards=/runs/out",
                       "dpo.reference=precomputed", "dpo.reference_dir=/ref/a://b"])
    assert (cfg.run_dir, cfg.tokenizer, cfg.dpo.reference_dir) == ("/runs/a://b", "/tok/a://b",
                                                                   "/ref/a://b")


@pytest.mark.parametrize("uri, why", [
    ("gs://bucket/ref", "gs:// is not read here"),
    ("s3://AKIAFAKE:S3cretKey@bucket/ref", "a URI with credentials"),
    ("s3://bucket/ref?endpoint_override=evil.example:9000", "a URI with a query string"),
    ("s3://bucket/ref#x", "a URI with a query string or fragment")])
def test_the_reference_dir_follows_the_rule_of_shards(uri, why):
    """`dpo.reference_dir` is written and read like OUT (an object store is allowed): before,
    any text passed, and its credentials would be recorded in training.json."""
    with pytest.raises(ConfigError, match=rf"\n  dpo.reference_dir: {re.escape(why)}") as refused:
        load_config(ROOT / "configs" / "dpo_tiny.yaml",
                    ["run_dir=/runs/x", "tokenizer=/runs/tokenizer", "shards=/runs/out",
                     "dpo.reference=precomputed", f"dpo.reference_dir={uri}"])
    assert "S3cretKey" not in str(refused.value)
    assert load_config(ROOT / "configs" / "dpo_tiny.yaml", [
        "run_dir=/runs/x", "tokenizer=/runs/tokenizer", "shards=/runs/out",
        "dpo.reference=precomputed", "dpo.reference_dir=s3://bucket/ref"]).dpo.reference_dir \
        == "s3://bucket/ref"


@pytest.mark.parametrize("uri", ["gs://bucket/out", "s3://KEY:S3cret@bucket/out",
                                 "s3://bucket/out?endpoint_override=h:1"])
def test_eval_config_and_the_leak_check_refuse_in_the_same_words(uri):
    from trainer.eval import EvalConfig
    from trainer.heldout import shard_files
    from trainer.shard_files import refuse_location

    with pytest.raises(ValueError) as direct:
        refuse_location(uri)
    with pytest.raises(ValueError) as leak_check:
        shard_files(uri)
    with pytest.raises(ValueError) as config:
        EvalConfig(checkpoint="c", shards=(uri,))
    assert str(direct.value) == str(leak_check.value)
    assert str(direct.value) in str(config.value)
    assert str(direct.value).startswith(f"--shards {uri.replace('KEY:S3cret@', '')}: ")
    assert "S3cret" not in str(direct.value)


# -- files that are not regular files --------------------------------------------------------

def test_the_kind_of_a_file_that_is_not_a_regular_file_is_named(tmp_path):
    from datagen.bounded_read import irregular_kind, read_bounded

    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    assert irregular_kind(tmp_path / "file") is None
    assert irregular_kind(tmp_path / "fifo") == "a FIFO"
    assert irregular_kind(tmp_path) == "a directory"
    assert irregular_kind("/dev/null") == "a character device"
    with pytest.raises(FileNotFoundError):
        irregular_kind(tmp_path / "absent")
    with pytest.raises(OSError, match=r"fifo is not a regular file \(a FIFO\)"):
        read_bounded(tmp_path / "fifo", 10)
    with pytest.raises(IsADirectoryError):  # as `open` raises it
        read_bounded(tmp_path, 10)


@pytest.mark.timeout(60)
def test_a_tokenizer_json_that_is_a_fifo_is_refused_naming_it_not_waited_on(tmp_path):
    """Tokenizer.from_file waited for a writer forever; tokenizer_problem said the directory
    had no tokenizer.json."""
    from trainer.tokens import TextTokenizer, tokenizer_problem

    os.mkfifo(tmp_path / "tokenizer.json")
    with pytest.raises(OSError, match=r"tokenizer.json is not a regular file \(a FIFO\)"):
        TextTokenizer(tmp_path)
    problem = tokenizer_problem(tmp_path)
    assert f"{tmp_path / 'tokenizer.json'} is not a regular file (a FIFO)" in problem
    assert "\n" not in problem


# -- which failures mark a store unreachable ---------------------------------------------------

def test_access_denied_on_one_prefix_leaves_the_bucket_s_other_outs_probed(tmp_path, monkeypatch):
    """One prefix the credentials may not list marked every other recorded OUT of the bucket
    not found; a connection failure still marks the whole store."""
    from trainer.eval import training_shards
    from trainer.lineage import write_lineage

    probed = []

    def listing(root):
        probed.append(root)
        if root.startswith("s3://gone/"):
            raise OSError(NO_CONNECTION)
        if root == "s3://store/loop/round-0/out":
            raise OSError(ACCESS_DENIED)
        return [f"{root}/trajectories/part-000000.parquet"]

    monkeypatch.setattr("trainer.heldout.shard_files", listing)
    recorded = [f"s3://store/loop/round-{i}/out" for i in range(3)] + \
        [f"s3://gone/round-{i}/out" for i in range(3)]
    write_lineage(tmp_path, {"shards": recorded}, step=1)
    shards, provenance = training_shards((), str(tmp_path))
    assert shards == ("s3://store/loop/round-1/out", "s3://store/loop/round-2/out")
    assert provenance["recorded_not_found"] == [recorded[0], *recorded[3:]]
    assert probed == recorded[:4]  # the unreachable store once


@pytest.fixture
def denied_bucket(s3, monkeypatch):  # noqa: F811
    """A bucket these credentials may not list (an IAM deny on moto, which enforces it once
    authentication is on), beside one they may; the secret of a user moto knows."""
    import boto3
    import moto.settings

    iam = boto3.client("iam", endpoint_url=s3.endpoint)
    user = f"u-{os.urandom(4).hex()}"
    denied, allowed = s3.bucket(), s3.bucket()
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="p", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
            {"Effect": "Deny", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{denied}"}]}))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    for bucket in (denied, allowed):
        s3.client.put_object(Bucket=bucket, Key="out/trajectories/part-000000.parquet",
                             Body=pq_bytes(pa.table(ROW)))
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    return denied, allowed


@pytest.mark.timeout(120)
def test_a_store_that_answers_access_denied_is_asked_again_for_each_out(denied_bucket, tmp_path,
                                                                        monkeypatch):
    """On a real S3 API (moto): ACCESS_DENIED is an answer from the store, not a store out of
    reach, so each recorded OUT of that bucket is listed (moto cannot deny by prefix: the
    whole bucket is denied here, each OUT's own answer is what counts)."""
    from trainer import heldout
    from trainer.eval import training_shards
    from trainer.lineage import write_lineage

    denied, allowed = denied_bucket
    listed = []
    real = heldout.shard_files

    def spied(root):
        listed.append(root)
        return real(root)

    monkeypatch.setattr("trainer.heldout.shard_files", spied)
    recorded = [f"s3://{denied}/out", f"s3://{denied}/other", f"s3://{allowed}/out"]
    write_lineage(tmp_path, {"shards": recorded}, step=1)
    with pytest.raises(OSError, match="ACCESS_DENIED"):
        real(recorded[0])  # what the store says, by pyarrow
    shards, provenance = training_shards((), str(tmp_path))
    assert shards == (recorded[2],)
    assert provenance["recorded_not_found"] == recorded[:2]
    assert listed == recorded


@pytest.mark.parametrize("uri", ["s3://bucket/out", "s3://bucket/out?endpoint_override=h:1",
                                 "s3://bucket/out#part", "s3://KEY:S3cret@bucket/out",
                                 "file:///data/out", "s3://bucket/a@b", "/tmp/x/a://b?c"])
def test_the_trainer_refuses_the_out_uris_datagen_refuses(uri):
    """One rule for both sides of an OUT (datagen writes it, the trainer reads it): datagen's
    refuse_uri_options and the trainer's location_problem agree on s3:// and file://."""
    from datagen.pipeline.storage import StoreUnusable, refuse_uri_options
    from trainer.shard_files import location_problem

    try:
        refuse_uri_options(uri)
        datagen_refuses = False
    except StoreUnusable:
        datagen_refuses = True
    assert (location_problem(uri) is not None) == datagen_refuses
