package amqphosts

import (
	"errors"
	"slices"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestSplit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"amqp://guest:guest@127.0.0.1:5672/", []string{"amqp://guest:guest@127.0.0.1:5672/"}},
		{"amqp://u:p@h1:5691,h2:5692,h3/v?heartbeat=5", []string{
			"amqp://u:p@h1:5691/v?heartbeat=5", "amqp://u:p@h2:5692/v?heartbeat=5", "amqp://u:p@h3/v?heartbeat=5"}},
		{"amqps://h1,h2", []string{"amqps://h1", "amqps://h2"}},
		// A comma or an @ in the password stays in the password.
		{"amqp://u:a,b@c@h1,h2/", []string{"amqp://u:a,b@c@h1/", "amqp://u:a,b@c@h2/"}},
		// One host is left as it is, even unreadable: the dial says why.
		{"not a url", []string{"not a url"}},
	} {
		got, err := Split(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Split(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"amqp://u:secret@h1,,h2/", "amqp://u:secret@h1,h2:notaport/", "amqp://u:secret@h1,/"} {
		_, err := Split(in)
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("Split(%q) = %v; want an error without the password", in, err)
		}
	}
}

func TestDialInOrder(t *testing.T) {
	t.Parallel()
	urls := []string{"amqp://u:secret@h1:5691/", "amqp://u:secret@h2:5692/", "amqp://u:secret@h3:5693/"}
	refused := errors.New("connection refused")
	var dialled []string
	want := &amqp.Connection{}
	dial := func(up string) func(string) (*amqp.Connection, error) {
		return func(u string) (*amqp.Connection, error) {
			dialled = append(dialled, u)
			if u == up {
				return want, nil
			}
			return nil, refused
		}
	}

	ac, err := DialInOrder(urls, dial(urls[1]))
	if err != nil || ac != want || !slices.Equal(dialled, urls[:2]) {
		t.Fatalf("DialInOrder = %v, %v after dialling %q; want the second host's connection after the first two", ac, err, dialled)
	}

	dialled = nil
	_, err = DialInOrder(urls, dial(""))
	if err == nil || !errors.Is(err, refused) || !slices.Equal(dialled, urls) {
		t.Fatalf("DialInOrder with every host down = %v after dialling %q; want an error wrapping each", err, dialled)
	}
	for _, h := range []string{"h1:5691", "h2:5692", "h3:5693"} {
		if !strings.Contains(err.Error(), h) {
			t.Errorf("error %q does not name %s", err, h)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error %q shows the password", err)
	}

	// One URL: its error as it is, as before hosts could be listed.
	_, err = DialInOrder(urls[:1], dial(""))
	if err != refused {
		t.Fatalf("DialInOrder of one URL = %v, want its dial's error as it is", err)
	}
}
