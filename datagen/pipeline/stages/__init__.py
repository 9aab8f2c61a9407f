"""Pipeline stages, one per file, behind one interface (base.py): trajectories.py (the
`trajectories` table), negatives.py (typed hard negatives + their preference pairs),
critics.py (repairs, repair and safety pairs). tables.py declares the built-in tables."""

from datagen.pipeline.stages.base import (Stage, StageBatch, StageContext, StageOutput, Table,
                                          configured_stages, register_stage, stage_classes)

__all__ = ["Stage", "StageBatch", "StageContext", "StageOutput", "Table", "configured_stages",
           "register_stage", "stage_classes"]
