"""What a chunk worker needs before it can run a chunk, checked where the chunk will run.

Workers on an existing cluster do not share the submitting shell's working directory or
environment, nor (unless it is shared storage) its disk. The driver therefore makes every path
absolute (`resolve_paths`) and writes a probe file into OUT; each worker, before it gets a
chunk, checks that it sees that probe and can write next to it, that the API-key variables the
config names are set, that local model and tokenizer paths exist, that a `logit_bias` fits the
local model's vocabulary and that `env_modules` import (`worker_problems`). A problem is
reported with how to fix it, instead of every chunk failing (or shards landing on a disk the
driver never reads).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from datagen.bounded_read import read_bounded
from datagen.config import MODEL_PATH_FIELDS, GenerateConfig
from datagen.envs import import_modules
from datagen.pipeline.storage import Storage, is_uri, join, open_storage, refuse_uri_options
from datagen.teachers.config import check_logit_bias

ENV_HELP = ("workers do not inherit the submitting shell's environment: pass it with "
            "`ray job submit --runtime-env-json '{\"env_vars\": {\"%s\": \"...\"}}'`, from a "
            "Kubernetes Secret in the worker pods' env (cluster/), or set it in the nodes' "
            "environment before `ray start`")
PATH_HELP = ("put it on storage every node mounts at the same path (or ship it with "
             "`ray job submit --working-dir`)")
MODULE_HELP = ("ship it with `ray job submit --working-dir .` (or runtime_env py_modules) or "
               "install it in the worker image")
STORE_HELP = ("workers reach an object store with their own environment: set the endpoint "
              "(AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL), region and credentials in every "
              "node's environment or the job's runtime_env env_vars (instance roles work too)")
OUT_HELP = ("on a multi-node cluster OUT must be a filesystem every node mounts at the same "
            "path (NFS, a shared volume); pass an absolute --out on it")

# (section path, field) of every local path a worker loads (datagen/config.py lists them once);
# sections may be absent.
MODEL_PATHS = tuple((tuple(dotted.split(".")[:-1]), dotted.split(".")[-1])
                    for dotted in MODEL_PATH_FIELDS)
# What a Hugging Face tokenizer directory holds at least one of (fast, slow, sentencepiece).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
KEY_VARIABLES = (("teacher", "openai"), ("critics", "llm", "openai"))
CONFIG_JSON_LIMIT = 1 << 20  # a model's config.json is a few KB


@dataclass(frozen=True)
class OutProbe:
    """A file the driver writes into OUT that every worker must be able to read."""

    path: str
    token: str

    @classmethod
    def create(cls, folder: str | Path) -> OutProbe:
        """A probe in `folder` (a path, or an object-store URI: then workers check that they
        reach the store with their own endpoint and credentials)."""
        token = secrets.token_hex(8)
        probe = cls(join(folder, f"probe-{token}"), token)
        probe._write(probe.path.rpartition("/")[2], token)
        return probe

    def _write(self, name: str, text: str) -> None:
        """Beside the probe; a plain write on a filesystem (LocalStorage.write would stage it
        in a `_tmp/` inside OUT/_tmp)."""
        storage, folder, _ = self._where()
        if is_uri(folder):
            storage.write(name, text.encode())
        else:
            (Path(folder) / name).write_text(text)

    def _where(self) -> tuple[Storage, str, str]:
        """(storage of the probe's folder, its folder, its name)."""
        folder, _, name = self.path.rpartition("/")
        return open_storage(folder), folder, name

    def remove(self) -> None:
        storage, _, name = self._where()
        try:
            storage.delete(name)
        except OSError:
            pass  # the store is gone: claim() clears _tmp/ on the next run

    def check(self) -> str | None:
        """On a worker: None if it sees the driver's probe and can write beside it."""
        storage, folder, name = self._where()
        try:
            if storage.read(name) != self.token.encode():
                return (f"OUT probe {self.path} has other contents than the driver wrote; "
                        f"{OUT_HELP}")
        except (OSError, ValueError) as exc:
            if is_uri(folder):
                return (f"OUT is not readable here: the driver's probe {self.path} "
                        f"({type(exc).__name__}); {STORE_HELP}")
            return (f"OUT is not visible here: the driver's probe file {self.path} is missing; "
                    f"{OUT_HELP}")
        mine = f"{name}-{os.getpid()}"
        try:
            self._write(mine, self.token)
            storage.delete(mine)
        except OSError as exc:
            return f"cannot write to OUT ({folder}): {exc.strerror or exc}"
        return None


def _section(config: BaseModel, path: tuple[str, ...]) -> Any:
    for name in path:
        config = getattr(config, name, None)
        if config is None:
            return None
    return config


def _replace(model: BaseModel, path: tuple[str, ...], field: str, value: Any) -> BaseModel:
    """A copy of the frozen `model` with `path.field` set to `value`."""
    if not path:
        return model.model_copy(update={field: value})
    child = getattr(model, path[0])
    return model.model_copy(update={path[0]: _replace(child, path[1:], field, value)})


def resolve_paths(config: GenerateConfig, keep_relative: bool = False) -> GenerateConfig:
    """OUT made absolute, and every model/tokenizer path that exists relative to this
    directory: a worker would resolve them against its own working directory. `~` is the
    driver's home, as in a shell. With `keep_relative` (a Ray job whose working_dir every
    worker starts in) relative model paths stay as written, so rows do not record a
    per-session temporary path. An OUT URI with a query or fragment is refused here, before
    the run lock's first request (`refuse_uri_options`)."""
    refuse_uri_options(config.out)
    if not is_uri(config.out):  # a URI is the same on every node
        out = os.path.abspath(os.path.expanduser(config.out))
        config = config.model_copy(update={"out": out})
    for path, field in MODEL_PATHS:
        section = _section(config, path)
        value = getattr(section, field, None) if section is not None else None
        if not value:
            continue
        local = os.path.expanduser(value)
        if not keep_relative and not os.path.isabs(local) and os.path.exists(local):
            local = os.path.abspath(local)
        if local != value:
            config = _replace(config, path, field, local)
    return config


def _worker_paths(config: GenerateConfig) -> list[tuple[str, str]]:
    """(field, path) of what a chunk worker loads itself. A vLLM model is loaded by the engine
    actors, which may run on other (GPU) nodes; the chunk worker only reads its tokenizer."""
    paths = []
    for path, field in MODEL_PATHS:
        value = getattr(_section(config, path), field, None)
        if value and path != ("teacher", "vllm"):
            paths.append((".".join((*path, field)), value))
    if config.teacher.backend == "vllm":
        paths.append(("teacher.vllm tokenizer", config.teacher.teacher_tokenizer()))
    return paths


def invalid_config_problem(error: ValidationError) -> str:
    """The config the driver validated fails here: in practice an env_modules module that
    this node cannot import."""
    details = "; ".join(f"{'.'.join(str(p) for p in item['loc'])}: "
                        f"{item['msg'].removeprefix('Value error, ')}" for item in error.errors())
    return f"the config does not load here ({details}); {MODULE_HELP}"


def local_vocab_size(model: str) -> int | None:
    """`vocab_size` of a local model directory's config.json (a text model's, or its
    `text_config`'s), the size of the logits hf and vLLM check logit_bias against; None for a
    hub name, a directory without one, or a config.json that does not say."""
    try:
        config = orjson.loads(read_bounded(Path(model) / "config.json", CONFIG_JSON_LIMIT))
    except (OSError, orjson.JSONDecodeError):
        return None
    for section in (config, config.get("text_config") if isinstance(config, dict) else None):
        if isinstance(section, dict) and isinstance(section.get("vocab_size"), int):
            return section["vocab_size"]
    return None


def logit_bias_problems(config: GenerateConfig) -> list[str]:
    """`sampling.logit_bias` ids of the teacher and the LLM critic past the vocabulary of the
    local model each loads: said at worker setup (exit 2, before any chunk) where the model's
    config.json is readable here. The loaders check again (datagen.teachers.config): before,
    a vLLM teacher's chunks each failed with this reason once its engine had started."""
    problems = []
    for path in (("teacher",), ("critics", "llm")):
        model_user = _section(config, path)  # a TeacherConfig, or None
        backend = getattr(model_user, "backend", "")
        section = getattr(model_user, backend, None) if backend in ("hf", "vllm") else None
        if section is None or not model_user.sampling.logit_bias:
            continue
        if (vocab_size := local_vocab_size(section.model)) is None:
            continue
        where = ".".join(path)
        try:
            check_logit_bias(model_user.sampling, vocab_size, f"{where}.sampling.logit_bias")
        except ValueError as exc:
            problems.append(f"{exc} ({where}.{backend}.model {section.model}/config.json)")
    return problems


def worker_problems(config: GenerateConfig, probe: OutProbe | None) -> list[str]:
    """Everything this process lacks to run `config`'s chunks, each with how to provide it."""
    problems = []
    if probe is not None and (problem := probe.check()):
        problems.append(problem)
    for path in KEY_VARIABLES:
        variable = getattr(_section(config, path), "api_key_env", None)
        if variable and not os.environ.get(variable):
            where = ".".join(path)
            problems.append(f"{where}.api_key_env names ${variable}, which is not set here; "
                            + ENV_HELP % variable)
    for name, value in _worker_paths(config):
        if os.path.isabs(value) and not os.path.exists(value):
            problems.append(f"{name} {value} does not exist here; {PATH_HELP}")
        elif name.endswith("tokenizer") and os.path.isdir(value) and not any(
                os.path.isfile(os.path.join(value, file)) for file in TOKENIZER_FILES):
            problems.append(f"{name} {value} holds no tokenizer (none of "
                            f"{', '.join(TOKENIZER_FILES)}); point it at a tokenizer's "
                            "directory (scripts/build_tokenizer.py builds one)")
    problems += logit_bias_problems(config)
    for module in config.env_modules:
        try:
            import_modules([module])
        except Exception as exc:  # noqa: BLE001 - any import failure is the same problem
            problems.append(f"env_modules: cannot import {module!r} here ({type(exc).__name__}: "
                            f"{exc}); {MODULE_HELP}")
    return problems
