package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	"github.com/spf13/cobra"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// holdMargin is how far past its TTL a hold queue's oldest message may be
// before status calls the queue not draining: RabbitMQ expires messages at
// the head of a queue, on a timer, not to the millisecond.
func holdMargin(ttl time.Duration) time.Duration {
	return max(10*time.Second, ttl/10)
}

// queueStatus is one queue of status's report.
type queueStatus struct {
	Queue     string   `json:"queue"`
	Role      string   `json:"role"` // work, dead, hold
	Ready     int      `json:"ready"`
	Unacked   int      `json:"unacked"`
	Consumers int      `json:"consumers"`
	InRate    *float64 `json:"publish_rate,omitempty"`
	OutRate   *float64 `json:"deliver_rate,omitempty"`
	// OldestAge is the age of the message at the head, by its timestamp
	// property, in seconds; absent when the broker does not know it.
	OldestAge *float64 `json:"oldest_age_seconds,omitempty"`
	DelayMs   int64    `json:"delay_ms,omitempty"`
}

// statusReport is status's --json output.
type statusReport struct {
	Vhost   string                   `json:"vhost"`
	Prefix  string                   `json:"prefix"`
	Healthy bool                     `json:"healthy"`
	Health  map[string][]string      `json:"health"` // problems, by logical queue
	Queues  map[string][]queueStatus `json:"queues"`
	Order   []string                 `json:"-"`
}

func newStatusCmd(o *options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every queue of a set, with counts, rates and its health in plain words",
		Long: `status shows every work, dead-letter and hold queue of a set with its ready and
unacknowledged messages, consumers and rates (where the broker has them), and
says in plain words what needs a person: dead letters waiting, a work queue
with messages that nothing consumes, a hold queue whose oldest message is
older than its delay plus a margin (it is not draining into its work queue).`,
		Example: `  queuey status --prefix myapp`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := o.api()
			if err != nil {
				return err
			}
			set, err := o.queueSet(api)
			if err != nil {
				return err
			}
			queues, err := listQueues(api, o.vhost)
			if err != nil {
				return err
			}
			heads, err := headTimestamps(o, api, o.vhost)
			if err != nil {
				return err
			}
			names := make([]string, len(set.Queues))
			for i, q := range set.Queues {
				names[i] = q.Name
			}
			r := buildStatus(o.vhost, set.Prefix, names, queues, heads, time.Now())
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			printStatus(cmd.OutOrStdout(), r)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// buildStatus makes the report of the logical queues names of prefix.
func buildStatus(vhost, prefix string, names []string, queues map[string]rabbithole.QueueInfo, heads map[string]int64, now time.Time) statusReport {
	r := statusReport{Vhost: vhost, Prefix: prefix, Healthy: true, Health: map[string][]string{}, Queues: map[string][]queueStatus{}, Order: names}
	holds := map[string][]string{}
	for n := range queues {
		if work, _, ok := topology.ParseHoldName(n); ok {
			holds[work] = append(holds[work], n)
		}
	}
	for _, name := range names {
		work := topology.WorkName(prefix, name)
		var rows []queueStatus
		var problems []string
		row := func(q string, role string) (queueStatus, bool) {
			info, ok := queues[q]
			if !ok {
				return queueStatus{Queue: q, Role: role}, false
			}
			s := queueStatus{Queue: q, Role: role, Ready: info.MessagesReady, Unacked: info.MessagesUnacknowledged, Consumers: info.Consumers}
			if st := info.MessageStats; st != nil {
				in, out := float64(st.PublishDetails.Rate), float64(st.DeliverGetDetails.Rate)
				s.InRate, s.OutRate = &in, &out
			}
			if ts, ok := heads[q]; ok && ts > 0 {
				age := now.Sub(time.Unix(ts, 0)).Seconds()
				s.OldestAge = &age
			}
			return s, true
		}
		w, ok := row(work, "work")
		if !ok {
			problems = append(problems, "work queue "+work+" is missing: apply the Terraform set, or start a producer of it")
		} else if w.Ready > 0 && w.Consumers == 0 {
			problems = append(problems, fmt.Sprintf("nothing consumes the work queue: %d jobs waiting", w.Ready))
		}
		rows = append(rows, w)
		dead := topology.DeadName(work)
		d, ok := row(dead, "dead")
		if !ok {
			problems = append(problems, "dead-letter queue "+dead+" is missing: apply the Terraform set")
		} else if n := d.Ready + d.Unacked; n > 0 {
			msg := fmt.Sprintf("dead letters waiting: %d", n)
			if d.OldestAge != nil {
				msg += ", oldest " + humanAge(time.Duration(*d.OldestAge*float64(time.Second)))
			}
			problems = append(problems, msg+" (queuey dead list --prefix "+prefix+" --queue "+name+")")
		}
		rows = append(rows, d)
		hs := holds[work]
		sort.Slice(hs, func(i, j int) bool {
			_, a, _ := topology.ParseHoldName(hs[i])
			_, b, _ := topology.ParseHoldName(hs[j])
			return a < b
		})
		for _, h := range hs {
			s, _ := row(h, "hold")
			_, ttl, _ := topology.ParseHoldName(h)
			s.DelayMs = ttl
			delay := time.Duration(ttl) * time.Millisecond
			if s.OldestAge != nil && s.Ready > 0 {
				if age := time.Duration(*s.OldestAge * float64(time.Second)); age > delay+holdMargin(delay) {
					problems = append(problems, fmt.Sprintf("hold queue not draining: %s holds %d, the oldest for %s, past its delay of %s", h, s.Ready, humanAge(age), topology.FormatDuration(delay)))
				}
			}
			rows = append(rows, s)
		}
		r.Queues[name] = rows
		if len(problems) > 0 {
			r.Healthy = false
			r.Health[name] = problems
		}
	}
	return r
}

func printStatus(out io.Writer, r statusReport) {
	fmt.Fprintf(out, "queue set %s in vhost %s\n\n", r.Prefix, r.Vhost)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tROLE\tREADY\tUNACKED\tCONSUMERS\tIN/S\tOUT/S\tOLDEST")
	for _, name := range r.Order {
		for _, q := range r.Queues[name] {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", q.Queue, q.Role, q.Ready, q.Unacked, q.Consumers, rate(q.InRate), rate(q.OutRate), oldest(q))
		}
	}
	_ = tw.Flush()
	fmt.Fprintln(out)
	if r.Healthy {
		fmt.Fprintln(out, "health: ok")
		return
	}
	fmt.Fprintln(out, "health: needs attention")
	for _, name := range r.Order {
		for _, p := range r.Health[name] {
			fmt.Fprintf(out, "  %s: %s\n", name, p)
		}
	}
}

func rate(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *r)
}

