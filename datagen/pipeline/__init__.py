"""The generation pipeline: stages behind one interface, chunk processing, Ray wiring, the CLI.

    driver.py     run_generation: plan chunks, start workers, feed them, manifest + card
    workers.py    chunk worker actors and their life cycle; dispatch.py: which chunk goes where
    placement.py  the vllm teacher's engines: refused when the cluster can never hold them
    chunk.py      one chunk end to end (rollout, then every configured stage), no Ray
    stages/       one stage per file: trajectories, negatives, critics (stages/base.py: the
                  interface and the registry)
    shards.py     atomic shards, markers, manifest, resume; runlock.py: one run per OUT
    summary.py, inspect.py, card.py, verify.py   what a run or an OUT reports, from its stages
    cli.py        `datagen ...`; eval_irr.py: `datagen eval irr`

It builds on the data model (datagen.types, chat, spans, rows), the environments and the
teachers, which never import it (an import contract checked by tests/test_layering.py).
`run_generation` and `LivenessPolicy` are imported from here lazily: they pull in Ray, which
the CLI's `--help` and `datagen inspect` do not need.
"""

from __future__ import annotations

from typing import Any

_LAZY = {"run_generation": "datagen.pipeline.driver", "LivenessPolicy": "datagen.pipeline.workers",
         "init_ray": "datagen.pipeline.cluster", "ClusterError": "datagen.pipeline.cluster"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'datagen.pipeline' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)


__all__ = list(_LAZY)
