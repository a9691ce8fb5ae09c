#!/usr/bin/env bash
# cluster.sh runs a multi-host Helmr on one machine: PostgreSQL
# (scripts/postgres-test.sh), an S3 server (scripts/s3-test.sh, SeaweedFS),
# control-plane replicas (`helmr server`, store in PostgreSQL, blobs in S3,
# one master key, worker token and owner token) behind an haproxy load
# balancer, and workers each in a network namespace of its own (a "host":
# its own address, data dir and state dir) leasing through the balancer.
#
#   eval "$(scripts/cluster.sh up [--dir D] [--workers N] [--replicas N] [--runtime process|gvisor])"
#   scripts/cluster.sh kill worker K | kill replica K    # kill -9 it (K is 1-based)
#   scripts/cluster.sh start worker K | start replica K  # start it again on its data, wait until ready
#   scripts/cluster.sh restart postgres                  # fast stop and start, same data
#   scripts/cluster.sh status                            # one line per part: name pid up|down
#   scripts/cluster.sh pids worker K                     # the worker's pid
#   scripts/cluster.sh down [--keep]                     # stop everything, remove D unless --keep
#
# `up` prints only `export K=V` lines on stdout (HELMR_CLUSTER_DIR, HELMR_URL
# (the balancer), HELMR_API_KEY (the owner token), HELMR_CLUSTER_WORKERS,
# HELMR_CLUSTER_REPLICAS, HELMR_CLUSTER_DATABASE_URL,
# HELMR_CLUSTER_REPLICA_URLS, HELMR_CLUSTER_REPLICA_METRICS_URLS,
# HELMR_CLUSTER_WORKER_METRICS_URLS, HELMR_CLUSTER_LB_STATS_URL); progress
# goes to stderr. The other verbs find the cluster in --dir or
# HELMR_CLUSTER_DIR (default /var/tmp/helmr-cluster). Logs are in D/logs,
# pids in D/pids, each process's settings in D/etc (mode 0600: keys).
#
# Settings passed through from `up`'s environment to every replica or
# worker they concern: HELMR_WORKER_TTL, HELMR_HEARTBEAT, HELMR_PARK_AFTER,
# HELMR_WARM, HELMR_SLOTS, HELMR_EGRESS, HELMR_WORKSPACE_QUOTA,
# HELMR_ROOT_SIZE, HELMR_LAYER_CACHE, HELMR_KEEP_MOVED,
# HELMR_ENV_CONCURRENCY, HELMR_RUNSC, HELMR_AGENT_PATH, HELMR_CACHE_DIR.
# HELMR_BIN is the helmr binary (default: the repository's bin/helmr, with
# helmr-agent beside it; `make build`).
#
# Hosts: a bridge in the root network namespace with a 10.x.y.0/24 derived
# from D (so two clusters differ), the balancer listening on its .1 and on
# 127.0.0.1, worker K at .(10+K) in namespace helmr-<hash>-hK, with a UTS
# namespace whose host name is hK. The workers enter only the network (and
# UTS) namespace, not a mount namespace of their own (`ip netns exec` would
# make one): what a worker mounts stays visible on the machine after it is
# killed, as on a real host, where the next worker must clean it up. The
# hosts reach the balancer and each other, nothing beyond (no NAT): sandbox
# egress to the internet does not work here. Needs root.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
dir=${HELMR_CLUSTER_DIR:-/var/tmp/helmr-cluster}
passthrough=(HELMR_WORKER_TTL HELMR_HEARTBEAT HELMR_PARK_AFTER HELMR_WARM HELMR_SLOTS HELMR_EGRESS
  HELMR_WORKSPACE_QUOTA HELMR_ROOT_SIZE HELMR_LAYER_CACHE HELMR_KEEP_MOVED HELMR_ENV_CONCURRENCY
  HELMR_RUNSC HELMR_AGENT_PATH)

