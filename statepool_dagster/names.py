"""Every name the Dagster skin spells: the run assets, the job, resource and metadata keys.

Each is written once, here. The asset names and the report keys are the core's
(``core/stages.py`` writes ``StageReport.values`` under these keys); all of it is meant
to move into ``core/names.py`` beside them.
"""

from .core.stages import EPISODES, PROMPTS, SNAPSHOTS, STATES

# The run assets in the data's order: each is built from the ones before it.
RUN_ASSETS = (EPISODES, SNAPSHOTS, STATES, PROMPTS)
# The last asset of the chain: a run is done once its prompts are materialized.
FINAL_ASSET = PROMPTS

JOB = "statepool_job"
GROUP = "statepool"
# Resource keys. SETTINGS is also the parameter name assets and sensors take it by.
SETTINGS = "statepool"
STORE = "statepool_store"

# Metadata keys of the run assets' materializations.
ROW_COUNT = "dagster/row_count"
COLUMN_SCHEMA = "dagster/column_schema"
FINGERPRINT = "source_fingerprint"
NOTES = "notes"
STATE_COUNT = "states"
REJECTS = "rejects"
SIDECAR_REJECTS = "sidecar_rejects"
# Where each asset's report counts the run's rejects.
REJECT_COUNTS = ((EPISODES, REJECTS), (SNAPSHOTS, REJECTS), (STATES, SIDECAR_REJECTS))
