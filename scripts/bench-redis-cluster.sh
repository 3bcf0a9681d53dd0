#!/bin/sh
# Starts (or stops) the servers bench_remote_cluster measures: a standalone
# redis-server on 6499 and a Redis Cluster of 3 masters + 3 replicas on
# 7201-7206, all on 127.0.0.1, state in ${KCACHE_BENCH_DIR:-/tmp/kcache-bench-redis}.
#   scripts/bench-redis-cluster.sh start|stop
set -eu
dir=${KCACHE_BENCH_DIR:-/tmp/kcache-bench-redis}
case "${1:-}" in
start)
  mkdir -p "$dir"
  redis-server --port 6499 --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --dir "$dir" --pidfile "$dir/6499.pid" --logfile "$dir/6499.log"
  nodes=""
  for p in 7201 7202 7203 7204 7205 7206; do
    mkdir -p "$dir/$p"
    redis-server --port $p --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
      --cluster-enabled yes --cluster-config-file "$dir/$p/nodes.conf" --dir "$dir/$p" \
      --pidfile "$dir/$p.pid" --logfile "$dir/$p.log"
    nodes="$nodes 127.0.0.1:$p"
  done
  sleep 1
  # shellcheck disable=SC2086
  redis-cli --cluster create $nodes --cluster-replicas 1 --cluster-yes >"$dir/create.log"
  for _ in $(seq 100); do
    redis-cli -p 7201 cluster info | grep -q 'cluster_state:ok' && exit 0
    sleep 0.1
  done
  echo "the cluster did not reach cluster_state:ok; see $dir" >&2
  exit 1
  ;;
stop)
  pids=""
  for f in "$dir"/*.pid; do
    [ -f "$f" ] && pids="$pids $(cat "$f")"
  done
  # shellcheck disable=SC2086
  [ -n "$pids" ] && kill $pids 2>/dev/null || true
  for _ in $(seq 50); do
    alive=0
    for p in $pids; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  rm -rf "$dir"
  ;;
*)
  echo "usage: $0 start|stop" >&2
  exit 2
  ;;
esac
