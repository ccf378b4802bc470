#!/usr/bin/env bash
# A throwaway Redis on loopback, the Celery broker and result backend for tests/project/test_celery.py
# (used by .ci/run and `make redis-up` / `make redis-down`). Nothing is installed here:
# redis-server must exist (Debian: apt-get install redis-server).
#
#   redis.sh start DIR [PORT]   start redis-server on 127.0.0.1:PORT (6390), working files in
#                               DIR, no persistence; waits until it answers, prints the URL
#   redis.sh stop DIR           stop it (if running) and delete DIR
set -euo pipefail

usage() {
  echo "usage: $0 start DIR [PORT] | stop DIR" >&2
  exit 2
}

[[ $# -ge 2 ]] || usage
cmd="$1"
dir="$(readlink -f "$2")"
port="${3:-6390}"

command -v redis-server >/dev/null 2>&1 || {
  echo "$0: no redis-server found (Debian: apt-get install redis-server)" >&2
  exit 1
}

pid_of() {
  [[ -f "$dir/redis.pid" ]] && cat "$dir/redis.pid"
}

case "$cmd" in
  start)
    if [[ -n "$(ls -A "$dir" 2>/dev/null)" && ! -f "$dir/.statepool_redis" ]]; then
      echo "$0: $dir is not empty and not a redis.sh folder: pick a new one" >&2
      exit 1
    fi
    mkdir -p "$dir"
    pid="$(pid_of || true)"
    if [[ -z "$pid" ]] || ! kill -0 "$pid" 2>/dev/null; then
      # A marker, so that `stop` only ever deletes a folder this script made.
      touch "$dir/.statepool_redis"
      redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --save '' --appendonly no \
        --protected-mode yes --daemonize yes --pidfile "$dir/redis.pid" \
        --logfile "$dir/redis.log"
    fi
    for _ in $(seq 100); do
      if redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then
        echo "redis://127.0.0.1:$port/0"
        exit 0
      fi
      sleep 0.1
    done
    echo "$0: redis-server did not answer on 127.0.0.1:$port" >&2
    cat "$dir/redis.log" >&2 2>/dev/null || true
    exit 1
    ;;
  stop)
    pid="$(pid_of || true)"
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
    fi
    if [[ -f "$dir/.statepool_redis" || -z "$(ls -A "$dir" 2>/dev/null)" ]]; then
      rm -rf "$dir"
    else
      echo "redis.sh: $dir holds no redis.sh server; left alone" >&2
    fi
    ;;
  *)
    usage
    ;;
esac
