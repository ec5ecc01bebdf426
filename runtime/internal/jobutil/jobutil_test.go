package jobutil

import (
	"regexp"
	"testing"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestNewIDIsARandomUUID(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		id := NewID()
		if !uuidV4.MatchString(id) {
			t.Fatalf("NewID() = %q, not a version 4 UUID", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
	}
}

type valueArgs struct{ N int }

func (valueArgs) Kind() string { return "value" }

type ptrArgs struct{ N int }

func (*ptrArgs) Kind() string { return "ptr" }

func TestZeroIsUsableForPointerTypes(t *testing.T) {
	t.Parallel()
	if v := Zero[valueArgs](); v.Kind() != "value" || v.N != 0 {
		t.Errorf("value type: %+v", v)
	}
	p := Zero[*ptrArgs]()
	if p == nil {
		t.Fatal("pointer type: nil")
	}
	if p.Kind() != "ptr" || p.N != 0 {
		t.Errorf("pointer type: %+v", p)
	}
}

// TestNewIDAllocatesOnce pins the cost of an id on the enqueue path: the
// string itself and nothing else (fmt.Sprintf of its groups took six).
func TestNewIDAllocatesOnce(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what escapes to the heap")
	}
	if n := testing.AllocsPerRun(100, func() { _ = NewID() }); n != 1 {
		t.Errorf("NewID allocates %v times, want 1", n)
	}
}
