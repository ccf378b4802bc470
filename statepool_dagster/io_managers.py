"""The asset store's loader: one Parquet file per asset and run, on any UPath filesystem.

The run assets write their files themselves (``core/stages.py``), a partition at a
time, which is what lets one run persist many partitions. This IO manager reads
them back, for ``defs.load_asset_value`` and any asset that takes one as an input.
"""

from typing import Any

import pandas as pd
import pyarrow as pa
from dagster import ConfigurableIOManagerFactory, InputContext, OutputContext, UPathIOManager
from pydantic import Field
from upath import UPath

from .core.config import Settings
from .core.locations import as_path
from .core.runs.names import check_run_name
from .core.store.files import StoreLayout, read_parquet, write_parquet_atomic
from .core.store.parts import read_table
from .core.store.tables import SCHEMAS
from .readers import to_frame


class ParquetStore(UPathIOManager):
    """Reads a run's table ``<store>/<asset>/<run>/`` (its parts as one); writes atomically."""

    extension = ".parquet"

    def make_safe_partition_path(self, base_path: UPath, partition: str) -> UPath:
        return base_path / check_run_name(partition)

    def dump_to_path(self, context: OutputContext, obj: pd.DataFrame, path: UPath) -> None:
        table = pa.Table.from_pandas(obj, preserve_index=False)
        if not context.has_asset_partitions:
            write_parquet_atomic(path, table)
            return
        with StoreLayout(self._base_path).lock(context.asset_partition_key):
            write_parquet_atomic(path, table)

    def load_from_path(self, context: InputContext, path: UPath) -> pd.DataFrame:
        asset = context.asset_key.path[-1]
        if context.has_asset_partitions and asset in SCHEMAS:
            folder = path.with_suffix("")  # a run's table is a folder of per-checkpoint parts
            if not folder.is_dir():
                raise FileNotFoundError(f"{folder}: no such table (never materialized?)")
            return to_frame(read_table(folder, SCHEMAS[asset]))
        return to_frame(read_parquet(path))

    def get_metadata(self, context: OutputContext, obj: Any) -> dict[str, Any]:
        return {}


class StatepoolIOManager(ConfigurableIOManagerFactory):
    """Parquet asset store rooted at ``store_dir`` (default: ``STATEPOOL_STORE_DIR``)."""

    store_dir: str | None = Field(None, description="STATEPOOL_STORE_DIR (default ./store)")

    def create_io_manager(self, context: Any) -> ParquetStore:
        root = Settings.from_env(store_dir=self.store_dir).store_dir
        return ParquetStore(base_path=UPath(as_path(root)))
