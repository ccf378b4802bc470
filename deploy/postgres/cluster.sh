#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on loopback, for tests/project/test_postgres.py (used by .ci/run and
# `make pg-up` / `make pg-down`). Nothing is installed here: PostgreSQL's server binaries
# must exist (Debian: apt-get install postgresql).
#
#   cluster.sh start DIR [PORT]   initdb in DIR (if new), start on 127.0.0.1:PORT (54329),
#                                 trust auth for the superuser `postgres`; prints the URL
#   cluster.sh stop DIR           stop it (if running) and delete DIR
#
# PostgreSQL refuses to run as root: as root, the cluster runs as the `postgres` user.
set -euo pipefail

usage() {
  echo "usage: $0 start DIR [PORT] | stop DIR" >&2
  exit 2
}

pg_bindir() {
  local newest
  newest="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
  if [[ -n "$newest" && -x "$newest/pg_ctl" ]]; then
    echo "$newest"
  elif command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v pg_ctl)")"
  else
    echo "$0: no pg_ctl found (Debian: apt-get install postgresql)" >&2
    exit 1
  fi
}

# Run a command as the cluster's owner, from a folder it can read.
as_owner() {
  if [[ "$(id -u)" == 0 ]]; then
    (cd / && runuser -u postgres -- "$@")
  else
    (cd / && "$@")
  fi
}

[[ $# -ge 2 ]] || usage
cmd="$1"
dir="$(readlink -f "$2")"
port="${3:-54329}"
bin="$(pg_bindir)"

case "$cmd" in
  start)
    mkdir -p "$dir"
    if [[ "$(id -u)" == 0 ]]; then
      id postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /bin/false postgres
      chown postgres: "$dir"
    fi
    if [[ ! -f "$dir/data/PG_VERSION" ]]; then
      as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 \
        --locale=C.UTF-8 --no-sync >/dev/null
    fi
    if ! as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
      # fsync off: a throwaway cluster trades durability for speed.
      as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=200" \
        >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    fi
    echo "postgresql://postgres@127.0.0.1:$port/postgres"
    ;;
  stop)
    if [[ -f "$dir/data/PG_VERSION" ]] && as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
      as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    fi
    # Only ever delete a folder this script made (a cluster, or nothing at all).
    if [[ -f "$dir/data/PG_VERSION" || -z "$(ls -A "$dir" 2>/dev/null)" ]]; then
      rm -rf "$dir"
    else
      echo "cluster.sh: $dir holds no cluster; left alone" >&2
    fi
    ;;
  *)
    usage
    ;;
esac
