// Package queuey is a job queue on RabbitMQ: producers that enqueue JSON jobs
// now, after a delay, or deferred ahead of the backlog, and workers that run
// typed handlers with retries and dead letters.
//
// The package is imported as github.com/queuey/terraform-provider-queuey/runtime
// and named queuey, because a package named runtime would shadow the standard
// library's.
//
// # Topology
//
// queuey declares no exchanges and no bindings. Every publish goes to the
// default exchange with the queue name as routing key. For a logical queue
// "emails" in a set with prefix "myapp" the broker holds:
//
//	myapp.emails                  work queue, x-max-priority 10 by default
//	myapp.emails.dead             dead letters, no arguments, always durable
//	myapp.emails.deferred.30000   hold queue, declared on demand for a 30 s delay
//
// A hold queue has x-message-ttl equal to its delay, dead-letters into the
// work queue when a message expires, and deletes itself after twice its TTL
// unused. It is declared again before every delayed publish, because the
// declaration is what renews x-expires (a publish into it does not), and
// once more after a publish that took longer than the TTL to be confirmed,
// since the queue could otherwise expire with the job in it; if even that
// renewal comes too late, the job is sent again. Delays therefore need no
// broker plugin. They are rounded up to a granularity (1 s by default) so
// that a spread of delays shares a bounded number of hold queues, and a
// delay above 24d 20h 31m 23s is refused rather than released early.
//
// # Priorities
//
// RabbitMQ priorities run upward: a higher number is delivered first. New
// work and retries are published at priority 0; a deferred job comes back at
// the queue's max priority, ahead of the backlog, for one round.
//
// # Delivery
//
// Every publish is mandatory and waits for its publisher confirm: a job the
// broker could not route, or nacked, is an error, never a silent success.
// Workers publish a retry, a deferral or a dead letter before they ack the
// original, so delivery is at least once.
package queuey
