"""datagen: agent trajectories from teachers in tool environments, as Parquet shards on Ray."""

__version__ = "0.1.0"
