"""`ledgerwire replay`: read a topic's history straight from the bookies into Parquet (Spark)."""

from spark_bridge.cli import add_replay_arguments as add_arguments
from spark_bridge.cli import run_replay as run

NAME = "replay"
HELP = "replay a topic's history from the bookies into Parquet (Spark)"

__all__ = ["NAME", "HELP", "add_arguments", "run"]
