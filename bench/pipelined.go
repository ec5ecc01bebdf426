package main

import (
	"context"
	"fmt"
	"log"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// callers is how many goroutines enqueue at once in the pipelined section.
const callers = 64

// rawChannelSweep are the channel counts of the raw pipelined twins: 64
// goroutines share them, each waiting for its own confirm.
var rawChannelSweep = []int{1, 2, 4, 8, 16}

// pipelinedSection: Enqueue from 64 goroutines on the producer's default
// channels, where concurrent publishes share a channel with many confirms
// in flight; the same with one publish per channel (PublishesPerChannel 1,
// the producer before pipelining); and the raw twins, 64 goroutines over 1
// to 16 channels, of which the best is the target. A serial Enqueue beside a
// serial raw publish shows what sharing costs a single caller.
func (b *bench) pipelinedSection(ctx context.Context) error {
	set := queuey.QueueSet{Prefix: b.name("pipelined"), Queues: []queuey.QueueConfig{{Name: "jobs"}}}
	work := set.WorkQueue("jobs")
	shared, err := queuey.NewProducer(ctx, b.c.amqpURL, set, &queuey.ProducerOptions{Logger: quiet()})
	if err != nil {
		return err
	}
	defer shared.Close()
	alone, err := queuey.NewProducer(ctx, b.c.amqpURL, set, &queuey.ProducerOptions{PublishesPerChannel: 1, Logger: quiet()})
	if err != nil {
		return err
	}
	defer alone.Close()
	chs, err := b.confirmChannels(rawChannelSweep[len(rawChannelSweep)-1])
	if err != nil {
		return err
	}
	defer closeAll(chs)
	msg := rawMessage(work)
	n := b.c.pipelinedJobs

	enqueue := func(p *queuey.Producer, workers, jobs int) func(ctx context.Context) (map[string]float64, error) {
		return func(ctx context.Context) (map[string]float64, error) {
			defer b.purge(work)
			return concurrently(ctx, workers, jobs, func(_, _ int) error {
				_, err := p.Enqueue(ctx, "jobs", noopKind, payload, nil)
				return err
			})
		}
	}
	raw := func(channels, workers, jobs int) func(ctx context.Context) (map[string]float64, error) {
		return func(ctx context.Context) (map[string]float64, error) {
			defer b.purge(work)
			return concurrently(ctx, workers, jobs, func(w, _ int) error {
				return rawPublish(ctx, chs[w%channels], work, msg)
			})
		}
	}
	vs := []variant{
		{"queuey Enqueue ×64", enqueue(shared, callers, n)},
		{"queuey Enqueue ×64, 1 per channel", enqueue(alone, callers, n)},
		{"queuey Enqueue ×1", enqueue(shared, 1, n/10)},
		{"queuey Enqueue ×1, 1 per channel", enqueue(alone, 1, n/10)},
		{"raw publish+confirm ×1", raw(1, 1, n/10)},
	}
	for _, k := range rawChannelSweep {
		vs = append(vs, variant{rawSweepName(k), raw(k, callers, n)})
	}
	// One goroutine, one channel, 256 confirms outstanding: the broker's
	// pipelined rate, which no caller that waits for its own confirm gets.
	vs = append(vs, variant{"raw window 256, 1 goroutine", b.rawSpread(chs[:1], work, msg, n, rawWindow)})
	s, err := measure(ctx, b.c.runs, vs)
	if err != nil {
		return err
	}
	best := rawSweepName(rawChannelSweep[0])
	for _, k := range rawChannelSweep {
		name := rawSweepName(k)
		log.Printf("  raw ×64 on %d channels: median %.0f jobs/s", k, median(s[name]["rate"]))
		if median(s[name]["rate"]) > median(s[best]["rate"]) {
			best = name
		}
	}
	bestLabel := "amqp091-go, 64 goroutines, " + best[len("raw ×64, "):] + " (the best of 1, 2, 4, 8 and 16)"
	b.report.add(s, "pipelined", "enqueue from 64 goroutines, default options", "jobs/s",
		"queuey Enqueue ×64", "rate", best, "rate", bestLabel, true, 0.9)
	b.report.add(s, "pipelined", "CPU of this process per job (all goroutines)", "µs/job",
		"queuey Enqueue ×64", "cpu", best, "cpu", bestLabel, false, 0)
	b.report.add(s, "pipelined", "heap allocations of this process per job", "allocs/job",
		"queuey Enqueue ×64", "allocs", best, "allocs", bestLabel, false, 0)
	b.report.add(s, "pipelined", "enqueue from 64 goroutines, beside one raw goroutine with 256 confirms outstanding", "jobs/s",
		"queuey Enqueue ×64", "rate", "raw window 256, 1 goroutine", "rate", "amqp091-go, 1 goroutine, 1 channel, 256 confirms outstanding", true, 0)
	b.report.add(s, "pipelined", "enqueue from 64 goroutines, PublishesPerChannel 1 (before pipelining)", "jobs/s",
		"queuey Enqueue ×64, 1 per channel", "rate", best, "rate", bestLabel, true, 0)
	b.report.add(s, "pipelined", "enqueue from 64 goroutines, shared ÷ 1 per channel", "jobs/s",
		"queuey Enqueue ×64", "rate", "queuey Enqueue ×64, 1 per channel", "rate", "the same producer code, PublishesPerChannel 1", true, 0)
	b.report.add(s, "pipelined", "serial enqueue, default options", "jobs/s",
		"queuey Enqueue ×1", "rate", "raw publish+confirm ×1", "rate", "amqp091-go, one goroutine, one channel", true, 0)
	b.report.add(s, "pipelined", "serial enqueue, PublishesPerChannel 1", "jobs/s",
		"queuey Enqueue ×1, 1 per channel", "rate", "raw publish+confirm ×1", "rate", "amqp091-go, one goroutine, one channel", true, 0)
	b.report.add(s, "pipelined", "serial enqueue, shared ÷ 1 per channel", "jobs/s",
		"queuey Enqueue ×1", "rate", "queuey Enqueue ×1, 1 per channel", "rate", "the same producer code, PublishesPerChannel 1", true, 0.9)
	return nil
}

func rawSweepName(channels int) string { return fmt.Sprintf("raw ×64, %d channels", channels) }
