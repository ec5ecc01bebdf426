#!/usr/bin/env bash
# Starts or stops the second RabbitMQ node that the fault suite (faults/)
# breaks on purpose: stop_app/start_app, closed connections, TLS. It runs
# beside the shared broker on 5672/15672 and never touches it.
#
#   scripts/fault-broker.sh start   # idempotent: a running node is left as is
#   scripts/fault-broker.sh stop    # idempotent: a stopped node is fine
#   scripts/fault-broker.sh status  # exit 0 when the node answers
#   scripts/fault-broker.sh env     # the settings below, as shell assignments
#   scripts/fault-broker.sh ctl ARGS # rabbitmqctl -n the node ARGS (stop_app, start_app)
#
# The node:
#   name      queuey-faults@localhost (FAULT_BROKER_NODE)
#   amqp      127.0.0.1:5673           (FAULT_BROKER_PORT)
#   amqps     127.0.0.1:5674           (FAULT_BROKER_TLS_PORT), client certificate required
#   http      127.0.0.1:15673          management API
#   https     127.0.0.1:15674          management API, client certificate required
#   dist      25673                    Erlang distribution
#   users     guest/guest, and queuey-faults with a password generated at start
#             (in $FAULT_BROKER_DIR/password), for the credential tests
#
# Everything lives in $FAULT_BROKER_DIR (default /tmp/queuey-fault-broker):
# config, data, logs, and certificates generated with openssl at start (a CA,
# a server certificate for localhost/127.0.0.1, a client certificate, and a
# second "rogue" CA with a client certificate the node must refuse). Nothing
# there is committed. `stop` leaves the directory for post-mortems; `stop
# --purge` removes it.
set -euo pipefail

NODE=${FAULT_BROKER_NODE:-queuey-faults@localhost}
PORT=${FAULT_BROKER_PORT:-5673}
TLS_PORT=${FAULT_BROKER_TLS_PORT:-5674}
MGMT_PORT=${FAULT_BROKER_MGMT_PORT:-15673}
MGMT_TLS_PORT=${FAULT_BROKER_MGMT_TLS_PORT:-15674}
DIST_PORT=${FAULT_BROKER_DIST_PORT:-25673}
DIR=${FAULT_BROKER_DIR:-/tmp/queuey-fault-broker}

export PATH="$PATH:/usr/sbin:/usr/lib/rabbitmq/bin"

log() { printf 'fault-broker: %s\n' "$*" >&2; }

# The node runs as the rabbitmq user, whose home holds the Erlang cookie that
# rabbitmqctl (run as root, it switches to rabbitmq) presents.
as_rabbitmq() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u rabbitmq -- env HOME=/var/lib/rabbitmq "$@"
	elif [ "$(id -un)" = rabbitmq ]; then
		env HOME=/var/lib/rabbitmq "$@"
	else
		sudo -u rabbitmq env HOME=/var/lib/rabbitmq "$@"
	fi
}

# ctl runs rabbitmqctl against the node; CTL_TIMEOUT bounds it.
ctl() { as_rabbitmq timeout "${CTL_TIMEOUT:-60}" /usr/lib/rabbitmq/bin/rabbitmqctl -n "$NODE" "$@"; }

running() { CTL_TIMEOUT=15 ctl -q ping >/dev/null 2>&1; }

port_busy() { ss -ltn "( sport = :$1 )" 2>/dev/null | grep -q LISTEN; }

certs() {
	local c=$DIR/certs
	if [ -s "$c/client-key.pem" ] && [ -s "$c/rogue-client-key.pem" ] &&
		openssl x509 -checkend 86400 -noout -in "$c/server.pem" >/dev/null 2>&1; then
		return 0
	fi
	rm -rf "$c"
	mkdir -p "$c"
	log "generating certificates in $c"
	(
		cd "$c"
		ossl() { openssl "$@" >/dev/null 2>&1; }
		# Certificate authorities: the one the node trusts, and a rogue one.
		for ca in ca rogue-ca; do
			ossl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=queuey faults $ca" \
				-keyout "$ca-key.pem" -out "$ca.pem"
		done
		printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
		printf 'extendedKeyUsage=clientAuth\n' >client.ext
		issue() { # name ca ext cn
			ossl req -newkey rsa:2048 -nodes -subj "/CN=$4" -keyout "$1-key.pem" -out "$1.csr"
			ossl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2-key.pem" -CAcreateserial -days 30 \
				-extfile "$3" -out "$1.pem"
			rm -f "$1.csr"
		}
		issue server ca server.ext localhost
		issue client ca client.ext queuey-faults-client
		issue rogue-client rogue-ca client.ext queuey-faults-rogue
	)
}

write_config() {
	local c=$DIR/certs
	cat >"$DIR/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$PORT
listeners.ssl.1 = 127.0.0.1:$TLS_PORT
ssl_options.cacertfile = $c/ca.pem
ssl_options.certfile = $c/server.pem
ssl_options.keyfile = $c/server-key.pem
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
management.ssl.ip = 127.0.0.1
management.ssl.port = $MGMT_TLS_PORT
management.ssl.cacertfile = $c/ca.pem
management.ssl.certfile = $c/server.pem
management.ssl.keyfile = $c/server-key.pem
management.ssl.verify = verify_peer
management.ssl.fail_if_no_peer_cert = true
log.file.level = info
log.console = false
EOF
	echo '[rabbitmq_management].' >"$DIR/enabled_plugins"
	# Replaces /etc/rabbitmq/rabbitmq-env.conf, which names the shared node.
	cat >"$DIR/rabbitmq-env.conf" <<EOF
ERL_EPMD_ADDRESS=127.0.0.1
EOF
}

