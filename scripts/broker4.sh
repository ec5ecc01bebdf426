#!/usr/bin/env bash
# Starts or stops a RabbitMQ 4.0 node beside the shared 3.10 broker, for the
# suites that run against both. Debian here ships 3.10; RabbitMQ 4.0.5 is
# Debian trixie's package, so it runs from a trixie root made with
# debootstrap, as its own node on its own ports, sharing the host's network
# and epmd. The 3.10 broker is never touched.
#
#   scripts/broker4.sh start [strict]    # idempotent: builds the root once, starts the node
#   scripts/broker4.sh stop [strict]     # idempotent: a stopped node is fine
#   scripts/broker4.sh status [strict]   # exit 0 when the node answers
#   scripts/broker4.sh env [strict]      # AMQP_URL and QUEUEY_ENDPOINT of the node
#   scripts/broker4.sh ctl ARGS          # rabbitmqctl against the node (BROKER4_* pick another)
#   scripts/broker4.sh prepare           # build the root once and mount what it needs, start no node
#
# "strict" is a second node on the same root, on 5681/15681/25681, that
# refuses transient non-exclusive queues as RabbitMQ 4.3 does by default
# (deprecated_features.permit.transient_nonexcl_queues = false): the tests of
# queuey's answer to that refusal run against it.
#
# The node:
#   name   queuey-rmq4@localhost (BROKER4_NODE)
#   amqp   127.0.0.1:5680        (BROKER4_PORT)
#   http   127.0.0.1:15680       (BROKER4_MGMT_PORT), management API, guest/guest
#   dist   25680                 (BROKER4_DIST_PORT)
#
# BROKER4_EXTRA_CONF is appended to the node's rabbitmq.conf at start, e.g.
# 'deprecated_features.permit.transient_nonexcl_queues = false' to make 4.0.5
# refuse transient queues as 4.3 does by default (checked: it does, with 541
# INTERNAL_ERROR over AMQP and 400 through the management API).
#
# The root lives in $BROKER4_ROOT (default /var/lib/queuey/rabbitmq4-trixie,
# about 575 MB; building it took 2.5 min here); each node's data and logs in
# $BROKER4_ROOT/srv/NODE. Nothing there is committed.
set -euo pipefail

if [ "${2:-}" = strict ]; then
	BROKER4_NODE=${BROKER4_NODE:-queuey-rmq4-strict@localhost}
	BROKER4_PORT=${BROKER4_PORT:-5681}
	BROKER4_MGMT_PORT=${BROKER4_MGMT_PORT:-15681}
	BROKER4_DIST_PORT=${BROKER4_DIST_PORT:-25681}
	BROKER4_EXTRA_CONF=${BROKER4_EXTRA_CONF:-deprecated_features.permit.transient_nonexcl_queues = false}
fi
ROOT=${BROKER4_ROOT:-/var/lib/queuey/rabbitmq4-trixie}
NODE=${BROKER4_NODE:-queuey-rmq4@localhost}
PORT=${BROKER4_PORT:-5680}
MGMT_PORT=${BROKER4_MGMT_PORT:-15680}
DIST_PORT=${BROKER4_DIST_PORT:-25680}
DATA=/srv/${NODE%@*} # inside the root

log() { printf 'broker4: %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
	exec sudo -E "$0" "$@"
fi

built() { [ -x "$ROOT/usr/lib/rabbitmq/bin/rabbitmq-server" ]; }

# build makes the root in a temporary directory and renames it into place
# only when it is complete, so an interrupted build is started again.
build() {
	built && return 0
	if ! command -v debootstrap >/dev/null 2>&1; then
		log "installing debootstrap from Debian's packages"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
	fi
	local tmp=$ROOT.tmp
	umount_root "$tmp"
	rm -rf "$tmp"
	mkdir -p "$(dirname "$ROOT")"
	log "building a Debian trixie root in $ROOT (once)"
	debootstrap --variant=minbase trixie "$tmp" http://deb.debian.org/debian >/dev/null
	# Keep the package's scripts from starting a node of their own.
	printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
	chmod +x "$tmp/usr/sbin/policy-rc.d"
	mount_root "$tmp"
	chroot "$tmp" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		rabbitmq-server >/dev/null
	umount_root "$tmp"
	mv "$tmp" "$ROOT"
	log "built: $(chroot "$ROOT" dpkg-query -W -f '${Package} ${Version}' rabbitmq-server)"
}

# Erlang needs /proc and /dev; the root shares the host's network, so it
# needs nothing else.
mount_root() {
	local r=$1
	mountpoint -q "$r/proc" || mount -t proc proc "$r/proc"
	mountpoint -q "$r/dev" || mount --bind /dev "$r/dev"
	cp /etc/resolv.conf "$r/etc/resolv.conf" 2>/dev/null || true
}

# in_use reports whether a process still runs inside root r (another node).
in_use() {
	local p
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/root" 2>/dev/null)" = "$1" ] && return 0
	done
	return 1
}

umount_root() {
	local r=$1
	[ -d "$r" ] || return 0
	in_use "$r" && return 0
	mountpoint -q "$r/dev" && umount "$r/dev"
	mountpoint -q "$r/proc" && umount "$r/proc"
	return 0
}

in_root() { chroot "$ROOT" runuser -u rabbitmq -- env HOME=/var/lib/rabbitmq "$@"; }

