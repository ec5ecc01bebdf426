package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// concurrency is the number of publishers of the enqueue figures: one
// confirm outstanding per channel, 8 channels.
const concurrency = 8

// rawWindow is how many confirms the raw batch twin keeps outstanding.
const rawWindow = 256

// The raw batch sweep: channels × confirms outstanding on each.
var (
	batchChannelSweep = []int{1, 2, 4, 8}
	batchWindowSweep  = []int{64, 256, 1024}
)

func batchSweepName(channels, window int) string {
	return fmt.Sprintf("raw %d channels × window %d", channels, window)
}

// payload is every job's arguments.
var payload = map[string]string{"to": "ada@example.com"}

const noopKind = "bench.noop"

// rawMessage is what the raw twins publish: the message queuey publishes
// for a job onto queue (same body size, headers, properties, persistence),
// built once, so that the raw side pays nothing per message but the
// protocol.
func rawMessage(queue string) amqp.Publishing {
	p, _ := json.Marshal(payload)
	env := queuey.Envelope{
		JobID:        "2f1e9c1a-8d7b-4c55-9a4e-1b2c3d4e5f60",
		JobType:      noopKind,
		Queue:        queue,
		Attempt:      1,
		EnqueuedAtMs: time.Now().UnixMilli(),
		Payload:      p,
	}
	body, _ := json.Marshal(env)
	return amqp.Publishing{
		Headers:      amqp.Table{topology.HeaderDeferrals: int64(0), topology.HeaderAttempt: int64(1)},
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    env.JobID,
		Type:         env.JobType,
		Timestamp:    time.Now(),
		Body:         body,
	}
}

// concurrently runs fn n times in total from workers goroutines and returns
// the rate, per second, and the process's CPU time per job. fn gets its
// worker's index and the job's.
func concurrently(ctx context.Context, workers, n int, fn func(worker, job int) error) (map[string]float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	t := startTimer()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j := int(next.Add(1)) - 1
				if j >= n || ctx.Err() != nil {
					return
				}
				if err := fn(w, j); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	m := t.stop(n)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return m, nil
}

// timer measures wall time, the process's CPU time (user + system, all
// goroutines), its allocations and the broker's CPU time over a stretch of
// work.
type timer struct {
	wall   time.Time
	cpu    time.Duration
	allocs uint64
	broker time.Duration
}

func startTimer() timer {
	return timer{wall: time.Now(), cpu: cpuTime(), allocs: mallocs(), broker: brokerCPU()}
}

// mallocs is how many heap objects the process has allocated so far.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// stop returns the rate of n jobs per second of wall time, and per job the
// CPU microseconds, the allocations and, when the broker was found, the
// broker's CPU microseconds.
func (t timer) stop(n int) map[string]float64 {
	wall := time.Since(t.wall)
	cpu := cpuTime() - t.cpu
	allocs := mallocs() - t.allocs
	m := map[string]float64{
		"rate":   float64(n) / wall.Seconds(),
		"cpu":    float64(cpu.Microseconds()) / float64(n),
		"allocs": float64(allocs) / float64(n),
	}
	if brokerPID != 0 {
		m["broker"] = float64((brokerCPU() - t.broker).Microseconds()) / float64(n)
	}
	return m
}

// cpuTime is the CPU time the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// confirmChannels opens n channels in confirm mode on the raw connection.
func (b *bench) confirmChannels(n int) ([]*amqp.Channel, error) {
	chs := make([]*amqp.Channel, n)
	for i := range chs {
		ch, err := b.raw.Channel()
		if err != nil {
			return nil, err
		}
		if err := ch.Confirm(false); err != nil {
			return nil, err
		}
		chs[i] = ch
	}
	return chs, nil
}

func closeAll(chs []*amqp.Channel) {
	for _, ch := range chs {
		if ch != nil {
			_ = ch.Close()
		}
	}
}

// rawPublish publishes msg mandatory on ch and waits for its confirm, as
// queuey does for every job.
func rawPublish(ctx context.Context, ch *amqp.Channel, queue string, msg amqp.Publishing) error {
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, msg)
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("nacked")
	}
	return nil
}

