"""The fit's Ray job environment: Ray Data's usage collection off by default (its poller
queries a Prometheus nobody runs and can print a traceback at exit), a user's choice kept."""

from __future__ import annotations

from trainer.fit import REPO_ROOT, job_env_vars


def test_ray_data_usage_collection_is_off_unless_the_user_chose(monkeypatch):
    from ray.data._internal.usage import collector

    monkeypatch.delenv("RAY_DATA_USAGE_DISABLED", raising=False)
    env = job_env_vars()
    assert env["RAY_DATA_USAGE_DISABLED"] == "1"
    assert collector.usage_collection_disabled()  # this process: no poller thread starts
    assert env["PYTHONPATH"].split(":")[0] == str(REPO_ROOT)

    monkeypatch.setenv("RAY_DATA_USAGE_DISABLED", "0")
    assert job_env_vars()["RAY_DATA_USAGE_DISABLED"] == "0"
