"""The `fs` environment: a virtual tree only, shell-like tool semantics, strict checks."""

from __future__ import annotations

import builtins
import os
import re
import time

import orjson
import pytest

from datagen.envs.fs import FsEnv

WRITING_TOOLS = ("write_file", "edit_file", "move", "delete", "make_dir")
STATE_TEMPLATES = ("archive_logs", "cleanup_temp", "fix_setting", "copy_setting", "file_note",
                   "changelog_entry", "organise_downloads")


@pytest.fixture(scope="module")
def env() -> FsEnv:
    return FsEnv()


def task_of(env: FsEnv, template: str):
    for seed in range(3000):
        task = env.generate_task(seed, f"fs-{seed}")
        if task.params["template"] == template:
            return task
    raise AssertionError(f"no {template} task")


def call(env: FsEnv, tool: str, **arguments):
    return env.step({"name": tool, "arguments": arguments})


def test_the_real_file_system_is_never_touched(env, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the real file system was touched")
    for module, name in ((builtins, "open"), (os, "remove"), (os, "rename"), (os, "listdir"),
                         (os, "mkdir"), (os, "unlink"), (os, "scandir")):
        monkeypatch.setattr(module, name, refuse)
    for seed in range(60):
        task = env.generate_task(seed, "t")
        env.reset(task)
        for gold in task.gold:
            assert env.step(gold.call.as_dict()).error is None
        assert env.check(task, task.answer)
    assert call(env, "read_file", path="/etc/passwd").error
    assert call(env, "list_dir", path="/etc").error
    assert call(env, "delete", path="/", recursive=True).error is None
    assert orjson.loads(call(env, "list_dir", path="/").content)["count"] == 0


@pytest.mark.parametrize("template", STATE_TEMPLATES)
def test_skipping_a_state_change_fails(env, template):
    task = task_of(env, template)
    last_write = max(i for i, g in enumerate(task.gold) if g.call.name in WRITING_TOOLS)
    env.reset(task)
    for i, gold in enumerate(task.gold):
        if i != last_write:
            env.step(gold.call.as_dict())
    assert not env.check(task, task.answer)
    env.reset(task)
    for gold in task.gold:
        env.step(gold.call.as_dict())
    assert env.check(task, task.answer)


def test_perturbed_answers_fail(env):
    for seed in range(150):
        task = env.generate_task(seed, "t")
        if task.params["template"] in STATE_TEMPLATES:
            continue
        env.reset(task)
        for gold in task.gold:
            env.step(gold.call.as_dict())
        assert env.check(task, f"It is {task.answer}.")
        wrong = str(int(task.answer) + 1) if task.answer.isdigit() else task.answer + "x"
        assert not env.check(task, wrong)
        assert not env.check(task, "I don't know")


def test_collateral_damage_fails_the_check(env):
    task = task_of(env, "cleanup_temp")
    env.reset(task)
    for gold in task.gold:
        env.step(gold.call.as_dict())
    assert env.check(task, task.answer)
    build = task.gold[0].call.arguments["path"]
    assert call(env, "delete", path=build, recursive=True).error is None
    assert not env.check(task, task.answer)


def test_answer_tasks_fail_when_files_were_changed(env):
    task = task_of(env, "config_lookup")
    env.reset(task)
    for gold in task.gold:
        env.step(gold.call.as_dict())
    path = task.gold[-1].call.arguments["path"]
    call(env, "write_file", path=path, content="wiped\n")
    assert not env.check(task, task.answer)


def test_tool_semantics(env):
    task = task_of(env, "file_note")
    env.reset(task)
    home = f"/home/{env._world.user}"
    assert call(env, "make_dir", path="~/tmp/a/b").error is None
    assert orjson.loads(call(env, "stat", path=f"{home}/tmp/a").content)["type"] == "dir"
    assert call(env, "write_file", path="~/tmp/a/b/x.txt", content="one\ntwo\n").error is None
    assert call(env, "write_file", path="~/tmp/a/b/x.txt", content="three\n",
                mode="append").error is None
    read = orjson.loads(call(env, "read_file", path="~/tmp/a/b/x.txt").content)
    assert read["content"] == "one\ntwo\nthree\n" and read["total_lines"] == 3
    part = orjson.loads(call(env, "read_file", path="~/tmp/a/b/x.txt", start_line=2,
                             max_lines=1).content)
    assert part["content"] == "two\n"
    assert call(env, "write_file", path="~/tmp/a/b/x.txt", content="", mode="create").error
    assert call(env, "edit_file", path="~/tmp/a/b/x.txt", old_text="o", new_text="0").error
    assert call(env, "edit_file", path="~/tmp/a/b/x.txt", old_text="two",
                new_text="2").error is None
    assert call(env, "move", source="~/tmp", destination="~/tmp/a").error  # into itself
    assert call(env, "move", source="~/tmp/a", destination="~/moved").error is None
    assert call(env, "stat", path="~/moved/b/x.txt").error is None
    assert call(env, "delete", path="~/moved").error  # not empty
    assert call(env, "delete", path="~/moved", recursive=True).error is None
    listing = orjson.loads(call(env, "list_dir", path="~", recursive=True).content)
    assert not any(entry["name"].startswith("moved") for entry in listing["entries"])


@pytest.mark.parametrize("arguments, message", [
    ({"path": "relative/path"}, "pattern"),
    ({"path": "/nope", "text": "x"}, "no such file"),
    ({"path": "/srv"}, "needs name_glob"),
    ({"path": "/srv", "text": "(", "regex": True}, "invalid regular expression"),
    ({"path": "/srv", "text": "x", "max_results": 0}, "less than the minimum 1"),
    ({"path": "/srv", "text": "(?<=a", "regex": True}, "invalid regular expression"),
])
def test_search_errors(env, arguments, message):
    env.reset(env.generate_task(2, "t"))
    obs = call(env, "search", **arguments)
    assert obs.error and message in obs.content, obs.content


def test_search_by_glob_and_text(env):
    task = task_of(env, "cleanup_temp")
    env.reset(task)
    build = task.gold[0].call.arguments["path"]
    found = orjson.loads(call(env, "search", path=build, name_glob="*.tmp").content)
    assert found["count"] == len(task.params["deletes"]) and found["files"] == \
        sorted(task.params["deletes"])
    hits = orjson.loads(call(env, "search", path="/var/log", text="error",
                             ignore_case=True).content)
    assert all("error" in match["text"].lower() for match in hits["matches"])


def test_alternatives_are_other_existing_paths(env):
    task = task_of(env, "archive_logs")
    env.reset(task)
    move = next(g.call.as_dict() for g in task.gold if g.call.name == "move")
    sources = env.alternatives(move, "arguments.source")
    assert sources and move["arguments"]["source"] not in sources
    assert all(env.step({"name": "stat", "arguments": {"path": p}}).error is None
               for p in sources)
    destinations = env.alternatives(move, "arguments.destination")
    listing = env.alternatives({"name": "list_dir", "arguments": {"path": "/var/log"}},
                               "arguments.path")
    assert "/var/log" not in listing and "/" in destinations
    assert env.alternatives({"name": "write_file", "arguments": {
        "path": "/x", "content": "", "mode": "append"}}, "arguments.mode") == \
        ["overwrite", "create"]


@pytest.mark.parametrize("pattern", ["(a+)+$", "((a)+)+$", "(a|a)*$", "(a|a?)+$", "(?:a|a)+b",
                                     "(x+x+)+y", "(\\w+\\s?)+$"])
def test_backtracking_regexes_run_in_linear_time_and_answer_right(env, pattern):
    # Python's re took seconds on 26 a's, doubling per character (issue 12, item 9)
    env.reset(env.generate_task(2, "t"))
    lines = ["a" * 3000 + "!", "x" * 3000, "aaa", "b", "word " * 600 + "!"]
    assert call(env, "write_file", path="~/evil.txt", content="\n".join(lines)).error is None
    start = time.perf_counter()
    obs = call(env, "search", path="~/evil.txt", text=pattern, regex=True)
    assert time.perf_counter() - start < 1, pattern
    found = [match["line"] for match in orjson.loads(obs.content)["matches"]]
    short = [line[:10] + line[-1] for line in lines]  # small enough for Python's re
    assert found == [n for n, line in enumerate(short, 1) if re.search(pattern, line)]


def test_a_backtracking_lookaround_is_an_error_not_a_hang(env):
    env.reset(env.generate_task(2, "t"))
    call(env, "write_file", path="~/evil.txt", content="a" * 40 + "!\nb\n")
    start = time.perf_counter()
    obs = call(env, "search", path="~/evil.txt", text="(a|a)*$(?=b)", regex=True)
    assert time.perf_counter() - start < 2
    assert obs.error and "backtracks too much" in obs.error, obs.content
    good = call(env, "search", path="~/evil.txt", text="^(?=b)", regex=True)
    assert orjson.loads(good.content)["count"] == 1
