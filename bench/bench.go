package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"
)

// bench is one run of the bench command: its connections, the prefix that
// every queue it declares starts with, and the report it fills.
type bench struct {
	c      config
	prefix string

	// raw is the raw twins' connection; admin is a channel on it for
	// purges and deletions, reopened when a refusal closes it.
	raw     *amqp.Connection
	adminMu sync.Mutex
	admin   *amqp.Channel

	// rh talks to the management API for the raw provider twin and for
	// cleaning up.
	rh *rabbithole.Client

	report report
}

func newBench(ctx context.Context, c config) (*bench, error) {
	var id [3]byte
	_, _ = rand.Read(id[:])
	b := &bench{c: c, prefix: "qbench-" + hex.EncodeToString(id[:])}
	conn, err := amqp.DialConfig(c.amqpURL, amqp.Config{Properties: amqp.Table{"connection_name": "queuey bench (raw twins)"}})
	if err != nil {
		return nil, fmt.Errorf("connect to %s (is RabbitMQ running? try bash scripts/broker.sh): %w", c.amqpURL, err)
	}
	b.raw = conn
	if brokerPID, err = findBroker(conn); err != nil {
		b.report.brokerCPU = "not measured: " + err.Error()
	} else {
		b.report.brokerCPU = fmt.Sprintf("read from /proc/%d/stat, the process at the other end of the raw twins' connection", brokerPID)
	}
	rh, err := rabbithole.NewTLSClient(strings.TrimRight(c.mgmtURL, "/"), c.user, c.pass, rawTransport())
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	b.rh = rh
	ov, err := rh.Overview()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("management API at %s: %w", c.mgmtURL, err)
	}
	b.report.broker = fmt.Sprintf("RabbitMQ %s on Erlang %s", ov.RabbitMQVersion, ov.ErlangVersion)
	log.Printf("prefix %s, %s", b.prefix, b.report.broker)
	return b, nil
}

// rawTransport is the HTTP transport of the raw management API twin: keeps
// as many idle connections as it has workers, so that 8 workers do not
// reconnect for every request.
func rawTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 16
	return t
}

// name is a broker name under the bench's prefix.
func (b *bench) name(parts ...string) string {
	return b.prefix + "." + strings.Join(parts, ".")
}

// adminDo runs fn on the admin channel, reopening it once if it was closed.
func (b *bench) adminDo(fn func(ch *amqp.Channel) error) error {
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	for try := 0; ; try++ {
		if b.admin == nil || b.admin.IsClosed() {
			ch, err := b.raw.Channel()
			if err != nil {
				return err
			}
			b.admin = ch
		}
		err := fn(b.admin)
		if err != nil && try == 0 && errors.Is(err, amqp.ErrClosed) {
			b.admin = nil
			continue
		}
		return err
	}
}

// purge empties queues, so that every run starts from the same queue
// lengths.
func (b *bench) purge(queues ...string) error {
	return b.adminDo(func(ch *amqp.Channel) error {
		for _, q := range queues {
			if _, err := ch.QueuePurge(q, false); err != nil {
				return fmt.Errorf("purge %s: %w", q, err)
			}
		}
		return nil
	})
}

// cleanupQueues deletes every queue under the bench's prefix that the
// management API lists.
func (b *bench) cleanupQueues() {
	qs, err := b.rh.ListQueuesWithParametersIn("/", map[string][]string{"columns": {"name"}})
	if err != nil {
		log.Printf("cleanup: list queues: %v", err)
		return
	}
	var mine []string
	for _, q := range qs {
		if strings.HasPrefix(q.Name, b.prefix+".") || q.Name == b.prefix {
			mine = append(mine, q.Name)
		}
	}
	if len(mine) == 0 {
		return
	}
	errs := parallel(8, len(mine), func(i int) error {
		res, err := b.rh.DeleteQueue("/", mine[i])
		if res != nil && res.Body != nil {
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
		}
		return err
	})
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	log.Printf("cleanup: deleted %d queues under %s (%d failed)", len(mine)-failed, b.prefix, failed)
}

// cleanup deletes everything and closes the connections.
func (b *bench) cleanup() {
	b.cleanupQueues()
	_ = b.raw.Close()
}

// parallel runs fn(0..n-1) with at most workers at a time and returns the
// errors by index.
func parallel(workers, n int, fn func(i int) error) []error {
	errs := make([]error, n)
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errs
}

// quiet is the logger of queuey's producers and pools in the bench: errors
// only, so that per-job records cost no I/O.
func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
}

// variant is one side of a comparison: it runs once and returns its figures
// by metric name.
type variant struct {
	name string
	run  func(ctx context.Context) (map[string]float64, error)
}

// samples are a section's figures: variant -> metric -> one value per run.
type samples map[string]map[string][]float64

// measure runs every variant runs times. The order rotates from one
// repetition to the next, so that a burst of load elsewhere on the machine
// does not always land on the same variant.
func measure(ctx context.Context, runs int, vs []variant) (samples, error) {
	s := samples{}
	for r := range runs {
		for k := range vs {
			v := vs[(r+k)%len(vs)]
			if err := ctx.Err(); err != nil {
				return s, err
			}
			t := time.Now()
			m, err := v.run(ctx)
			if err != nil {
				return s, fmt.Errorf("%s (run %d): %w", v.name, r+1, err)
			}
			if s[v.name] == nil {
				s[v.name] = map[string][]float64{}
			}
			var parts []string
			for metric, x := range m {
				s[v.name][metric] = append(s[v.name][metric], x)
				parts = append(parts, fmt.Sprintf("%s=%.4g", metric, x))
			}
			log.Printf("  run %d/%d %-28s %s (%s)", r+1, runs, v.name, strings.Join(parts, " "), time.Since(t).Round(time.Millisecond))
		}
	}
	return s, nil
}
