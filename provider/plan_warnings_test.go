package provider

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// expectPlanWarning is a plan check that the plan just made gave the
// warning summary, with a detail matching detail, among the warnings w
// recorded since its last reset. Run before the apply, it shows what an
// operator sees above "Do you want to perform these actions?".
func expectPlanWarning(w *planWarnings, summary string, detail *regexp.Regexp) plancheck.PlanCheck {
	return planWarningCheck{w: w, summary: summary, detail: detail}
}

type planWarningCheck struct {
	w       *planWarnings
	summary string
	detail  *regexp.Regexp
}

func (c planWarningCheck) CheckPlan(_ context.Context, _ plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	var seen []string
	for _, d := range c.w.seen() {
		if d.Summary == c.summary && c.detail.MatchString(d.Detail) {
			return
		}
		seen = append(seen, fmt.Sprintf("%q: %s", d.Summary, d.Detail))
	}
	resp.Error = fmt.Errorf("the plan gave no warning %q matching %s; it gave %d: %s", c.summary, c.detail, len(seen), strings.Join(seen, "; "))
}

// TestAccQueueSet_planWarnsBeforeRemovingAQueueWithMessages pins that
// removing a queue that holds messages is not planned quietly: without
// force_destroy the plan says the apply will refuse (and it does), with it
// the plan says which messages the apply discards, with their counts.
func TestAccQueueSet_planWarnsBeforeRemovingAQueueWithMessages(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("rmwarn")
	warnings := &planWarnings{}
	held := regexp.QuoteMeta(fmt.Sprintf(`queue %q holds 4 messages, queue %q holds 2 messages`, work(p, "b"), dead(p, "b")))
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: warnings.providers(),
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []tfresource.TestStep{{
			Config: b.providerBlock("") + setConfig(p, false, `a = {}`+"\n"+`b = {}`),
		}, {
			PreConfig: func() {
				b.publish(work(p, "b"), 4)
				b.publish(dead(p, "b"), 2) // dead letters count too
				b.waitManagementCount(work(p, "b"), 4)
				b.waitManagementCount(dead(p, "b"), 2)
				warnings.reset()
			},
			Config: b.providerBlock("") + setConfig(p, false, `a = {}`),
			ConfigPlanChecks: tfresource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					expectPlanWarning(warnings, "Removed Queue Holds Messages",
						regexp.MustCompile(`^The configuration removes queue "b" .* in virtual host "/", but `+held+`\. Without force_destroy the apply refuses`)),
				},
			},
			// The apply's own error, which a failed plan check cannot match.
			ExpectError: regexp.MustCompile(`(?s)Error running apply.*Error: Queue Holds Messages.*Queue "b" was removed from the\s+configuration`),
		}, {
			PreConfig: warnings.reset,
			Config:    b.providerBlock("") + setConfig(p, true, `a = {}`),
			ConfigPlanChecks: tfresource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					expectPlanWarning(warnings, "Removed Queue's Messages Will Be Discarded",
						regexp.MustCompile(`^The apply deletes queue "b" .* and force_destroy is set, so it discards their messages: `+held+`\.`)),
				},
			},
			Check: b.checkQueues(p, map[string]wantQueue{
				work(p, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
				dead(p, "a"): {true, map[string]any{}},
			}),
		}, {
			// An empty queue is removed without a warning.
			PreConfig: warnings.reset,
			Config:    b.providerBlock("") + setConfig(p, true, `a = {}`+"\n"+`c = {}`),
		}, {
			PreConfig: warnings.reset,
			Config:    b.providerBlock("") + setConfig(p, true, `a = {}`),
			Check:     warnings.none(),
		}},
	})
}

