//go:build integration

package migrate

// Migrations against a real RabbitMQ, over the shared fixture
// (internal/brokertest): AMQP_URL and QUEUEY_ENDPOINT (QUEUEY_USERNAME,
// QUEUEY_PASSWORD) say where it is; a broker that cannot be reached fails
// the test. Every test works under a prefix of its own and deletes every
// queue under it when it ends, the temporary ones included.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

const migMessages = 5000

// migBroker is the broker as one test sees it.
type migBroker struct {
	t      testing.TB
	url    string
	api    *rabbithole.Client
	vhost  string
	prefix string
	ac     *amqp.Connection
}

func newMigBroker(t testing.TB) *migBroker {
	t.Helper()
	s := brokertest.New(t, "qm")
	return &migBroker{t: t, url: s.AMQPURL, api: s.API, vhost: s.Vhost, prefix: s.Prefix, ac: s.Dial()}
}

// dial gives the test a connection of its own, closed at cleanup.
func (b *migBroker) dial() *amqp.Connection {
	b.t.Helper()
	ac, err := Dial(b.url, b.vhost, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { _ = ac.Close() })
	return ac
}

func (b *migBroker) channel() *amqp.Channel {
	b.t.Helper()
	ch, err := b.ac.Channel()
	if err != nil {
		b.t.Fatal(err)
	}
	return ch
}

func (b *migBroker) declare(name string, durable bool, args map[string]any) {
	b.t.Helper()
	ch := b.channel()
	defer func() { _ = ch.Close() }()
	if _, err := ch.QueueDeclare(name, durable, false, false, false, amqp.Table(args)); err != nil {
		b.t.Fatalf("declare %s: %v", name, err)
	}
}

// exists reports whether name exists and how many messages are ready in it,
// exactly (a passive declaration, where the management API lags).
func (b *migBroker) exists(name string) (bool, int) {
	b.t.Helper()
	m := &migration{ctx: context.Background(), ac: b.ac}
	defer m.close()
	ok, n, err := m.exists(name)
	if err != nil {
		b.t.Fatal(err)
	}
	return ok, n
}

// queueColumns are the fields the tests read of a queue. Without them the
// answer includes consumer_details, which rabbit-hole cannot decode while a
// consumer's channel is closing (channel_details [] instead of an object).
var queueColumns = url.Values{"columns": {"name,durable,arguments,messages"}}

// args reads a queue's arguments through the management API.
func (b *migBroker) args(name string) map[string]any {
	b.t.Helper()
	q, err := b.api.GetQueueWithParameters(b.vhost, name, queueColumns)
	if err != nil {
		b.t.Fatalf("management API: get queue %s: %v", name, err)
	}
	return q.Arguments
}

// sample is the message with index i of a test: mixed priorities, headers
// and properties.
func sample(i int) amqp.Publishing {
	p := amqp.Publishing{
		Headers: amqp.Table{
			topology.HeaderAttempt:   int64(i%3 + 1),
			topology.HeaderDeferrals: int64(i % 2),
			"x-index":                int64(i),
			"x-label":                fmt.Sprintf("label-%d", i),
		},
		ContentType:   "application/json",
		DeliveryMode:  amqp.Persistent,
		Priority:      uint8(i % 10),
		CorrelationId: fmt.Sprintf("corr-%d", i),
		MessageId:     fmt.Sprintf("msg-%05d", i),
		Timestamp:     time.Unix(1700000000+int64(i), 0),
		Type:          "test.job",
		AppId:         "migrate-test",
		Body:          []byte(fmt.Sprintf(`{"i":%d}`, i)),
	}
	if i%7 == 0 {
		p.Expiration = "3600000"
	}
	return p
}

// publish publishes sample(from)..sample(to-1) into queue with confirms.
func (b *migBroker) publish(queue string, from, to int) {
	b.t.Helper()
	ch := b.channel()
	defer func() { _ = ch.Close() }()
	if err := ch.Confirm(false); err != nil {
		b.t.Fatal(err)
	}
	for start := from; start < to; start += 500 {
		var dcs []*amqp.DeferredConfirmation
		for i := start; i < min(start+500, to); i++ {
			dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false, sample(i))
			if err != nil {
				b.t.Fatal(err)
			}
			dcs = append(dcs, dc)
		}
		for _, dc := range dcs {
			if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
				b.t.Fatalf("publish to %s: confirm %v %v", queue, ok, err)
			}
		}
	}
}

