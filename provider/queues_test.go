package provider

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

func TestParseID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		id, vhost, prefix string
	}{
		{"myapp@/", "/", "myapp"},
		{"myapp", "/", "myapp"},
		{"myapp@prod", "prod", "myapp"},
		{"my%40app@v%40h", "v@h", "my@app"},
		{"a%25b@/", "/", "a%b"},
		{"a@b@/", "/", "a@b"}, // lenient: the last '@' separates
	} {
		vhost, prefix, err := parseID(c.id)
		if err != nil || vhost != c.vhost || prefix != c.prefix {
			t.Errorf("parseID(%q) = %q, %q, %v; want %q, %q", c.id, vhost, prefix, err, c.vhost, c.prefix)
		}
	}
	for _, id := range []string{"myapp@", "@/", "x%zz@/", "amq.x@/", "x.@/"} {
		if _, _, err := parseID(id); err == nil {
			t.Errorf("parseID(%q) succeeded, want an error", id)
		}
	}
}

func TestFormatIDRoundTrips(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]string{{"/", "myapp"}, {"v@h", "p@x"}, {"100%", "a%40b"}, {"a/b", "c"}} {
		id := formatID(c[0], c[1])
		vhost, prefix, err := parseID(id)
		if err != nil || vhost != c[0] || prefix != c[1] {
			t.Errorf("parseID(formatID(%q, %q)) = %q, %q, %v (id %q)", c[0], c[1], vhost, prefix, err, id)
		}
	}
	if got := formatID("/", "myapp"); got != "myapp@/" {
		t.Errorf("formatID = %q, want myapp@/", got)
	}
}

func TestFormatTTL(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                                  "0s",
		90 * time.Second:                   "1m30s",
		24 * time.Hour:                     "24h",
		1500 * time.Millisecond:            "1s500ms",
		time.Hour + 5*time.Second:          "1h5s",
		49*24*time.Hour + 7*time.Minute:    "1176h7m",
		4294967295 * time.Millisecond:      "1193h2m47s295ms",
		time.Millisecond:                   "1ms",
		2*time.Minute + 3*time.Millisecond: "2m3ms",
	} {
		got := formatTTL(d)
		if got != want {
			t.Errorf("formatTTL(%v) = %q, want %q", d, got, want)
		}
		back, err := parseTTL(got)
		if err != nil || back != d {
			t.Errorf("parseTTL(%q) = %v, %v; want %v", got, back, err, d)
		}
	}
}

func TestNormalizeArgs(t *testing.T) {
	t.Parallel()
	got := normalizeArgs(map[string]any{"a": float64(10), "b": 1.5, "c": "10", "d": float64(4294967295)})
	want := map[string]any{"a": int64(10), "b": 1.5, "c": "10", "d": int64(4294967295)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("normalizeArgs = %#v, want %#v", got, want)
	}
	// What the topology package computes equals what the API returns.
	computed := topology.WorkArgs(topology.Queue{MaxPriority: 10, MessageTTL: 90 * time.Second})
	fromAPI := normalizeArgs(map[string]any{topology.ArgMaxPriority: float64(10), topology.ArgMessageTTL: float64(90000)})
	if !reflect.DeepEqual(computed, fromAPI) {
		t.Errorf("computed %#v != normalized %#v", computed, fromAPI)
	}
}

func brokerPair(work string, durable bool, args map[string]any) (brokerQueue, brokerQueue) {
	return brokerQueue{Name: work, Durable: durable, Type: "classic", Arguments: args},
		brokerQueue{Name: topology.DeadName(work), Durable: true, Type: "classic", Arguments: map[string]any{}}
}

