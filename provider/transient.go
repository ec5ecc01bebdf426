package provider

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	rabbithole "github.com/michaelklishin/rabbit-hole/v2"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// RabbitMQ deprecates transient (non-durable) non-exclusive queues from
// 3.13, where its deprecated-features subsystem begins, and refuses them by
// default from 4.3; on 3.13 to 4.2 an operator refuses them with
// deprecated_features.permit.transient_nonexcl_queues = false. Neither the
// management API's /api/deprecated-features (4.0.5 lists the feature as
// permitted_by_default either way) nor the version tells which a broker
// does, so a plan with a durable = false queue asks the broker itself: it
// declares a transient queue of its own and deletes it at once.

// transientPolicy is what a broker does with a transient non-exclusive
// queue.
type transientPolicy int

const (
	// transientAccepted: RabbitMQ before 3.13, which has no word against
	// them.
	transientAccepted transientPolicy = iota
	// transientDeprecated: accepted, but deprecated, and refused by default
	// from 4.3.
	transientDeprecated
	// transientRefused: the broker refuses the declaration.
	transientRefused
)

// transientAnswer is a broker's transientPolicy with its version, as the
// plan's diagnostics say them.
type transientAnswer struct {
	policy  transientPolicy
	version string
}

// The summaries of the plan's diagnostics about transient queues.
const (
	summaryTransientRefused    = "Transient Queue Refused"
	summaryTransientDeprecated = "Transient Queue Deprecated"
)

// transientFeature is the deprecated feature RabbitMQ names when it refuses
// a transient queue.
const transientFeature = "transient_nonexcl_queues"

// transientPolicy asks the broker what it does with a transient queue in
// vhost, once per vhost and provider process. The probe queue is named
// under prefix, which the provider's user may configure, and is deleted
// before the answer returns.
func (b *broker) transientPolicy(vhost, prefix string) (transientAnswer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a, ok := b.transient[vhost]; ok {
		return a, nil
	}
	ov, err := b.client.Overview()
	if err != nil {
		return transientAnswer{}, fmt.Errorf("read the broker's version: %w", err)
	}
	a := transientAnswer{policy: transientAccepted, version: ov.RabbitMQVersion}
	if versionAtLeast(ov.RabbitMQVersion, 3, 13) {
		if a.policy, err = b.probeTransient(vhost, prefix); err != nil {
			return transientAnswer{}, err
		}
	}
	if b.transient == nil {
		b.transient = map[string]transientAnswer{}
	}
	b.transient[vhost] = a
	return a, nil
}

// probeTransient declares a transient, auto-deleted queue and deletes it.
func (b *broker) probeTransient(vhost, prefix string) (transientPolicy, error) {
	var id [4]byte
	_, _ = rand.Read(id[:])
	name := prefix + ".queuey-transient-probe-" + hex.EncodeToString(id[:])
	res, err := b.client.DeclareQueue(vhost, name, rabbithole.QueueSettings{Durable: false, AutoDelete: true})
	var resp rabbithole.ErrorResponse
	switch {
	case errors.As(err, &resp) && resp.StatusCode == http.StatusBadRequest && strings.Contains(resp.Reason, transientFeature):
		return transientRefused, nil
	case err != nil:
		return 0, fmt.Errorf("declare the transient queue %q that asks whether the broker accepts them: %w", name, err)
	}
	drain(res)
	if err := b.deleteQueue(vhost, name, false); err != nil {
		return 0, fmt.Errorf("delete the transient queue %q that asked whether the broker accepts them: %w", name, err)
	}
	return transientDeprecated, nil
}

// versionAtLeast reports whether a RabbitMQ version ("4.0.5", "3.13.7",
// "4.1.0-rc.1") is major.minor or later. A version it cannot read, or a
// development build's "0.0.0", counts as later: asking the broker costs one
// probe, guessing wrong an apply.
func versionAtLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return true
	}
	maj, err1 := strconv.Atoi(parts[0])
	mnr, err2 := strconv.Atoi(strings.TrimLeftFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil || maj == 0 {
		return true
	}
	return maj > major || (maj == major && mnr >= minor)
}

// transientDiagnostics is the plan's word on each queue of queues with
// durable = false: an error where the broker refuses transient queues, a
// warning where it deprecates them, nothing on RabbitMQ before 3.13. It
// asks the broker only when there is such a queue.
func (r *queueSetResource) transientDiagnostics(vhost, prefix string, queues map[string]queueModel) diag.Diagnostics {
	var transient []string
	for _, name := range sortedKeys(queues) {
		if d := queues[name].Durable; !d.IsNull() && !d.IsUnknown() && !d.ValueBool() {
			transient = append(transient, name)
		}
	}
	var diags diag.Diagnostics
	if len(transient) == 0 || r.data == nil {
		return diags
	}
	a, err := r.data.broker.transientPolicy(vhost, prefix)
	if err != nil {
		diags.AddWarning("Transient Queues Not Checked",
			fmt.Sprintf("Queues %s set durable = false, and the provider could not ask the broker whether it accepts transient queues (RabbitMQ 4.3 refuses them by default): %s", strings.Join(quoteAll(transient), ", "), err))
		return diags
	}
	for _, name := range transient {
		at := path.Root("queues").AtMapKey(name)
		work := topology.WorkName(prefix, name)
		switch a.policy {
		case transientRefused:
			diags.AddAttributeError(at, summaryTransientRefused,
				fmt.Sprintf("RabbitMQ %s refuses transient (non-durable) non-exclusive queues: its deprecated feature %s is not permitted, as from RabbitMQ 4.3 by default. "+
					"Queue %q sets durable = false, so the broker would refuse its work queue %q and the hold queues of its delays and retries. "+
					"Set durable = true (the default; for a queue that exists, the apply migrates it without losing a message, and the runtime's QueueConfig then drops NonDurable), "+
					"or permit transient queues on every node with deprecated_features.permit.%s = true in rabbitmq.conf.",
					a.version, transientFeature, name, work, transientFeature))
		case transientDeprecated:
			diags.AddAttributeWarning(at, summaryTransientDeprecated,
				fmt.Sprintf("RabbitMQ %s accepts transient (non-durable) non-exclusive queues, but deprecates them, and RabbitMQ 4.3 refuses them by default. "+
					"Queue %q sets durable = false, so its work queue %q and the hold queues of its delays and retries are transient. "+
					"Set durable = true before upgrading (for a queue that exists, the apply migrates it without losing a message).",
					a.version, name, work))
		}
	}
	return diags
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strconv.Quote(n)
	}
	return out
}
