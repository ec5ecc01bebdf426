//go:build integration

package queuey_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// nodeURL is the AMQP URL of node n alone of scripts/cluster.sh's cluster.
func nodeURL(c *brokertest.Cluster, n int) string {
	return fmt.Sprintf("amqp://%s:%s@127.0.0.1:569%d/", c.Username, c.Password, n)
}

// declareOn declares queue on node n, where a classic queue then lives.
func declareOn(t *testing.T, c *brokertest.Cluster, n int, queue string, durable bool, args amqp.Table) {
	t.Helper()
	ac, err := amqp.Dial(nodeURL(c, n))
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	ch, err := ac.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, durable, false, false, false, args); err != nil {
		t.Fatalf("declare %s on node %d: %v", queue, n, err)
	}
}

// While the node of a classic work queue is down, a producer connected to
// another node starts, an enqueue to that queue waits for the node instead
// of failing with a bare nack, and a delayed job whose hold queue lives on
// the lost node goes to the neighbouring hold queue, on a live node, and
// runs on time. Before, the producer's connection failed its declarations
// (404 NOT_FOUND) and reconnected forever, and the nack was ErrNacked at
// once.
func TestIntegrationClusterQueueNodeDown(t *testing.T) {
	c := brokertest.OpenCluster(t)
	prefix := c.NewPrefix("nodedown")
	// Before the prefix's queues are deleted: a classic queue on a node
	// that is down cannot be.
	t.Cleanup(func() {
		if err := c.RestartNode(3); err != nil {
			t.Error(err)
		}
	})
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.QueueConfig{
		{Name: "home3"}, // classic, declared on node 3 below
		{Name: "jobs", QueueType: queuey.QueueTypeQuorum},
	}}
	home3, jobs := set.WorkQueue("home3"), set.WorkQueue("jobs")
	declareOn(t, c, 3, home3, true, amqp.Table{topology.ArgMaxPriority: int64(topology.DefaultMaxPriority)})
	// The hold queue of a 1 s delay of jobs, on node 3 too.
	declareOn(t, c, 3, topology.HoldName(jobs, 1000), true, amqp.Table(topology.HoldArgs(jobs, 1000)))
	declareOn(t, c, 1, jobs, true, amqp.Table(topology.WorkArgs(topology.Queue{Durable: true, Type: topology.QuorumQueueType})))
	// And home3's own hold queue of a 1 s delay, beside it on node 3.
	declareOn(t, c, 3, topology.HoldName(home3, 1000), true, amqp.Table(topology.HoldArgs(home3, 1000)))
	stopBegan := time.Now()
	if err := c.StopNode(3, false); err != nil {
		t.Fatal(err)
	}
	t.Logf("node 3 stopped in %v", time.Since(stopBegan).Round(100*time.Millisecond))
	log := &wkLog{}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, r := range log.all() {
			t.Logf("log: %s %s %v", r.level, r.msg, r.attrs)
		}
		out, _ := c.Script("status")
		t.Logf("cluster.sh status:\n%s", out)
		api, err := c.API()
		if err != nil {
			t.Log(err)
			return
		}
		for _, q := range []string{home3, topology.HoldName(jobs, 1000)} {
			info, err := api.GetQueue(c.Vhost(), q)
			if err != nil {
				t.Logf("queue %s: %v", q, err)
				continue
			}
			t.Logf("queue %s: node %s, state %q, %d messages", q, info.Node, info.Status, info.Messages)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := queuey.NewProducer(ctx, nodeURL(c, 1), set, &queuey.ProducerOptions{Logger: slog.New(log)})
	if err != nil {
		t.Fatalf("NewProducer with node 3 down: %v", err)
	}
	defer p.Close()
	if recs := log.find("node is down, so it was not declared"); len(recs) == 0 {
		t.Errorf("no warning that %s's node is down", home3)
	}

	// A held job: its hold queue's node is down.
	ran := make(chan time.Time, 1)
	ws := queuey.NewWorkers()
	queuey.AddWorker(ws, queuey.WorkFunc[clJob](func(context.Context, *queuey.Job[clJob]) error {
		select {
		case ran <- time.Now():
		default:
		}
		return nil
	}))
	pool, err := queuey.NewWorkerPool(ctx, nodeURL(c, 1), queuey.QueueSet{Prefix: prefix, Queues: set.Queues[1:]}, ws, &queuey.WorkerOptions{Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Start(); err != nil {
		t.Fatal(err)
	}
	defer pool.Stop(context.Background())
	sent := time.Now()
	if _, err := p.EnqueueAfter(ctx, "jobs", clJob{}.Kind(), clJob{Seq: 1}, time.Second, nil); err != nil {
		t.Fatalf("EnqueueAfter with its hold queue's node down: %v", err)
	}
	select {
	case at := <-ran:
		if late := at.Sub(sent); late < time.Second || late > 5*time.Second {
			t.Errorf("the delayed job ran %v after its enqueue, want about 1s", late)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the delayed job did not run")
	}
	if recs := log.find("neighbouring hold queue"); len(recs) != 1 || recs[0].attrs["instead"] != topology.HoldName(jobs, 1001) {
		t.Errorf("neighbour log: %+v, want one naming %s", recs, topology.HoldName(jobs, 1001))
	}

	// An enqueue to the classic queue on the lost node waits for it; so
	// does a delayed one whose hold queue is on that node too: a
	// neighbouring hold queue would release the job into a work queue
	// that is down, which drops it.
	done := make(chan error, 2)
	go func() {
		_, err := p.Enqueue(ctx, "home3", clJob{}.Kind(), clJob{Seq: 2}, nil)
		done <- err
	}()
	go func() {
		_, err := p.EnqueueAfter(ctx, "home3", clJob{}.Kind(), clJob{Seq: 4}, time.Second, nil)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("an enqueue returned (%v) while the queue's node was down; want it to wait", err)
	case <-time.After(3 * time.Second):
	}
	stopped := time.Now()
	if err := c.RestartNode(3); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("an enqueue failed after the node came back: %v", err)
			}
			t.Logf("an enqueue returned %v after node 3 was back", time.Since(stopped))
		case <-time.After(30 * time.Second):
			t.Fatal("an enqueue did not return after the node came back")
		}
	}
	if recs := log.find("hold queue and the work queue it releases into are on nodes that are down"); len(recs) != 1 {
		t.Errorf("hold-queue wait log: %+v, want one", recs)
	}
	// Both jobs reach home3: the delayed one a second later, from the
	// hold queue on node 3.
	ch := func() int {
		ac, err := amqp.Dial(nodeURL(c, 1))
		if err != nil {
			return -1
		}
		defer ac.Close()
		chn, err := ac.Channel()
		if err != nil {
			return -1
		}
		q, err := chn.QueueDeclarePassive(home3, true, false, false, false, nil)
		if err != nil {
			return -1
		}
		return q.Messages
	}
	deadline := time.Now().Add(15 * time.Second)
	for ch() != 2 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if n := ch(); n != 2 {
		t.Errorf("%s holds %d jobs after the node came back, want the 2 enqueued (one of them delayed)", home3, n)
	}
	if recs := log.find("on a node that is down; waiting"); len(recs) != 1 || !strings.Contains(fmt.Sprint(recs[0].attrs["reason"]), "NOT_FOUND") {
		t.Errorf("node-down log: %+v", recs)
	}

	// And the end of its bounds: the error says the node is down.
	if err := c.StopNode(3, false); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	_, err = p.Enqueue(short, "home3", clJob{}.Kind(), clJob{Seq: 3}, nil)
	if !errors.Is(err, queuey.ErrNodeDown) {
		t.Errorf("enqueue with a 2 s deadline while the node is down: %v, want ErrNodeDown", err)
	}
	t.Logf("the error: %v", err)
}
