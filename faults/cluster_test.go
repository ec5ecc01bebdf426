//go:build faults

package faults

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// The cluster fault run (issue 17): producers and a worker pool run on a
// queue set of scripts/cluster.sh's three-node RabbitMQ 4.0 cluster while
// each node in turn is stopped and started again, then node 1 is killed
// with kill -9 and started again. It needs QUEUEY_CLUSTER_AMQP_URL and
// QUEUEY_CLUSTER_ENDPOINTS (`export $(bash scripts/cluster.sh env)`) and
// skips without them and without QUEUEY_CLUSTER_FAULTS=1: at about six
// minutes it is not part of make test's fault suite; `make cluster-faults`
// runs it. It holds brokertest.ClusterLock while it runs.

// clusterEvent is one outage of the run.
type clusterEvent struct {
	Node int
	Kill bool
	// At is the confirmed count that starts it (or the end of the event
	// before, whichever comes later).
	At int

	StopBegan, StopDone, RestartBegan, RestartDone time.Time
}

func (e *clusterEvent) name() string {
	if e.Kill {
		return fmt.Sprintf("kill -9 node %d", e.Node)
	}
	return fmt.Sprintf("stopnode %d", e.Node)
}

// clusterRuns records every successful run's time, beside the ledger.
type clusterRuns struct {
	mu  sync.Mutex
	at  []time.Time
	due map[int]time.Time // when each confirmed delayed job was due
	ids map[int]string    // the job id of each confirmed job
	// failAt and slowAt are when the enqueues that failed, and those that
	// took over 5 s, began.
	failAt, slowAt []time.Time
}

func (r *clusterRuns) add(t time.Time) {
	r.mu.Lock()
	r.at = append(r.at, t)
	r.mu.Unlock()
}

func (r *clusterRuns) sorted() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]time.Time(nil), r.at...)
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// firstAfter is the first run after t (zero if none).
func firstAfter(runs []time.Time, t time.Time) time.Time {
	i := sort.Search(len(runs), func(i int) bool { return runs[i].After(t) })
	if i == len(runs) {
		return time.Time{}
	}
	return runs[i]
}

// longestPause is the longest time without a run in [from, to]: what a
// user watching the handled count sees.
func longestPause(runs []time.Time, from, to time.Time) time.Duration {
	prev := from
	var longest time.Duration
	for _, at := range runs {
		if at.Before(from) {
			continue
		}
		if at.After(to) {
			at = to
		}
		if d := at.Sub(prev); d > longest {
			longest = d
		}
		prev = at
		if at.Equal(to) {
			break
		}
	}
	return longest
}

// connLost is the runtime's record of a lost connection (the producer's,
// the pool's consumer's or its publisher's), which it then redials from the
// next node of the URL.
var connLost = regexp.MustCompile(`time=(\S+) level=WARN msg="queuey: AMQP connection lost; reconnecting"`)

// TestFaultClusterNodeLoss runs the cluster fault run on a quorum queue
// set, then on a classic one.
//
// A quorum set must lose no confirmed job. A classic set may lose delayed
// jobs that fall due while the work queue's node is down (the broker drops
// a hold queue's dead letter that it cannot route to a queue that is down;
// RELIABILITY.md): the test reports them and fails only when an immediate
// job of a classic set is lost.
func TestFaultClusterNodeLoss(t *testing.T) {
	if os.Getenv("QUEUEY_CLUSTER_FAULTS") == "" {
		t.Skip("the cluster fault run takes about six minutes: `make cluster-faults` (QUEUEY_CLUSTER_FAULTS=1)")
	}
	for _, qt := range []string{queuey.QueueTypeQuorum, queuey.QueueTypeClassic} {
		t.Run(qt, func(t *testing.T) { clusterNodeLoss(t, qt) })
	}
}

