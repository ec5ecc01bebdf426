package provider

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// exampleEndpoints is the endpoint setting of a three-node cluster, for
// descriptions and diagnostics.
const exampleEndpoints = "http://rabbit1:15672,http://rabbit2:15672,http://rabbit3:15672"

// failoverDialTimeout bounds each connection attempt when endpoint lists
// several nodes, so that a node that is down without refusing (its host
// powered off, a firewall dropping packets) leaves time in requestTimeout
// for the next one. A node that answers at all connects in milliseconds.
const failoverDialTimeout = 5 * time.Second

// parseEndpoints reads the endpoint setting: one management API URL, or
// several separated by commas, the nodes of one cluster, in the order the
// provider tries them. problem is the detail of the diagnostic when the
// setting is refused, "" when it is not.
//
// Several URLs must share a scheme, because one set of TLS settings serves
// them all and the default amqp_url is amqp or amqps for all of them, and a
// path, because failover (failover.go) changes a request's scheme and host
// only. One URL is read as it always was: spaces, a path and the error
// text are unchanged.
func parseEndpoints(setting string) (urls []*url.URL, problem string) {
	if !strings.Contains(setting, ",") {
		u, err := url.Parse(setting)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			detail := fmt.Sprintf("The management endpoint %q is not an http or https URL. Set endpoint (or QUEUEY_ENDPOINT) to a URL such as %s.", setting, defaultEndpoint)
			if err != nil {
				detail += "\n\n" + err.Error()
			}
			return nil, detail
		}
		return []*url.URL{u}, ""
	}
	for i, entry := range strings.Split(setting, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, fmt.Sprintf("The management endpoint list %q has an empty entry (entry %d). "+
				"Set endpoint (or QUEUEY_ENDPOINT) to the management API URLs of the cluster's nodes separated by single commas, such as %s.", setting, i+1, exampleEndpoints)
		}
		u, err := url.Parse(entry)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			detail := fmt.Sprintf("Entry %d of the management endpoint list, %q, is not an http or https URL. "+
				"Set endpoint (or QUEUEY_ENDPOINT) to the management API URLs of the cluster's nodes separated by commas, such as %s.", i+1, entry, exampleEndpoints)
			if err != nil {
				detail += "\n\n" + err.Error()
			}
			return nil, detail
		}
		if len(urls) > 0 && u.Scheme != urls[0].Scheme {
			return nil, fmt.Sprintf("The management endpoint list mixes schemes: entry 1, %q, uses %s, and entry %d, %q, uses %s. "+
				"The provider reaches every node with the same TLS settings: write every entry with https:// if the nodes serve the management API over TLS, else every entry with http://.",
				urls[0], urls[0].Scheme, i+1, entry, u.Scheme)
		}
		if len(urls) > 0 && strings.TrimRight(u.Path, "/") != strings.TrimRight(urls[0].Path, "/") {
			return nil, fmt.Sprintf("The management endpoint list mixes paths: entry 1, %q, has path %q, and entry %d, %q, has path %q. "+
				"The provider fails over from one node to the next by changing the host alone: give every entry the same path.",
				urls[0], urls[0].Path, i+1, entry, u.Path)
		}
		urls = append(urls, u)
	}
	return urls, ""
}

// defaultAMQPURL is the AMQP URL of the broker whose management API is at
// endpoints, on the standard ports, with the same credentials. Several
// endpoints give one URL that lists every node's host, in the same order,
// the form the runtime and migrations dial (package amqphosts):
// amqp://user:pass@h1:5672,h2:5672,h3:5672/.
func defaultAMQPURL(endpoints []*url.URL, username, password string) string {
	scheme, port := "amqp", "5672"
	if endpoints[0].Scheme == "https" {
		scheme, port = "amqps", "5671"
	}
	hosts := make([]string, len(endpoints))
	for i, e := range endpoints {
		hosts[i] = net.JoinHostPort(e.Hostname(), port)
	}
	u := url.URL{Scheme: scheme, Host: strings.Join(hosts, ","), User: url.UserPassword(username, password), Path: "/"}
	return u.String()
}