log() { echo "cluster: $*" >&2; }
die() { echo "cluster: $*" >&2; exit 1; }
usage() {
  sed -n '/^#   /s/^#   //p' "${BASH_SOURCE[0]}" >&2
  exit 2
}

# free_port prints a TCP port on 127.0.0.1 that nothing listens on and
# that this run has not handed out yet, below the kernel's ephemeral
# range (so no outgoing connection takes it before its server binds it).
taken=" "
free_port() {
  local p lo
  lo=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  ((lo > 12000)) || lo=32768
  for _ in $(seq 200); do
    p=$((10000 + RANDOM % (lo - 10000)))
    if [[ $taken != *" $p "* ]] && ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
      taken="$taken$p "
      echo "$p"
      return
    fi
  done
  die "no free port"
}

# wait_until DESC SECONDS LOG CMD...: polls CMD until it succeeds; on
# timeout prints LOG's tail and fails.
wait_until() {
  local desc=$1 secs=$2 logf=$3
  shift 3
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then
      [[ -f $logf ]] && { echo "--- tail of $logf" >&2; tail -n 40 "$logf" >&2; }
      die "$desc not ready after ${secs}s"
    fi
    sleep 0.2
  done
}

# alive PID: the process exists and is not a zombie waiting to be reaped.
alive() {
  [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null || return 1
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ $st != Z && $st != X ]]
}
pid_of() { cat "$dir/pids/$1.pid" 2>/dev/null || true; }
pg_pid() { head -n1 "$dir/pg/data/postmaster.pid" 2>/dev/null || true; }
s3_pid() { cat "$dir/s3/weed.pid" 2>/dev/null || true; }

load() {
  [[ -f $dir/cluster.env ]] || die "no cluster in $dir (scripts/cluster.sh up --dir $dir)"
  # shellcheck disable=SC1091
  source "$dir/cluster.env"
}

# launch NAME CMD...: starts CMD in a session of its own (so a signal to
# the caller's process group does not reach it), stdin closed, output
# appended to D/logs/NAME.log, pid in D/pids/NAME.pid (the pid of CMD
# itself: every wrapper execs).
launch() {
  local name=$1
  shift
  # shellcheck disable=SC2016
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$dir/pids/$name.pid" "$@" \
    </dev/null >>"$dir/logs/$name.log" 2>&1 &
  local deadline=$((SECONDS + 5))
  until [[ -s $dir/pids/$name.pid ]]; do
    ((SECONDS < deadline)) || die "$name did not start"
    sleep 0.05
  done
}

# stop_pid PID: SIGTERM, up to 15 s, then SIGKILL.
stop_pid() {
  local pid=$1
  alive "$pid" || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 150); do alive "$pid" || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 50); do alive "$pid" || return 0; sleep 0.1; done
}

