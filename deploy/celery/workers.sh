#!/usr/bin/env bash
# One Celery worker for STATEPOOL_EXECUTOR=celery, in the foreground (see celery.yaml beside this
# file for what it needs: the `celery` extra, the same instance, code and STATEPOOL_* settings).
#
#   workers.sh [NAME]   start worker NAME@<host> (default: statepool) on $STATEPOOL_CELERY_BROKER
#
# Run one per machine. `--pool solo` runs one step at a time in the worker process: a step
# already spreads its partitions over every core (STATEPOOL_WORKERS), and a worker that is busy
# never holds back a step another idle worker could take.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
: "${STATEPOOL_CELERY_BROKER:?set STATEPOOL_CELERY_BROKER, e.g. redis://127.0.0.1:6390/0}"
: "${DAGSTER_HOME:?set DAGSTER_HOME to the instance the runs use}"
export STATEPOOL_CELERY_BACKEND="${STATEPOOL_CELERY_BACKEND:-$STATEPOOL_CELERY_BROKER}"

exec dagster-celery worker start -A dagster_celery.app -y "$here/celery.yaml" \
  -n "${1:-statepool}" -- --pool solo
