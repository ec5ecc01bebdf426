package topology_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

func TestDeclarationsListWorkThenDeadPerQueue(t *testing.T) {
	t.Parallel()
	set := topology.Set{Prefix: "p", Queues: []topology.Queue{
		{Name: "a", MaxPriority: 5, MessageTTL: time.Minute, Durable: true},
		{Name: "b", Durable: false},
	}}
	want := []topology.Declaration{
		{Name: "p.a", Durable: true, Args: map[string]any{topology.ArgMaxPriority: int64(5), topology.ArgMessageTTL: int64(60000)}},
		{Name: "p.a.dead", Durable: true, Args: map[string]any{}},
		{Name: "p.b", Durable: false, Args: map[string]any{}},
		{Name: "p.b.dead", Durable: true, Args: map[string]any{}},
	}
	if got := topology.Declarations(set); !reflect.DeepEqual(got, want) {
		t.Errorf("Declarations = %+v\nwant %+v", got, want)
	}
}
