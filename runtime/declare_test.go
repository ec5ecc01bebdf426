package queuey

import (
	"reflect"
	"testing"

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
		{Name: "p.a.dead", Durable: topology.DeadDurable, Args: topology.DeadArgs()},
		{Name: "p.b", Durable: false, Args: topology.WorkArgs(b)},
		{Name: "p.b.dead", Durable: topology.DeadDurable, Args: topology.DeadArgs()},
	}
	if got := setDeclarations(set); !reflect.DeepEqual(got, want) {
		t.Errorf("setDeclarations = %+v\nwant %+v", got, want)
	}
}
