package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// watcher prints the broker's view of a queue set whenever it changes.
//
// Which queues exist comes from the management API, one list request a tick.
// How many messages wait in a work or dead queue comes from a passive
// declaration over AMQP, which is exact where the management API's figures
// lag by its statistics interval (5 s by default). Hold queues are never
// declared passively: a declaration renews x-expires, and the watcher would
// keep alive the very queues it wants to show deleting themselves, and the
// management API's figures for them lag behind their short lives, so the
// watcher shows that they exist and not what they hold.
type watcher struct {
	mgmt    *rabbithole.Client
	amqpURL string
	prefix  string
	say     func(format string, args ...any)

	mu       sync.Mutex
	current  map[string]bool // hold queues that exist now
	everSeen map[string]bool
	deleted  map[string]bool
}

func (w *watcher) run(ctx context.Context) {
	w.mu.Lock()
	w.current, w.everSeen, w.deleted = map[string]bool{}, map[string]bool{}, map[string]bool{}
	w.mu.Unlock()
	conn, err := amqp.Dial(w.amqpURL)
	if err != nil {
		w.say("watcher: cannot connect to count messages: %v", err)
		return
	}
	defer conn.Close()

	last := ""
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if view, ok := w.snapshot(conn); ok && view != last {
			w.say("the broker now shows:\n%s", view)
			last = view
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (w *watcher) snapshot(conn *amqp.Connection) (string, bool) {
	queues, err := w.mgmt.ListQueuesIn("/")
	if err != nil {
		return "", false
	}
	var names []string
	info := map[string]rabbithole.QueueInfo{}
	for _, q := range queues {
		if strings.HasPrefix(q.Name, w.prefix) {
			names = append(names, q.Name)
			info[q.Name] = q
		}
	}
	sort.Slice(names, func(i, j int) bool { return sortKey(names[i]) < sortKey(names[j]) })

	now := map[string]bool{}
	var b strings.Builder
	for _, name := range names {
		if work, ttl, ok := topology.ParseHoldName(name); ok {
			now[name] = true
			fmt.Fprintf(&b, "           %-34s <- hold queue: holds for %d ms, then dead-letters into %s\n", name, ttl, work)
			continue
		}
		ch, err := conn.Channel()
		if err != nil {
			return "", false
		}
		q, err := ch.QueueDeclarePassive(name, info[name].Durable, false, false, false, nil)
		if err != nil { // deleted between the list and the count
			continue
		}
		_ = ch.Close()
		fmt.Fprintf(&b, "           %-34s ready: %-3d consumers: %d\n", name, q.Messages, q.Consumers)
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	for name := range w.current {
		if !now[name] {
			w.deleted[name] = true
		}
	}
	for name := range now {
		w.everSeen[name] = true
		delete(w.deleted, name)
	}
	w.current = now
	return strings.TrimRight(b.String(), "\n"), true
}

// sortKey lists a work queue, then its dead queue, then its hold queues.
func sortKey(name string) string {
	if work, ttl, ok := topology.ParseHoldName(name); ok {
		return fmt.Sprintf("%s 2 %010d", work, ttl)
	}
	if strings.HasSuffix(name, topology.DeadSuffix) {
		return strings.TrimSuffix(name, topology.DeadSuffix) + " 1"
	}
	return name + " 0"
}

func (w *watcher) holdQueues() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return sortedKeys(w.current)
}

func (w *watcher) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return sortedKeys(w.everSeen)
}

func (w *watcher) gone() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return sortedKeys(w.deleted)
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// purge empties queue and says how many messages it held.
func purge(url, queue string) (int, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return 0, fmt.Errorf("connect to purge %s: %w", queue, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	return ch.QueuePurge(queue, false)
}

// peekDeadLetter returns the headers of the message waiting in the dead
// queue, and leaves it there for a person to look at.
func peekDeadLetter(url, queue string) (amqp.Table, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("connect to read %s: %w", queue, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	for i := 0; i < 20; i++ {
		msg, ok, err := ch.Get(queue, false)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", queue, err)
		}
		if ok {
			headers := msg.Headers
			// Back into the queue, unchanged: the dead letter is the user's.
			if err := msg.Nack(false, true); err != nil {
				return nil, err
			}
			return headers, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, errors.New("no dead letter arrived in " + queue)
}

// jsonPayload decodes the payload of a queuey envelope.
func jsonPayload(body []byte, v any) error {
	var env struct {
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return err
	}
	return json.Unmarshal(env.Payload, v)
}