// drain takes every message out of queue and returns them by message id,
// counting duplicates.
func (b *migBroker) drain(queue string) (map[string]amqp.Delivery, int, []uint8) {
	b.t.Helper()
	ch := b.channel()
	defer func() { _ = ch.Close() }()
	got := map[string]amqp.Delivery{}
	var prios []uint8
	dups := 0
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			b.t.Fatalf("get %s: %v", queue, err)
		}
		if !ok {
			return got, dups, prios
		}
		if _, seen := got[d.MessageId]; seen {
			dups++
		}
		got[d.MessageId] = d
		prios = append(prios, d.Priority)
	}
}

// checkIntact fails unless got holds sample(0)..sample(n-1), every property
// as published.
func checkIntact(t *testing.T, got map[string]amqp.Delivery, n int) {
	t.Helper()
	bad := 0
	for i := range n {
		want := sample(i)
		d, ok := got[want.MessageId]
		if !ok {
			t.Errorf("message %s is missing", want.MessageId)
			bad++
		} else if d.Priority != want.Priority || d.CorrelationId != want.CorrelationId || d.ContentType != want.ContentType ||
			d.DeliveryMode != want.DeliveryMode || d.Type != want.Type || d.AppId != want.AppId || d.Expiration != want.Expiration ||
			!d.Timestamp.Equal(want.Timestamp) || string(d.Body) != string(want.Body) || len(d.Headers) != len(want.Headers) ||
			d.Headers["x-index"] != want.Headers["x-index"] || d.Headers["x-label"] != want.Headers["x-label"] ||
			d.Headers[topology.HeaderAttempt] != want.Headers[topology.HeaderAttempt] ||
			d.Headers[topology.HeaderDeferrals] != want.Headers[topology.HeaderDeferrals] {
			t.Errorf("message %s changed:\n got %+v\nwant %+v", want.MessageId, d, want)
			bad++
		}
		if bad > 5 {
			t.Fatal("more than 5 messages missing or changed")
		}
	}
	if len(got) != n {
		t.Errorf("%d distinct messages, want %d", len(got), n)
	}
}

var (
	noPriority = topology.WorkArgs(topology.Queue{MaxPriority: 0})
	priority10 = topology.WorkArgs(topology.Queue{MaxPriority: 10})
)

