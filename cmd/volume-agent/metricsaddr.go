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
	addr     string
	gatherer prometheus.Gatherer
	log      *zap.Logger
}

func (m metricsServer) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", m.addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.gatherer, promhttp.HandlerOpts{}))
	m.log.Info("metrics endpoint listening", zap.String("addr", ln.Addr().String()))
	return status.Serve(ctx, ln, mux, nil)
}
