"""critics: error injection, critiques and repairs, safety refusal pairs (issue 4; not built yet)."""
