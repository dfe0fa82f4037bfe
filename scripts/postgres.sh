#!/usr/bin/env bash
# Starts a throw-away PostgreSQL server for the tests and prints its URL.
#   eval "$(scripts/postgres.sh start)"   # exports VIRTPLANE_TEST_PG_URL
#   scripts/postgres.sh stop
set -euo pipefail
DIR=${VIRTPLANE_PG_DIR:-/tmp/virtplane-pg}
PORT=${VIRTPLANE_PG_PORT:-54329}
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
case "${1:-start}" in
start)
  if [ -z "$BIN" ] || ! id postgres >/dev/null 2>&1; then
    echo "echo 'postgres.sh: PostgreSQL is not installed; PostgreSQL tests will skip' >&2"; exit 0
  fi
  if [ ! -f "$DIR/PG_VERSION" ]; then
    mkdir -p "$DIR"; chown postgres "$DIR"
    su postgres -s /bin/sh -c "$BIN/initdb -D $DIR -A trust -U postgres" >/dev/null
  fi
  if ! su postgres -s /bin/sh -c "$BIN/pg_ctl -D $DIR status" >/dev/null 2>&1; then
    su postgres -s /bin/sh -c "$BIN/pg_ctl -D $DIR -l $DIR/server.log -w -o '-p $PORT -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off' start" >/dev/null
  fi
  echo "export VIRTPLANE_TEST_PG_URL=postgresql+psycopg://postgres@127.0.0.1:$PORT/postgres"
  ;;
stop)
  [ -n "$BIN" ] && su postgres -s /bin/sh -c "$BIN/pg_ctl -D $DIR -m fast stop" >/dev/null 2>&1 || true
  ;;
esac