func TestFromBroker(t *testing.T) {
	t.Parallel()
	w, d := brokerPair("p.a", false, map[string]any{topology.ArgMaxPriority: int64(3), topology.ArgMessageTTL: int64(90000)})

	q, problems := fromBroker("a", w, d, nil)
	if len(problems) != 0 {
		t.Errorf("problems = %v", problems)
	}
	if q.MaxPriority.ValueInt64() != 3 || q.Durable.ValueBool() || q.MessageTTL.ValueString() != "1m30s" ||
		q.Name.ValueString() != "p.a" || q.DeadName.ValueString() != "p.a.dead" {
		t.Errorf("fromBroker without prior = %+v", q)
	}

	// A prior "90s" is the framework's to keep, through ttlValue's
	// semantic equality; fromBroker says what the broker has.
	prior := queueModel{MessageTTL: ttlString("90s")}
	if q, _ := fromBroker("a", w, d, &prior); q.MessageTTL.ValueString() != "1m30s" {
		t.Errorf("message_ttl = %q, want the broker's 1m30s", q.MessageTTL.ValueString())
	}

	w, d = brokerPair("p.b", true, map[string]any{})
	q, _ = fromBroker("b", w, d, nil)
	if q.MaxPriority.ValueInt64() != 0 || !q.MessageTTL.IsNull() || len(q.Arguments.Elements()) != 0 {
		t.Errorf("fromBroker of a queue without arguments = %+v", q)
	}
	prior = queueModel{MessageTTL: ttlString("0s")}
	if q, _ := fromBroker("b", w, d, &prior); q.MessageTTL.ValueString() != "0s" {
		t.Errorf("message_ttl = %v, want the prior \"0s\" kept, which declares no TTL", q.MessageTTL)
	}

	w, d = brokerPair("p.c", true, map[string]any{topology.ArgMaxPriority: "10"})
	w.Type = "quorum"
	d.Durable = false
	if _, problems := fromBroker("c", w, d, nil); len(problems) != 3 {
		t.Errorf("problems = %q, want the string argument, the quorum type and the non-durable dead queue", problems)
	}
}

func TestDiscover(t *testing.T) {
	t.Parallel()
	queues := map[string]brokerQueue{}
	for _, n := range []string{
		"p.a", "p.a.dead", "p.a.deferred.500", "p.a.deferred.1000",
		"p.b",                              // no dead-letter queue: not a set member
		"p.c", "p.c.dead", "p.c.dead.dead", // p.c.dead belongs to p.c
		"p.x.y", "p.x.y.dead",
		"other.z", "other.z.dead", "pp.q", "pp.q.dead", "p.", "p..dead",
	} {
		queues[n] = brokerQueue{Name: n}
	}
	got := discover("p", queues)
	// "p." is the prefix and its dot alone: no logical name.
	want := []string{"a", "c", "x.y"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("discover = %q, want %q", got, want)
	}
}

func TestArgDiff(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		before, after map[string]int64
		want          string
	}{
		{map[string]int64{"x-max-priority": 10}, map[string]int64{"x-max-priority": 10}, ""},
		{map[string]int64{"x-max-priority": 10}, map[string]int64{"x-max-priority": 5}, "x-max-priority 10 → 5"},
		{map[string]int64{}, map[string]int64{"x-message-ttl": 90000}, "x-message-ttl (none) → 90000"},
		{map[string]int64{"x-max-length": 3, "x-max-priority": 1}, map[string]int64{"x-max-priority": 1}, "x-max-length 3 → (none)"},
	} {
		if got := argDiff(c.before, c.after); got != c.want {
			t.Errorf("argDiff(%v, %v) = %q, want %q", c.before, c.after, got, c.want)
		}
	}
}

func TestDiffQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := func(p int64, ttl string, durable bool) queueModel {
		q := queueModel{MaxPriority: types.Int64Value(p), Durable: types.BoolValue(durable), MessageTTL: ttlNull()}
		if ttl != "" {
			q.MessageTTL = ttlString(ttl)
		}
		return withComputed("p", "a", q)
	}
	if c, _ := diffQueue(ctx, cfg(10, "90s", true), cfg(10, "1m30s", true)); c.Work || c.Dead {
		t.Errorf("90s and 1m30s differ: %+v", c)
	}
	c, _ := diffQueue(ctx, cfg(10, "", true), cfg(5, "", false))
	if !c.Work || c.Dead || c.Reason != "x-max-priority 10 → 5; durable true → false" {
		t.Errorf("diffQueue = %+v", c)
	}
	before := cfg(10, "", true)
	before.DeadArguments = argsValue(map[string]int64{"x-max-length": 1})
	if c, _ := diffQueue(ctx, before, cfg(10, "", true)); c.Work || !c.Dead {
		t.Errorf("a dead queue with arguments is not planned for replacement: %+v", c)
	}
}