ctl() { in_root timeout "${CTL_TIMEOUT:-60}" /usr/lib/rabbitmq/bin/rabbitmqctl -n "$NODE" "$@"; }

running() { built && mountpoint -q "$ROOT/proc" && CTL_TIMEOUT=15 ctl -q ping >/dev/null 2>&1; }

port_busy() { ss -ltn "( sport = :$1 )" 2>/dev/null | grep -q LISTEN; }

write_config() {
	mkdir -p "$ROOT$DATA/mnesia" "$ROOT$DATA/log"
	cat >"$ROOT$DATA/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
loopback_users = none
log.file.level = info
log.console = false
${BROKER4_EXTRA_CONF:-}
EOF
	echo '[rabbitmq_management].' >"$ROOT$DATA/enabled_plugins"
	echo 'ERL_EPMD_ADDRESS=127.0.0.1' >"$ROOT$DATA/rabbitmq-env.conf"
	chroot "$ROOT" chown -R rabbitmq:rabbitmq "$DATA"
}

start() {
	build
	mount_root "$ROOT"
	if running; then
		log "$NODE is already running"
		wait_ready
		return 0
	fi
	for p in "$PORT" "$MGMT_PORT" "$DIST_PORT"; do
		if port_busy "$p"; then
			log "port $p is taken by something else; set the BROKER4_*PORT variables"
			exit 1
		fi
	done
	write_config
	log "starting $NODE (amqp $PORT, http $MGMT_PORT)"
	# The node outlives this script: it must not keep open what the
	# caller had open, such as the lock of `flock FILE go test ...`, which
	# it would then hold for as long as it runs.
	local fd
	for fd in /proc/$$/fd/*; do
		fd=${fd##*/}
		[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
	done
	in_root \
		RABBITMQ_NODENAME="$NODE" \
		RABBITMQ_NODE_PORT="$PORT" \
		RABBITMQ_DIST_PORT="$DIST_PORT" \
		RABBITMQ_CONF_ENV_FILE="$DATA/rabbitmq-env.conf" \
		RABBITMQ_CONFIG_FILE="$DATA/rabbitmq.conf" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$DATA/enabled_plugins" \
		RABBITMQ_MNESIA_BASE="$DATA/mnesia" \
		RABBITMQ_LOG_BASE="$DATA/log" \
		RABBITMQ_PID_FILE="$DATA/node.pid" \
		ERL_EPMD_ADDRESS=127.0.0.1 \
		/usr/lib/rabbitmq/bin/rabbitmq-server -detached
	for _ in $(seq 1 90); do
		running && break
		sleep 1
	done
	running || { log "$NODE did not answer within 90 s; see $ROOT$DATA/log"; exit 1; }
	CTL_TIMEOUT=120 ctl -q await_startup >/dev/null
	wait_ready
	log "$NODE is up: $(curl -fsS -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/overview" | sed -n 's/.*"rabbitmq_version":"\([^"]*\)".*/RabbitMQ \1/p')"
}

wait_ready() {
	for _ in $(seq 1 60); do
		curl -fsS -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/overview" >/dev/null 2>&1 && return 0
		sleep 1
	done
	log "the management API of $NODE did not answer on $MGMT_PORT within 60 s"
	exit 1
}

# node_pid is the pid of this node's Erlang VM when it runs: the one in its
# pid file, if that process runs inside the root (a stale file's pid may
# have been reused by something else).
node_pid() {
	local pid
	pid=$(cat "$ROOT$DATA/node.pid" 2>/dev/null || true)
	[ -n "$pid" ] && [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$ROOT" ] && echo "$pid"
	return 0
}

# stop stops the node and returns only once its VM has gone: a clean
# rabbitmqctl stop first, then SIGTERM (a clean shutdown too), then SIGKILL.
# It does not ask `running` alone whether there is anything to stop: when
# that ping failed (it gives up after 15 s, and a loaded machine can take
# that long), stop did nothing and still said the node had stopped.
stop() {
	local pid sig
	pid=$(node_pid)
	if [ -n "$pid" ] || running; then
		log "stopping $NODE"
		ctl -q stop "$DATA/node.pid" >/dev/null 2>&1 || ctl -q stop >/dev/null 2>&1 || true
	fi
	for sig in TERM KILL; do
		# The VM takes a moment to leave after stop returns.
		for _ in $(seq 1 20); do
			[ -n "$(node_pid)" ] || break
			sleep 0.5
		done
		pid=$(node_pid)
		[ -n "$pid" ] || break
		log "$NODE (pid $pid) still runs; kill -$sig"
		kill "-$sig" "$pid" 2>/dev/null || true
	done
	for _ in $(seq 1 10); do
		[ -n "$(node_pid)" ] || break
		sleep 0.5
	done
	if [ -n "$(node_pid)" ]; then
		log "$NODE (pid $(node_pid)) did not stop"
		exit 1
	fi
	umount_root "$ROOT"
	log "$NODE is stopped"
}

case "${1:-}" in
start) start ;;
prepare)
	build
	mount_root "$ROOT"
	;;
stop) stop ;;
status) running ;;
ctl)
	shift
	ctl "$@"
	;;
env)
	cat <<EOF
AMQP_URL=amqp://guest:guest@127.0.0.1:$PORT/
QUEUEY_ENDPOINT=http://127.0.0.1:$MGMT_PORT
EOF
	;;
*)
	echo "usage: $0 start|stop|status|env|prepare|ctl ARGS..." >&2
	exit 2
	;;
esac