func clusterNodeLoss(t *testing.T, queueType string) {
	const jobs, producers = 10_000, 16
	// The producers together enqueue about this many jobs a second, so
	// that the 10,000 last through the four outages (each about 25 s).
	const rate = 85
	c := brokertest.OpenCluster(t)
	prefix := c.NewPrefix("fault-cluster-" + queueType)
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.QueueConfig{
		{Name: "jobs", Prefetch: 64, QueueType: queueType},
	}}
	var logs logBuffer
	l := newLedger()
	runs := &clusterRuns{due: map[int]time.Time{}, ids: map[int]string{}}
	// Info and up: the runtime's failover records ("connected to another
	// node of the cluster") are at info.
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	prod := newProducer(t, c.AMQPURL, set, &queuey.ProducerOptions{Logger: logger})
	ws := queuey.NewWorkers()
	work := l.worker()
	queuey.AddWorker(ws, queuey.WorkFunc[faultJob](func(ctx context.Context, job *queuey.Job[faultJob]) error {
		err := work(ctx, job)
		if err == nil {
			runs.add(time.Now())
		}
		return err
	}))
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	pool, err := queuey.NewWorkerPool(pctx, c.AMQPURL, set, ws, &queuey.WorkerOptions{
		Logger: logger,
		Retry:  &queuey.RetryPolicy{Strategy: queuey.RetryFixed, Base: time.Second, MaxAttempts: 10},
	})
	pcancel()
	if err != nil {
		t.Fatalf("NewWorkerPool: %v", err)
	}
	if err := pool.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := pool.Stop(ctx); err != nil {
			t.Logf("Stop: %v", err)
		}
	})

	events := []*clusterEvent{
		{Node: 1, At: 800}, {Node: 2, At: 3000}, {Node: 3, At: 5200}, {Node: 1, Kill: true, At: 7400},
	}
	var confirmedN atomic.Int64
	outages := make(chan struct{})
	go func() {
		defer close(outages)
		for _, e := range events {
			for confirmedN.Load() < int64(e.At) {
				time.Sleep(20 * time.Millisecond)
			}
			e.StopBegan = time.Now()
			if err := c.StopNode(e.Node, e.Kill); err != nil {
				t.Errorf("%v", err)
				return
			}
			e.StopDone = time.Now()
			time.Sleep(5 * time.Second)
			e.RestartBegan = time.Now()
			if err := c.RestartNode(e.Node); err != nil {
				t.Errorf("%v", err)
				return
			}
			e.RestartDone = time.Now()
			// Let the node catch up before the next one goes.
			time.Sleep(2 * time.Second)
		}
	}()

	began := time.Now()
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	var wg sync.WaitGroup
	var slowest atomic.Int64
	spread(&wg, producers, 0, jobs, func(seq int) {
		<-tick.C
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		callStart := time.Now()
		var id string
		var err error
		delay := time.Duration(0)
		if seq%10 == 0 {
			delay = time.Second + time.Duration(seq%11)*100*time.Millisecond
			id, err = queuey.EnqueueJobAfter(ctx, prod, faultJob{Seq: seq}, delay, nil)
		} else {
			id, err = queuey.EnqueueJob(ctx, prod, faultJob{Seq: seq}, nil)
		}
		took := time.Since(callStart)
		if int64(took) > slowest.Load() {
			slowest.Store(int64(took))
		}
		l.enqueued(seq, err)
		runs.mu.Lock()
		if took > 5*time.Second {
			runs.slowAt = append(runs.slowAt, callStart)
		}
		if err != nil {
			runs.failAt = append(runs.failAt, callStart)
		} else {
			runs.ids[seq] = id
			if delay > 0 {
				runs.due[seq] = time.Now().Add(delay)
			}
		}
		runs.mu.Unlock()
		if err == nil {
			confirmedN.Add(1)
		}
	})
	wg.Wait()
	produced := time.Since(began)
	<-outages
	if !within(time.Minute, l.allHandled) {
		_, _, _, lost, _ := l.counts()
		t.Logf("%d confirmed jobs were not handled within 1 min of the end of the load", lost)
		explainLost(t, c, prefix, l, runs, events, began, &logs)
	}
	took := time.Since(began)

	// Per event: the clients' moves, the first run after the node went,
	// the longest pause in handling, the enqueues that failed or were slow
	// during it, and the delayed jobs that fell due during it.
	all := runs.sorted()
	losses := connLost.FindAllStringSubmatch(logs.String(), -1)
	var notes []string
	l.mu.Lock()
	firstAt := maps.Clone(l.firstAt)
	l.mu.Unlock()
	for _, e := range events {
		if e.RestartDone.IsZero() {
			continue
		}
		windowEnd := e.RestartDone.Add(2 * time.Second)
		in := func(at time.Time) bool { return !at.Before(e.StopBegan) && at.Before(windowEnd) }
		first := firstAfter(all, e.StopDone)
		var lostConns []string
		for _, m := range losses {
			at, err := time.Parse(time.RFC3339Nano, m[1])
			if err == nil && in(at) {
				lostConns = append(lostConns, "+"+at.Sub(e.StopBegan).Round(100*time.Millisecond).String())
			}
		}
		nFailed, nSlow, dueIn, dueHandled := 0, 0, 0, 0
		runs.mu.Lock()
		for _, at := range runs.failAt {
			if in(at) {
				nFailed++
			}
		}
		for _, at := range runs.slowAt {
			if in(at) {
				nSlow++
			}
		}
		for seq, due := range runs.due {
			if in(due) {
				dueIn++
				if _, ok := firstAt[seq]; ok {
					dueHandled++
				}
			}
		}
		runs.mu.Unlock()
		n := fmt.Sprintf("%s: stop took %s, down %s, restart took %s; %d client connections lost [%s]; first run after the stop returned +%s (from its start); longest pause in handling %s; %d enqueues begun from the stop to 2 s after the restart failed and %d took over 5 s; %d delayed jobs fell due while it was down or restarting, %d of them handled",
			e.name(), e.StopDone.Sub(e.StopBegan).Round(100*time.Millisecond), e.RestartDone.Sub(e.StopDone).Round(100*time.Millisecond),
			e.RestartDone.Sub(e.RestartBegan).Round(100*time.Millisecond), len(lostConns), strings.Join(lostConns, " "),
			sinceOr(first, e.StopBegan), longestPause(all, e.StopBegan, windowEnd).Round(10*time.Millisecond),
			nFailed, nSlow, dueIn, dueHandled)
		t.Log(n)
		notes = append(notes, n)
	}
	delayedConf, delayedHandled := 0, 0
	runs.mu.Lock()
	for seq := range runs.due {
		delayedConf++
		if _, ok := firstAt[seq]; ok {
			delayedHandled++
		}
	}
	runs.mu.Unlock()
	_, conf, _, _, _ := l.counts()
	summary := fmt.Sprintf("%d delayed jobs confirmed, %d handled; %d enqueues failed, %d of those handled anyway; slowest call %s; producing took %s",
		delayedConf, delayedHandled, jobs-conf, l.unconfirmedHandled(), time.Duration(slowest.Load()).Round(100*time.Millisecond), produced.Round(time.Second))
	if errs := l.firstErrors(3); len(errs) > 0 {
		summary += "; e.g. " + strings.Join(errs, " / ")
	}
	t.Log(summary)
	r := l.row(fmt.Sprintf("cluster (%s set): stopnode 1, 2, 3 and kill -9 node 1, each restarted", queueType),
		fmt.Sprintf("%d jobs, 10%% delayed 1-2 s, %d producers at ~%d/s, 1 pool (prefetch 64), 3-node RabbitMQ 4.0.5", jobs, producers, rate),
		took, summary+"; "+strings.Join(notes, "; "))
	if queueType == queuey.QueueTypeQuorum {
		record(t, r)
	} else {
		// record fails the test on any loss; a classic set is allowed to
		// lose the delayed jobs it reports.
		reportMu.Lock()
		report = append(report, r)
		reportMu.Unlock()
		t.Logf("%s: published %d, confirmed %d, handled %d, lost %d (%d of them delayed), duplicates %d (%s)",
			r.Fault, r.Published, r.Confirmed, r.Handled, r.Lost, delayedConf-delayedHandled, r.Dups, r.Took.Round(time.Millisecond))
		if n := r.Lost - (delayedConf - delayedHandled); n > 0 {
			t.Errorf("%d confirmed immediate jobs of the classic set were lost", n)
		}
	}
	if t.Failed() {
		t.Logf("warnings and errors logged:\n%s", tail(warnings(logs.String()), 6000))
	}
}

