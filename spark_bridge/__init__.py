"""spark_bridge: PySpark data sources for ledgerwire (Python Data Source API, pyspark >= 4).

`register(spark)` makes `spark.read.format("ledgerwire")`, `spark.readStream.format(...)` and
`df.write.format("ledgerwire")` available in a session. Workers must run the same interpreter
(set PYSPARK_PYTHON to sys.executable) so that they can import this package.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register the "ledgerwire" data source with a SparkSession."""
    from spark_bridge.source import LedgerwireDataSource

    spark.dataSource.register(LedgerwireDataSource)
