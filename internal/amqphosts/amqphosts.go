// Package amqphosts reads an AMQP URL that lists the nodes of a cluster as
// hosts, amqp://user:pass@host1:5672,host2:5672,host3/vhost, and dials them
// in order: the form the queuey runtime accepts, which the provider's
// amqp_url takes too and writes by default when its endpoint lists several
// management APIs.
//
// The runtime's splitHosts (runtime/conn.go) is Split with its own prefix
// on the errors.
package amqphosts

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Split turns an AMQP URL with several hosts in its authority into one URL
// per host, with the same user, password, vhost and query, in the order
// given. A URL with one host is returned as it is, even one that does not
// parse (amqp091-go's dial says what is wrong with it). A host list with an
// empty entry, or an entry that does not parse, is an error that says which;
// it never quotes the URL, which holds the password.
func Split(url string) ([]string, error) {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return []string{url}, nil
	}
	authority, path := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	userinfo, hosts := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	if !strings.Contains(hosts, ",") {
		return []string{url}, nil
	}
	var urls []string
	for i, h := range strings.Split(hosts, ",") {
		if h == "" {
			return nil, fmt.Errorf("the AMQP URL's host list %q has an empty entry (host %d): write host:port,host:port", hosts, i+1)
		}
		u := scheme + "://" + userinfo + h + path
		if _, err := amqp.ParseURI(u); err != nil {
			return nil, fmt.Errorf("host %d of the AMQP URL's host list does not parse as host or host:port", i+1)
		}
		urls = append(urls, u)
	}
	return urls, nil
}

// DialInOrder dials each of urls with dial, in order, once each, and
// returns the first connection. When none connects, the error is the one
// URL's as it is, or, for several, one that names each host (without its
// password) and its error.
func DialInOrder(urls []string, dial func(url string) (*amqp.Connection, error)) (*amqp.Connection, error) {
	if len(urls) == 1 {
		return dial(urls[0])
	}
	errs := make([]error, 0, len(urls))
	for _, u := range urls {
		ac, err := dial(u)
		if err == nil {
			return ac, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", host(u), err))
	}
	return nil, fmt.Errorf("none of the %d hosts of the AMQP URL answered: %w", len(urls), errors.Join(errs...))
}

// host is the host:port of an AMQP URL, for an error message.
func host(u string) string {
	uri, err := amqp.ParseURI(u)
	if err != nil {
		return "(an unreadable URL)"
	}
	return net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
}