func TestHeldMessages(t *testing.T) {
	t.Parallel()
	existing := map[string]brokerQueue{
		"p.a":                {Name: "p.a", Messages: 1},
		"p.a.dead":           {Name: "p.a.dead", Messages: 3},
		"p.a.deferred.30000": {Name: "p.a.deferred.30000", Messages: 2},
		"p.ab.deferred.5":    {Name: "p.ab.deferred.5", Messages: 9},
	}
	got := heldMessages(existing, "p.a", true, true, true)
	want := []string{`queue "p.a" holds 1 message`, `queue "p.a.deferred.30000" holds 2 messages`, `queue "p.a.dead" holds 3 messages`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("heldMessages = %q, want %q", got, want)
	}
	if got := heldMessages(existing, "p.a", false, false, true); len(got) != 1 {
		t.Errorf("heldMessages of the dead queue alone = %q", got)
	}
	if got := heldMessages(existing, "p.a", true, false, false); len(got) != 1 {
		t.Errorf("heldMessages of the work queue alone = %q", got)
	}
}

func TestValidateSetPointsAtAttributes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := func(p int64, ttl string) attr.Value {
		m := map[string]attr.Value{
			"max_priority": types.Int64Value(p), "message_ttl": ttlNull(), "durable": types.BoolNull(), "queue_type": types.StringNull(),
			"name": types.StringNull(), "dead_name": types.StringNull(),
			"arguments": types.MapNull(types.Int64Type), "dead_arguments": types.MapNull(types.Int64Type),
		}
		if ttl != "" {
			m["message_ttl"] = ttlString(ttl)
		}
		return types.ObjectValueMust(queueObjectType.AttrTypes, m)
	}
	for _, c := range []struct {
		prefix string
		queues map[string]attr.Value
		want   path.Path
		// detail starts every error's detail: a queue's argument errors
		// point at the queue's entry, so the detail names the queue and
		// the attribute.
		detail string
	}{
		{"p.", map[string]attr.Value{"a": q(1, "")}, path.Root("prefix"), ""},
		{"p", map[string]attr.Value{}, path.Root("queues"), ""},
		{"p", map[string]attr.Value{"a": q(300, "")}, path.Root("queues").AtMapKey("a"), `Queue "a": max_priority 300 is out of range`},
		{"p", map[string]attr.Value{"a": q(1, "1h"), "b": q(1, "1ns")}, path.Root("queues").AtMapKey("b"), `Queue "b": message_ttl 1ns is not a whole number of milliseconds`},
		{"p", map[string]attr.Value{"a": q(1, "soon")}, path.Root("queues").AtMapKey("a"), `Queue "a": message_ttl "soon" is not a duration`},
		{"p", map[string]attr.Value{"a": q(1, "50d")}, path.Root("queues").AtMapKey("a"), `Queue "a": message_ttl 50d is longer than RabbitMQ's limit of 4294967295 ms (49d 17h 2m 47s 295ms)`},
		{"p", map[string]attr.Value{"a": q(1, ""), "a.dead": q(1, "")}, path.Root("queues").AtMapKey("a.dead"), ""},
		{"p", map[string]attr.Value{"": q(1, "")}, path.Root("queues").AtMapKey(""), ""},
	} {
		cfg := queueSetModel{
			Prefix: types.StringValue(c.prefix),
			Queues: types.MapValueMust(queueObjectType, c.queues),
		}
		diags := validateSet(ctx, cfg)
		if diags.ErrorsCount() != 1 {
			t.Errorf("prefix %q queues %v: %d errors %v, want 1", c.prefix, c.queues, diags.ErrorsCount(), diags)
			continue
		}
		withPath, ok := diags.Errors()[0].(diag.DiagnosticWithPath)
		if !ok || !withPath.Path().Equal(c.want) {
			t.Errorf("prefix %q queues %v: error %v, want it at %s", c.prefix, c.queues, diags.Errors()[0], c.want)
		}
		if d := diags.Errors()[0].Detail(); !strings.HasPrefix(d, c.detail) {
			t.Errorf("prefix %q queues %v: error detail %q, want it to start %q", c.prefix, c.queues, d, c.detail)
		}
	}
	// A message_ttl that is no duration does not hide the same queue's
	// max_priority error: both are reported, at the queue.
	both := validateSet(ctx, queueSetModel{Prefix: types.StringValue("p"), Queues: types.MapValueMust(queueObjectType, map[string]attr.Value{"orders": q(300, "abc")})})
	if both.ErrorsCount() != 2 {
		t.Errorf("max_priority 300 and message_ttl \"abc\": %d errors %v, want 2", both.ErrorsCount(), both)
	}
	for _, e := range both.Errors() {
		if p := e.(diag.DiagnosticWithPath).Path(); !p.Equal(path.Root("queues").AtMapKey("orders")) || !strings.HasPrefix(e.Detail(), `Queue "orders": `) {
			t.Errorf("error %q: %q at %s, want it at queues[\"orders\"], naming the queue", e.Summary(), e.Detail(), p)
		}
	}
	// Unknown values are left for apply.
	cfg := queueSetModel{Prefix: types.StringUnknown(), Queues: types.MapValueMust(queueObjectType, map[string]attr.Value{"a": q(1, "")})}
	if diags := validateSet(ctx, cfg); diags.HasError() {
		t.Errorf("unknown prefix: %v", diags)
	}
}

