package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	"github.com/spf13/cobra"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// options are the connection and set settings every command shares.
type options struct {
	endpoint, username, password, amqpURL string
	vhost, prefix, set                    string
	timeout                               time.Duration
	// answering is the endpoint of a list (a cluster's nodes) that
	// answered, once endpointValue has asked.
	answering string
}

// envDefault is the first of the environment variables that is set, or def.
func envDefault(def string, names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return def
}

func (o *options) register(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&o.endpoint, "endpoint", "", "management API URL, or the URLs of a cluster's nodes separated by commas, of which the first that answers is used (env QUEUEY_ENDPOINT; default http://127.0.0.1:15672)")
	f.StringVar(&o.username, "username", "", "management API user (env QUEUEY_USERNAME; default guest)")
	f.StringVar(&o.password, "password", "", "management API password (env QUEUEY_PASSWORD; default guest)")
	f.StringVar(&o.amqpURL, "amqp-url", "", "AMQP URL for reading dead letters (env QUEUEY_AMQP_URL; default: the endpoint's host on port 5672, same credentials)")
	f.StringVar(&o.vhost, "vhost", "/", "virtual host of the set")
	f.StringVar(&o.prefix, "prefix", "", "prefix of the set")
	f.StringVar(&o.set, "set", "", "the set's runtime_config: JSON or a file holding it (env QUEUEY_SET)")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
}

// The settings resolve at run time, flag first, then the provider's
// environment variables, then the provider's defaults, so that --help
// never shows what the environment holds.

func (o *options) endpointValue() string {
	v := o.endpoint
	if v == "" {
		v = envDefault("http://127.0.0.1:15672", "QUEUEY_ENDPOINT", "RABBITMQ_ENDPOINT")
	}
	if !strings.Contains(v, ",") {
		return v
	}
	if o.answering == "" {
		o.answering = o.firstAnswering(strings.Split(v, ","))
	}
	return o.answering
}

// firstAnswering is the first of endpoints, the management APIs of a
// cluster's nodes as the provider's endpoint lists them, whose overview
// answers within 5 s; the first of them when none does, so that its error
// is what the command reports. A command is short: it stays with the node
// it started on.
func (o *options) firstAnswering(endpoints []string) string {
	for i := range endpoints {
		endpoints[i] = strings.TrimSuffix(strings.TrimSpace(endpoints[i]), "/")
	}
	for _, e := range endpoints {
		c, err := rabbithole.NewClient(e, o.usernameValue(), o.passwordValue())
		if err != nil {
			continue
		}
		c.SetTimeout(5 * time.Second)
		if _, err := c.Overview(); err == nil {
			return e
		}
	}
	return endpoints[0]
}

func (o *options) usernameValue() string {
	if o.username != "" {
		return o.username
	}
	return envDefault("guest", "QUEUEY_USERNAME", "RABBITMQ_USERNAME")
}

func (o *options) passwordValue() string {
	if o.password != "" {
		return o.password
	}
	return envDefault("guest", "QUEUEY_PASSWORD", "RABBITMQ_PASSWORD")
}

// amqpURLValue is --amqp-url, QUEUEY_AMQP_URL, or the endpoint's host on
// the AMQP port, as the provider derives it.
func (o *options) amqpURLValue() (string, error) {
	if o.amqpURL != "" {
		return o.amqpURL, nil
	}
	if v := os.Getenv("QUEUEY_AMQP_URL"); v != "" {
		return v, nil
	}
	ep, err := url.Parse(o.endpointValue())
	if err != nil || ep.Hostname() == "" {
		return "", usagef("--endpoint %q is not a URL such as http://127.0.0.1:15672", o.endpointValue())
	}
	u := url.URL{Scheme: "amqp", Host: net.JoinHostPort(ep.Hostname(), "5672"), User: url.UserPassword(o.usernameValue(), o.passwordValue()), Path: "/" + url.PathEscape(o.vhost)}
	if o.vhost == "/" {
		u.Path = "/"
	}
	if ep.Scheme == "https" {
		u.Scheme, u.Host = "amqps", net.JoinHostPort(ep.Hostname(), "5671")
	}
	return u.String(), nil
}

func (o *options) api() (*rabbithole.Client, error) {
	ep, err := url.Parse(o.endpointValue())
	if err != nil || (ep.Scheme != "http" && ep.Scheme != "https") {
		return nil, usagef("--endpoint %q is not an http or https URL such as http://127.0.0.1:15672", o.endpointValue())
	}
	c, err := rabbithole.NewClient(strings.TrimSuffix(o.endpointValue(), "/"), o.usernameValue(), o.passwordValue())
	if err != nil {
		return nil, fmt.Errorf("management API at %s: %w", o.endpointValue(), err)
	}
	c.SetTimeout(30 * time.Second)
	return c, nil
}

// setSource is the runtime_config to read: --set, else QUEUEY_SET.
func (o *options) setSource() string {
	if o.set != "" {
		return o.set
	}
	return os.Getenv("QUEUEY_SET")
}