func oldest(q queueStatus) string {
	if q.OldestAge == nil || q.Ready == 0 {
		return "-"
	}
	return humanAge(time.Duration(*q.OldestAge * float64(time.Second)))
}

// humanAge writes an age the way an operator says it: "40 s", "12 min",
// "3 h", "2 d".
func humanAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", max(0, int(d.Seconds())))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h", int(d.Hours()))
	}
	return fmt.Sprintf("%d d", int(d.Hours()/24))
}

// headTimestamps reads each queue's head_message_timestamp (the timestamp
// property of its oldest ready message, in seconds), which rabbit-hole's
// QueueInfo does not carry, with the same credentials in one request.
func headTimestamps(o *options, api *rabbithole.Client, vhost string) (map[string]int64, error) {
	u := strings.TrimSuffix(o.endpointValue(), "/") + "/api/queues/" + url.PathEscape(vhost) + "?columns=name,head_message_timestamp"
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(api.Username, api.Password)
	client := &http.Client{Timeout: 30 * time.Second}
	res, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the queues' oldest messages at %s: %w", o.endpointValue(), err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the queues' oldest messages at %s: %s", o.endpointValue(), res.Status)
	}
	var rows []struct {
		Name string          `json:"name"`
		Head json.RawMessage `json:"head_message_timestamp"`
	}
	if err := json.NewDecoder(res.Body).Decode(&rows); err != nil {
		return nil, fmt.Errorf("read the queues' oldest messages at %s: %w", o.endpointValue(), err)
	}
	out := map[string]int64{}
	for _, r := range rows {
		// A number when known; absent, or "", when not.
		if ts, err := strconv.ParseInt(string(r.Head), 10, 64); err == nil {
			out[r.Name] = ts
		}
	}
	return out, nil
}