// TestModifyPlanWarnsAboutChangedQueueOnly pins what an operator sees
// before approving an argument change: one warning, for the queue that is
// replaced, naming it and the old and new arguments.
func TestModifyPlanWarnsAboutChangedQueueOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := queueSetSchema()
	set := func(priorities map[string]int64) queueSetModel {
		queues := map[string]queueModel{}
		for name, p := range priorities {
			queues[name] = withComputed("app", name, queueModel{MaxPriority: types.Int64Value(p), Durable: types.BoolValue(true), MessageTTL: ttlNull()})
		}
		return queueSetModel{
			ID: types.StringValue("app@/"), Vhost: types.StringValue("/"), Prefix: types.StringValue("app"),
			ForceDestroy: types.BoolValue(false), Queues: types.MapValueMust(queueObjectType, toValues(t, queues)),
		}
	}
	state := tfsdk.State{Schema: s}
	if d := state.Set(ctx, set(map[string]int64{"a": 10, "b": 10})); d.HasError() {
		t.Fatal(d)
	}
	plan := tfsdk.Plan{Schema: s}
	if d := plan.Set(ctx, set(map[string]int64{"a": 5, "b": 10, "c": 1})); d.HasError() {
		t.Fatal(d)
	}
	req := resource.ModifyPlanRequest{State: state, Plan: plan}
	resp := &resource.ModifyPlanResponse{Plan: plan}
	(&queueSetResource{}).ModifyPlan(ctx, req, resp)
	if resp.Diagnostics.HasError() {
		t.Fatal(resp.Diagnostics)
	}
	warnings := resp.Diagnostics.Warnings()
	if len(warnings) != 1 {
		t.Fatalf("%d warnings %v, want 1", len(warnings), warnings)
	}
	w := warnings[0]
	if w.Summary() != "Queue Will Be Replaced" || !strings.Contains(w.Detail(), `"app.a"`) || !strings.Contains(w.Detail(), "x-max-priority 10 → 5") {
		t.Errorf("warning = %q: %q", w.Summary(), w.Detail())
	}
	if p := w.(diag.DiagnosticWithPath).Path(); !p.Equal(path.Root("queues").AtMapKey("a")) {
		t.Errorf("warning at %s, want queues[\"a\"]", p)
	}
}

func toValues(t *testing.T, queues map[string]queueModel) map[string]attr.Value {
	t.Helper()
	m, d := types.MapValueFrom(context.Background(), queueObjectType, queues)
	if d.HasError() {
		t.Fatal(d)
	}
	return m.Elements()
}