start() {
	if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
		log "RabbitMQ is not installed; \`make broker\` (scripts/broker.sh) installs it from the OS packages"
		exit 1
	fi
	if running; then
		log "$NODE is already running"
		ctl -q start_app >/dev/null 2>&1 || true
		wait_ready
		return 0
	fi
	for p in "$PORT" "$TLS_PORT" "$MGMT_PORT" "$MGMT_TLS_PORT" "$DIST_PORT"; do
		if port_busy "$p"; then
			log "port $p is taken by something else; set the FAULT_BROKER_*PORT variables"
			exit 1
		fi
	done
	mkdir -p "$DIR/mnesia" "$DIR/log"
	certs
	write_config
	if [ ! -s "$DIR/password" ]; then
		(umask 077 && openssl rand -hex 16 >"$DIR/password")
	fi
	if [ "$(id -u)" -eq 0 ]; then
		chown -R rabbitmq:rabbitmq "$DIR"
	fi
	log "starting $NODE (amqp $PORT, amqps $TLS_PORT, http $MGMT_PORT, https $MGMT_TLS_PORT)"
	# As in broker4.sh: the node must not hold what the caller had open
	# (the lock of a `flock FILE go test ...` run).
	local fd
	for fd in /proc/$$/fd/*; do
		fd=${fd##*/}
		[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
	done
	as_rabbitmq \
		RABBITMQ_NODENAME="$NODE" \
		RABBITMQ_NODE_PORT="$PORT" \
		RABBITMQ_DIST_PORT="$DIST_PORT" \
		RABBITMQ_CONF_ENV_FILE="$DIR/rabbitmq-env.conf" \
		RABBITMQ_CONFIG_FILE="$DIR/rabbitmq.conf" \
		RABBITMQ_ADVANCED_CONFIG_FILE="$DIR/advanced.config" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$DIR/enabled_plugins" \
		RABBITMQ_MNESIA_BASE="$DIR/mnesia" \
		RABBITMQ_LOG_BASE="$DIR/log" \
		RABBITMQ_PID_FILE="$DIR/node.pid" \
		ERL_EPMD_ADDRESS=127.0.0.1 \
		/usr/lib/rabbitmq/bin/rabbitmq-server -detached
	for _ in $(seq 1 90); do
		running && break
		sleep 1
	done
	running || { log "$NODE did not answer within 90 s; see $DIR/log"; exit 1; }
	CTL_TIMEOUT=120 ctl -q await_startup >/dev/null
	wait_ready
	# A user with a password of its own, for the tests that look for a
	# password in logs and errors (guest/guest would match too much).
	if ! ctl -q list_users 2>/dev/null | grep -q '^queuey-faults\b'; then
		ctl -q add_user queuey-faults "$(cat "$DIR/password")" >/dev/null
		ctl -q set_permissions -p / queuey-faults '.*' '.*' '.*' >/dev/null
		ctl -q set_user_tags queuey-faults administrator >/dev/null
	fi
	log "$NODE is up"
}

wait_ready() {
	for _ in $(seq 1 60); do
		if curl -fsS -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/overview" >/dev/null 2>&1; then
			return 0
		fi
		sleep 1
	done
	log "the management API of $NODE did not answer on $MGMT_PORT within 60 s"
	exit 1
}

stop() {
	if running; then
		log "stopping $NODE"
		ctl -q stop "$DIR/node.pid" >/dev/null 2>&1 || ctl -q stop >/dev/null 2>&1 || true
	fi
	# A node that lost its Erlang distribution but kept its sockets: end it
	# by the pid it wrote, never by name.
	if [ -s "$DIR/node.pid" ]; then
		pid=$(cat "$DIR/node.pid")
		if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$NODE"; then
			kill "$pid" 2>/dev/null || true
		fi
	fi
	if [ "${1:-}" = --purge ]; then
		rm -rf "$DIR"
	fi
	log "$NODE is stopped"
}

case "${1:-}" in
start) start ;;
stop) stop "${2:-}" ;;
status) running ;;
ctl) # rabbitmqctl against the node, e.g. `ctl stop_app`
	shift
	ctl "$@"
	;;
env)
	cat <<EOF
FAULT_BROKER_NODE=$NODE
FAULT_BROKER_PORT=$PORT
FAULT_BROKER_TLS_PORT=$TLS_PORT
FAULT_BROKER_MGMT_PORT=$MGMT_PORT
FAULT_BROKER_MGMT_TLS_PORT=$MGMT_TLS_PORT
FAULT_BROKER_DIR=$DIR
EOF
	;;
*)
	echo "usage: $0 start|stop [--purge]|status|env|ctl ARGS..." >&2
	exit 2
	;;
esac
