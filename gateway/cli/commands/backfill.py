"""`ledgerwire backfill`: write a Parquet/JSON/CSV dump into a topic with Spark."""

from spark_bridge.cli import add_backfill_arguments as add_arguments
from spark_bridge.cli import run_backfill as run

NAME = "backfill"
HELP = "write a Parquet/JSON/CSV dump into a topic (Spark)"

__all__ = ["NAME", "HELP", "add_arguments", "run"]
