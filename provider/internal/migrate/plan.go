package migrate

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// Describe is the sentence a plan shows for a queue that will be migrated:
// which queue, how many messages it holds (messages < 0 when unknown), and
// what the apply will do with them, e.g.
//
//	queue "p.x" (1,234 messages) will be migrated: its messages moved to
//	"p.x.migrating", the queue declared again with x-max-priority=10
//	(durable), and the messages moved back, with their properties
func Describe(queue string, messages int, args map[string]any, durable bool) string {
	count := "message count unknown"
	if messages >= 0 {
		count = Count(messages)
	}
	kind := "durable"
	if !durable {
		kind = "transient"
	}
	return fmt.Sprintf("queue %q (%s) will be migrated: its messages moved to %q, the queue declared again with %s (%s), "+
		"and the messages moved back, with their properties",
		queue, count, topology.MigrationName(queue), FormatArgs(args), kind)
}

// Count renders a message count with thousands separators: "1 message",
// "1,234 messages".
func Count(n int) string {
	if n == 1 {
		return "1 message"
	}
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String() + " messages"
}

// FormatArgs renders queue arguments as "k=v, k=v" in name order, or "no
// arguments".
func FormatArgs(args map[string]any) string {
	if len(args) == 0 {
		return "no arguments"
	}
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, args[k])
	}
	return strings.Join(parts, ", ")
}

// Unfinished returns, in name order, the queues that a migration did not
// finish, from a listing of a virtual host's queue names (such as the one
// Read makes): every q whose temporary queue q.migrating is listed, whether
// or not q itself is. Such a queue must be planned as a change even when q
// already has the configured arguments, or is absent, because only Migrate
// moves its messages back.
func Unfinished(names []string) []string {
	var out []string
	for _, n := range names {
		if q, ok := strings.CutSuffix(n, topology.MigrationSuffix); ok && q != "" {
			out = append(out, q)
		}
	}
	sort.Strings(out)
	return out
}
