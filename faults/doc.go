// Package faults is queuey's fault suite: integration tests, behind the
// `faults` build tag, that break a RabbitMQ node on purpose (stop_app and
// start_app under load, connections closed by the broker, refused
// declarations, bad messages, wrong credentials, TLS mismatches) and count
// every job: published, confirmed, handled, lost, handled twice.
//
// The tests never touch the shared broker on 5672: TestMain starts a second
// node with scripts/fault-broker.sh (AMQP on 5673, AMQPS on 5674, the
// management API on 15673 and, over TLS, 15674) and stops it when they end.
// Run them with `make faults`; RELIABILITY.md records a run.
package faults