// producer builds a queuey producer for a one-queue set under the bench's
// prefix.
func (b *bench) producer(ctx context.Context, section string, channels int) (*queuey.Producer, queuey.QueueSet, error) {
	set := queuey.QueueSet{Prefix: b.name(section), Queues: []queuey.QueueConfig{{Name: "jobs"}}}
	p, err := queuey.NewProducer(ctx, b.c.amqpURL, set, &queuey.ProducerOptions{Channels: channels, Logger: quiet()})
	return p, set, err
}

// enqueueSection: persistent, confirmed enqueues from 8 goroutines, one
// confirm outstanding per channel, 8 channels.
func (b *bench) enqueueSection(ctx context.Context) error {
	p, set, err := b.producer(ctx, "enqueue", concurrency)
	if err != nil {
		return err
	}
	defer p.Close()
	work := set.WorkQueue("jobs")
	chs, err := b.confirmChannels(concurrency)
	if err != nil {
		return err
	}
	defer closeAll(chs)
	msg := rawMessage(work)
	n := b.c.enqueueJobs
	// The same producer with queueyotel's middleware, on the same set.
	inst, closeOtel, err := instrumentation()
	if err != nil {
		return err
	}
	defer closeOtel()
	otelOpts := &queuey.ProducerOptions{Channels: concurrency, Logger: quiet()}
	inst.InstrumentProducer(otelOpts)
	po, err := queuey.NewProducer(ctx, b.c.amqpURL, set, otelOpts)
	if err != nil {
		return err
	}
	defer po.Close()
	enqueue := func(p *queuey.Producer) func(ctx context.Context) (map[string]float64, error) {
		return func(ctx context.Context) (map[string]float64, error) {
			defer b.purge(work)
			return (concurrently(ctx, concurrency, n, func(_, _ int) error {
				_, err := p.Enqueue(ctx, "jobs", noopKind, payload, nil)
				return err
			}))
		}
	}
	s, err := measure(ctx, b.c.runs, []variant{
		{"queuey Enqueue ×8", enqueue(p)},
		{"queuey Enqueue ×8 + otel", enqueue(po)},
		{"raw publish+confirm ×8", func(ctx context.Context) (map[string]float64, error) {
			defer b.purge(work)
			return (concurrently(ctx, concurrency, n, func(w, _ int) error {
				return rawPublish(ctx, chs[w], work, msg)
			}))
		}},
	})
	if err != nil {
		return err
	}
	b.report.add(s, "enqueue", "persistent enqueue, 8 channels × 1 confirm outstanding", "jobs/s",
		"queuey Enqueue ×8", "rate", "raw publish+confirm ×8", "rate", "amqp091-go, same message, 8 channels", true, 0.9)
	b.report.add(s, "enqueue", "CPU of this process per job (all goroutines)", "µs/job",
		"queuey Enqueue ×8", "cpu", "raw publish+confirm ×8", "cpu", "amqp091-go, same message, 8 channels", false, 0)
	b.report.add(s, "enqueue", "heap allocations of this process per job", "allocs/job",
		"queuey Enqueue ×8", "allocs", "raw publish+confirm ×8", "allocs", "amqp091-go, same message, 8 channels", false, 0)
	b.report.add(s, "enqueue", "with queueyotel (every span sampled, batch processor, discarding exporter; manual metric reader)", "jobs/s",
		"queuey Enqueue ×8 + otel", "rate", "queuey Enqueue ×8", "rate", "the same queuey Enqueue ×8 without it", true, 0.9)
	b.report.add(s, "enqueue", "with queueyotel, beside raw", "jobs/s",
		"queuey Enqueue ×8 + otel", "rate", "raw publish+confirm ×8", "rate", "amqp091-go, same message, 8 channels", true, 0)
	return nil
}