// queueSet resolves the set: from its runtime_config when given, else from
// the broker's queues under --prefix (names and arguments as they are, so a
// declaration of them changes nothing).
func (o *options) queueSet(api *rabbithole.Client) (queuey.QueueSet, error) {
	if src := o.setSource(); src != "" {
		var set queuey.QueueSet
		var err error
		if strings.HasPrefix(strings.TrimSpace(src), "{") {
			set, err = queuey.ParseQueueSet([]byte(src))
		} else {
			set, err = queuey.LoadQueueSetFile(src)
		}
		if err != nil {
			return queuey.QueueSet{}, err
		}
		if o.prefix != "" && o.prefix != set.Prefix {
			return queuey.QueueSet{}, usagef("--prefix %q differs from the prefix %q of the set given with --set or QUEUEY_SET: give one of them", o.prefix, set.Prefix)
		}
		return set, nil
	}
	if o.prefix == "" {
		return queuey.QueueSet{}, usagef("say which set: --prefix (the queues under it are read from the broker), or --set / QUEUEY_SET with the resource's runtime_config")
	}
	if err := topology.ValidatePrefix(o.prefix); err != nil {
		return queuey.QueueSet{}, usagef("%v", err)
	}
	queues, err := listQueues(api, o.vhost)
	if err != nil {
		return queuey.QueueSet{}, err
	}
	set := queuey.QueueSet{Prefix: o.prefix}
	for _, name := range discover(o.prefix, queues) {
		w := queues[topology.WorkName(o.prefix, name)]
		set.Queues = append(set.Queues, configOf(name, w))
	}
	if len(set.Queues) == 0 {
		return queuey.QueueSet{}, fmt.Errorf("virtual host %q has no queue set with prefix %q (no %s.<name> beside a %s.<name>.dead): check --prefix and --vhost", o.vhost, o.prefix, o.prefix, o.prefix)
	}
	return set, nil
}

// configOf is the QueueConfig that declares w as it is.
func configOf(name string, w rabbithole.QueueInfo) queuey.QueueConfig {
	c := queuey.QueueConfig{Name: name, MaxPriority: queuey.NoPriority, NonDurable: !w.Durable}
	if p, ok := intArg(w.Arguments[topology.ArgMaxPriority]); ok {
		c.MaxPriority = int(p)
	}
	if ttl, ok := intArg(w.Arguments[topology.ArgMessageTTL]); ok {
		c.MessageTTL = time.Duration(ttl) * time.Millisecond
	}
	return c
}

func intArg(v any) (int64, bool) {
	switch n := v.(type) {
	case float64:
		return int64(n), true
	case int64:
		return n, true
	case int:
		return int64(n), true
	}
	return 0, false
}

// statusColumns are what status reads of each queue.
var statusColumns = url.Values{"columns": {"name,durable,arguments,messages,messages_ready,messages_unacknowledged,consumers,message_stats"}}

// listQueues lists the vhost's queues in one request, by name.
func listQueues(api *rabbithole.Client, vhost string) (map[string]rabbithole.QueueInfo, error) {
	infos, err := api.ListQueuesWithParametersIn(vhost, statusColumns)
	if err != nil {
		if re, ok := err.(rabbithole.ErrorResponse); ok && re.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("RabbitMQ at %s has no virtual host %q: check --vhost", api.Endpoint, vhost)
		}
		if re, ok := err.(rabbithole.ErrorResponse); ok && re.StatusCode == http.StatusUnauthorized {
			return nil, fmt.Errorf("the management API at %s refused user %q: check --username and --password (QUEUEY_USERNAME, QUEUEY_PASSWORD)", api.Endpoint, api.Username)
		}
		return nil, fmt.Errorf("list the queues of virtual host %q at %s: %w (is the management plugin enabled, and --endpoint right?)", vhost, api.Endpoint, err)
	}
	out := make(map[string]rabbithole.QueueInfo, len(infos))
	for _, q := range infos {
		out[q.Name] = q
	}
	return out, nil
}

// discover finds the logical queues of prefix: a work queue is
// "<prefix>.<name>" beside "<prefix>.<name>.dead", neither a hold queue nor
// the dead-letter queue of a shorter work queue. As the provider's import
// reads a set.
func discover(prefix string, queues map[string]rabbithole.QueueInfo) []string {
	names := make([]string, 0, len(queues))
	for n := range queues {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if len(names[i]) != len(names[j]) {
			return len(names[i]) < len(names[j])
		}
		return names[i] < names[j]
	})
	claimed := map[string]bool{}
	var logical []string
	head := prefix + "."
	for _, n := range names {
		if !strings.HasPrefix(n, head) || len(n) == len(head) || claimed[n] {
			continue
		}
		if _, _, hold := topology.ParseHoldName(n); hold {
			continue
		}
		for _, suffix := range []string{topology.MigrationSuffix, topology.DivertSuffix} {
			if strings.HasSuffix(n, suffix) {
				claimed[n] = true
			}
		}
		if claimed[n] {
			continue
		}
		dead := topology.DeadName(n)
		if _, ok := queues[dead]; !ok {
			continue
		}
		claimed[dead] = true
		logical = append(logical, strings.TrimPrefix(n, head))
	}
	sort.Strings(logical)
	return logical
}

// openDead opens the set's dead letters.
func (o *options) openDead(ctx context.Context) (*queuey.DeadLetters, queuey.QueueSet, error) {
	api, err := o.api()
	if err != nil {
		return nil, queuey.QueueSet{}, err
	}
	set, err := o.queueSet(api)
	if err != nil {
		return nil, queuey.QueueSet{}, err
	}
	u, err := o.amqpURLValue()
	if err != nil {
		return nil, queuey.QueueSet{}, err
	}
	dl, err := queuey.OpenDeadLetters(ctx, u, set)
	if err != nil {
		return nil, queuey.QueueSet{}, err
	}
	return dl, set, nil
}
