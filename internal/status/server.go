// Package status serves the agent's local HTTP API: health, readiness, the
// volumes of every pod and where they are, and Prometheus metrics; and it
// makes the endpoints it is served on: a TCP address, or a unix socket
// that only root and one group can connect to (listen.go), each within the
// bounds of serve.go (timeouts, sizes, a cap on waiting requests).
//
// It only reads the desired and actual state; its one request that
// changes anything, POST /v1/claims/delete-now (deletenow.go), hands an
// operator's request, with the operator token, to the binder. It never serves, logs or puts
// into an error the content of a ConfigMap or Secret, and never removes a
// file at a socket's path that is not a stale socket.
package status

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/binder"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/source"
)

// MaxWait bounds the ?wait= parameter.
const MaxWait = 5 * time.Minute

// Config configures a Server.
type Config struct {
	// Addr to listen on, as ParseAddr reads it: "127.0.0.1:9810" or
	// "unix:///run/volume-agent/status.sock".
	Addr string
	// Listener, when set, is served instead of listening on Addr: the
	// caller binds the address before anything runs. Run closes it.
	Listener net.Listener
	Worlds   Worlds
	// Sources are reported by /v1/sources and gate /readyz.
	Sources []source.Source
	// Recovered reports whether start-up recovery (reconstruction) is done.
	Recovered func() bool
	// Healthy returns an error when a loop is stuck.
	Healthy func() error
	// Warnings, when set, lists what a user must act on but restarting the
	// agent would not fix (the kubelet's liveness probe restarts it when
	// /healthz fails): /healthz answers 200 with them after "ok".
	Warnings func() []string
	Gatherer prometheus.Gatherer
	Logger   *zap.Logger
	// Claims lists the claims the agent bound itself (manifest mode), for
	// GET /v1/claims; may be nil.
	Claims Claims
	// Deleter, with OperatorToken, serves POST /v1/claims/delete-now
	// (deletenow.go); may be nil: no such route.
	Deleter       ClaimDeleter
	OperatorToken string
	// Profiling serves Go's profiles under /debug/pprof/ (off by default,
	// as in the kubelet: a profile shows what the agent is doing).
	Profiling bool
	// Now is the clock of the volumes' "since"; time.Now when nil.
	Now func() time.Time
	// Limits bound the server's requests; zero: DefaultLimits.
	Limits Limits
	// MaxWaiting bounds the requests waiting at once (?wait=); more are
	// answered 429. Zero: DefaultMaxWaiting.
	MaxWaiting int
	// OnIdle, when set, is called when the last open connection of the
	// status endpoint closes: what the connections of a burst held (a
	// goroutine, buffers) is then garbage, and can be given back.
	OnIdle func()
}

// DefaultMaxWaiting is how many requests may wait at once by default. A
// node's container runtime may wait for every pod it starts at once: the
// kubelet's --max-pods is 110 by default and some clusters raise it to 250,
// so the bound stays above twice that. Each waiting request costs a
// goroutine and a connection, some 20 KiB: 10 MiB at most.
const DefaultMaxWaiting = 512

// Claims lists claims with their phase and PersistentVolume.
type Claims interface {
	Claims() []binder.ClaimStatus
}

// Snapshots is a Claims that lists VolumeSnapshots too (manifest mode);
// GET /v1/claims then answers them under "snapshots".
type Snapshots interface {
	Snapshots() []binder.SnapshotStatus
}

// Server is the HTTP API. Create with New, start with Run.
type Server struct {
	cfg Config
	log *zap.Logger

	// stopping is closed when Run's context ends: waiting requests then
	// answer 503 rather than nothing.
	stopping     chan struct{}
	stoppingOnce sync.Once

	// desired and actual name the pods that changed in either world, so
	// that a change wakes only the requests waiting for its pod; nil when
	// Worlds has none.
	desired, actual *dsw.Changes
	// cache keeps the answer of GET /v1/pods by pod; nil when Worlds has
	// no worlds.
	cache *podCache

	// pending hands the pods Notify saw change to Run's recorder, which
	// records since when their volumes are in their state; Notify itself
	// only hands them over, so the populator and the operations that call
	// it never compute a status.
	pending pendingPods

	// waiting holds a token per request waiting (?wait=); its capacity
	// is Config.MaxWaiting.
	waiting chan struct{}

	mu      sync.Mutex
	waiters map[string]*poll // guarded by mu; by pod UID, the requests waiting for it
	addr    net.Addr         // guarded by mu; set once listening
	conns   int              // guarded by mu; open connections
}

// poll is one request waiting (?wait=) for its pod to be ready. It is
// registered once, before it first looks, and stays registered until it
// answers: each change of its pod leaves a token in changed, which the
// request takes before it looks again, so that a change at any moment
// after the registration (while it looks, or between two looks) makes it
// look once more, and none is missed. Polls are reused (pollPool): a
// request allocates no waiter, channel or timer of its own.
type poll struct {
	uid      string
	changed  chan struct{} // holds one token: the pod changed since the request last took it
	deadline *time.Timer   // the end of the wait; nil until first used
	next     *poll         // guarded by Server.mu; the next request waiting for the same pod
	// readiness is the request's: its looks copy the pod's volumes into
	// the same buffers.
	readiness readiness
}

// pollPool keeps the polls of requests that answered. At most
// Config.MaxWaiting are in use at once.
var pollPool = sync.Pool{New: func() any { return &poll{changed: make(chan struct{}, 1)} }}