running_cluster() {
  [[ -f $dir/cluster.env ]] || return 1
  local f
  for f in "$dir"/pids/*.pid; do
    [[ -f $f ]] && alive "$(cat "$f")" && return 0
  done
  alive "$(pg_pid)" || alive "$(s3_pid)"
}

host_env() {
  # The environment every process starts with: nothing of the caller's
  # but PATH and HOME; the settings come from D/etc.
  echo "PATH=$PATH" "HOME=${HOME:-/root}"
}

replica_url() { echo "http://127.0.0.1:$(eval echo "\$REPLICA_PORT_$1")"; }
replica_metrics() { echo "http://127.0.0.1:$(eval echo "\$REPLICA_METRICS_$1")"; }
worker_ip() { echo "$NET_PREFIX.$((10 + $1))"; }
worker_metrics() { echo "http://$(worker_ip "$1"):9480"; }
netns_name() { echo "helmr-$HASH-h$1"; }

ready() { curl -fsS -m 3 -o /dev/null "$1/readyz"; }

# lb_up K: the balancer's health checks count replica K up in both
# backends.
lb_up() {
  curl -fsS -m 3 "$LB_STATS/;csv" |
    awk -F, -v s="r$1" '($1=="replicas" || $1=="terminals") && $2==s && $18 ~ /^UP/ {n++} END {exit n != 2}'
}

start_replica() {
  local k=$1
  alive "$(pid_of "replica-$k")" && die "replica $k is running (pid $(pid_of "replica-$k"))"
  mkdir -p "$dir/replicas/r$k"
  # shellcheck disable=SC2046
  launch "replica-$k" env -i $(host_env) HELMR_CONFIG="$dir/etc/server.conf" \
    HELMR_DATA_DIR="$dir/replicas/r$k" HELMR_ADDR="127.0.0.1:$(eval echo "\$REPLICA_PORT_$k")" \
    HELMR_METRICS_ADDR="127.0.0.1:$(eval echo "\$REPLICA_METRICS_$k")" \
    "$HELMR_BIN_PATH" server
  wait_until "replica $k" 60 "$dir/logs/replica-$k.log" ready "$(replica_url "$k")"
  if alive "$(pid_of lb)"; then
    wait_until "replica $k in the balancer" 30 "$dir/logs/lb.log" lb_up "$k"
  fi
  log "replica $k ready at $(replica_url "$k")"
}

start_worker() {
  local k=$1 ns
  ns=$(netns_name "$k")
  alive "$(pid_of "worker-$k")" && die "worker $k is running (pid $(pid_of "worker-$k"))"
  [[ -e /run/netns/$ns ]] || die "host $k has no network namespace $ns"
  local data=$dir/hosts/h$k
  mkdir -p "$data/state"
  chmod 711 "$dir/hosts" "$data"
  # nsenter and unshare exec without forking (no --pid, no --fork): the
  # recorded pid is helmr's.
  # shellcheck disable=SC2016,SC2046
  launch "worker-$k" nsenter --net="/run/netns/$ns" -- unshare --uts -- \
    bash -c 'hostname "$0" && exec "$@"' "h$k" \
    env -i $(host_env) HELMR_CONFIG="$dir/etc/worker.conf" HELMR_DATA_DIR="$data" \
    HELMR_STATE_DIR="$data/state" HELMR_METRICS_ADDR="$(worker_ip "$k"):9480" \
    "$HELMR_BIN_PATH" worker --control-url "$LB_BRIDGE_URL"
  wait_until "worker $k" 90 "$dir/logs/worker-$k.log" ready "$(worker_metrics "$k")"
  log "worker $k ready (host h$k at $(worker_ip "$k"))"
}

kill_part() {
  local what=$1 k=$2 pid
  pid=$(pid_of "$what-$k")
  alive "$pid" || die "$what $k is not running"
  kill -9 "$pid"
  for _ in $(seq 100); do alive "$pid" || return 0; sleep 0.05; done
  die "$what $k (pid $pid) survived kill -9"
}

# setup_host K: network namespace, veth into the bridge, address, route.
setup_host() {
  local k=$1 ns veth peer
  ns=$(netns_name "$k")
  veth="hv$HASH$k"
  peer="hp$HASH$k"
  ip netns add "$ns"
  ip link add "$veth" type veth peer name "$peer"
  ip link set "$peer" netns "$ns"
  ip link set "$veth" master "$BRIDGE" up
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "$peer" name eth0
  ip -n "$ns" addr add "$(worker_ip "$k")/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "$NET_PREFIX.1"
}

write_lb_config() {
  local k
  {
    cat <<CFG
# haproxy for scripts/cluster.sh: round robin over the control-plane
# replicas, health-checked on /readyz; long timeouts, since workers
# long-poll and event, session and terminal streams stay open.
global
    maxconn 4096
    log stdout format raw local0 info

defaults
    mode http
    log global
    option httplog
    timeout connect 3s
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h
    timeout http-request 30s
    timeout http-keep-alive 60s
    timeout queue 30s
    # A connection that fails goes to the other replica (a request that
    # reached a replica is never replayed).
    retries 3
    option redispatch 1

frontend api
    bind 127.0.0.1:$LB_PORT
    bind $NET_PREFIX.1:$LB_PORT
    # A workspace's terminals live in the memory of the replica that
    # opened them: all of a workspace's terminal requests go to one.
    use_backend terminals if { path_reg ^/v1/workspaces/[^/]+/terminals }
    # A worker's requests all go to one replica (by the worker id it
    # sends): the operations it takes, their data and results live in
    # that replica's memory.
    use_backend workers if { path_beg /v1/worker/ }
    default_backend replicas

backend replicas
    # Round robin; an E2B sandbox's in-sandbox calls (its processes and
    # watches live in one replica's memory) by their E2b-Sandbox-Id.
    balance hdr(E2b-Sandbox-Id)
    hash-type consistent
    option httpchk GET /readyz
    http-check expect status 200
    default-server check inter 1s fall 2 rise 1
CFG
    for k in $(seq "$REPLICAS"); do
      echo "    server r$k 127.0.0.1:$(eval echo "\$REPLICA_PORT_$k")"
    done
    cat <<CFG

backend workers
    balance hdr(Helmr-Worker-Id)
    hash-type consistent
    # A worker that goes away (its long poll closed) is seen by the
    # replica at once: an operation is not handed to a dead poll.
    option abortonclose
    option httpchk GET /readyz
    http-check expect status 200
    default-server check inter 1s fall 2 rise 1
CFG
    for k in $(seq "$REPLICAS"); do
      echo "    server r$k 127.0.0.1:$(eval echo "\$REPLICA_PORT_$k")"
    done
    cat <<CFG

backend terminals
    balance uri depth 3
    hash-type consistent
    option httpchk GET /readyz
    http-check expect status 200
    default-server check inter 1s fall 2 rise 1
CFG
    for k in $(seq "$REPLICAS"); do
      echo "    server r$k 127.0.0.1:$(eval echo "\$REPLICA_PORT_$k")"
    done
    cat <<CFG

listen stats
    bind 127.0.0.1:$LB_STATS_PORT
    stats enable
    stats uri /
CFG
  } >"$dir/lb.cfg"
}

ensure_haproxy() {
  command -v haproxy >/dev/null && return
  log "installing haproxy"
  DEBIAN_FRONTEND=noninteractive apt-get install -y haproxy >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y haproxy >&2; } ||
    die "cannot install haproxy (apt-get install -y haproxy): the cluster needs it as its load balancer"
  command -v haproxy >/dev/null || die "no haproxy after install"
}

# pick_subnet sets NET_PREFIX to a 10.x.y of a /24 no address or route of
# this machine uses, derived from HASH.
pick_subnet() {
  local a=$((200 + 0x${HASH:0:2} % 50)) b=$((0x${HASH:2:2})) used
  used=$( (ip -4 addr; ip -4 route) 2>/dev/null)
  for _ in $(seq 50); do
    if ! grep -q "10\.$a\.$b\." <<<"$used"; then
      NET_PREFIX=10.$a.$b
      return
    fi
    b=$(((b + 1) % 256))
  done
  die "no free 10.$a.x.0/24 for the hosts' bridge"
}

cmd_up() {
  local workers=3 replicas=2 runtime=process
  while (($#)); do
    case $1 in
      --dir) dir=$2; shift 2 ;;
      --workers) workers=$2; shift 2 ;;
      --replicas) replicas=$2; shift 2 ;;
      --runtime) runtime=$2; shift 2 ;;
      *) usage ;;
    esac
  done
  [[ $workers =~ ^[1-9][0-9]?$ ]] || die "--workers $workers: want 1 to 99"
  [[ $replicas =~ ^[1-9]$ ]] || die "--replicas $replicas: want 1 to 9"
  [[ $runtime == process || $runtime == gvisor ]] || die "--runtime $runtime: want process or gvisor"
  [[ $(id -u) -eq 0 ]] || die "needs root (network namespaces, sandboxes)"
  [[ $dir == /* ]] || dir=$(pwd)/$dir
  dir=${dir%/}
  for c in ip nsenter unshare curl setsid; do command -v "$c" >/dev/null || die "needs $c"; done
  local bin=${HELMR_BIN:-$repo/bin/helmr}
  [[ -x $bin ]] || die "no helmr binary at $bin: run make build (or set HELMR_BIN)"
  bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
  [[ -n ${HELMR_AGENT_PATH:-} || -x $(dirname "$bin")/helmr-agent ]] ||
    die "no helmr-agent beside $bin: run make build (or set HELMR_AGENT_PATH)"

  if running_cluster; then
    die "a cluster is running in $dir: scripts/cluster.sh down --dir $dir first"
  fi
  if [[ -e $dir ]]; then
    log "clearing what a previous cluster left in $dir"
    cmd_down >&2
  fi
  ensure_haproxy
  mkdir -p "$dir"/{logs,pids,etc,hosts,replicas}
  chmod 711 "$dir"
  chmod 700 "$dir/etc"
  # The process tier's sandboxes walk to their state by path: every
  # parent of D must be searchable by others.
  local p=$dir
  while [[ $p != / ]]; do
    p=$(dirname "$p")
    [[ $(($(stat -c '%a' "$p" | sed 's/^.*\(.\)$/\1/') & 1)) -eq 1 ]] ||
      die "$p is not searchable by others (o+x): the process tier's sandboxes cannot reach their state below it"
  done
  # On any failure from here on, stop what started; keep the logs.
  up_done=false
  trap 'if [[ $up_done != true ]]; then log "up failed; stopping what started (logs kept in $dir/logs)"; cmd_down --keep >&2; fi' EXIT

  HASH=$(printf %s "$dir" | sha256sum | cut -c1-6)
  BRIDGE=hb$HASH
  pick_subnet
  ip link show "$BRIDGE" >/dev/null 2>&1 && die "bridge $BRIDGE exists: another cluster uses $dir's name"

  log "PostgreSQL in $dir/pg"
  local pg_port database_url
  pg_port=$(free_port)
  database_url=$(HELMR_PG_DIR=$dir/pg HELMR_PG_PORT=$pg_port "$here/postgres-test.sh" --url)
  ln -sf ../pg/server.log "$dir/logs/postgres.log"
  log "S3 (SeaweedFS) in $dir/s3"
  # s3-test.sh picks its ports in the ephemeral range, where one may be
  # taken before weed binds it: it then fails, and a second try picks
  # others.
  local s3env="" try
  for try in 1 2 3; do
    s3env=$(HELMR_S3_DIR=$dir/s3 "$here/s3-test.sh") && break
    s3env=""
    log "the S3 server did not start (try $try of 3; its log: $dir/logs/s3-try$try.log)"
    cp "$dir/s3/weed.log" "$dir/logs/s3-try$try.log" 2>/dev/null || true
    HELMR_S3_DIR=$dir/s3 "$here/s3-test.sh" --stop >&2 || true
  done
  [[ -n $s3env ]] || die "the S3 server did not start; see $dir/logs/s3-try*.log"
  eval "$s3env"
  ln -sf ../s3/weed.log "$dir/logs/s3.log"

  local k lb_port
  lb_port=$(free_port)
  {
    echo "HELMR_BIN_PATH='$bin'"
    echo "HASH=$HASH BRIDGE=$BRIDGE NET_PREFIX=$NET_PREFIX"
    echo "WORKERS=$workers REPLICAS=$replicas RUNTIME=$runtime"
    echo "PG_PORT=$pg_port DATABASE_URL='$database_url'"
    echo "LB_PORT=$lb_port LB_STATS_PORT=$(free_port)"
    echo "LB_URL=http://127.0.0.1:$lb_port LB_BRIDGE_URL=http://$NET_PREFIX.1:$lb_port"
    echo "OWNER_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    for k in $(seq "$replicas"); do echo "REPLICA_PORT_$k=$(free_port) REPLICA_METRICS_$k=$(free_port)"; done
  } >"$dir/cluster.env"
  echo 'LB_STATS=http://127.0.0.1:$LB_STATS_PORT' >>"$dir/cluster.env"
  chmod 600 "$dir/cluster.env"
  load

  local worker_token master_key ck_key s
  worker_token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  master_key=$(head -c 32 /dev/urandom | base64)
  ck_key=$(head -c 32 /dev/urandom | base64)
  {
    echo "# helmr server (each replica): written by scripts/cluster.sh"
    echo "HELMR_DATABASE_URL=$DATABASE_URL"
    echo "HELMR_BLOB_URL=$HELMR_TEST_S3_URL/cluster"
    echo "HELMR_S3_ENDPOINT=$HELMR_TEST_S3_ENDPOINT"
    echo "HELMR_S3_REGION=us-east-1"
    echo "HELMR_S3_ACCESS_KEY=$HELMR_TEST_S3_ACCESS_KEY"
    echo "HELMR_S3_SECRET_KEY=$HELMR_TEST_S3_SECRET_KEY"
    echo "HELMR_MASTER_KEY=$master_key"
    echo "HELMR_OWNER_TOKEN=$OWNER_TOKEN"
    echo "HELMR_WORKER_TOKEN=$worker_token"
    # The control plane checks its worker TTL against the heartbeat.
    for s in HELMR_WORKER_TTL HELMR_HEARTBEAT HELMR_ENV_CONCURRENCY; do [[ -n ${!s:-} ]] && echo "$s=${!s}"; done
  } >"$dir/etc/server.conf"
  {
    echo "# helmr worker (each host): written by scripts/cluster.sh"
    echo "HELMR_WORKER_TOKEN=$worker_token"
    echo "HELMR_CHECKPOINT_ENCRYPTION_KEY=$ck_key"
    echo "HELMR_RUNTIME=$runtime"
    echo "HELMR_CACHE_DIR=${HELMR_CACHE_DIR:-${HOME:-/root}/.cache/helmr}"
    for s in "${passthrough[@]}"; do
      [[ $s == HELMR_WORKER_TTL || $s == HELMR_ENV_CONCURRENCY ]] && continue
      [[ -n ${!s:-} ]] && echo "$s=${!s}"
    done
  } >"$dir/etc/worker.conf"
  chmod 600 "$dir/etc/server.conf" "$dir/etc/worker.conf"

  log "bridge $BRIDGE at $NET_PREFIX.1/24"
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET_PREFIX.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up

  for k in $(seq "$replicas"); do start_replica "$k"; done
  write_lb_config
  haproxy -c -q -f "$dir/lb.cfg" >&2 || die "haproxy rejects $dir/lb.cfg"
  launch lb haproxy -db -f "$dir/lb.cfg"
  wait_until "the load balancer" 30 "$dir/logs/lb.log" ready "$LB_URL"
  for k in $(seq "$replicas"); do wait_until "replica $k in the balancer" 30 "$dir/logs/lb.log" lb_up "$k"; done
  log "load balancer at $LB_URL and $LB_BRIDGE_URL"

  for k in $(seq "$workers"); do
    setup_host "$k"
    mkdir -p "$dir/hosts/h$k"
  done
  for k in $(seq "$workers"); do start_worker "$k"; done
  wait_until "$workers live workers in the API" 60 "$dir/logs/replica-1.log" live_workers "$workers"
  up_done=true

  local urls="" murls="" wurls=""
  for k in $(seq "$replicas"); do urls="$urls $(replica_url "$k")"; murls="$murls $(replica_metrics "$k")"; done
  for k in $(seq "$workers"); do wurls="$wurls $(worker_metrics "$k")"; done
  log "up: $replicas replicas, $workers workers ($runtime tier)"
  echo "export HELMR_CLUSTER_DIR='$dir'"
  echo "export HELMR_URL='$LB_URL'"
  echo "export HELMR_API_KEY='$OWNER_TOKEN'"
  echo "export HELMR_CLUSTER_WORKERS=$workers"
  echo "export HELMR_CLUSTER_REPLICAS=$replicas"
  echo "export HELMR_CLUSTER_DATABASE_URL='$DATABASE_URL'"
  echo "export HELMR_CLUSTER_REPLICA_URLS='${urls# }'"
  echo "export HELMR_CLUSTER_REPLICA_METRICS_URLS='${murls# }'"
  echo "export HELMR_CLUSTER_WORKER_METRICS_URLS='${wurls# }'"
  echo "export HELMR_CLUSTER_LB_STATS_URL='$LB_STATS'"
}

# live_workers N: the API lists at least N live workers.
live_workers() {
  local n
  n=$(curl -fsS -m 5 -H "Authorization: Bearer $OWNER_TOKEN" "$LB_URL/v1/workers?project=cluster" |
    grep -o '"live":true' | wc -l)
  ((n >= $1))
}

# procs_in_dir lists the pids of processes whose executable, working
# directory, root, command line or Helmr settings name a path below D
# (sandboxes and helpers a killed worker left), and those in a host's
# network namespace; never this script or its callers.
procs_in_dir() {
  local p pid nets="" k ns inode mine=" " a=$$
  while [[ -n $a && $a != 0 ]]; do
    mine="$mine$a "
    a=$(awk '{print $4}' "/proc/$a/stat" 2>/dev/null || true)
  done
  for ns in /run/netns/helmr-"${HASH:-none}"-h*; do
    [[ -e $ns ]] || continue
    inode=$(stat -L -c %i "$ns" 2>/dev/null) && nets="$nets $inode "
  done
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [[ $pid == "$BASHPID" || $mine == *" $pid "* ]] && continue
    for k in exe cwd root; do
      case $(readlink "$p/$k" 2>/dev/null) in "$dir" | "$dir"/*) echo "$pid"; continue 2 ;; esac
    done
    if tr '\0' '\n' 2>/dev/null <"$p/cmdline" | grep -qF "$dir/" ||
      tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qE "^HELMR_(CONFIG|DATA_DIR|STATE_DIR)=$dir/"; then
      echo "$pid"
      continue
    fi
    if [[ -n $nets ]]; then
      inode=$(stat -L -c %i "$p/ns/net" 2>/dev/null) || continue
      if [[ $nets == *" $inode "* ]]; then echo "$pid"; fi
    fi
  done
  return 0
}

cmd_down() {
  local keep=false
  while (($#)); do
    case $1 in
      --keep) keep=true; shift ;;
      --dir) dir=$2; shift 2 ;;
      *) usage ;;
    esac
  done
  dir=${dir%/}
  [[ -d $dir ]] || { log "nothing in $dir"; return 0; }
  [[ $(id -u) -eq 0 ]] || die "needs root"
  if [[ -f $dir/cluster.env ]]; then
    # shellcheck disable=SC1091
    source "$dir/cluster.env"
  fi
  local f name
  # Workers first (they destroy their sandboxes on SIGTERM), then the
  # balancer and the replicas.
  for f in "$dir"/pids/worker-*.pid "$dir"/pids/lb.pid "$dir"/pids/replica-*.pid; do
    [[ -f $f ]] || continue
    name=$(basename "$f" .pid)
    stop_pid "$(cat "$f")"
    rm -f "$f"
  done
  if [[ -d $dir/s3 ]]; then
    [[ -f $dir/s3/weed.log ]] && cp "$dir/s3/weed.log" "$dir/logs/s3.log" 2>/dev/null || true
    HELMR_S3_DIR=$dir/s3 "$here/s3-test.sh" --stop >&2 || true
  fi
  if [[ -f $dir/pg/data/postmaster.pid ]]; then
    HELMR_PG_DIR=$dir/pg HELMR_PG_PORT=${PG_PORT:-55432} "$here/postgres-test.sh" --stop >&2 || true
  fi
  # Whatever else runs from D or in a host's namespace: what killed
  # workers left.
  local pids pid round
  for round in 1 2 3; do
    pids=$(procs_in_dir)
    [[ -z $pids ]] && break
    log "killing leftover processes: $(echo $pids)"
    for pid in $pids; do kill -9 "$pid" 2>/dev/null || true; done
    sleep 0.3
  done
  pids=$(procs_in_dir)
  [[ -z $pids ]] || log "processes left after kill -9 (round $round): $(echo $pids)"
  # Mounts below D, deepest first.
  local m
  for _ in 1 2 3; do
    m=$(awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r)
    [[ -z $m ]] && break
    while read -r mp; do
      [[ -n $mp ]] && umount -l "$mp" 2>/dev/null || true
    done <<<"$m"
  done
  # Network namespaces, veths, the bridge.
  local ns
  if [[ -n ${HASH:-} ]]; then
    for ns in /run/netns/helmr-"$HASH"-h*; do
      [[ -e $ns ]] && ip netns del "$(basename "$ns")"
    done
    for f in /sys/class/net/hv"$HASH"*; do
      [[ -e $f ]] && ip link del "$(basename "$f")" 2>/dev/null || true
    done
    ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
  fi
  if [[ $keep == false ]]; then
    rm -rf "$dir" || { sleep 1; rm -rf "$dir"; }
    log "down: $dir removed"
  else
    rm -f "$dir/cluster.env"
    log "down: kept $dir"
  fi
}

cmd_status() {
  load
  local k pid
  line() { if alive "$2"; then echo "$1 $2 up"; else echo "$1 ${2:--} down"; fi; }
  line postgres "$(pg_pid)"
  line s3 "$(s3_pid)"
  line lb "$(pid_of lb)"
  for k in $(seq "$REPLICAS"); do line "replica-$k" "$(pid_of "replica-$k")"; done
  for k in $(seq "$WORKERS"); do line "worker-$k" "$(pid_of "worker-$k")"; done
}

# part_index WHAT K: checks K names one of the cluster's WHATs.
part_index() {
  local what=$1 k=$2 max
  case $what in
    worker) max=$WORKERS ;;
    replica) max=$REPLICAS ;;
    *) usage ;;
  esac
  [[ $k =~ ^[0-9]+$ ]] && ((k >= 1 && k <= max)) || die "no $what $k (the cluster has $max)"
}

main() {
  (($#)) || usage
  local verb=$1
  shift
  # --dir may come anywhere after the verb.
  local args=() a
  while (($#)); do
    a=$1
    shift
    if [[ $a == --dir && $verb != up ]]; then dir=$1; shift; continue; fi
    args+=("$a")
  done
  set -- "${args[@]+"${args[@]}"}"
  case $verb in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) (($# == 0)) || usage; cmd_status ;;
    kill | start)
      (($# == 2)) || usage
      load
      part_index "$1" "$2"
      if [[ $verb == kill ]]; then kill_part "$1" "$2"; else "start_$1" "$2"; fi ;;
    restart)
      [[ $# == 1 && $1 == postgres ]] || usage
      load
      HELMR_PG_DIR=$dir/pg HELMR_PG_PORT=$PG_PORT "$here/postgres-test.sh" --stop >&2
      HELMR_PG_DIR=$dir/pg HELMR_PG_PORT=$PG_PORT "$here/postgres-test.sh" --url >/dev/null
      log "postgres restarted" ;;
    pids)
      (($# == 2)) && [[ $1 == worker ]] || usage
      load
      part_index worker "$2"
      local pid
      pid=$(pid_of "worker-$2")
      alive "$pid" || die "worker $2 is not running"
      echo "$pid" ;;
    -h | --help | help) usage ;;
    *) usage ;;
  esac
}

main "$@"
