// Package tokens mints service account tokens for projected
// serviceAccountToken sources through the TokenRequest API, bound to the
// pod, and keeps them fresh.
//
// A token is due for replacement at 80% of its lifetime (24 hours at most),
// less a random jitter of up to a tenth of that, so that a node's tokens do
// not all renew at once. Each cached token keeps its due time on the wall
// clock. A timer signals a change when that time comes (no polling), and
// Token and Version also compare it with the wall clock on every call: the
// timers run on the monotonic clock, which stops while a machine is
// suspended.
//
// A token found in a volume (after a restart) is reused while it is fresh
// and was issued for the same pod, service account and audience, so that a
// restart mints nothing and rewrites nothing (see claims.go).
//
// Tokens are never logged, put into an error or served.
package tokens

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.uber.org/zap"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Defaults, as the API server's.
const (
	defaultExpiration = 3600 * time.Second
	maxTokenAge       = 24 * time.Hour
)

// Config configures a Manager.
type Config struct {
	Client kubernetes.Interface
	Logger *zap.Logger
	// OnChange is called when a token is due for refresh and when the cache
	// gains a token, so that Version is read again (must not block).
	OnChange func()
	// Clock defaults to the real clock.
	Clock clock.WithDelayedExecution
	// Jitter returns a number in [0, 1): how much of the largest jitter to
	// take off a refresh point. Defaults to math/rand/v2's Float64.
	Jitter func() float64
}

// Manager mints and caches tokens. Create with New; Run owns its timers.
type Manager struct {
	cfg Config
	log *zap.Logger

	mu     sync.Mutex
	tokens map[key]*entry // guarded by mu
	closed bool           // guarded by mu; set when Run returns
}

// key identifies a token request.
type key struct {
	pod        types.UID
	account    string
	audience   string
	expiration int64 // seconds
}

type entry struct {
	token  []byte
	issued time.Time // our clock when minted; its iat claim when reused
	// due is when the token must be replaced. It has no monotonic reading,
	// so comparisons with it use the wall clock.
	due     time.Time
	refresh clock.Timer
}

// dueAt reports whether the token must be replaced at now, by the wall clock.
func (e *entry) dueAt(now time.Time) bool { return !now.Before(e.due) }

// New returns a manager; it starts nothing.
func New(cfg Config) *Manager {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.OnChange == nil {
		cfg.OnChange = func() {}
	}
	if cfg.Jitter == nil {
		cfg.Jitter = rand.Float64
	}
	return &Manager{cfg: cfg, log: cfg.Logger.Named("tokens"), tokens: map[key]*entry{}}
}

// Run waits for ctx to end, then stops every refresh timer.
func (m *Manager) Run(ctx context.Context) error {
	<-ctx.Done()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	for k, e := range m.tokens {
		e.refresh.Stop()
		delete(m.tokens, k)
	}
	return nil
}

// Version changes whenever Token would return a different token: when a
// token is cached, and again when it is due for refresh.
func (m *Manager) Version(pod *v1.Pod, src *v1.ServiceAccountTokenProjection) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.tokens[keyFor(pod, src)]
	switch {
	case !ok:
		return "token:none"
	case e.dueAt(m.now()):
		return "token:due@" + stamp(e.issued)
	}
	return "token:" + stamp(e.issued)
}

// Token returns the token for the pod and source: the cached one while it
// is not due for refresh, else current (the token found in the volume,
// possibly nil) when it can be reused, else a new one.
func (m *Manager) Token(ctx context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection, current []byte) ([]byte, error) {
	k := keyFor(pod, src)
	if token, ok := m.cached(k); ok {
		return token, nil
	}
	if m.reuse(k, pod, current) {
		return current, nil
	}
	token, lifetime, err := m.request(ctx, pod, src, k)
	if err != nil {
		return nil, err
	}
	now := m.now()
	m.store(k, token, now, m.dueTime(now, lifetime))
	m.cfg.OnChange()
	return token, nil
}

