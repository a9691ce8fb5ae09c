#!/usr/bin/env bash
# postgres-test.sh makes a throwaway local PostgreSQL ready for the store
# tests and prints how to reach it:
#
#   eval "$(scripts/postgres-test.sh)"    # exports HELMR_TEST_DATABASE_URL
#   scripts/postgres-test.sh --url        # prints just the URL
#   scripts/postgres-test.sh --stop       # stops the cluster
#
# It installs the Debian postgresql package when no server binary is found,
# then runs its own cluster (initdb + pg_ctl, no systemd) in HELMR_PG_DIR
# (default /var/tmp/helmr-pgtest), listening on a unix socket in that
# directory and on 127.0.0.1:HELMR_PG_PORT (default 55432). It is
# idempotent: a second run reuses the cluster, role and database. Progress
# goes to stderr; stdout carries only the result. The cluster runs with
# fsync off: it is for tests, not for data anyone keeps.
set -euo pipefail

dir=${HELMR_PG_DIR:-/var/tmp/helmr-pgtest}
port=${HELMR_PG_PORT:-55432}
role=helmr
password=helmr
database=helmr_test
mode=export

case "${1:-}" in
  --url) mode=url ;;
  --stop) mode=stop ;;
  "") ;;
  *) echo "usage: $0 [--url|--stop]" >&2; exit 2 ;;
esac

log() { echo "postgres-test: $*" >&2; }

find_bindir() {
  local b
  b=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
  if [[ -n "$b" && -x "$b/postgres" ]]; then echo "$b"; fi
}

bindir=$(find_bindir)
if [[ -z "$bindir" ]]; then
  [[ $mode == stop ]] && exit 0
  log "installing postgresql"
  if [[ $(id -u) -ne 0 ]]; then
    echo "postgres-test: postgresql is not installed; run as root or: sudo apt-get install -y postgresql" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >&2; }
  bindir=$(find_bindir)
  [[ -n "$bindir" ]] || { echo "postgres-test: no postgres binary after install" >&2; exit 1; }
fi

# PostgreSQL refuses to run as root: use the postgres user then.
if [[ $(id -u) -eq 0 ]]; then
  owner=postgres
  as_owner() { runuser -u postgres -- "$@"; }
else
  owner=$(id -un)
  as_owner() { "$@"; }
fi

data=$dir/data
sock=$dir/sock
pgctl() { as_owner "$bindir/pg_ctl" -D "$data" "$@"; }

if [[ $mode == stop ]]; then
  if [[ -f $data/postmaster.pid ]]; then pgctl stop -m fast >&2; fi
  exit 0
fi

mkdir -p "$dir" "$sock"
chown "$owner" "$dir" "$sock"
chmod 700 "$dir"

if [[ ! -f $data/PG_VERSION ]]; then
  log "initializing cluster in $data"
  # The superuser is the OS owner over the socket; the test role logs in
  # over TCP with a password.
  as_owner "$bindir/initdb" -D "$data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 --locale=C.UTF-8 >&2
fi

if ! pgctl status >/dev/null 2>&1; then
  log "starting server on 127.0.0.1:$port"
  pgctl start -w -t 60 -l "$dir/server.log" \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $sock -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" >&2 ||
    { tail -n 20 "$dir/server.log" >&2; exit 1; }
fi

deadline=$((SECONDS + 60))
until "$bindir/pg_isready" -q -h "$sock" -p "$port"; do
  if ((SECONDS > deadline)); then
    echo "postgres-test: server not ready after 60s; see $dir/server.log" >&2
    exit 1
  fi
  sleep 0.2
done

psql() { as_owner "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$sock" -p "$port" -U postgres "$@"; }
psql -d postgres >&2 <<SQL
SELECT format('CREATE ROLE %I LOGIN CREATEDB PASSWORD %L', '$role', '$password')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$role')
\gexec
SELECT format('CREATE DATABASE %I OWNER %I', '$database', '$role')
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '$database')
\gexec
SQL

url="postgres://$role:$password@127.0.0.1:$port/$database?sslmode=disable"
if [[ $mode == url ]]; then
  echo "$url"
else
  echo "export HELMR_TEST_DATABASE_URL='$url'"
fi
