#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests, from Debian's postgresql package.
#
#   hack/postgres.sh start DIR [PORT]  creates a cluster in DIR, listening on 127.0.0.1:PORT (a free
#                                      port if none is given) and on a unix socket in DIR, with trust
#                                      auth and a database "spawnerd"; prints one line, DSN=postgres://...
#   hack/postgres.sh stop DIR          stops it (fast shutdown); a no-op if it is not running
#
# PG_LISTEN adds addresses to listen on besides 127.0.0.1 (e.g. a container network's gateway), and
# PG_TRUST_CIDR lets clients from that network in without a password (pg_hba.conf).
# With WATCH_PID set, start also leaves a watchdog that, once that process has exited, stops the
# server and removes DIR, so a test binary that dies (a panic, a timeout) leaves nothing behind.
# Durability is off (fsync, synchronous_commit, full_page_writes): the data is thrown away.
set -o errexit -o nounset -o pipefail

usage() { echo "usage: $0 start DIR [PORT] | stop DIR" >&2; exit 2; }
(($# >= 2)) || usage
cmd=$1
dir=$2
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
port=${3:-}

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [[ -z $bindir || ! -x $bindir/pg_ctl ]]; then
  echo "postgres: no PostgreSQL server binaries under /usr/lib/postgresql/*/bin; \`make deps\` installs them (Debian package postgresql)" >&2
  exit 1
fi

# PostgreSQL refuses to run as root: then the cluster belongs to the postgres system user.
as_owner() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

data=$dir/data

stop() {
  if [[ -f $data/postmaster.pid ]]; then
    as_owner "$bindir/pg_ctl" stop -D "$data" -m fast -w -t 30 >/dev/null
  fi
}

start() {
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  data=$dir/data
  if [[ $(id -u) -eq 0 ]]; then
    chown postgres: "$dir"
    if ! runuser -u postgres -- test -w "$dir"; then
      echo "postgres: the postgres user cannot write $dir (are its parent folders traversable?)" >&2
      exit 1
    fi
  fi
  if [[ ! -f $data/PG_VERSION ]]; then
    as_owner "$bindir/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --locale=C \
      --no-sync --no-instructions >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
  fi
  if [[ -n ${PG_TRUST_CIDR:-} ]] && ! grep -q "^host all all $PG_TRUST_CIDR trust" "$data/pg_hba.conf"; then
    echo "host all all $PG_TRUST_CIDR trust" | as_owner tee -a "$data/pg_hba.conf" >/dev/null
  fi
  local listen=127.0.0.1
  [[ -z ${PG_LISTEN:-} ]] || listen+=",$PG_LISTEN"
  local opts="-c listen_addresses=$listen -k $dir -c fsync=off -c synchronous_commit=off"
  opts+=" -c full_page_writes=off -c shared_buffers=64MB -c max_connections=200"
  # Random ports are picked below the kernel's ephemeral range: a port in it can be held by any
  # outgoing connection (e.g. this machine talking to a container from the gateway address).
  local ephemeral_low
  ephemeral_low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  ((ephemeral_low > 21000)) || ephemeral_low=32768
  # A port picked at random may still be taken by the time the server binds it (another cluster
  # starting in parallel): then try another. PostgreSQL starts when it could bind any one of its
  # addresses, so a port it could not bind on every address counts as taken too.
  local tries=0
  while :; do
    local p=$port
    [[ -n $p ]] || p=$((20000 + RANDOM % (ephemeral_low - 20000)))
    as_owner truncate -s 0 "$dir/postgres.log"
    if as_owner "$bindir/pg_ctl" start -D "$data" -l "$dir/postgres.log" -w -t 60 \
      -o "-p $p $opts" >/dev/null 2>&1; then
      if ! grep -q "could not bind" "$dir/postgres.log"; then
        port=$p
        break
      fi
      stop
    fi
    tries=$((tries + 1))
    if [[ -n $port ]] || ((tries >= 20)) || ! grep -q "could not bind\|Address already in use" "$dir/postgres.log"; then
      echo "postgres: the server did not start on every address of $listen; its log:" >&2
      tail -n 20 "$dir/postgres.log" >&2
      exit 1
    fi
  done
  as_owner "$bindir/createdb" -h "$dir" -p "$port" -U postgres spawnerd
  if [[ -n ${WATCH_PID:-} ]]; then
    # setsid and closed descriptors: the caller reading our stdout must not wait on the watchdog.
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done
      bash "$2" stop "$3" && [[ -f $3/data/PG_VERSION ]] && rm -rf "$3"' \
      watchdog "$WATCH_PID" "$self" "$dir" </dev/null >/dev/null 2>&1 &
  fi
  echo "DSN=postgres://postgres@127.0.0.1:$port/spawnerd?sslmode=disable"
}

case $cmd in
start) start ;;
stop) stop ;;
*) usage ;;
esac
