package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/queuey/terraform-provider-queuey/runtime/queueyotel"
)

// metrics serves the demo's job metrics at /metrics through OpenTelemetry's
// Prometheus exporter: the five lines the README shows, plus a server.
type metrics struct {
	inst *queueyotel.Instrumentation
	url  string
	srv  *http.Server
	mp   *sdkmetric.MeterProvider
}

// serveMetrics listens on addr ("127.0.0.1:0" picks a free port).
func serveMetrics(addr string) (*metrics, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	inst, err := queueyotel.New(queueyotel.Options{MeterProvider: mp})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for /metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &metrics{inst: inst, url: "http://" + ln.Addr().String() + "/metrics", srv: &http.Server{Handler: mux}, mp: mp}
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

func (m *metrics) close() {
	_ = m.srv.Close()
	_ = m.mp.Shutdown(context.Background())
}

// scrape fetches /metrics as Prometheus would and returns the lines of the
// queuey_jobs_settled counter.
func (m *metrics) scrape(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", m.url, err)
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "queuey_jobs_settled") {
			lines = append(lines, line)
		}
	}
	return lines, sc.Err()
}
