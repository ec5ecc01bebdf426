//go:build integration

package migrate

import (
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
)

// An amqp_url that lists a dead host first still migrates: Dial tries the
// hosts in order and uses the first that answers (issue 17).
func TestIntegrationDialSkipsAHostThatIsDown(t *testing.T) {
	s := brokertest.Open(t, brokertest.FromEnv())
	uri, err := amqp.ParseURI(s.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	// Port 1 on loopback refuses at once.
	list := strings.Replace(s.AMQPURL, uri.Host, "127.0.0.1:1,"+uri.Host, 1)
	cfg := &amqp.Config{Properties: amqp.Table{"product": "test"}}
	ac, err := Dial(list, s.Vhost, cfg)
	if err != nil {
		t.Fatalf("Dial(%s): %v", uri.Host+" after a dead host", err)
	}
	_ = ac.Close()
	if _, ok := cfg.Properties["connection_name"]; ok || len(cfg.Properties) != 1 {
		t.Errorf("Dial wrote to the caller's properties: %v", cfg.Properties)
	}

	_, err = Dial(strings.Replace(s.AMQPURL, uri.Host, "127.0.0.1:1,127.0.0.1:2", 1), s.Vhost, nil)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "127.0.0.1:2") {
		t.Fatalf("Dial with every host down = %v, want an error naming both", err)
	}
}
