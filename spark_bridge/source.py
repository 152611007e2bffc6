"""The "ledgerwire" data source: what `spark_bridge.register(spark)` registers with a session.

It only names the format, gives the schema and hands out the batch reader (reader.py), the
streaming reader (stream_reader.py) and the backfill writer (writer.py).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from ledger_backend.metadata.zk_url import redact
from spark_bridge.metadata_access import BOOKIE_SECRET_FILE_OPTION, METADATA_OPTION
from spark_bridge.reader import LedgerwireBatchReader
from spark_bridge.record_decode import spark_schema_ddl
from spark_bridge.stream_reader import LedgerwireStreamReader
from spark_bridge.writer import LedgerwireBackfillWriter

FORMAT_NAME = "ledgerwire"
_DRIVER_ONLY = frozenset({"kafka.sasl.password", "kafka.sasl.jaas.config"})


class LedgerwireDataSource(DataSource):  # type: ignore[misc]
    """The "ledgerwire" format: batch and streaming reads, and backfill writes."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        lowered = {str(k).lower(): str(v) for k, v in self.options.items()}
        return spark_schema_ddl(lowered.get("includeheaders", "false").strip().lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        reader = LedgerwireBatchReader(dict(self.options))
        # Spark ships this data source to the executors with the reader: the principal was
        # checked on the driver (reader.py), so its password stays here
        for key in [k for k in self.options if str(k).lower() in _DRIVER_ONLY]:
            del self.options[key]
        if reader.opts.spec.read_ticket is not None:
            self._redact_metadata()
        return reader

    def _redact_metadata(self) -> None:
        """Executors that read with a ticket open no metadata store: they get its address
        without the password (zk://user:***@...)."""
        for key in [k for k in self.options if str(k).lower() == METADATA_OPTION.lower()]:
            self.options[key] = redact(str(self.options[key]))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        reader = LedgerwireStreamReader(dict(self.options))
        if reader.reads_with_tickets:  # the reader's own copy serves the driver; Spark ships
            dropped = _DRIVER_ONLY | {BOOKIE_SECRET_FILE_OPTION.lower()}  # this one too
            for key in [k for k in self.options if str(k).lower() in dropped]:
                del self.options[key]
            self._redact_metadata()
        return reader

    def writer(self, schema: StructType, overwrite: bool):  # type: ignore[no-untyped-def]
        return LedgerwireBackfillWriter(dict(self.options), schema, overwrite)
