// Package status serves the agent's local HTTP API: health, readiness, the
// volumes of every pod and where they are, and Prometheus metrics.
//
// It only reads the desired and actual state. It never serves, logs or puts
// into an error the content of a ConfigMap or Secret.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/binder"
	"github.com/volume-agent/volume-agent/internal/source"
)

// MaxWait bounds the ?wait= parameter.
const MaxWait = 5 * time.Minute

// Config configures a Server.
type Config struct {
	// Addr to listen on, e.g. "127.0.0.1:9810".
	Addr   string
	Worlds Worlds
	// Sources are reported by /v1/sources and gate /readyz.
	Sources []source.Source
	// Recovered reports whether start-up recovery (reconstruction) is done.
	Recovered func() bool
	// Healthy returns an error when a loop is stuck.
	Healthy  func() error
	Gatherer prometheus.Gatherer
	Logger   *zap.Logger
	// Claims lists the claims the agent bound itself (manifest mode), for
	// GET /v1/claims; may be nil.
	Claims Claims
	// Profiling serves Go's profiles under /debug/pprof/ (off by default,
	// as in the kubelet: a profile shows what the agent is doing).
	Profiling bool
}

// Claims lists claims with their phase and PersistentVolume.
type Claims interface {
	Claims() []binder.ClaimStatus
}

// Server is the HTTP API. Create with New, start with Run.
type Server struct {
	cfg Config
	log *zap.Logger

	// stopping is closed when Run's context ends: waiting requests then
	// answer 503 rather than nothing.
	stopping     chan struct{}
	stoppingOnce sync.Once

	mu      sync.Mutex
	changed chan struct{} // guarded by mu; closed and replaced on every change
	addr    net.Addr      // guarded by mu; set once listening
}

// New returns a server; it starts nothing.
func New(cfg Config) *Server {
	return &Server{cfg: cfg, log: cfg.Logger.Named("status"), changed: make(chan struct{}), stopping: make(chan struct{})}
}

// Notify tells waiting requests that the state changed. It never blocks.
func (s *Server) Notify() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// changes returns a channel closed at the next change.
func (s *Server) changes() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Addr returns the address the server listens on, once it does.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Run listens and serves until ctx ends, then shuts down gracefully.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()
	// A request's context ends only when its client goes away; the end of
	// ctx reaches handlers through s.stopping, so that a request still
	// waiting gets an answer that says so.
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.log.Info("status endpoint listening", zap.String("addr", ln.Addr().String()))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.stop()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// stop makes waiting requests answer that the agent is stopping.
func (s *Server) stop() { s.stoppingOnce.Do(func() { close(s.stopping) }) }

// isStopping reports whether the agent is stopping.
func (s *Server) isStopping() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

// Handler returns the API's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /v1/pods", s.pods)
	mux.HandleFunc("GET /v1/pods/{uid}", s.pod)
	mux.HandleFunc("GET /v1/sources", s.sources)
	mux.HandleFunc("GET /v1/claims", s.claims)
	if s.cfg.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	if s.cfg.Profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeText(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(text + "\n"))
}
