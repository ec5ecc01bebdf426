package provider

import (
	"net/http"
	"sync"
	"testing"
)

// Regression: newBroker with a nil transport read http.DefaultTransport's
// TLSClientConfig, which the transport's first RoundTrip or Clone writes (it
// sets up HTTP/2 once), so `go test -race` failed whenever another test's
// request started alongside. Run under -race; the two goroutines share no
// synchronisation until both are done, so the race detector sees any
// conflicting access, if this is the first use of the default transport in
// the process (tests in this file run before the other files' tests).
func TestNewBrokerWithDefaultTransportRacesNoFirstRequest(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = http.DefaultTransport.(*http.Transport).Clone()
	}()
	go func() {
		defer wg.Done()
		if _, err := newBroker("http://127.0.0.1:15672/", "alice", "secret", nil); err != nil {
			t.Error(err)
		}
	}()
	wg.Wait()
}
