//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// silentProxy forwards TCP to the second node until it is partitioned:
// then it stops forwarding on every open connection without closing it (no
// FIN, no RST: the peer simply goes quiet, as behind a dead router) and
// refuses new ones. Only heartbeats can tell such a connection is gone.
type silentProxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	cut     bool
	gate    chan struct{} // closed while forwarding; replaced when cut
	pairs   []net.Conn
	refused atomic.Int64
}

func newSilentProxy(t *testing.T, target string) *silentProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{ln: ln, target: target, gate: make(chan struct{})}
	close(p.gate)
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.pairs {
			_ = c.Close()
		}
	})
	return p
}

func (p *silentProxy) addr() string { return p.ln.Addr().String() }

func (p *silentProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			p.refused.Add(1)
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.pairs = append(p.pairs, c, up)
		p.mu.Unlock()
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

// pipe copies from src to dst, holding each chunk while the proxy is cut.
func (p *silentProxy) pipe(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			<-gate
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				_ = dst.Close()
			}
			return
		}
	}
}

// partition stops all forwarding.
func (p *silentProxy) partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.gate = make(chan struct{})
}

// heal drops the connections that went quiet (both ends have given up on
// them by now) and forwards again.
func (p *silentProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.pairs {
		_ = c.Close()
	}
	p.pairs = nil
	p.cut = false
	close(p.gate)
}

// TestFaultSilentPartition puts a proxy that goes silent between the
// runtime and the node: for 6 s nothing passes on open connections (no
// reset, no close) and new ones are refused, while 3,000 jobs are enqueued
// and consumed. With a 1 s heartbeat the runtime must notice the dead
// connections, keep redialling, and deliver every confirmed job once the
// network heals; no call may hang past its context.
func TestFaultSilentPartition(t *testing.T) {
	const jobs, producers = 3_000, 8
	proxy := newSilentProxy(t, nodeAMQP)
	uri := "amqp://guest:guest@" + proxy.addr() + "/"
	prefix := uniquePrefix(t, "partition")
	set := jobsSet(prefix)
	var logs logBuffer
	l := newLedger()
	l.work = time.Millisecond
	cfg := &amqp.Config{Heartbeat: time.Second}
	prod := newProducer(t, uri, set, &queuey.ProducerOptions{AMQPConfig: cfg, Logger: quiet(&logs)})
	startPool(t, uri, set, l, &queuey.WorkerOptions{AMQPConfig: cfg, Logger: quiet(&logs)})

	began := time.Now()
	var confirmedN atomic.Int64
	var cutAt, healAt time.Time
	healed := make(chan struct{})
	go func() {
		defer close(healed)
		within(time.Minute, func() bool { return confirmedN.Load() >= jobs/4 })
		cutAt = time.Now()
		proxy.partition()
		time.Sleep(6 * time.Second)
		healAt = time.Now()
		proxy.heal()
	}()
	var slowest atomic.Int64
	var wg sync.WaitGroup
	spread(&wg, producers, 0, jobs, func(seq int) {
		job := faultJob{Seq: seq}
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		start := time.Now()
		var err error
		if seq%10 == 0 {
			_, err = queuey.EnqueueJobAfter(ctx, prod, job, time.Second, nil)
		} else {
			_, err = queuey.EnqueueJob(ctx, prod, job, nil)
		}
		cancel()
		if d := int64(time.Since(start)); d > slowest.Load() {
			slowest.Store(d)
		}
		l.enqueued(seq, err)
		if err == nil {
			confirmedN.Add(1)
		}
		time.Sleep(2 * time.Millisecond)
	})
	wg.Wait()
	<-healed
	if !within(2*time.Minute, l.allHandled) {
		t.Errorf("not every confirmed job was handled within 2 min of the end of the load")
	}
	lostConns := strings.Count(logs.String(), "connection lost")
	if lostConns == 0 {
		t.Errorf("no lost connection was logged: the heartbeat did not notice the silent peer")
	}
	_, c, _, _, _ := l.counts()
	note := fmt.Sprintf("silent for %s from %d confirmed (no FIN/RST; new connections refused: %d); heartbeat 1 s; %d lost connections logged; %d enqueue errors, %d of those jobs handled anyway; slowest call %s",
		healAt.Sub(cutAt).Round(100*time.Millisecond), jobs/4, proxy.refused.Load(), lostConns, jobs-c, l.unconfirmedHandled(),
		time.Duration(slowest.Load()).Round(100*time.Millisecond))
	if errs := l.firstErrors(2); len(errs) > 0 {
		note += "; e.g. " + strings.Join(errs, " / ")
	}
	record(t, l.row("silent network partition (no reset), detected by heartbeats",
		fmt.Sprintf("%d jobs (10%% delayed 1 s), %d producers, 1 pool, through a TCP proxy that goes silent", jobs, producers),
		time.Since(began), note))
	if t.Failed() {
		t.Logf("warnings and errors logged:\n%s", tail(logs.String(), 4000))
	}
}
