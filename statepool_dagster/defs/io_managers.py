"""The asset store's loader: one Parquet file per asset and run, on any UPath filesystem.

The run assets write their files themselves (``core/stages/``), a partition at a
time, which is what lets one run persist many partitions. This IO manager reads
them back, for ``defs.load_asset_value`` and any asset that takes one as an input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
from dagster import (
    Definitions,
    InitResourceContext,
    InputContext,
    OutputContext,
    UPathIOManager,
    definitions,
    io_manager,
)
from upath import UPath

from ..core.locations import as_path
from ..core.names import SETTINGS, STORE, check_run_name
from ..core.store.atomic import read_parquet, write_parquet_atomic
from ..core.store.layout import StoreLayout
from ..core.store.reading import read_table
from ..core.store.schemas import SCHEMAS
from ..readers import to_frame
from .resources import StatepoolSettings

if TYPE_CHECKING:  # a DataFrame is made only where an asset's value is loaded
    import pandas as pd


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


# A function IO manager taking the settings resource by key. (A ConfigurableIOManagerFactory
# holding it as a nested resource sets off Dagster 1.13's own DeprecationWarning,
# InitResourceContext.dagster_run, from InitResourceContext.replace_config; a partial
# nested resource avoids that but breaks defs.load_asset_value.)
@io_manager(
    required_resource_keys={SETTINGS},
    description="Parquet asset store rooted at the settings' store_dir (STATEPOOL_STORE_DIR).",
)
def statepool_store(context: InitResourceContext) -> ParquetStore:
    statepool: StatepoolSettings = getattr(context.resources, SETTINGS)
    return ParquetStore(base_path=UPath(as_path(statepool.settings().store_dir)))


@definitions
def store_resource() -> Definitions:
    """The asset store, the IO manager every asset's outputs go through, under its key."""
    return Definitions(resources={STORE: statepool_store})
