package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// progressAt is how many dead letters a replay must have for a progress bar.
const progressAt = 1000

// filterFlags are the flags that select dead letters.
type filterFlags struct {
	queue     string
	kinds     []string
	reasons   []string
	ids       []string
	olderThan time.Duration
}

func (f *filterFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.queue, "queue", "", "logical queue whose dead letters to read (required)")
	fs.StringSliceVar(&f.kinds, "kind", nil, "only these job kinds (repeat or comma-separate)")
	fs.StringArrayVar(&f.reasons, "reason", nil, "only dead letters whose reason contains this text (repeatable)")
	fs.StringSliceVar(&f.ids, "id", nil, "only these job ids (repeatable)")
	fs.DurationVar(&f.olderThan, "older-than", 0, "only dead letters older than this, e.g. 1h")
}

func (f *filterFlags) filter() (queuey.DeadFilter, error) {
	if f.queue == "" {
		return queuey.DeadFilter{}, usagef("--queue is required: the logical queue, such as emails for myapp.emails.dead")
	}
	df := queuey.DeadFilter{Kinds: f.kinds, Reasons: f.reasons, IDs: f.ids, OlderThan: f.olderThan}
	if err := df.Validate(); err != nil {
		return queuey.DeadFilter{}, &usageError{err.Error()}
	}
	return df, nil
}

func (f *filterFlags) any() bool {
	return len(f.kinds) > 0 || len(f.reasons) > 0 || len(f.ids) > 0 || f.olderThan > 0
}

func newDeadCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "List, show, replay and purge a queue's dead letters",
		Long: `dead reads a queue's dead letters (<prefix>.<name>.dead) without losing them: it
browses the queue with a consumer that acknowledges nothing it leaves, and
gives back everything it read, in place, when it ends.`,
		Example: `  queuey dead list --prefix myapp --queue emails`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newDeadListCmd(o), newDeadShowCmd(o), newDeadReplayCmd(o), newDeadPurgeCmd(o))
	return cmd
}

