"""cluster/ as a user takes it: the launcher YAML against Ray's own schema and defaults (what
`ray up` checks before it calls the cloud), the KubeRay RayJob against the RayJob CRD's shape,
the runtime_env as Ray parses it, submit.sh by bash and against the session's head, and the
Dockerfile's files. Cloud and Kubernetes themselves are not reachable here."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import jsonschema
import polars as pl
import pytest
import ray
import yaml

from tests.conftest import ROOT, submit_to_head

CLUSTER = ROOT / "cluster"
IMAGE = "datagen:latest"
APP = Path("/app")  # where the Dockerfile puts the repo

# From KubeRay's RayJob CRD, version ray.io/v1 (ray-project/kuberay,
# ray-operator/config/crd/bases/ray.io_rayjobs.yaml, operator 1.6+): the fields it knows at
# each level of this file and the ones it requires. The CRD itself (1.4 MB) is not vendored.
RAYJOB_SPEC_FIELDS = {"activeDeadlineSeconds", "backoffLimit", "clusterSelector",
                      "deletionStrategy", "entrypoint", "entrypointNumCpus", "entrypointNumGpus",
                      "entrypointResources", "jobId", "managedBy", "metadata",
                      "preRunningDeadlineSeconds", "rayClusterSpec", "runtimeEnvYAML",
                      "shutdownAfterJobFinishes", "submissionMode", "submitterConfig",
                      "submitterPodTemplate", "suspend", "ttlSecondsAfterFinished"}
HEAD_GROUP = {"fields": {"enableIngress", "headService", "ingressOptions", "labels",
                         "rayStartParams", "resources", "serviceType", "template"},
              "required": {"template"}}
WORKER_GROUP = {"fields": {"groupName", "idleTimeoutSeconds", "labels", "maxReplicas",
                           "minReplicas", "numOfHosts", "priority", "rayStartParams", "replicas",
                           "resources", "scaleStrategy", "suspend", "template"},
                "required": {"groupName", "maxReplicas", "minReplicas", "template"}}


def _yaml(name: str) -> dict:
    return yaml.safe_load((CLUSTER / name).read_text())


def _dockerfile_copies() -> list[str]:
    """The sources of the Dockerfile's COPY lines (the destination dropped)."""
    sources = []
    for line in (CLUSTER / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            sources.extend(line.split()[1:-1])
    return sources


def test_launcher_yaml_passes_rays_schema_and_the_checks_of_ray_up():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = _yaml("ray-cluster.yaml")
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    jsonschema.validate(config, schema)
    validate_config(prepare_config(config))  # ray up: defaults merged, then validated
    assert config["docker"]["image"] == IMAGE
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    assert all("RAY_AUTH_MODE=token" in command for command in starts if "ray start" in command)
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"  # the token, copied


def test_a_launcher_yaml_ray_would_refuse_is_refused():
    """The check above can fail: a node type without `resources` (as this file had)."""
    config = _yaml("ray-cluster.yaml")
    del config["available_node_types"]["cpu_worker"]["resources"]
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    with pytest.raises(jsonschema.ValidationError, match="'resources' is a required property"):
        jsonschema.validate(config, schema)


def _check_group(group: dict, shape: dict, where: str) -> None:
    assert set(group) <= shape["fields"], f"{where}: unknown {set(group) - shape['fields']}"
    assert shape["required"] <= set(group), f"{where}: missing {shape['required'] - set(group)}"
    containers = group["template"]["spec"]["containers"]
    assert containers and all(c["name"] and c["image"] == IMAGE for c in containers), where
    mounts = {m["name"] for c in containers for m in c.get("volumeMounts", [])}
    assert mounts <= {v["name"] for v in group["template"]["spec"].get("volumes", [])}, where


def test_rayjob_has_the_shape_of_the_kuberay_crd():
    job = _yaml("kuberay-rayjob.yaml")
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob") and job["metadata"]["name"]
    spec = job["spec"]
    assert set(spec) <= RAYJOB_SPEC_FIELDS, set(spec) - RAYJOB_SPEC_FIELDS
    cluster = spec["rayClusterSpec"]
    assert cluster["rayVersion"] == ray.__version__  # the image's Ray (cluster/Dockerfile)
    assert cluster["authOptions"] == {"mode": "token", "secretName": "datagen-ray-token"}
    _check_group(cluster["headGroupSpec"], HEAD_GROUP, "headGroupSpec")
    for group in cluster["workerGroupSpecs"]:
        _check_group(group, WORKER_GROUP, group["groupName"])
        assert group["minReplicas"] <= group.get("replicas", group["minReplicas"]) <= group["maxReplicas"]


def test_rayjob_entrypoint_runs_an_existing_module_with_a_valid_config():
    from datagen.config import load_config
    from datagen.pipeline.cli import _overrides, _parser

    argv = shlex.split(_yaml("kuberay-rayjob.yaml")["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "datagen"] and (ROOT / "datagen" / "__main__.py").is_file()
    args = _parser().parse_args(argv[3:])
    config_path = Path(args.config)
    assert config_path.is_relative_to(APP), "the job runs in the image: paths under /app"
    local = ROOT / config_path.relative_to(APP)
    assert local.is_file() and config_path.relative_to(APP).parts[0] in _dockerfile_copies()
    config = load_config(local, _overrides(args))
    assert config.out.startswith("/data/")  # the shared volume every pod mounts


def test_runtime_env_parses_as_a_ray_runtime_env():
    from ray.runtime_env import RuntimeEnv

    data = _yaml("runtime_env.yaml")
    assert set(data) <= RuntimeEnv.known_fields, set(data) - RuntimeEnv.known_fields
    assert RuntimeEnv(**data)["env_vars"]["PYTHONUNBUFFERED"] == "1"  # values must be strings


def test_submit_script_parses_and_refuses_an_unknown_command():
    script = CLUSTER / "submit.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    for path in re.findall(r"cluster/[\w.]+", script.read_text()):
        assert (ROOT / path).is_file(), path
    refused = subprocess.run(["bash", str(script), "train", "configs/demo.yaml"],
                             capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and "generate|fit" in refused.stderr


@pytest.mark.slow
def test_submit_script_submits_a_generation_job(ray_head, tmp_path):
    out = tmp_path / "out"
    env = dict(ray_head.env, RAY_ADDRESS=ray_head.dashboard)
    result = submit_to_head(ray_head, ["bash", "cluster/submit.sh", "generate", "configs/demo.yaml",
                                       "--num-trajectories", "20", "--out", str(out),
                                       "--no-progress"], env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "succeeded" in result.stdout
    assert pl.read_parquet(out / "trajectories" / "*.parquet").height == 20


def test_dockerfile_copies_files_that_exist_and_installs_known_extras():
    text = (CLUSTER / "Dockerfile").read_text()
    assert f"FROM rayproject/ray:{ray.__version__}-py311" in text
    assert f"-t {IMAGE}" in text  # the build command it documents tags what the YAMLs pull
    for source in _dockerfile_copies():
        assert (ROOT / source).exists(), source
    extras = re.search(r'pip install .*"\.\[([\w,-]+)\]"', text).group(1).split(",")
    import tomllib

    known = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras) <= set(known) and "train" in extras  # `trainer fit` runs in the image
