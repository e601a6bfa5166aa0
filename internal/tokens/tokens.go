// Package tokens mints service account tokens for projected
// serviceAccountToken sources through the TokenRequest API, bound to the
// pod, and keeps them fresh: a token is replaced once 80% of its lifetime
// (or 24 hours) has passed, by signalling a change so that the volume is
// refreshed — no polling.
//
// Tokens are never logged, put into an error or served.
package tokens

import (
	"context"
	"fmt"
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
	// OnChange is called when a token is due for refresh (must not block).
	OnChange func()
	Clock    clock.WithDelayedExecution
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
	expiration int64
}

type entry struct {
	token   []byte
	issued  time.Time
	refresh clock.Timer
}

// New returns a manager; it starts nothing.
func New(cfg Config) *Manager {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.OnChange == nil {
		cfg.OnChange = func() {}
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

// Version changes whenever Token would return a different token.
func (m *Manager) Version(pod *v1.Pod, src *v1.ServiceAccountTokenProjection) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.tokens[keyFor(pod, src)]
	if !ok {
		return "token:none"
	}
	return "token:" + e.issued.UTC().Format(time.RFC3339Nano)
}

// Token returns the cached token for the pod and source, requesting one
// when there is none or it is due for refresh.
func (m *Manager) Token(ctx context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection) ([]byte, error) {
	k := keyFor(pod, src)
	m.mu.Lock()
	e, ok := m.tokens[k]
	m.mu.Unlock()
	if ok {
		return e.token, nil
	}
	token, lifetime, err := m.request(ctx, pod, src, k)
	if err != nil {
		return nil, err
	}
	m.store(k, token, lifetime)
	m.cfg.OnChange()
	return token, nil
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
	m.log.Debug("token issued", zap.String("pod", pod.Namespace+"/"+pod.Name), zap.String("serviceAccount", k.account),
		zap.Time("expires", out.Status.ExpirationTimestamp.Time))
	granted := k.expiration
	if out.Spec.ExpirationSeconds != nil {
		granted = *out.Spec.ExpirationSeconds
	}
	return []byte(out.Status.Token), time.Duration(granted) * time.Second, nil
}

// store caches a token and arranges its refresh at 80% of its lifetime, or
// after maxTokenAge, whichever comes first.
func (m *Manager) store(k key, token []byte, lifetime time.Duration) {
	now := m.cfg.Clock.Now()
	refreshIn := min(lifetime*8/10, maxTokenAge)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	if old, ok := m.tokens[k]; ok {
		old.refresh.Stop()
	}
	m.tokens[k] = &entry{token: token, issued: now, refresh: m.cfg.Clock.AfterFunc(refreshIn, func() { m.expire(k) })}
}

// expire drops a token due for refresh; the next Version differs, so the
// volume is refreshed and Token requests a new one. A token of a pod that
// is gone is simply dropped.
func (m *Manager) expire(k key) {
	m.mu.Lock()
	delete(m.tokens, k)
	m.mu.Unlock()
	m.cfg.OnChange()
}

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
