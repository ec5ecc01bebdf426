package migrate_test

// The provider-level acceptance test of lossless argument changes, through
// the real Terraform binary like the provider's own (TF_ACC=1):
//
//	TF_ACC=1 go test -run TestAccQueueSet_migrat ./provider/internal/migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
	"github.com/queuey/terraform-provider-queuey/provider"
	"github.com/queuey/terraform-provider-queuey/provider/internal/migrate"
	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

const accMessages = 5000

type accBroker struct {
	t                         *testing.T
	shared                    *brokertest.Broker
	endpoint, user, pass, url string
	api                       *rabbithole.Client
	ac                        *amqp.Connection
}

func newAccBroker(t *testing.T) *accBroker {
	t.Helper()
	brokertest.Acceptance(t)
	s := brokertest.Open(t, brokertest.FromEnv())
	return &accBroker{t: t, shared: s, endpoint: s.Endpoint, user: s.Username, pass: s.Password, url: s.AMQPURL, api: s.API, ac: s.Dial()}
}

func (b *accBroker) prefix() string { return b.shared.Own(brokertest.Unique("tfacc-migrate")) }

func (b *accBroker) config(prefix string, maxPriority int) string {
	return fmt.Sprintf(`
provider "queuey" {
  endpoint = %q
  username = %q
  password = %q
  amqp_url = %q
}

resource "queuey_queue_set" "test" {
  prefix = %q
  queues = {
    jobs = { max_priority = %d }
  }
}
`, b.endpoint, b.user, b.pass, b.url, prefix, maxPriority)
}

func accSample(i int) amqp.Publishing {
	return amqp.Publishing{
		Headers:       amqp.Table{topology.HeaderAttempt: int64(i%3 + 1), "x-index": int64(i)},
		ContentType:   "application/json",
		DeliveryMode:  amqp.Persistent,
		Priority:      uint8(i % 10),
		CorrelationId: fmt.Sprintf("corr-%d", i),
		MessageId:     fmt.Sprintf("msg-%05d", i),
		Type:          "test.job",
		Timestamp:     time.Unix(1700000000+int64(i), 0),
		Body:          []byte(fmt.Sprintf(`{"i":%d}`, i)),
	}
}

func (b *accBroker) publish(queue string) {
	b.t.Helper()
	ch, err := b.ac.Channel()
	if err != nil {
		b.t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		b.t.Fatal(err)
	}
	var dcs []*amqp.DeferredConfirmation
	for i := range accMessages {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false, accSample(i))
		if err != nil {
			b.t.Fatal(err)
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
			b.t.Fatalf("publish to %s not confirmed: %v", queue, err)
		}
	}
}

// checkMigrated checks that queue has x-max-priority want, that its
// temporary queue is gone, and that it holds every sample with its
// properties; it takes them out.
func (b *accBroker) checkMigrated(queue string, want int) resource.TestCheckFunc {
	return func(*terraform.State) error {
		q, err := b.api.GetQueueWithParameters("/", queue, accColumns)
		if err != nil {
			return err
		}
		if q.Arguments[topology.ArgMaxPriority] != float64(want) {
			return fmt.Errorf("%s has arguments %v, want x-max-priority %d", queue, q.Arguments, want)
		}
		for _, left := range []string{topology.MigrationName(queue), topology.DivertName(queue)} {
			if _, err := b.api.GetQueueWithParameters("/", left, accColumns); err == nil {
				return fmt.Errorf("%s is still there", left)
			}
		}
		ch, err := b.ac.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		seen := map[string]bool{}
		for {
			d, ok, err := ch.Get(queue, true)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			i := 0
			_, _ = fmt.Sscanf(d.MessageId, "msg-%d", &i)
			s := accSample(i)
			if d.Priority != s.Priority || d.CorrelationId != s.CorrelationId || d.Type != s.Type || d.ContentType != s.ContentType ||
				d.DeliveryMode != s.DeliveryMode || !d.Timestamp.Equal(s.Timestamp) || string(d.Body) != string(s.Body) ||
				d.Headers["x-index"] != s.Headers["x-index"] || d.Headers[topology.HeaderAttempt] != s.Headers[topology.HeaderAttempt] {
				return fmt.Errorf("message %s changed: %+v", d.MessageId, d)
			}
			seen[d.MessageId] = true
		}
		if len(seen) != accMessages {
			return fmt.Errorf("%s held %d distinct messages, want %d", queue, len(seen), accMessages)
		}
		return nil
	}
}

// checkArgs checks that queue has x-max-priority want and that its
// temporary queue is gone.
func (b *accBroker) checkArgs(queue string, want int) resource.TestCheckFunc {
	return func(*terraform.State) error {
		q, err := b.api.GetQueueWithParameters("/", queue, accColumns)
		if err != nil {
			return err
		}
		if q.Arguments[topology.ArgMaxPriority] != float64(want) {
			return fmt.Errorf("%s has arguments %v, want x-max-priority %d", queue, q.Arguments, want)
		}
		for _, left := range []string{topology.MigrationName(queue), topology.DivertName(queue)} {
			if _, err := b.api.GetQueueWithParameters("/", left, accColumns); err == nil {
				return fmt.Errorf("%s is still there", left)
			}
		}
		return nil
	}
}

var errKilled = errors.New("killed by the test")

// accColumns: what the checks read of a queue, and no consumer_details,
// which rabbit-hole cannot decode while a consumer's channel is closing.
var accColumns = url.Values{"columns": {"name,arguments"}}