// New returns a server; it starts nothing.
func New(cfg Config) *Server {
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits
	}
	if cfg.MaxWaiting <= 0 {
		cfg.MaxWaiting = DefaultMaxWaiting
	}
	s := &Server{cfg: cfg, log: cfg.Logger.Named("status"), waiters: map[string]*poll{}, stopping: make(chan struct{}),
		waiting: make(chan struct{}, cfg.MaxWaiting)}
	if cfg.Worlds.Desired != nil && cfg.Worlds.Actual != nil {
		s.cfg.Worlds.clock = newStateClock(cfg.Now)
		s.desired, s.actual = cfg.Worlds.Desired.Watch(), cfg.Worlds.Actual.Watch()
		s.cache = newPodCache(s.cfg.Worlds)
	}
	return s
}

// Notify records since when the volumes of the pods that changed are in
// their state, and tells the requests waiting for those pods that they
// changed. It never blocks on a request.
func (s *Server) Notify() {
	if s.desired == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.wakeLocked(nil, true)
		return
	}
	desired, allDesired := s.desired.Take()
	actual, allActual := s.actual.Take()
	changed, all := slices.Concat(desired, actual), allDesired || allActual
	s.pending.add(changed, all)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wakeLocked(changed, all)
}

// wakeLocked wakes the requests waiting for pods, or for any pod when all.
// Only the requests of a pod that changed are woken; they stay
// registered.
func (s *Server) wakeLocked(pods []types.UID, all bool) {
	if all {
		for _, p := range s.waiters {
			p.wake()
		}
		return
	}
	for _, uid := range pods {
		s.waiters[string(uid)].wake()
	}
}

// wake leaves a token in the changed of p and of the polls after it
// (none when p is nil); one already there stands for this change too.
func (p *poll) wake() {
	for ; p != nil; p = p.next {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// watch registers a poll of pod uid that ends wait from now; release it
// with unwatch once the request answered.
func (s *Server) watch(uid string, wait time.Duration) *poll {
	p := pollPool.Get().(*poll)
	p.uid = uid
	if p.deadline == nil {
		p.deadline = time.NewTimer(wait)
	} else {
		p.deadline.Reset(wait) // stopped by unwatch: no stale tick (Go 1.23's timers)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p.next = s.waiters[uid]
	s.waiters[uid] = p
	return p
}

// unwatch unregisters p, after which no change reaches it, and puts it
// back in the pool with no token and its timer stopped.
func (s *Server) unwatch(p *poll) {
	s.mu.Lock()
	s.unlinkLocked(p)
	s.mu.Unlock()
	p.deadline.Stop()
	select {
	case <-p.changed:
	default:
	}
	p.uid, p.next = "", nil
	p.readiness.forget()
	pollPool.Put(p)
}

// unlinkLocked removes p from the polls of its pod.
func (s *Server) unlinkLocked(p *poll) {
	head := s.waiters[p.uid]
	switch {
	case head == p && p.next == nil:
		delete(s.waiters, p.uid)
	case head == p:
		s.waiters[p.uid] = p.next
	default:
		for q := head; q != nil; q = q.next {
			if q.next == p {
				q.next = p.next
				return
			}
		}
	}
}

// Addr returns the address the server listens on, once it does.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Run listens (unless given a Listener) and serves until ctx ends, then
// shuts down gracefully.
func (s *Server) Run(ctx context.Context) error {
	ln := s.cfg.Listener
	if ln == nil {
		addr, err := ParseAddr(s.cfg.Addr)
		if err != nil {
			return err
		}
		if ln, err = Listen(addr, -1); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()
	recorderDone := make(chan struct{})
	recorderCtx, stopRecorder := context.WithCancel(ctx)
	go func() { defer close(recorderDone); s.recordStates(recorderCtx) }()
	defer func() { stopRecorder(); <-recorderDone }()
	s.log.Info("status endpoint listening", zap.String("addr", ln.Addr().String()))
	// A request's context ends only when its client goes away; the end of
	// ctx reaches handlers through s.stopping, so that a request still
	// waiting gets an answer that says so.
	return serveWithin(ctx, ln, s.Handler(), s.stop, s.cfg.Limits, s.connState)
}

// connState counts the open connections, and calls OnIdle when the last
// one closes.
func (s *Server) connState(_ net.Conn, state http.ConnState) {
	s.mu.Lock()
	switch state {
	case http.StateNew:
		s.conns++
	case http.StateClosed, http.StateHijacked:
		s.conns--
	default:
		s.mu.Unlock()
		return
	}
	idle := s.conns == 0
	s.mu.Unlock()
	if idle && s.cfg.OnIdle != nil {
		s.cfg.OnIdle()
	}
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
	if s.cfg.Deleter != nil {
		mux.HandleFunc("POST /v1/claims/delete-now", s.deleteNow)
	}
	if s.cfg.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	if s.cfg.Profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", profiling(pprof.Profile))
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", profiling(pprof.Trace))
	}
	return mux
}

// HealthHandler returns /healthz and /readyz alone: what the kubelet's
// probes ask for on a loopback port, with nothing on the node's pods.
func (s *Server) HealthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusNotFound, "only /healthz and /readyz are served here; the status API is on the agent's --status-addr")
	})
	return mux
}

// profiling gives a profile that lasts ?seconds= the time to answer.
func profiling(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if sec, err := strconv.Atoi(r.FormValue("seconds")); err == nil && sec > 0 {
			extendWrite(w, r, time.Duration(min(sec, 3600))*time.Second)
		}
		h(w, r)
	}
}

// The Content-Type of the answers, set without a slice per answer
// (net/http copies the header, and never changes a value in place).
var (
	jsonType = []string{"application/json"}
	textType = []string{"text/plain; charset=utf-8"}
)

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", indent)
	_ = enc.Encode(v)
}

func writeText(w http.ResponseWriter, code int, text string) {
	w.Header()["Content-Type"] = textType
	w.WriteHeader(code)
	_, _ = w.Write([]byte(text + "\n")) //nolint:gosec // G705: text/plain, never rendered as HTML
}
