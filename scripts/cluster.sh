#!/usr/bin/env bash
# A three-node RabbitMQ 4.0 cluster on this machine, for the tests of queuey
# on a cluster (issue 17). Each node is a scripts/broker4.sh node on the same
# trixie root (so they share the Erlang cookie), with its own name and ports;
# nodes 2 and 3 join node 1. Idempotent: a running node is left alone, a
# node already in the cluster is not joined again.
#
#   scripts/cluster.sh start           # build the root once, start the three nodes, cluster them
#   scripts/cluster.sh stop            # stop every node (the cluster's data stays)
#   scripts/cluster.sh stopnode N      # stop node N (1-3) cleanly
#   scripts/cluster.sh kill N          # kill -9 node N's Erlang VM
#   scripts/cluster.sh restart N       # start node N again; it rejoins with its data
#   scripts/cluster.sh status          # the members and which of them run (exit 0 when all three do)
#   scripts/cluster.sh env             # QUEUEY_CLUSTER_AMQP_URL (one URL, the three hosts), QUEUEY_CLUSTER_AMQP_URLS and QUEUEY_CLUSTER_ENDPOINTS
#   scripts/cluster.sh reset           # stop every node and delete the cluster's data
#
# Node N: name queuey-cN@localhost, amqp 127.0.0.1:569N, management
# 127.0.0.1:1569N, distribution 2569N.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=${BROKER4_ROOT:-/var/lib/queuey/rabbitmq4-trixie}
export BROKER4_ROOT=$ROOT

log() { printf 'cluster: %s\n' "$*" >&2; }

# node N CMD ARGS...: broker4.sh CMD for node N.
node() {
	local n=$1
	shift
	BROKER4_NODE=queuey-c$n@localhost BROKER4_PORT=569$n BROKER4_MGMT_PORT=1569$n BROKER4_DIST_PORT=2569$n \
		BROKER4_EXTRA_CONF= bash "$here/broker4.sh" "$@"
}

check_n() {
	case "${1:-}" in
	1 | 2 | 3) ;;
	*)
		echo "cluster: a node is 1, 2 or 3, not '${1:-}'" >&2
		exit 2
		;;
	esac
}

# members N prints the cluster's nodes as node N sees them ("running" for
# the running ones).
members() { node "$1" ctl -q cluster_status --formatter json 2>/dev/null | sed -n "s/.*\"${2:-disk}_nodes\":\[\([^]]*\)\].*/\1/p" | tr -d '"' | tr ',' ' '; }

join() {
	local n=$1
	if members "$n" | grep -qw queuey-c1@localhost; then
		return 0
	fi
	log "queuey-c$n joins queuey-c1"
	node "$n" ctl -q stop_app >/dev/null
	node "$n" ctl -q join_cluster queuey-c1@localhost >/dev/null
	node "$n" ctl -q start_app >/dev/null
}

# start_all starts the three nodes side by side. One at a time would not
# do: a node that was not the last of the cluster to stop (all three killed
# at once, as when the machine stops) waits for the others before it
# finishes booting, so the first start would wait for nodes not yet started.
start_all() {
	local n pids=() rc=0
	node 1 prepare # the root, built once, before three starts use it
	for n in 1 2 3; do
		node "$n" start &
		pids+=($!)
	done
	for n in "${pids[@]}"; do
		wait "$n" || rc=1
	done
	return $rc
}

start() {
	if ! start_all; then
		# The cluster holds only what tests make, and they delete it: a
		# cluster that cannot come back is made again rather than debugged.
		log "the nodes did not start; deleting the cluster's data and starting afresh"
		reset
		start_all
	fi
	join 2
	join 3
	log "members: $(members 1)"
}

stop_all() {
	local n
	for n in 3 2 1; do
		node "$n" stop
	done
}

reset() {
	local n
	stop_all
	for n in 1 2 3; do
		rm -rf "$ROOT/srv/queuey-c$n"
	done
	log "the cluster's data is deleted"
}

pid_of() { cat "$ROOT/srv/queuey-c$1/node.pid" 2>/dev/null || true; }

case "${1:-}" in
start) start ;;
stop) stop_all ;;
stopnode)
	check_n "${2:-}"
	node "$2" stop
	;;
kill)
	check_n "${2:-}"
	pid=$(pid_of "$2")
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		log "kill -9 queuey-c$2 (pid $pid)"
		kill -9 "$pid"
	else
		log "queuey-c$2 is not running"
	fi
	;;
restart)
	check_n "${2:-}"
	node "$2" start
	;;
status)
	up=0
	for n in 1 2 3; do
		if node "$n" status; then
			log "queuey-c$n runs; members: $(members "$n"); running: $(members "$n" running)"
			up=$((up + 1))
		else
			log "queuey-c$n is down"
		fi
	done
	[ "$up" -eq 3 ]
	;;
env)
	echo "QUEUEY_CLUSTER_AMQP_URL=amqp://guest:guest@127.0.0.1:5691,127.0.0.1:5692,127.0.0.1:5693/"
	echo "QUEUEY_CLUSTER_AMQP_URLS=amqp://guest:guest@127.0.0.1:5691/,amqp://guest:guest@127.0.0.1:5692/,amqp://guest:guest@127.0.0.1:5693/"
	echo "QUEUEY_CLUSTER_ENDPOINTS=http://127.0.0.1:15691,http://127.0.0.1:15692,http://127.0.0.1:15693"
	;;
reset) reset ;;
*)
	echo "usage: $0 start|stop|stopnode N|kill N|restart N|status|env|reset" >&2
	exit 2
	;;
esac
