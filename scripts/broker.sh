#!/usr/bin/env bash
# Makes sure a local RabbitMQ with the management plugin is answering on
# 127.0.0.1:5672 (AMQP) and 127.0.0.1:15672 (management API).
#
# Idempotent: on a machine that already runs the broker it only checks; on one
# that has nothing it installs rabbitmq-server from Debian's packages, starts
# it detached and enables the management plugin.
set -euo pipefail

log() { printf 'broker: %s\n' "$*" >&2; }

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if ! command -v rabbitmq-server >/dev/null 2>&1 && [ ! -x /usr/sbin/rabbitmq-server ]; then
	log "rabbitmq-server is not installed; installing it from Debian's packages"
	export DEBIAN_FRONTEND=noninteractive
	as_root apt-get update -qq
	# The package's postinst may try to start a service manager that a
	# container lacks; the broker is started below either way.
	as_root apt-get install -y -qq rabbitmq-server >/dev/null || as_root apt-get install -y rabbitmq-server
fi
export PATH="$PATH:/usr/sbin:/usr/lib/rabbitmq/bin"

ping_node() { timeout 20 rabbitmq-diagnostics -q ping >/dev/null 2>&1; }

if ping_node; then
	log "RabbitMQ is running"
else
	log "starting RabbitMQ"
	as_root rabbitmq-server -detached || true
	for _ in $(seq 1 90); do
		ping_node && break
		sleep 1
	done
	ping_node || { log "RabbitMQ did not start within 90 s; see /var/log/rabbitmq/"; exit 1; }
	timeout 120 rabbitmqctl -q await_startup >/dev/null 2>&1 || true
	log "RabbitMQ started"
fi

if ! rabbitmq-plugins -q is_enabled rabbitmq_management >/dev/null 2>&1; then
	log "enabling the management plugin"
	as_root rabbitmq-plugins enable rabbitmq_management >/dev/null
fi

# The plugin answers a few seconds after it is enabled or the node starts.
for _ in $(seq 1 60); do
	if curl -fsS -u guest:guest http://127.0.0.1:15672/api/overview >/dev/null 2>&1; then
		log "management API answers on http://127.0.0.1:15672"
		exit 0
	fi
	sleep 1
done
log "the management API did not answer on http://127.0.0.1:15672 within 60 s"
exit 1