func TestSettingPrecedence(t *testing.T) {
	t.Setenv("QUEUEY_ENDPOINT", "")
	t.Setenv("RABBITMQ_ENDPOINT", "http://rabbit:15672")
	if got := setting(types.StringNull(), "endpoint", defaultEndpoint); got != "http://rabbit:15672" {
		t.Errorf("RABBITMQ_ENDPOINT ignored: %q", got)
	}
	t.Setenv("QUEUEY_ENDPOINT", "http://queuey:15672")
	if got := setting(types.StringNull(), "endpoint", defaultEndpoint); got != "http://queuey:15672" {
		t.Errorf("QUEUEY_ENDPOINT does not win over RABBITMQ_ENDPOINT: %q", got)
	}
	if got := setting(types.StringValue("http://config:15672"), "endpoint", defaultEndpoint); got != "http://config:15672" {
		t.Errorf("the configuration does not win: %q", got)
	}
	t.Setenv("QUEUEY_ENDPOINT", "")
	t.Setenv("RABBITMQ_ENDPOINT", "")
	if got := setting(types.StringNull(), "endpoint", defaultEndpoint); got != defaultEndpoint {
		t.Errorf("default = %q", got)
	}
}

func TestBuildTLS(t *testing.T) {
	t.Parallel()
	if _, err := buildTLS("", "cert.pem", "", false); err == nil {
		t.Error("a client certificate without a key was accepted")
	}
	if _, err := buildTLS("/nonexistent/ca.pem", "", "", false); err == nil {
		t.Error("a missing ca_file was accepted")
	}
	cfg, err := buildTLS("", "", "", true)
	if err != nil || !cfg.InsecureSkipVerify {
		t.Errorf("insecure: %+v, %v", cfg, err)
	}
}

func TestNewRabbitClientTrimsTrailingSlash(t *testing.T) {
	t.Parallel()
	c, err := newRabbitClient("http://127.0.0.1:15672/", "u", "p", nil)
	if err != nil || c.Endpoint != "http://127.0.0.1:15672" {
		t.Errorf("endpoint = %q, %v", c.Endpoint, err)
	}
}

func TestReadQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prior := withComputed("p", "a", queueModel{MaxPriority: types.Int64Value(4), Durable: types.BoolValue(false), MessageTTL: ttlString("90s")})
	w, d := brokerPair("p.a", false, map[string]any{topology.ArgMaxPriority: int64(4), topology.ArgMessageTTL: int64(90000)})

	q, found, _ := readQueue("p", "a", map[string]brokerQueue{w.Name: w, d.Name: d}, &prior)
	if !found {
		t.Fatal("not found")
	}
	if c, _ := replacement(ctx, q, prior); c.Work || c.Dead {
		t.Errorf("an unchanged queue reads as a change: %+v", c)
	}

	if _, found, _ := readQueue("p", "a", map[string]brokerQueue{}, &prior); found {
		t.Error("a queue with neither broker queue was found")
	}

	// Work queue gone: kept, name null, the prior configuration kept, and
	// nothing to replace.
	q, found, _ = readQueue("p", "a", map[string]brokerQueue{d.Name: d}, &prior)
	if !found || !q.Name.IsNull() || q.DeadName.IsNull() || q.MaxPriority.ValueInt64() != 4 || q.Durable.ValueBool() {
		t.Errorf("work queue gone: found %t, %+v", found, q)
	}
	if mw, md := missing(q); !mw || md {
		t.Errorf("missing = %t, %t", mw, md)
	}
	changed := withComputed("p", "a", queueModel{MaxPriority: types.Int64Value(9), Durable: types.BoolValue(true), MessageTTL: ttlNull()})
	if c, _ := replacement(ctx, q, changed); c.Work || c.Dead {
		t.Errorf("a missing work queue is planned for replacement: %+v", c)
	}

	// Dead-letter queue gone.
	q, found, _ = readQueue("p", "a", map[string]brokerQueue{w.Name: w}, &prior)
	if !found || q.Name.IsNull() || !q.DeadName.IsNull() {
		t.Errorf("dead queue gone: found %t, %+v", found, q)
	}

	// Import has no prior: only complete pairs count.
	if _, found, _ := readQueue("p", "a", map[string]brokerQueue{w.Name: w}, nil); found {
		t.Error("half a queue was imported")
	}
}
