package provider

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// TestAccProvider_tls runs the provider against the management API behind
// a TLS proxy: refused without the CA, accepted with ca_file or insecure,
// and, where the proxy requires a client certificate, accepted only with
// client_cert_file and client_key_file.
func TestAccProvider_tls(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("tls")
	dir := t.TempDir()

	clientCA, clientCert, clientKey := newClientCertificate(t)
	certFile, keyFile := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	writeFile(t, certFile, clientCert)
	writeFile(t, keyFile, clientKey)

	server := newTLSProxy(t, b.env.endpoint, nil)
	mutual := newTLSProxy(t, b.env.endpoint, clientCA)
	caFile := filepath.Join(dir, "ca.pem")
	writeFile(t, caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw}))

	provider := func(endpoint, extra string) string {
		return fmt.Sprintf(`
provider "queuey" {
  endpoint = %q
  username = %q
  password = %q
  %s
}
`, endpoint, b.env.username, b.env.password, extra)
	}
	set := setConfig(p, false, `a = {}`)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			Config:      provider(server.URL, fmt.Sprintf("client_cert_file = %q", certFile)) + set,
			ExpectError: regexp.MustCompile(`(?s)Invalid TLS Settings.*set both or neither`),
		}, {
			Config:      provider(server.URL, "") + set,
			ExpectError: regexp.MustCompile(`(?s)Cannot Verify RabbitMQ's Certificate.*ca_file`),
		}, {
			Config: provider(server.URL, fmt.Sprintf("ca_file = %q", caFile)) + set,
			Check: b.checkQueues(p, map[string]wantQueue{
				work(p, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
				dead(p, "a"): {true, map[string]any{}},
			}),
		}, {
			Config:   provider(server.URL, "insecure = true") + set,
			PlanOnly: true,
		}, {
			// The proxy refuses the connection for want of a client
			// certificate, and the diagnostic says so (it used to blame
			// reachability). Under TLS 1.3 the refusal may arrive as a
			// closed connection rather than as the alert.
			Config:      provider(mutual.URL, fmt.Sprintf("ca_file = %q", caFile)) + set,
			PlanOnly:    true,
			ExpectError: regexp.MustCompile(`(?s)RabbitMQ (Refused The Client Certificate|Closed The TLS Connection).*client_cert_file\s+and\s+client_key_file`),
		}, {
			// Plain http:// to the HTTPS proxy.
			Config:      provider("http://"+strings.TrimPrefix(server.URL, "https://"), "") + set,
			PlanOnly:    true,
			ExpectError: regexp.MustCompile(`(?s)RabbitMQ Endpoint Expects HTTPS.*https://`),
		}, {
			Config: provider(mutual.URL, fmt.Sprintf("ca_file = %q\n client_cert_file = %q\n client_key_file = %q", caFile, certFile, keyFile)) + set,
			// The same server certificate serves both proxies.
			PlanOnly: true,
		}},
	})
}

// newTLSProxy serves the management API over TLS with httptest's
// certificate for 127.0.0.1; with clientCAs it requires a client
// certificate signed by one of them.
func newTLSProxy(t *testing.T, target string, clientCAs *x509.CertPool) *httptest.Server {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(u))
	if clientCAs != nil {
		s.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// newClientCertificate makes a CA and a client certificate it signed, as
// PEM.
func newClientCertificate(t *testing.T) (*x509.CertPool, []byte, []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "queuey test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "queuey test client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func writeFile(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
