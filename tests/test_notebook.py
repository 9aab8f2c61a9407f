"""The inspection notebook runs top to bottom against a freshly generated dataset."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from datagen.config import GenerateConfig
from datagen.pipeline import run_generation
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_inspect_notebook_executes(ray_head, tmp_path, monkeypatch):
    out = tmp_path / "out"
    run_generation(GenerateConfig(out=str(out), num_trajectories=120, chunk_size=60,
                                  progress=False))
    monkeypatch.setenv("DATAGEN_OUT", str(out))
    notebook = nbformat.read(ROOT / "notebooks" / "inspect_trajectories.ipynb", as_version=4)
    NotebookClient(notebook, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(str(o.get("text", "")) + str(o.get("data", {})) for o in outputs)
    assert "120 trajectories" in text and "REASON" in text and "background:" in text
