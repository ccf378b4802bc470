"""``state_stats``: what trainers saw per state, folded from feedback segments once sealed."""

from dagster import (
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    asset,
)

from ...core.feedback.folders import stats_folder
from ...core.feedback.importers import feedback_folder
from ...core.feedback.stats_store import load_fold, update_stats
from ...core.locations import is_local
from ...core.names import GROUP, ROW_COUNT
from ...core.report.paths import state_pages_path
from ...core.store.layout import StoreLayout
from ..resources import StatepoolSettings

PREVIEW_ROWS = 20


@asset(group_name=GROUP, kinds={"python", "parquet"})
def state_stats(context: AssetExecutionContext, statepool: StatepoolSettings) -> MaterializeResult:
    """Per state: groups and answers seen, score mean and spread, zero-variance share, the
    last groups' spreads, the policy step last seen and the ops-match rate.

    Folded from the sealed feedback segments (STATEPOOL_FEEDBACK_DIR, else
    <store>/feedback) not folded before: one new segment costs one segment's work.
    Written to <store>/feedback_stats/state_stats.parquet, each state's history by policy
    step beside it; the report's state pages (state_pages, <store>/report/states/) show it.
    """
    settings = statepool.settings()
    store = settings.store_dir
    folder = feedback_folder(settings)
    report = update_stats(settings.store_dir, folder)
    if report.bad:
        context.log.warning(f"{report.bad} feedback lines were not records (see fold.json)")
    rows = report.table.to_pylist()
    groups = sum(r["groups"] for r in rows)
    spread = sum(r["groups"] for r in rows if r["zero_variance_share"] is not None)
    zero = sum(r["zero_variance_groups"] for r in rows)
    _, manifest = load_fold(settings.store_dir)
    pages = state_pages_path(StoreLayout(store))
    local = is_local(pages)  # a file: URL the UI opens in a new tab (a store on S3: the path)
    return MaterializeResult(
        metadata={
            ROW_COUNT: len(rows),
            "states": len(rows),
            "groups": groups,
            "answers": sum(r["answers"] for r in rows),
            "zero_variance_share": zero / spread if spread else 0.0,
            "new_segments": report.new_segments,
            "new_records": report.new_records,
            "new_bad_lines": report.bad,
            "bad_lines": manifest.get("bad", 0),
            "open_groups": manifest.get("open_groups", 0),
            "feedback": MetadataValue.path(str(folder)),
            "table": MetadataValue.path(str(stats_folder(settings.store_dir))),
            "preview": MetadataValue.md(stats_markdown(rows)),
            "state_pages": MetadataValue.path(str(pages)),
            **({"state_pages_link": MetadataValue.url(pages.resolve().as_uri())} if local else {}),
        }
    )


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def stats_markdown(rows: list[dict], limit: int = PREVIEW_ROWS) -> str:
    """The most answered states as a Markdown table."""
    if not rows:
        return "_no feedback yet_"
    top = sorted(rows, key=lambda r: (-r["answers"], r["state_id"]))[:limit]
    lines = [
        "| state | groups | answers | score mean | score std | zero-var share | ops match | step |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in top:
        step = "-" if r["last_step"] is None else str(r["last_step"])
        lines.append(
            f"| {r['state_id']} | {r['groups']} | {r['answers']} | {_f(r['score_mean'])} | "
            f"{_f(r['score_std'])} | {_f(r['zero_variance_share'])} | "
            f"{_f(r['ops_match_rate'])} | {step} |"
        )
    if len(rows) > limit:
        lines.append(f"\n_{len(rows) - limit} more states_")
    return "\n".join(lines)
