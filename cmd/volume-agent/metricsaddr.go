package main

import (
	"context"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/status"
)

// metricsServer serves /metrics, and nothing else, on --metrics-addr: an
// address Prometheus can reach off the node, while the status endpoint
// (pods, paths, errors) stays on the loopback.
type metricsServer struct {
	ln       net.Listener // bound to --metrics-addr; Run closes it
	gatherer prometheus.Gatherer
	log      *zap.Logger
}

func (m metricsServer) Run(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.gatherer, promhttp.HandlerOpts{}))
	m.log.Info("metrics endpoint listening", zap.String("addr", m.ln.Addr().String()))
	return status.Serve(ctx, m.ln, mux, nil)
}

// healthServer serves /healthz and /readyz, and nothing else, on
// --healthz-addr: a loopback port the kubelet's probes reach while the
// status endpoint is a unix socket.
type healthServer struct {
	ln     net.Listener // bound to --healthz-addr; Run closes it
	server *status.Server
	log    *zap.Logger
}

func (h healthServer) Run(ctx context.Context) error {
	h.log.Info("health endpoint listening", zap.String("addr", h.ln.Addr().String()))
	return status.Serve(ctx, h.ln, h.server.HealthHandler(), nil)
}
