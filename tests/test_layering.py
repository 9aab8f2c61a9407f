"""The layering of DESIGN.md as import contracts (`[tool.importlinter]` in pyproject.toml),
checked with import-linter: mutators import nothing of the project; datagen's data model,
environments and teachers import neither the pipeline nor critics; datagen never imports
trainer; critics does not import the pipeline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def _lint(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's packages, not an install
    return subprocess.run([LINT_IMPORTS, "--no-cache", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    result = _lint()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


def test_a_broken_contract_is_reported(tmp_path):
    """The check can fail: critics do import datagen, so forbidding it is reported."""
    config = tmp_path / "contracts.toml"
    config.write_text('[tool.importlinter]\nroot_packages = ["datagen", "critics", "mutators"]\n'
                      '[[tool.importlinter.contracts]]\nname = "no datagen in critics"\n'
                      'type = "forbidden"\nsource_modules = ["critics"]\n'
                      'forbidden_modules = ["datagen"]\n')
    result = _lint("--config", str(config))
    assert result.returncode == 1 and "critics.repair -> datagen" in result.stdout