// ForgetPod drops every token of the pod and stops their timers. Call it
// when the pod leaves the desired state. Should the pod come back, a token
// its volumes still hold is reused if it is fresh.
func (m *Manager) ForgetPod(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, e := range m.tokens {
		if k.pod == uid {
			e.refresh.Stop()
			delete(m.tokens, k)
		}
	}
}

// cached returns the cached token of k unless it is due for refresh.
func (m *Manager) cached(k key) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.tokens[k]
	if !ok || e.dueAt(m.now()) {
		return nil, false
	}
	return e.token, true
}

// request calls the TokenRequest API for a token bound to the pod and
// returns it with the lifetime the API server granted. The lifetime comes
// from the answer's spec, not from its expirationTimestamp against our clock:
// a node clock ahead of the API server's would see fresh tokens as expired.
func (m *Manager) request(ctx context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection, k key) ([]byte, time.Duration, error) {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &k.expiration,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if src.Audience != "" {
		req.Spec.Audiences = []string{src.Audience}
	}
	out, err := m.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, k.account, req, metav1.CreateOptions{})
	if err != nil {
		return nil, 0, fmt.Errorf("request token for service account %s/%s: %w", pod.Namespace, k.account, err)
	}
	m.log.Debug("token issued", podField(pod), zap.String("serviceAccount", k.account),
		zap.Time("expires", out.Status.ExpirationTimestamp.Time))
	granted := k.expiration
	if out.Spec.ExpirationSeconds != nil {
		granted = *out.Spec.ExpirationSeconds
	}
	return []byte(out.Status.Token), time.Duration(granted) * time.Second, nil
}

// store caches a token and arranges its refresh at due.
func (m *Manager) store(k key, token []byte, issued, due time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	if old, ok := m.tokens[k]; ok {
		old.refresh.Stop()
	}
	e := &entry{token: token, issued: issued, due: due}
	e.refresh = m.cfg.Clock.AfterFunc(due.Sub(m.now()), func() { m.expire(k, e) })
	m.tokens[k] = e
}

// expire drops a token due for refresh; the next Version differs, so the
// volume is refreshed and Token requests a new one. A token of a pod that
// is gone is simply dropped. An entry that replaced e stays.
func (m *Manager) expire(k key, e *entry) {
	m.mu.Lock()
	if m.tokens[k] == e {
		delete(m.tokens, k)
	}
	m.mu.Unlock()
	m.cfg.OnChange()
}

// dueTime is when a token issued at issued with lifetime must be replaced
// (see refreshDelay), without a monotonic reading.
func (m *Manager) dueTime(issued time.Time, lifetime time.Duration) time.Time {
	return issued.Add(refreshDelay(lifetime, m.cfg.Jitter())).Round(0)
}

// refreshDelay is how long after its issue a token of lifetime is
// replaced: at 80% of its lifetime or after maxTokenAge, whichever comes
// first, less jitter (in [0, 1)) times a tenth of that.
func refreshDelay(lifetime time.Duration, jitter float64) time.Duration {
	d := min(lifetime*8/10, maxTokenAge)
	return d - time.Duration(jitter*float64(d/10))
}

// now reads the clock without its monotonic reading: every time the
// manager compares is a wall-clock time.
func (m *Manager) now() time.Time { return m.cfg.Clock.Now().Round(0) }

func keyFor(pod *v1.Pod, src *v1.ServiceAccountTokenProjection) key {
	account := pod.Spec.ServiceAccountName
	if account == "" {
		account = "default"
	}
	exp := int64(defaultExpiration.Seconds())
	if src.ExpirationSeconds != nil {
		exp = *src.ExpirationSeconds
	}
	return key{pod: pod.UID, account: account, audience: src.Audience, expiration: exp}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func podField(pod *v1.Pod) zap.Field { return zap.String("pod", pod.Namespace+"/"+pod.Name) }
