//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// TestFaultMemoryAlarmBlocksPublishers lowers the fault node's
// vm_memory_high_watermark until its memory alarm goes off, while producers
// enqueue and a pool handles (and retries) jobs, then restores it.
func TestFaultMemoryAlarmBlocksPublishers(t *testing.T) {
	alarmTest(t, "memory", "a memory alarm (set_vm_memory_high_watermark 0.0001, then 0.4)",
		[]string{"set_vm_memory_high_watermark", "0.0001"}, []string{"set_vm_memory_high_watermark", "0.4"})
}

// TestFaultDiskAlarmBlocksPublishers raises the fault node's disk free limit
// above the free space of its disk, then restores RabbitMQ's default.
func TestFaultDiskAlarmBlocksPublishers(t *testing.T) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(brokerDir, &st); err != nil {
		t.Fatal(err)
	}
	free := st.Bavail * uint64(st.Bsize)
	limit := strconv.FormatUint(free*2+1<<30, 10)
	alarmTest(t, "disk", fmt.Sprintf("a disk alarm (set_disk_free_limit to twice the %d MiB free, then 50 MB)", free>>20),
		[]string{"set_disk_free_limit", limit}, []string{"set_disk_free_limit", "50000000"})
}

// alarmTest runs 8 producers (each enqueue bounded by 2 s) and a pool (one
// job in ten fails once, so retries are published during the alarm) for
// 2 s, raises the alarm with raise, keeps producing for 8 s after the
// producer saw the block, restores, and keeps producing for 2 s after the
// block ended. Every failed enqueue must be a *BlockedError; every confirmed
// job must be handled; a Close during the block must return, as must an
// enqueue with no deadline it interrupts.
func alarmTest(t *testing.T, tag, fault string, raise, restore []string) {
	prefix := uniquePrefix(t, "alarm-"+tag)
	set := jobsSet(prefix)
	var logs logBuffer
	l := newLedger()
	prod := newProducer(t, amqpURL(), set, &queuey.ProducerOptions{Logger: logger(&logs)})
	pool := startPool(t, amqpURL(), set, l, &queuey.WorkerOptions{Logger: quiet(&logs),
		Retry: &queuey.RetryPolicy{Strategy: queuey.RetryFixed, Base: 500 * time.Millisecond, MaxAttempts: 10}})
	// A second producer, for Close during the block.
	closer := newProducer(t, amqpURL(), set, &queuey.ProducerOptions{Logger: quiet(&logs)})
	restored := false
	t.Cleanup(func() {
		if !restored {
			ctl(t, restore...)
		}
	})

	var blockedErrs, otherErrs atomic.Int64
	var otherMu sync.Mutex
	var others []string
	var stop atomic.Bool
	var seq atomic.Int64
	var wg sync.WaitGroup
	var slowest atomic.Int64
	began := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				s := int(seq.Add(1)) - 1
				job := faultJob{Seq: s}
				if s%10 == 0 {
					job.FailUntil = 1
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				at := time.Now()
				_, err := queuey.EnqueueJob(ctx, prod, job, nil)
				cancel()
				if took := time.Since(at); int64(took) > slowest.Load() {
					slowest.Store(int64(took))
				}
				l.enqueued(s, err)
				switch {
				case err == nil:
				case errors.Is(err, queuey.ErrPublishingBlocked):
					blockedErrs.Add(1)
				default:
					otherErrs.Add(1)
					otherMu.Lock()
					others = append(others, err.Error())
					otherMu.Unlock()
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	time.Sleep(2 * time.Second)
	raised := time.Now()
	ctl(t, raise...)
	if !within(30*time.Second, func() bool { _, b := prod.Blocked(); return b }) {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("the producer never saw the broker block it\n%s", logs.String())
	}
	sawBlock := time.Now()
	block, _ := prod.Blocked()

	// Close during the block returns, and ends an enqueue that has no
	// deadline of its own.
	enqErr := make(chan error, 1)
	go func() {
		_, err := queuey.EnqueueJob(context.Background(), closer, faultJob{Seq: -1}, nil)
		enqErr <- err
	}()
	time.Sleep(500 * time.Millisecond)
	closeAt := time.Now()
	closeErr := closer.Close()
	closeTook := time.Since(closeAt)
	var closedEnqueue error
	select {
	case closedEnqueue = <-enqErr:
	case <-time.After(10 * time.Second):
		t.Errorf("an enqueue with no deadline still waited 10 s after Close during the block")
	}
	if closeTook > 5*time.Second {
		t.Errorf("Close during the block took %s", closeTook)
	}
	if closedEnqueue == nil || !errors.Is(closedEnqueue, queuey.ErrPublishingBlocked) {
		t.Errorf("the enqueue Close interrupted returned %v, want the blocking error", closedEnqueue)
	}

	time.Sleep(8*time.Second - time.Since(sawBlock))
	_, poolBlocked := pool.Blocked()
	restoreAt := time.Now()
	ctl(t, restore...)
	restored = true
	if !within(60*time.Second, func() bool { _, b := prod.Blocked(); return !b }) {
		t.Errorf("the producer was still blocked 60 s after the alarm was restored")
	}
	unblocked := time.Now()
	time.Sleep(2 * time.Second)
	stop.Store(true)
	wg.Wait()
	if !within(60*time.Second, l.allHandled) {
		t.Errorf("not every confirmed job was handled within 60 s of the end")
	}
	took := time.Since(began)

	if blockedErrs.Load() == 0 {
		t.Errorf("no enqueue failed with the blocking error during an 8 s block of 2 s enqueues")
	}
	if otherErrs.Load() != 0 {
		t.Errorf("%d enqueues failed with another error, e.g. %v", otherErrs.Load(), others[:min(3, len(others))])
	}
	for _, want := range []string{"blocking publishes on this connection", "takes publishes again"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the producer's log has no %q", want)
		}
	}
	// "Not sent" must be the truth: no such job may be handled.
	notSent, sentMaybe := 0, 0
	l.mu.Lock()
	for seq, err := range l.failed {
		var be *queuey.BlockedError
		if !errors.As(err, &be) {
			continue
		}
		if be.Sent {
			sentMaybe++
			continue
		}
		notSent++
		if l.handled[seq] > 0 {
			t.Errorf("job %d failed with %q and was handled all the same", seq, err)
		}
	}
	l.mu.Unlock()
	examples := l.firstErrors(2)
	t.Logf("blocking errors, e.g.: %v", examples)
	t.Logf("Close during the block: %s, %v; its enqueue: %v", closeTook, closeErr, closedEnqueue)
	l.mu.Lock()
	runs := l.runs
	l.mu.Unlock()
	record(t, l.row(fault,
		"8 producers, each enqueue bounded by 2 s, 1 pool (1 job in 10 fails once and is retried); alarm 2 s in, restored 8 s after the producer saw the block",
		took, fmt.Sprintf("broker's reason %q; failed with the blocking error %d (%d not sent, %d sent as the block began: may or may not be enqueued), with another error %d; handled though their enqueue failed %d; %d runs; "+
			"block seen %s after the command, alarm restored after %s of block, unblocked %s after the restore (producers blocked %s); slowest enqueue %s; "+
			"pool's publisher blocked at the restore: %v; Close during the block took %s",
			block.Reason, blockedErrs.Load(), notSent, sentMaybe, otherErrs.Load(), l.unconfirmedHandled(), runs,
			sawBlock.Sub(raised).Round(time.Millisecond), restoreAt.Sub(sawBlock).Round(time.Millisecond), unblocked.Sub(restoreAt).Round(time.Millisecond),
			unblocked.Sub(sawBlock).Round(time.Millisecond), time.Duration(slowest.Load()).Round(time.Millisecond), poolBlocked, closeTook.Round(time.Millisecond))))
}