// TestAccQueueSet_planWarnsBeforeReplacingASetWithMessages pins the plan of
// a prefix change on a set that holds messages: the destroy half of the
// replacement takes force_destroy from the state, so with it unset there
// the plan says the destroy will refuse (even though the configuration
// sets it), and with it set the plan says which messages are discarded.
func TestAccQueueSet_planWarnsBeforeReplacingASetWithMessages(t *testing.T) {
	b := newTestBroker(t)
	p1, p2 := b.uniquePrefix("repwarn"), b.uniquePrefix("repwarn")
	warnings := &planWarnings{}
	held := regexp.QuoteMeta(fmt.Sprintf(`queue %q holds 3 messages`, work(p1, "a")))
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: warnings.providers(),
		CheckDestroy:             tfresource.ComposeAggregateTestCheckFunc(b.checkDestroyed(p1), b.checkDestroyed(p2)),
		Steps: []tfresource.TestStep{{
			Config: b.providerBlock("") + setConfig(p1, false, `a = {}`),
		}, {
			PreConfig: func() {
				b.publish(work(p1, "a"), 3)
				b.waitManagementCount(work(p1, "a"), 3)
				warnings.reset()
			},
			Config: b.providerBlock("") + setConfig(p2, true, `a = {}`),
			ConfigPlanChecks: tfresource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionDestroyBeforeCreate),
					expectPlanWarning(warnings, "Queue Set Holds Messages",
						regexp.MustCompile(`^Changing prefix replaces the whole queue set: .*`+regexp.QuoteMeta(fmt.Sprintf(`prefix %q`, p1))+
							`.* But `+held+`, and force_destroy is not set in the state, so the destroy refuses`)),
				},
			},
			// The destroy's own error, which a failed plan check cannot match.
			ExpectError: regexp.MustCompile(`(?s)Error running apply.*Error: Queue Set Holds Messages.*was\s+not\s+destroyed,\s+because`),
		}, {
			// force_destroy on its own: an update, no warning.
			PreConfig: warnings.reset,
			Config:    b.providerBlock("") + setConfig(p1, true, `a = {}`),
			ConfigPlanChecks: tfresource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
			},
			Check: tfresource.ComposeAggregateTestCheckFunc(warnings.none(), b.checkCount(work(p1, "a"), 3)),
		}, {
			PreConfig: warnings.reset,
			Config:    b.providerBlock("") + setConfig(p2, true, `a = {}`),
			ConfigPlanChecks: tfresource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionDestroyBeforeCreate),
					expectPlanWarning(warnings, "Queue Set's Messages Will Be Discarded",
						regexp.MustCompile(`^Changing prefix replaces the whole queue set: .* force_destroy is set in the state, so the destroy discards the messages its queues hold: `+held+`\.`)),
				},
			},
			Check: tfresource.ComposeAggregateTestCheckFunc(
				b.checkDestroyed(p1),
				b.checkQueues(p2, map[string]wantQueue{
					work(p2, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
					dead(p2, "a"): {true, map[string]any{}},
				}),
			),
		}},
	})
}

// TestAccQueueSet_planWarnsBeforeDestroyingASetWithMessages pins the
// destroy plan of a set with force_destroy whose queues hold messages: it
// names them, with their counts, before the destroy discards them.
func TestAccQueueSet_planWarnsBeforeDestroyingASetWithMessages(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("dswarn")
	warnings := &planWarnings{}
	config := b.providerBlock("") + setConfig(p, true, `a = {}`+"\n"+`b = {}`)
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: warnings.providers(),
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []tfresource.TestStep{{
			Config: config,
		}, {
			PreConfig: func() {
				b.publish(dead(p, "b"), 2)
				b.waitManagementCount(dead(p, "b"), 2)
				warnings.reset()
			},
			Config:  config,
			Destroy: true,
			ConfigPlanChecks: tfresource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionDestroy),
					expectPlanWarning(warnings, "Queue Set's Messages Will Be Discarded",
						regexp.MustCompile(`^The plan destroys the queue set of prefix "`+regexp.QuoteMeta(p)+`" in virtual host "/"\. force_destroy is set in the state, so the destroy discards the messages its queues hold: `+
							regexp.QuoteMeta(fmt.Sprintf(`queue %q holds 2 messages`, dead(p, "b")))+`\. Dead letters are lost with them\.`)),
				},
			},
		}},
	})
}