// batchSection: EnqueueBatch beside the raw sweep, and beside itself with
// its chunks sent one at a time.
func (b *bench) batchSection(ctx context.Context) error {
	p, set, err := b.producer(ctx, "batch", queuey.DefaultPublishChannels)
	if err != nil {
		return err
	}
	defer p.Close()
	// The same set with the chunks sent one after another, as before
	// BatchChunks.
	p1, err := queuey.NewProducer(ctx, b.c.amqpURL, set, &queuey.ProducerOptions{Channels: queuey.DefaultPublishChannels, BatchChunks: 1, Logger: quiet()})
	if err != nil {
		return err
	}
	defer p1.Close()
	work := set.WorkQueue("jobs")
	chs, err := b.confirmChannels(batchChannelSweep[len(batchChannelSweep)-1])
	if err != nil {
		return err
	}
	defer closeAll(chs)
	msg := rawMessage(work)
	n := b.c.batchJobs
	jobs := make([]queuey.BatchJob, n)
	for i := range jobs {
		jobs[i] = queuey.BatchJob{Queue: "jobs", JobType: noopKind, Payload: payload}
	}
	batch := func(p *queuey.Producer) func(context.Context) (map[string]float64, error) {
		return func(ctx context.Context) (map[string]float64, error) {
			defer b.purge(work)
			t := startTimer()
			if _, err := p.EnqueueBatch(ctx, jobs); err != nil {
				return nil, err
			}
			return t.stop(n), nil
		}
	}
	vs := []variant{
		{"queuey EnqueueBatch", batch(p)},
		{"queuey EnqueueBatch, BatchChunks 1", batch(p1)},
		{"raw window 256", b.rawSpread(chs[:1], work, msg, n, rawWindow)},
	}
	const raws = 2 // vs[raws:] are the raw twins
	// The sweep: the batch split over k channels, each with a window of w
	// confirms outstanding, from a goroutine of its own.
	for _, k := range batchChannelSweep {
		for _, w := range batchWindowSweep {
			if k == 1 && w == rawWindow {
				continue // the variant above
			}
			vs = append(vs, variant{batchSweepName(k, w), b.rawSpread(chs[:k], work, msg, n, w)})
		}
	}
	s, err := measure(ctx, b.c.runs, vs)
	if err != nil {
		return err
	}
	best := "raw window 256"
	for _, v := range vs[raws:] {
		if median(s[v.name]["rate"]) > median(s[best]["rate"]) {
			best = v.name
		}
	}
	for _, v := range vs[raws:] {
		b.report.notes = append(b.report.notes, fmt.Sprintf("batch sweep: %s, median %.0f jobs/s", v.name, median(s[v.name]["rate"])))
	}
	b.report.add(s, "batch", fmt.Sprintf("EnqueueBatch of %d jobs, beside the best of the raw sweep (%s)", n, best), "jobs/s",
		"queuey EnqueueBatch", "rate", best, "rate", "amqp091-go, the best of 1, 2, 4, 8 channels × 64, 256, 1024 outstanding", true, 0.9)
	b.report.add(s, "batch", fmt.Sprintf("EnqueueBatch of %d jobs, %d chunks in flight (the default) beside 1 at a time", n, queuey.DefaultBatchChunks), "jobs/s",
		"queuey EnqueueBatch", "rate", "queuey EnqueueBatch, BatchChunks 1", "rate", "queuey, BatchChunks 1 (the chunks one after another, as before)", true, 0)
	b.report.add(s, "batch", fmt.Sprintf("EnqueueBatch of %d jobs, pipelined confirms", n), "jobs/s",
		"queuey EnqueueBatch", "rate", "raw window 256", "rate", "amqp091-go, 256 confirms outstanding, 1 channel", true, 0.8)
	b.report.add(s, "batch", "CPU of this process per job (all goroutines)", "µs/job",
		"queuey EnqueueBatch", "cpu", "raw window 256", "cpu", "amqp091-go, 256 confirms outstanding, 1 channel", false, 0)
	if brokerPID != 0 {
		b.report.add(s, "batch", "CPU of the broker per job (its limit: the broker on this machine)", "µs/job",
			"queuey EnqueueBatch", "broker", best, "broker", "the best of the raw sweep", false, 0)
	}
	b.report.add(s, "batch", "heap allocations of this process per job", "allocs/job",
		"queuey EnqueueBatch", "allocs", "raw window 256", "allocs", "amqp091-go, 256 confirms outstanding, 1 channel", false, 0)
	return nil
}