// TestAccQueueSet_migratesWithoutLoss: 5,000 messages with mixed priorities
// and headers in a queue without priorities; max_priority 0 → 10; apply:
// all 5,000 are in the priority queue with their properties, the temporary
// queue is gone. Then an apply that died between delete and redeclare (the
// broker left as it would be) is resumed by the next apply, 5,000 in, 5,000
// out.
func TestAccQueueSet_migratesWithoutLoss(t *testing.T) {
	b := newAccBroker(t)
	p := b.prefix()
	q := topology.WorkName(p, "jobs")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: map[string]func() (tfprotov6.ProviderServer, error){
			"queuey": providerserver.NewProtocol6WithError(provider.New("test")()),
		},
		Steps: []resource.TestStep{{
			Config: b.config(p, 0),
		}, {
			PreConfig: func() { b.publish(q) },
			Config:    b.config(p, 10),
			Check:     b.checkMigrated(q, 10),
		}, {
			PreConfig: func() {
				b.publish(q)
				ac, err := migrate.Dial(b.url, "/", nil)
				if err != nil {
					t.Fatal(err)
				}
				defer ac.Close()
				_, err = migrate.Migrate(context.Background(), ac, q, topology.WorkArgs(topology.Queue{MaxPriority: 5}), true,
					&migrate.Options{AfterStep: func(s migrate.Step) error {
						if s == migrate.StepDelete {
							return errKilled
						}
						return nil
					}})
				if !errors.Is(err, errKilled) {
					t.Fatalf("the killed migration: %v", err)
				}
			},
			Config: b.config(p, 5),
			Check:  b.checkMigrated(q, 5),
		}, {
			// Producers and a worker running through the apply, configured
			// with the old arguments.
			PreConfig: func() { live.start(t, b, p) },
			Config:    b.config(p, 10),
			Check:     resource.ComposeAggregateTestCheckFunc(live.stop(t), b.checkArgs(q, 10)),
		}},
	})
}

type accJob struct {
	N int `json:"n"`
}

func (accJob) Kind() string  { return "migrate.acceptance" }
func (accJob) Queue() string { return "jobs" }

// liveLoad is queuey producers enqueueing and a queuey worker pool
// consuming while Terraform applies.
type liveLoad struct {
	ctx       context.Context
	cancel    context.CancelFunc
	prod      *queuey.Producer
	pool      *queuey.WorkerPool
	stopping  atomic.Bool
	wg        sync.WaitGroup
	mu        sync.Mutex
	confirmed map[string]bool
	handled   map[string]int
	failed    atomic.Int64
}

var live = &liveLoad{}

const liveProducers = 2

func (l *liveLoad) start(t *testing.T, b *accBroker, prefix string) {
	l.ctx, l.cancel = context.WithTimeout(context.Background(), 5*time.Minute)
	l.confirmed, l.handled = map[string]bool{}, map[string]int{}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.QueueConfig{{Name: "jobs", MaxPriority: 5}}}
	var err error
	if l.prod, err = queuey.NewProducer(l.ctx, b.url, set, &queuey.ProducerOptions{Logger: logger}); err != nil {
		t.Fatal(err)
	}
	jobs := make([]queuey.BatchJob, accMessages)
	for i := range jobs {
		jobs[i] = queuey.BatchJob{Queue: "jobs", JobType: accJob{}.Kind(), Payload: accJob{N: i}}
	}
	ids, err := l.prod.EnqueueBatch(l.ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		l.confirmed[id] = true
	}
	workers := queuey.NewWorkers()
	queuey.AddWorker(workers, queuey.WorkFunc[accJob](func(_ context.Context, job *queuey.Job[accJob]) error {
		time.Sleep(10 * time.Millisecond) // keep a backlog through the apply
		l.mu.Lock()
		l.handled[job.ID]++
		l.mu.Unlock()
		return nil
	}))
	if l.pool, err = queuey.NewWorkerPool(l.ctx, b.url, set, workers, &queuey.WorkerOptions{Logger: logger}); err != nil {
		t.Fatal(err)
	}
	if err := l.pool.Start(); err != nil {
		t.Fatal(err)
	}
	for g := range liveProducers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; !l.stopping.Load(); i++ {
				id, err := l.prod.Enqueue(l.ctx, "jobs", accJob{}.Kind(), accJob{N: -(g*1_000_000 + i)}, nil)
				if err != nil {
					l.failed.Add(1)
					continue
				}
				l.mu.Lock()
				l.confirmed[id] = true
				l.mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
}

// stop stops enqueueing a second after the apply, waits for the worker to
// handle every confirmed job, and counts: none may be missing. The producers
// follow the divert protocol (package internal/divert), so none publishes to the
// queue while the migration deletes it.
func (l *liveLoad) stop(t *testing.T) resource.TestCheckFunc {
	return func(*terraform.State) error {
		defer l.cancel()
		time.Sleep(time.Second)
		l.stopping.Store(true)
		l.wg.Wait()
		start := time.Now()
		missing := 0
		for {
			l.mu.Lock()
			missing = 0
			for id := range l.confirmed {
				if l.handled[id] == 0 {
					missing++
				}
			}
			l.mu.Unlock()
			waited := time.Since(start)
			if missing == 0 || waited > 2*time.Minute {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = l.pool.Stop(context.Background())
		_ = l.prod.Close()
		l.mu.Lock()
		defer l.mu.Unlock()
		dups := 0
		for _, n := range l.handled {
			dups += n - 1
		}
		t.Logf("through the apply: confirmed %d jobs (%d before it), handled %d distinct, %d more than once, %d missing, %d enqueue errors",
			len(l.confirmed), accMessages, len(l.handled), dups, missing, l.failed.Load())
		if l.failed.Load() > 0 {
			return fmt.Errorf("%d enqueues failed during the apply", l.failed.Load())
		}
		if missing > 0 {
			return fmt.Errorf("%d confirmed jobs were never handled", missing)
		}
		return nil
	}
}