func TestIntegrationMigrateMovesEveryMessageWithItsProperties(t *testing.T) {
	t.Parallel()
	b := newMigBroker(t)
	q := b.prefix + ".jobs"
	b.declare(q, true, noPriority)
	b.publish(q, 0, migMessages)

	start := time.Now()
	res, err := Migrate(t.Context(), b.dial(), q, priority10, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("migrated %d messages in %v (absent %v): %+v", migMessages, time.Since(start), res.Absent, res)
	if res.Found != StateFresh || res.MovedAside != migMessages || res.MovedBack != migMessages || res.DeleteAttempts != 1 {
		t.Errorf("result %+v, want fresh, %d moved each way, one delete", res, migMessages)
	}
	if res.Absent <= 0 || res.Absent > time.Second {
		t.Errorf("queue absent for %v", res.Absent)
	}
	if got := b.args(q)[topology.ArgMaxPriority]; got != float64(10) {
		t.Errorf("%s has x-max-priority %v, want 10", q, got)
	}
	if ok, _ := b.exists(topology.MigrationName(q)); ok {
		t.Errorf("%s is still there", topology.MigrationName(q))
	}
	got, dups, prios := b.drain(q)
	if dups != 0 {
		t.Errorf("%d duplicates without a crash", dups)
	}
	checkIntact(t, got, migMessages)
	// The queue is a priority queue now: highest first.
	if !slices.IsSortedFunc(prios, func(a, b uint8) int { return int(b) - int(a) }) {
		t.Errorf("messages did not come out highest priority first: first %v", prios[:20])
	}

	// Again with the same target: nothing to do.
	res, err = Migrate(t.Context(), b.ac, q, priority10, true, nil)
	if err != nil || res.Found != StateDone || res.MovedAside != 0 {
		t.Errorf("second Migrate: %+v, %v; want already migrated", res, err)
	}
}

var errKilled = errors.New("killed by the test")

// TestIntegrationMigrateResumesAfterAFailureAtEveryStep kills a migration
// after every step, and in the middle of each move between a confirm and the
// acknowledgement, and checks that Migrate run again finishes it with every
// message.
func TestIntegrationMigrateResumesAfterAFailureAtEveryStep(t *testing.T) {
	t.Parallel()
	type kill struct {
		name string
		opts Options
	}
	var kills []kill
	for _, s := range Steps {
		kills = append(kills, kill{"after-" + string(s), Options{AfterStep: func(got Step) error {
			if got == s {
				return errKilled
			}
			return nil
		}}})
	}
	for _, from := range []string{"aside", "back"} {
		kills = append(kills, kill{"mid-move-" + from, Options{beforeAck: func(q string, _ int) error {
			if strings.HasSuffix(q, topology.MigrationSuffix) == (from == "back") {
				return errKilled
			}
			return nil
		}}})
	}
	for _, k := range kills {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			b := newMigBroker(t)
			q := b.prefix + ".jobs"
			b.declare(q, true, noPriority)
			b.publish(q, 0, migMessages)

			first, err := Migrate(t.Context(), b.dial(), q, priority10, true, &k.opts)
			if !errors.Is(err, errKilled) {
				t.Fatalf("first Migrate = %v, want it killed", err)
			}
			second, err := Migrate(t.Context(), b.dial(), q, priority10, true, nil)
			if err != nil {
				t.Fatalf("second Migrate: %v", err)
			}
			t.Logf("killed: %+v; resumed: %+v", first, second)
			if got := b.args(q)[topology.ArgMaxPriority]; got != float64(10) {
				t.Errorf("%s has x-max-priority %v, want 10", q, got)
			}
			for _, left := range []string{topology.MigrationName(q), topology.DivertName(q)} {
				if ok, _ := b.exists(left); ok {
					t.Errorf("%s is still there", left)
				}
			}
			got, dups, _ := b.drain(q)
			checkIntact(t, got, migMessages)
			t.Logf("%d in, %d distinct out, %d duplicates", migMessages, len(got), dups)
			if !strings.HasPrefix(k.name, "mid-move") && dups != 0 {
				t.Errorf("%d duplicates after a kill between steps", dups)
			}
			if strings.HasPrefix(k.name, "mid-move") && dups > DefaultBatch {
				t.Errorf("%d duplicates, more than one batch", dups)
			}
		})
	}
}