// rawSpread is a raw pipelined variant: n copies of msg to queue, split
// evenly over chs, each channel from a goroutine of its own keeping up to
// window confirms outstanding; the queue is purged after each run.
func (b *bench) rawSpread(chs []*amqp.Channel, queue string, msg amqp.Publishing, n, window int) func(context.Context) (map[string]float64, error) {
	return func(ctx context.Context) (map[string]float64, error) {
		defer b.purge(queue)
		t := startTimer()
		errs := make([]error, len(chs))
		var wg sync.WaitGroup
		for c, ch := range chs {
			share := n/len(chs) + min(1, max(0, n%len(chs)-c))
			wg.Go(func() { errs[c] = rawPipelined(ctx, ch, queue, msg, share, window) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		return t.stop(n), nil
	}
}

// rawPipelined publishes n copies of msg on ch keeping up to window
// confirms outstanding.
func rawPipelined(ctx context.Context, ch *amqp.Channel, queue string, msg amqp.Publishing, n, window int) error {
	dcs := make([]*amqp.DeferredConfirmation, n)
	wait := func(i int) error {
		ok, err := dcs[i].WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("nacked")
		}
		return nil
	}
	for i := range n {
		if i >= window {
			if err := wait(i - window); err != nil {
				return err
			}
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, msg)
		if err != nil {
			return err
		}
		dcs[i] = dc
	}
	for i := max(0, n-window); i < n; i++ {
		if err := wait(i); err != nil {
			return err
		}
	}
	return nil
}

// delayedSection: EnqueueAfter to one delay and to 50 distinct delays,
// beside a raw declare + publish + confirm per message, serial and at the
// same concurrency, and beside queuey's own plain Enqueue.
func (b *bench) delayedSection(ctx context.Context) error {
	p, set, err := b.producer(ctx, "delayed", concurrency)
	if err != nil {
		return err
	}
	defer p.Close()
	work := set.WorkQueue("jobs")
	chs, err := b.confirmChannels(concurrency)
	if err != nil {
		return err
	}
	defer closeAll(chs)
	msg := rawMessage(work)
	n := b.c.delayedJobs

	// Delays long enough that nothing comes back during the section: the
	// figure is the cost of getting a job into its hold queue.
	one := []time.Duration{10 * time.Minute}
	fifty := make([]time.Duration, 50)
	for i := range fifty {
		fifty[i] = 10*time.Minute + time.Duration(i)*time.Second
	}
	holds := []string{}
	for _, d := range fifty {
		ttl, _ := topology.HoldTTL(d, topology.DefaultGranularity)
		holds = append(holds, topology.HoldName(work, ttl))
	}
	reset := func() { _ = b.purgeQuiet(append([]string{work}, holds...)...) }

	queueyAfter := func(delays []time.Duration) func(ctx context.Context) (map[string]float64, error) {
		return func(ctx context.Context) (map[string]float64, error) {
			defer reset()
			return (concurrently(ctx, concurrency, n, func(_, j int) error {
				_, err := p.EnqueueAfter(ctx, "jobs", noopKind, payload, delays[j%len(delays)], nil)
				return err
			}))
		}
	}
	rawAfter := func(delays []time.Duration, workers int) func(ctx context.Context) (map[string]float64, error) {
		return func(ctx context.Context) (map[string]float64, error) {
			defer reset()
			return (concurrently(ctx, workers, n, func(w, j int) error {
				ttl, err := topology.HoldTTL(delays[j%len(delays)], topology.DefaultGranularity)
				if err != nil {
					return err
				}
				hold := topology.HoldName(work, ttl)
				if _, err := chs[w].QueueDeclare(hold, true, false, false, false, amqp.Table(topology.HoldArgs(work, ttl))); err != nil {
					return err
				}
				return rawPublish(ctx, chs[w], hold, msg)
			}))
		}
	}
	s, err := measure(ctx, b.c.runs, []variant{
		{"queuey Enqueue ×8", func(ctx context.Context) (map[string]float64, error) {
			defer reset()
			return (concurrently(ctx, concurrency, n, func(_, _ int) error {
				_, err := p.Enqueue(ctx, "jobs", noopKind, payload, nil)
				return err
			}))
		}},
		{"queuey EnqueueAfter 1 delay ×8", queueyAfter(one)},
		{"queuey EnqueueAfter 50 delays ×8", queueyAfter(fifty)},
		{"raw declare+publish 1 delay ×1", rawAfter(one, 1)},
		{"raw declare+publish 1 delay ×8", rawAfter(one, concurrency)},
		{"raw declare+publish 50 delays ×1", rawAfter(fifty, 1)},
		{"raw declare+publish 50 delays ×8", rawAfter(fifty, concurrency)},
	})
	if err != nil {
		return err
	}
	if err := b.countDeclarations(ctx, n, map[string]func(context.Context) (map[string]float64, error){
		"queuey EnqueueAfter, 1 delay, 8 concurrent":         queueyAfter(one),
		"queuey EnqueueAfter, 50 delays, 8 concurrent":       queueyAfter(fifty),
		"raw declare+publish+confirm, 1 delay, 8 concurrent": rawAfter(one, concurrency),
	}); err != nil {
		return err
	}
	for _, d := range []struct{ label, q, r string }{
		{"1 delay", "queuey EnqueueAfter 1 delay ×8", "1 delay"},
		{"50 delays", "queuey EnqueueAfter 50 delays ×8", "50 delays"},
	} {
		b.report.add(s, "delayed", "EnqueueAfter, "+d.label+", 8 concurrent, ÷ plain Enqueue ×8", "jobs/s",
			d.q, "rate", "queuey Enqueue ×8", "rate", "queuey Enqueue, 8 concurrent", true, 0.5)
		b.report.add(s, "delayed", "EnqueueAfter, "+d.label+", 8 concurrent", "jobs/s",
			d.q, "rate", "raw declare+publish "+d.r+" ×8", "rate", "declare+publish+confirm, 8 concurrent", true, 0)
		b.report.add(s, "delayed", "EnqueueAfter, "+d.label+", 8 concurrent, vs raw serial", "jobs/s",
			d.q, "rate", "raw declare+publish "+d.r+" ×1", "rate", "declare+publish+confirm, serial", true, 0)
		b.report.add(s, "delayed", "raw declare+publish, "+d.label+", 8 concurrent, ÷ plain Enqueue ×8", "jobs/s",
			"raw declare+publish "+d.r+" ×8", "rate", "queuey Enqueue ×8", "rate", "queuey Enqueue, 8 concurrent", true, 0)
	}
	return nil
}

// purgeQuiet purges the queues that exist and skips the others.
func (b *bench) purgeQuiet(queues ...string) error {
	for _, q := range queues {
		_ = b.purge(q)
	}
	return nil
}

// countDeclarations runs each variant once more and counts the queue.declare
// methods the broker saw meanwhile, from the management API's cumulative
// churn counter, to show whether concurrent held publishes to one hold queue
// share their declaration. The counter is broker-wide and refreshed every
// few seconds, so the bench waits for it before and after, and other clients
// declaring meanwhile count too: the figure is an upper bound.
func (b *bench) countDeclarations(ctx context.Context, n int, variants map[string]func(context.Context) (map[string]float64, error)) error {
	declared := func() (int64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(b.c.mgmtURL, "/")+"/api/overview?columns=churn_rates", nil)
		if err != nil {
			return 0, err
		}
		req.SetBasicAuth(b.c.user, b.c.pass)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		var ov struct {
			ChurnRates struct {
				QueueDeclared int64 `json:"queue_declared"`
			} `json:"churn_rates"`
		}
		if err := json.NewDecoder(res.Body).Decode(&ov); err != nil {
			return 0, err
		}
		return ov.ChurnRates.QueueDeclared, nil
	}
	// The management API refreshes its counters every 5 s by default.
	const settle = 6 * time.Second
	names := make([]string, 0, len(variants))
	for name := range variants {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		time.Sleep(settle)
		before, err := declared()
		if err != nil {
			return err
		}
		if _, err := variants[name](ctx); err != nil {
			return err
		}
		time.Sleep(settle)
		after, err := declared()
		if err != nil {
			return err
		}
		b.report.notes = append(b.report.notes, fmt.Sprintf("queue.declare seen by the broker during %d jobs of %s: %d (%.2f per job; broker-wide, so an upper bound)",
			n, name, after-before, float64(after-before)/float64(n)))
	}
	return nil
}
