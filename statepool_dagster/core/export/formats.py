"""The export's row layouts: verl's and TRL's Arrow schemas and one record per row."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from .rows import ABILITY, ExportRow

_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])

VERL_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(_MESSAGE)),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        (
            "extra_info",
            pa.struct(
                [
                    ("index", pa.int64()),
                    ("split", pa.string()),
                    ("state_id", pa.string()),
                    ("run", pa.string()),
                    ("version", pa.int64()),
                    ("has_reference_ops", pa.bool_()),
                    ("state", pa.string()),
                    ("reference_ops", pa.string()),
                    ("prompt_tokens", pa.int64()),
                ]
            ),
        ),
    ]
)


TRL_SCHEMA = pa.schema(
    [
        ("prompt", pa.list_(_MESSAGE)),
        ("state_id", pa.string()),
        ("run", pa.string()),
        ("version", pa.int64()),
        ("ground_truth", pa.string()),
        ("reference_ops", pa.string()),
        ("followup_qids", pa.list_(pa.string())),
        ("gt_map", pa.string()),
        ("state", pa.string()),
        ("prompt_tokens", pa.int64()),
    ]
)


# Where session states are exported, each row also says where it came from; with a
# weight, each row has its weight. A run-only, unweighted export keeps the schemas above.
SOURCE_FIELDS = [("source", pa.string()), ("session", pa.string()), ("policy_step", pa.int64())]
WEIGHT_FIELD = ("weight", pa.float64())
SESSIONS_INDEX = ".statepool_sessions.jsonl"  # pool format: each session state's session


def verl_schema(sources: bool = False, weighted: bool = False) -> pa.Schema:
    """verl's schema, with the source fields in ``extra_info`` and a ``weight`` column."""
    if not (sources or weighted):
        return VERL_SCHEMA
    fields = list(VERL_SCHEMA)
    if sources:
        info = fields[-1]
        fields[-1] = pa.field(info.name, pa.struct([*info.type, *SOURCE_FIELDS]))
    if weighted:
        fields.append(pa.field(*WEIGHT_FIELD))
    return pa.schema(fields)


def trl_schema(sources: bool = False, weighted: bool = False) -> pa.Schema:
    """TRL's schema, with ``source``, ``session``, ``policy_step`` and ``weight`` columns."""
    if not (sources or weighted):
        return TRL_SCHEMA
    fields = list(TRL_SCHEMA)
    if sources:
        fields += [pa.field(*f) for f in SOURCE_FIELDS]
    if weighted:
        fields.append(pa.field(*WEIGHT_FIELD))
    return pa.schema(fields)


def _sources(r: ExportRow) -> dict[str, Any]:
    return {"source": r.source, "session": r.session, "policy_step": r.policy_step}


def verl_record(r: ExportRow, sources: bool = False, weighted: bool = False) -> dict[str, Any]:
    """One row in verl's RL dataset layout; varying shapes (state, ops) travel as JSON."""
    record = {
        "data_source": f"statepool/{r.dataset}",
        "prompt": r.messages(),
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": r.ground_truth()},
        "extra_info": {
            "index": r.index,
            "split": r.split,
            "state_id": r.state_id,
            "run": r.run,
            "version": r.version,
            "has_reference_ops": r.ops.get("next_version") is not None,
            "state": r.state,
            "reference_ops": r.reference_ops,
            "prompt_tokens": r.prompt_tokens,
        },
    }
    if sources:
        record["extra_info"].update(_sources(r))
    if weighted:
        record["weight"] = r.weight
    if r.stand_in_for is not None:
        record["extra_info"]["stand_in_for"] = r.stand_in_for
    return record


def trl_record(r: ExportRow, sources: bool = False, weighted: bool = False) -> dict[str, Any]:
    """A conversational ``prompt`` for GRPOTrainer, plus the columns a reward function reads."""
    state = json.loads(str(r.state))
    record = {
        "prompt": r.messages(),
        "state_id": r.state_id,
        "run": r.run,
        "version": r.version,
        "ground_truth": r.ground_truth(),
        "reference_ops": r.reference_ops,
        "followup_qids": [str(q) for q in state.get("followup_qids", [])],
        "gt_map": json.dumps(state.get("gt_map", {}), ensure_ascii=False),
        "state": r.state,
        "prompt_tokens": r.prompt_tokens,
    }
    if sources:
        record.update(_sources(r))
    if weighted:
        record["weight"] = r.weight
    if r.stand_in_for is not None:
        record["stand_in_for"] = r.stand_in_for
    return record


RECORDS = {"verl": (verl_record, verl_schema), "trl": (trl_record, trl_schema)}
