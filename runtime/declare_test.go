package queuey

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// The one list that both the first declaration and every redeclaration walk.
func TestSetDeclarationsListsWorkThenDeadPerQueue(t *testing.T) {
	t.Parallel()
	set := QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "a", MaxPriority: 5}, {Name: "b", NonDurable: true, MaxPriority: NoPriority}}}
	a := topology.Queue{Name: "a", MaxPriority: 5, Durable: true}
	b := topology.Queue{Name: "b", Durable: false}
	want := []topology.Declaration{
		{Name: "p.a", Durable: true, Args: topology.WorkArgs(a)},
		{Name: "p.a.dead", Durable: topology.DeadDurable, Args: topology.DeadArgs("")},
		{Name: "p.b", Durable: false, Args: topology.WorkArgs(b)},
		{Name: "p.b.dead", Durable: topology.DeadDurable, Args: topology.DeadArgs("")},
	}
	if got := setDeclarations(set); !reflect.DeepEqual(got, want) {
		t.Errorf("setDeclarations = %+v\nwant %+v", got, want)
	}
}

// TestDeclareErrorNamesARefusedTransientQueue pins how RabbitMQ's refusal
// of a transient queue (a 541 connection error naming the deprecated
// feature, as 4.0.5 sends it) reaches the caller: an error that matches
// ErrTransientRefused and says what to change. Other internal errors stay
// what they were.
func TestDeclareErrorNamesARefusedTransientQueue(t *testing.T) {
	refused := &amqp.Error{Code: amqp.InternalError, Reason: "INTERNAL_ERROR - Feature `transient_nonexcl_queues` is deprecated."}
	err := declareError("app.jobs", refused)
	if !errors.Is(err, ErrTransientRefused) {
		t.Fatalf("declareError = %v, want a match for ErrTransientRefused", err)
	}
	for _, want := range []string{`"app.jobs"`, "NonDurable", "durable = true", "transient_nonexcl_queues = true", "the broker refuses"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	hold := declareError(topology.HoldName("app.jobs", 1000), refused)
	if !strings.Contains(hold.Error(), "hold queue") {
		t.Errorf("%q does not say it is a hold queue", hold)
	}
	other := declareError("app.jobs", &amqp.Error{Code: amqp.InternalError, Reason: "INTERNAL_ERROR - something else"})
	if errors.Is(other, ErrTransientRefused) {
		t.Errorf("an unrelated internal error %v matches ErrTransientRefused", other)
	}
}