// warnings keeps the lines of s at WARN or ERROR.
func warnings(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// sinceOr is t - from, or "never" when t is zero.
func sinceOr(t, from time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Sub(from).Round(10 * time.Millisecond).String()
}

// explainLost logs, for each confirmed job not handled, when it was
// confirmed and due against the outages, every log record naming it, and
// the queues of the set with what they hold.
func explainLost(t *testing.T, c *brokertest.Cluster, prefix string, l *ledger, runs *clusterRuns, events []*clusterEvent, began time.Time, logs *logBuffer) {
	t.Helper()
	l.mu.Lock()
	var lost []int
	for seq := range l.confirmed {
		if l.handled[seq] == 0 {
			lost = append(lost, seq)
		}
	}
	confAt := maps.Clone(l.confAt)
	l.mu.Unlock()
	sort.Ints(lost)
	for _, e := range events {
		t.Logf("%s: began +%s, returned +%s, restart began +%s, returned +%s", e.name(),
			e.StopBegan.Sub(began).Round(10*time.Millisecond), e.StopDone.Sub(began).Round(10*time.Millisecond),
			e.RestartBegan.Sub(began).Round(10*time.Millisecond), e.RestartDone.Sub(began).Round(10*time.Millisecond))
	}
	all := logs.String()
	for _, seq := range lost[:min(len(lost), 10)] {
		runs.mu.Lock()
		id, due := runs.ids[seq], runs.due[seq]
		runs.mu.Unlock()
		dueS := "not delayed"
		if !due.IsZero() {
			dueS = "due +" + due.Sub(began).Round(10*time.Millisecond).String()
		}
		t.Logf("lost seq %d (job %s): confirmed +%s, %s", seq, id, confAt[seq].Sub(began).Round(10*time.Millisecond), dueS)
		for _, line := range strings.Split(all, "\n") {
			if id != "" && strings.Contains(line, id) {
				t.Logf("  %s", line)
			}
		}
	}
	api, err := c.API()
	if err != nil {
		t.Logf("queues: %v", err)
		return
	}
	qs, err := brokertest.Under(api, c.Vhost(), prefix)
	if err != nil {
		t.Logf("queues: %v", err)
		return
	}
	for _, q := range qs {
		t.Logf("queue %s: type %s, node %s, %d messages (%d ready, %d unacked)", q.Name, q.Type, q.Node, q.Messages, q.MessagesReady, q.MessagesUnacknowledged)
	}
}