// TestRemovalWarning pins the words of the removal warnings, which the
// acceptance tests match in part.
func TestRemovalWarning(t *testing.T) {
	t.Parallel()
	held := []string{`queue "p.b" holds 4 messages`}
	for _, c := range []struct {
		force           bool
		held            []string
		unread, summary string
	}{
		{false, held, "", "Removed Queue Holds Messages"},
		{true, held, "", "Removed Queue's Messages Will Be Discarded"},
		{false, nil, "", ""},
		{true, nil, "", ""},
		{false, nil, "the message counts could not be read", ""}, // the apply refuses anyway if they hold any
		{true, nil, "the message counts could not be read", "Removed Queue May Hold Messages"},
	} {
		diags := removalWarning("/", "p", "b", c.force, c.held, c.unread)
		if c.summary == "" {
			if len(diags) != 0 {
				t.Errorf("force %t, held %q, unread %q: %v, want no warning", c.force, c.held, c.unread, diags)
			}
			continue
		}
		if len(diags) != 1 || diags.HasError() || diags[0].Summary() != c.summary {
			t.Errorf("force %t, held %q, unread %q: %v, want one warning %q", c.force, c.held, c.unread, diags, c.summary)
			continue
		}
		d := diags[0].Detail()
		if !strings.Contains(d, `queue "b" ("p.b"`) || !strings.Contains(d, strings.Join(c.held, ", ")) || !strings.Contains(d, c.unread) {
			t.Errorf("force %t: detail %q does not name the queue, its counts and what was unread", c.force, d)
		}
	}
}

// TestModifyPlanWarnsWithoutABroker: a plan made before the provider can
// reach the broker still warns about queues force_destroy may empty, since
// their counts are not known.
func TestModifyPlanWarnsWithoutABroker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := queueSetSchema()
	set := func(prefix string, force bool, names ...string) queueSetModel {
		queues := map[string]queueModel{}
		for _, name := range names {
			queues[name] = withComputed(prefix, name, queueModel{MaxPriority: types.Int64Value(10), Durable: types.BoolValue(true), MessageTTL: ttlNull()})
		}
		return queueSetModel{
			ID: types.StringValue(prefix + "@/"), Vhost: types.StringValue("/"), Prefix: types.StringValue(prefix),
			ForceDestroy: types.BoolValue(force), Queues: types.MapValueMust(queueObjectType, toValues(t, queues)),
		}
	}
	plan := func(m *queueSetModel) []string {
		t.Helper()
		state := tfsdk.State{Schema: s}
		if d := state.Set(ctx, set("app", true, "a", "b")); d.HasError() {
			t.Fatal(d)
		}
		p := tfsdk.Plan{Schema: s}
		if m == nil {
			p.Raw = tftypes.NewValue(s.Type().TerraformType(ctx), nil) // null: a destroy
		} else if d := p.Set(ctx, *m); d.HasError() {
			t.Fatal(d)
		}
		resp := &resource.ModifyPlanResponse{Plan: p}
		(&queueSetResource{}).ModifyPlan(ctx, resource.ModifyPlanRequest{State: state, Plan: p}, resp)
		if resp.Diagnostics.HasError() {
			t.Fatal(resp.Diagnostics)
		}
		var got []string
		for _, w := range resp.Diagnostics.Warnings() {
			got = append(got, w.Summary())
		}
		return got
	}
	removed := set("app", true, "a")
	renamed := set("other", true, "a", "b")
	kept := set("app", false, "a")
	for name, c := range map[string]struct {
		plan *queueSetModel
		want string
	}{
		"removal with force_destroy":            {&removed, "Removed Queue May Hold Messages"},
		"prefix change with force_destroy":      {&renamed, "Queue Set May Hold Messages"},
		"destroy with force_destroy":            {nil, "Queue Set May Hold Messages"},
		"removal without force_destroy planned": {&kept, ""},
	} {
		got := plan(c.plan)
		if c.want == "" && len(got) != 0 || c.want != "" && (len(got) != 1 || got[0] != c.want) {
			t.Errorf("%s: warnings %q, want %q", name, got, c.want)
		}
	}
}