// TestIntegrationMigrateMovesAsideAgainWhenTheQueueIsDeclaredBack covers a
// process with the old configuration declaring the queue (and publishing to
// it) while it is absent: the migration moves it aside again.
func TestIntegrationMigrateMovesAsideAgainWhenTheQueueIsDeclaredBack(t *testing.T) {
	t.Parallel()
	b := newMigBroker(t)
	q := b.prefix + ".jobs"
	b.declare(q, true, noPriority)
	b.publish(q, 0, 100)
	once := false
	res, err := Migrate(t.Context(), b.dial(), q, priority10, true, &Options{AfterStep: func(s Step) error {
		if s == StepDelete && !once {
			once = true
			b.declare(q, true, noPriority)
			b.publish(q, 100, 110)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Redeclared != 1 || res.MovedAside != 110 || res.MovedBack != 110 {
		t.Errorf("result %+v, want one redeclaration found and 110 messages moved each way", res)
	}
	got, _, _ := b.drain(q)
	checkIntact(t, got, 110)
}

func TestIntegrationMigrateMovesAsideAgainWhenWorkArrivesBeforeTheDelete(t *testing.T) {
	t.Parallel()
	b := newMigBroker(t)
	q := b.prefix + ".jobs"
	b.declare(q, true, noPriority)
	b.publish(q, 0, 100)
	once := false
	// No grace: without one the delete comes right after the move, and
	// the message published in between makes it fail.
	res, err := Migrate(t.Context(), b.dial(), q, priority10, true, &Options{Grace: time.Nanosecond, AfterStep: func(s Step) error {
		if s == StepMoveAside && !once {
			once = true
			b.publish(q, 100, 101) // arrives after the move took everything
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.DeleteAttempts != 2 || res.MovedAside != 101 {
		t.Errorf("result %+v, want a second move and delete", res)
	}
	got, _, _ := b.drain(q)
	checkIntact(t, got, 101)
}

// TestIntegrationMigrateAbsentWindow measures how long the queue does not
// exist, over 20 migrations of a queue holding 1,000 messages, alternating
// between no priorities and x-max-priority 10.
func TestIntegrationMigrateAbsentWindow(t *testing.T) {
	t.Parallel()
	b := newMigBroker(t)
	q := b.prefix + ".jobs"
	b.declare(q, true, noPriority)
	b.publish(q, 0, 1000)
	ac := b.dial()
	var windows, took []time.Duration
	for i := range 20 {
		target := priority10
		if i%2 == 1 {
			target = noPriority
		}
		// Nothing publishes during these migrations, so the grace for
		// producers (which does not count towards the window) is cut.
		res, err := Migrate(t.Context(), ac, q, target, true, &Options{Grace: time.Nanosecond})
		if err != nil {
			t.Fatal(err)
		}
		if res.MovedBack != 1000 {
			t.Fatalf("migration %d moved back %d messages, want 1000", i, res.MovedBack)
		}
		windows = append(windows, res.Absent)
		took = append(took, res.Took)
	}
	slices.Sort(windows)
	slices.Sort(took)
	median := (windows[9] + windows[10]) / 2
	t.Logf("queue absent during a migration: median %v, max %v, min %v over 20 migrations of 1,000 messages (whole migration: median %v, max %v)",
		median, windows[19], windows[0], (took[9]+took[10])/2, took[19])
	fmt.Printf("NOTES: migration absent window over 20: median %v max %v (migration of 1,000 messages: median %v max %v)\n",
		median, windows[19], (took[9]+took[10])/2, took[19])
	got, _, _ := b.drain(q)
	checkIntact(t, got, 1000)
}

func TestIntegrationMigrateCreatesAMissingQueue(t *testing.T) {
	t.Parallel()
	b := newMigBroker(t)
	q := b.prefix + ".jobs"
	res, err := Migrate(t.Context(), b.dial(), q, priority10, false, nil)
	if err != nil || res.Found != StateCreated {
		t.Fatalf("Migrate of a missing queue: %+v, %v", res, err)
	}
	if got := b.args(q)[topology.ArgMaxPriority]; got != float64(10) {
		t.Errorf("x-max-priority %v, want 10", got)
	}
	// A durability change is a migration too.
	b.publish(q, 0, 10)
	res, err = Migrate(t.Context(), b.ac, q, priority10, true, nil)
	if err != nil || res.Found != StateFresh || res.MovedBack != 10 {
		t.Fatalf("Migrate to durable: %+v, %v", res, err)
	}
	pending, _, err := Pending(t.Context(), b.ac, q)
	if err != nil || pending {
		t.Errorf("Pending = %v, %v after a finished migration", pending, err)
	}
}

// TestIntegrationMigrateWaitsOutTheGraceBeforeEachDeletion checks the
// engine's side of the divert protocol (package internal/divert) from outside:
// the divert queue exists from before q is deleted until after q is
// declared again, and q and the temporary queue are each deleted no sooner
// than the grace after the divert queue appeared or went.
func TestIntegrationMigrateWaitsOutTheGraceBeforeEachDeletion(t *testing.T) {
	t.Parallel()
	b := newMigBroker(t)
	q := b.prefix + ".jobs"
	b.declare(q, true, noPriority)
	b.publish(q, 0, 10)
	const grace = 300 * time.Millisecond
	at := map[Step]time.Time{}
	divertAt := map[Step]bool{}
	res, err := Migrate(t.Context(), b.dial(), q, priority10, true, &Options{Grace: grace, AfterStep: func(s Step) error {
		at[s] = time.Now()
		divertAt[s], _ = b.exists(topology.DivertName(q))
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[Step]bool{StepDeclareTemp: false, StepDivert: true, StepMoveAside: true, StepDelete: true, StepRedeclare: true, StepUndivert: false, StepMoveBack: false, StepDeleteTemp: false}
	for s, w := range want {
		if _, ok := at[s]; !ok {
			t.Errorf("step %s never ran", s)
		} else if divertAt[s] != w {
			t.Errorf("after step %s the divert queue exists = %v, want %v", s, divertAt[s], w)
		}
	}
	if d := at[StepDelete].Sub(at[StepDivert]); d < grace {
		t.Errorf("q deleted %v after the divert queue was declared, want at least %v", d, grace)
	}
	if d := at[StepDeleteTemp].Sub(at[StepUndivert]); d < grace {
		t.Errorf("the temporary queue deleted %v after the divert queue was deleted, want at least %v", d, grace)
	}
	if res.Diverted < grace {
		t.Errorf("Diverted = %v, want at least the grace %v", res.Diverted, grace)
	}
	t.Logf("%+v", res)
	got, _, _ := b.drain(q)
	checkIntact(t, got, 10)
}

// TestIntegrationMigrateRemovesAStrayDivertQueue covers a divert queue
// whose temporary queue was deleted by hand: producers would keep probing
// it and falling back, so a migration removes it.
func TestIntegrationMigrateRemovesAStrayDivertQueue(t *testing.T) {
	t.Parallel()
	b := newMigBroker(t)
	q := b.prefix + ".jobs"
	b.declare(q, true, priority10)
	b.declare(topology.DivertName(q), topology.DivertDurable, topology.DivertArgs())
	res, err := Migrate(t.Context(), b.dial(), q, priority10, true, nil)
	if err != nil || res.Found != StateDone {
		t.Fatalf("Migrate = %+v, %v; want already migrated", res, err)
	}
	if ok, _ := b.exists(topology.DivertName(q)); ok {
		t.Errorf("%s is still there", topology.DivertName(q))
	}
}

// Regression: RabbitMQ refuses a publish whose user_id is not the
// publishing connection's user, closing the channel, so one message
// published by another user with its user_id set stopped every migration
// of its queue ("channel/connection is not open"), leaving the divert queue
// in place. The move drops such a user_id, and keeps the migration's own.
func TestIntegrationMigrateMovesAMessageWithAnotherUsersUserID(t *testing.T) {
	t.Parallel()
	b := newMigBroker(t)
	other, password := b.prefix+"-alice", "alice-secret"
	if _, err := b.api.PutUser(other, rabbithole.UserSettings{Password: password, Tags: rabbithole.UserTags{}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := b.api.DeleteUser(other); err != nil {
			t.Errorf("cleanup: delete user %s: %v", other, err)
		}
	})
	if _, err := b.api.UpdatePermissionsIn(b.vhost, other, rabbithole.Permissions{Configure: ".*", Write: ".*", Read: ".*"}); err != nil {
		t.Fatal(err)
	}
	q := b.prefix + ".jobs"
	b.declare(q, true, map[string]any{})
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	own := u.User.Username()
	u.User = url.UserPassword(other, password)
	ac, err := amqp.Dial(u.String())
	if err != nil {
		t.Fatalf("connect as %s: %v", other, err)
	}
	defer func() { _ = ac.Close() }()
	ch, err := ac.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for id, user := range map[string]string{"theirs": other, "ours": own, "none": ""} {
		msg := amqp.Publishing{MessageId: id, UserId: user, Body: []byte(id)}
		if user == own {
			// Only the migration's user may publish its user_id.
			err = b.channel().Publish("", q, true, false, msg)
		} else {
			err = ch.Publish("", q, true, false, msg)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	count := func() int { _, n := b.exists(q); return n }
	for deadline := time.Now().Add(5 * time.Second); count() != 3 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}

	res, err := Migrate(t.Context(), b.dial(), q, priority10, true, nil)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if res.MovedBack != 3 || res.UserIDsDropped != 1 {
		t.Errorf("moved back %d, dropped %d user ids; want 3 and 1", res.MovedBack, res.UserIDsDropped)
	}
	got, _, _ := b.drain(q)
	for id, want := range map[string]string{"theirs": "", "ours": own, "none": ""} {
		if d, ok := got[id]; !ok || d.UserId != want || string(d.Body) != id {
			t.Errorf("message %s after the migration: present %v, user_id %q, body %q; want user_id %q", id, ok, d.UserId, d.Body, want)
		}
	}
}