// withDead runs f with the set's dead letters, under --timeout.
func withDead(o *options, f func(ctx context.Context, dl *queuey.DeadLetters) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	dl, _, err := o.openDead(ctx)
	if err != nil {
		return err
	}
	defer dl.Close()
	return f(ctx, dl)
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newDeadListCmd(o *options) *cobra.Command {
	var f filterFlags
	var limit int
	var cursor string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a queue's dead letters: kind, job id, reason, attempts, age",
		Long: `list prints a page of a queue's dead letters, oldest first: position, job id,
kind, attempts, age and reason. Dead letters that are not queuey envelopes are
listed as malformed. A longer queue continues with --cursor.`,
		Example: `  queuey dead list --prefix myapp --queue emails --kind welcome_email --limit 20`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			df, err := f.filter()
			if err != nil {
				return err
			}
			if limit <= 0 {
				return usagef("--limit %d: give a positive number of dead letters per page", limit)
			}
			return withDead(o, func(ctx context.Context, dl *queuey.DeadLetters) error {
				page, err := dl.List(ctx, f.queue, queuey.ListOptions{Filter: df, Cursor: cursor, Limit: limit})
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if asJSON {
					if page.Letters == nil {
						page.Letters = []queuey.DeadLetterInfo{}
					}
					return writeJSON(out, page)
				}
				if len(page.Letters) == 0 {
					fmt.Fprintf(out, "no dead letters match (%d in the queue)\n", page.Total)
					return nil
				}
				now := time.Now()
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "POS\tJOB ID\tKIND\tATTEMPTS\tAGE\tREASON")
				for _, l := range page.Letters {
					kind := l.Kind
					if l.Malformed {
						kind = "(malformed)"
					}
					age := "-"
					if a := l.Age(now); a > 0 {
						age = humanAge(a)
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", l.Position, orDash(l.JobID), kind, l.Attempts, age, oneLine(l.Reason, 80))
				}
				_ = tw.Flush()
				fmt.Fprintf(out, "\n%d shown, %d in the queue", len(page.Letters), page.Total)
				if page.NextCursor != "" {
					fmt.Fprintf(out, "; more with --cursor %s", page.NextCursor)
				}
				fmt.Fprintln(out)
				return nil
			})
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().IntVar(&limit, "limit", 50, "dead letters per page")
	cmd.Flags().StringVar(&cursor, "cursor", "", "continue a listing where the page before ended")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the page as JSON")
	return cmd
}

func newDeadShowCmd(o *options) *cobra.Command {
	var f filterFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show JOB_ID",
		Short: "Show one dead letter in full: its reason, its headers' story and its payload",
		Long: `show prints one dead letter of a queue in full, found by its job id (for a
malformed dead letter, its AMQP message id): kind, reason, attempts, when it
was enqueued and dead-lettered, correlation id, and its payload or raw body.`,
		Example: `  queuey dead show --prefix myapp --queue emails 0b5e0c52-6b4f-4f8e-9a53-2f1f7c1f8a10`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("show takes one job id, such as 0b5e0c52-6b4f-4f8e-9a53-2f1f7c1f8a10; find it with queuey dead list")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f.ids = []string{args[0]}
			df, err := f.filter()
			if err != nil {
				return err
			}
			return withDead(o, func(ctx context.Context, dl *queuey.DeadLetters) error {
				page, err := dl.List(ctx, f.queue, queuey.ListOptions{Filter: df, Limit: 1})
				if err != nil {
					return err
				}
				if len(page.Letters) == 0 {
					return fmt.Errorf("no dead letter with job id %q in queue %s (%d dead letters there): check the id with queuey dead list", args[0], f.queue, page.Total)
				}
				l := page.Letters[0]
				out := cmd.OutOrStdout()
				if asJSON {
					return writeJSON(out, struct {
						queuey.DeadLetterInfo
						Body string `json:"body,omitempty"`
					}{l, bodyIfMalformed(l)})
				}
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintf(tw, "job id\t%s\n", orDash(l.JobID))
				if l.Malformed {
					fmt.Fprintf(tw, "kind\t(malformed: %s)\n", l.MalformedError)
				} else {
					fmt.Fprintf(tw, "kind\t%s\n", l.Kind)
				}
				fmt.Fprintf(tw, "queue\t%s\n", l.Queue)
				fmt.Fprintf(tw, "position\t%d\n", l.Position)
				fmt.Fprintf(tw, "reason\t%s\n", l.Reason)
				fmt.Fprintf(tw, "attempts\t%d\n", l.Attempts)
				fmt.Fprintf(tw, "enqueued at\t%s\n", when(l.EnqueuedAt))
				fmt.Fprintf(tw, "dead-lettered at\t%s\n", when(l.DeadAt))
				fmt.Fprintf(tw, "correlation id\t%s\n", orDash(l.CorrelationID))
				_ = tw.Flush()
				if l.Malformed {
					fmt.Fprintf(out, "body (%d bytes):\n%q\n", len(l.Body), l.Body)
				} else {
					fmt.Fprintf(out, "payload:\n%s\n", l.Payload)
				}
				return nil
			})
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the dead letter as JSON")
	return cmd
}

func newDeadReplayCmd(o *options) *cobra.Command {
	var f filterFlags
	var keep, malformed, asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Replay dead letters into their work queue, with the same job ids",
		Long: `replay publishes the dead letters the filters select into their work queue, as
attempt 1 (or the attempt they died on, with --keep-attempts) and with the same
job id, and removes each dead letter only once the broker confirmed its copy:
a replay that is interrupted loses nothing, and at worst replays a job twice.
Malformed dead letters stay unless --malformed, which replays them byte for
byte. The others stay where they were.`,
		Example: `  queuey dead replay --prefix myapp --queue emails --kind welcome_email --reason "timed out"`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			df, err := f.filter()
			if err != nil {
				return err
			}
			if limit < 0 {
				return usagef("--limit %d: give a positive number, or 0 for every match", limit)
			}
			return withDead(o, func(ctx context.Context, dl *queuey.DeadLetters) error {
				var bar *progressbar.ProgressBar
				opts := queuey.ReplayOptions{Filter: df, ResetAttempts: !keep, Malformed: malformed, Limit: limit}
				if !asJSON {
					opts.Progress = func(done, total int) {
						if total < progressAt {
							return
						}
						if bar == nil {
							bar = progressbar.NewOptions(total,
								progressbar.OptionSetWriter(cmd.ErrOrStderr()),
								progressbar.OptionSetDescription("replaying"),
								progressbar.OptionShowCount(),
								progressbar.OptionThrottle(100*time.Millisecond),
								progressbar.OptionClearOnFinish())
						}
						_ = bar.Set(done)
					}
				}
				res, err := dl.Replay(ctx, f.queue, opts)
				if bar != nil {
					_ = bar.Finish()
				}
				out := cmd.OutOrStdout()
				if asJSON {
					if jerr := writeJSON(out, res); jerr != nil {
						return jerr
					}
				} else {
					fmt.Fprintf(out, "replayed %d of %d dead letters read from %s into its work queue", res.Done, res.Seen, f.queue)
					if res.SkippedMalformed > 0 {
						fmt.Fprintf(out, "; %d malformed left in place (--malformed replays them byte for byte)", res.SkippedMalformed)
					}
					fmt.Fprintln(out)
				}
				return err
			})
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&keep, "keep-attempts", false, "replay each job at the attempt it died on, not attempt 1")
	cmd.Flags().BoolVar(&malformed, "malformed", false, "also replay dead letters that are not envelopes, byte for byte")
	cmd.Flags().IntVar(&limit, "limit", 0, "replay at most this many (0: every match)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the counts as JSON")
	return cmd
}

func newDeadPurgeCmd(o *options) *cobra.Command {
	var f filterFlags
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete dead letters for good",
		Long: `purge deletes the dead letters the filters select, malformed ones included;
the others stay where they were. Without a filter it needs --all.`,
		Example: `  queuey dead purge --prefix myapp --queue emails --reason "no handler for job type" --older-than 168h`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			df, err := f.filter()
			if err != nil {
				return err
			}
			if !f.any() && !all {
				return usagef("purge without --kind, --reason, --id or --older-than deletes every dead letter of %s: say --all if that is what you want", f.queue)
			}
			return withDead(o, func(ctx context.Context, dl *queuey.DeadLetters) error {
				res, err := dl.Purge(ctx, f.queue, df)
				out := cmd.OutOrStdout()
				if asJSON {
					if jerr := writeJSON(out, res); jerr != nil {
						return jerr
					}
				} else {
					fmt.Fprintf(out, "purged %d of %d dead letters read from %s\n", res.Done, res.Seen, f.queue)
				}
				return err
			})
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&all, "all", false, "with no filter, purge every dead letter of the queue")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the counts as JSON")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}

func when(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return t.UTC().Format(time.RFC3339) + " (" + humanAge(time.Since(t)) + " ago)"
}

func bodyIfMalformed(l queuey.DeadLetterInfo) string {
	if l.Malformed {
		return string(l.Body)
	}
	return ""
}
