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
// Version names an epoch, not a token: an epoch begins when a new token is
// needed (none is cached, or the cached one is due) and ends when that
// token is due. The token a set-up mints or reuses belongs to the epoch the
// set-up was planned in, so it leaves Version as it was and no refresh
// follows the set-up; the only token of an epoch is the first one stored in
// it, so every volume set up in one epoch holds the same token.
//
// Tokens are never logged, put into an error or served.
package tokens

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
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
	// OnChange is called with the pod's UID when Version changes, that is
	// when a token of the pod is due for refresh, so that Version is read
	// again (must not block). It is not called when a token is minted or
	// reused: that leaves Version as it was.
	OnChange func(pod types.UID)
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
	epochs uint64         // guarded by mu; the last epoch begun
	closed bool           // guarded by mu; set when Run returns
}

// key identifies a token request.
type key struct {
	pod        types.UID
	account    string
	audience   string
	expiration int64 // seconds
}

// entry is one epoch of a key: the token it waits for, then the token it
// holds until that is due.
type entry struct {
	// epoch is what Version reports for the entry: unique in the process
	// (volume versions are never kept across restarts).
	epoch uint64
	// token is nil until the epoch's token is minted or reused.
	token  []byte
	issued time.Time // our clock when minted; its iat claim when reused
	// due is when the token must be replaced. It has no monotonic reading,
	// so comparisons with it use the wall clock.
	due     time.Time
	refresh clock.Timer // nil while token is nil
}

// dueAt reports whether the entry holds a token that must be replaced at
// now, by the wall clock.
func (e *entry) dueAt(now time.Time) bool { return e.token != nil && !now.Before(e.due) }

// stop stops the entry's refresh timer, if it has one.
func (e *entry) stop() {
	if e.refresh != nil {
		e.refresh.Stop()
	}
}

// New returns a manager; it starts nothing.
func New(cfg Config) *Manager {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.OnChange == nil {
		cfg.OnChange = func(types.UID) {}
	}
	if cfg.Jitter == nil {
		cfg.Jitter = rand.Float64
	}
	return &Manager{cfg: cfg, log: cfg.Logger.Named("tokens"), tokens: map[key]*entry{}}
}

// Run waits for ctx to end, then stops every refresh timer. The cached
// tokens stay, so that Version does not change while the agent stops.
func (m *Manager) Run(ctx context.Context) error {
	<-ctx.Done()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	for _, e := range m.tokens {
		e.stop()
		e.refresh = nil
	}
	return nil
}

// Version changes whenever Token would return a token other than the one
// a set-up planned at the previous Version wrote: when the cached token is
// due, and when there is no entry (none was ever asked for, or the pod was
// forgotten) so that a volume set up before is refreshed and its token
// found again. Minting or reusing a token leaves it as it was.
func (m *Manager) Version(pod *v1.Pod, src *v1.ServiceAccountTokenProjection) string {
	m.mu.Lock()
	e, rolled := m.currentLocked(keyFor(pod, src))
	m.mu.Unlock()
	if rolled {
		m.cfg.OnChange(pod.UID)
	}
	return version(e)
}

// Token returns the token for the pod and source: the cached one while it
// is not due for refresh, else current (the token found in the volume,
// possibly nil) when it can be reused, else a new one. The token it returns
// belongs to the epoch Version reports (see fill).
func (m *Manager) Token(ctx context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection, current []byte) ([]byte, error) {
	k := keyFor(pod, src)
	m.mu.Lock()
	e, rolled := m.currentLocked(k)
	var token []byte
	if !e.dueAt(m.now()) { // only once Run has returned is a due entry current
		token = e.token
	}
	m.mu.Unlock()
	if rolled {
		m.cfg.OnChange(pod.UID)
	}
	if token != nil {
		return token, nil
	}
	if issued, due, ok := m.reuse(k, pod, current); ok {
		return m.fill(k, e, current, issued, due), nil
	}
	token, lifetime, err := m.request(ctx, pod, src, k)
	if err != nil {
		return nil, err
	}
	now := m.now()
	return m.fill(k, e, token, now, m.dueTime(now, lifetime)), nil
}

// currentLocked returns the entry of k, beginning a new epoch when there is
// none or its token is due; rolled reports that an epoch ended, so that
// Version changed for volumes set up in it.
//
// Once Run has returned, epochs neither begin nor end: Version stays as it
// was while the agent stops, so that nothing is refreshed then.
func (m *Manager) currentLocked(k key) (e *entry, rolled bool) {
	e, ok := m.tokens[k]
	switch {
	case ok && (m.closed || !e.dueAt(m.now())):
		return e, false
	case m.closed:
		return &entry{}, false // not cached: Token mints or reuses, nothing is timed
	}
	return m.beginLocked(k), ok
}

// beginLocked begins a new epoch of k, waiting for its token, and stops the
// timer of the one it ends.
func (m *Manager) beginLocked(k key) *entry {
	if old, ok := m.tokens[k]; ok {
		old.stop()
	}
	m.epochs++
	e := &entry{epoch: m.epochs}
	m.tokens[k] = e
	return e
}

// fill stores token in e, the epoch it was asked for in, and arranges its
// refresh at due; it returns the token to write. When e already got a token
// meanwhile (two set-ups asked at once), that one is returned instead, so
// that every volume set up in an epoch holds its one token. When e is no
// longer current (the pod was forgotten meanwhile), the token is returned
// and not cached: a volume set up with it gets a new epoch's Version.
func (m *Manager) fill(k key, e *entry, token []byte, issued, due time.Time) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed || m.tokens[k] != e:
		return token
	case e.token != nil:
		return e.token
	}
	e.token, e.issued, e.due = token, issued, due
	e.refresh = m.cfg.Clock.AfterFunc(due.Sub(m.now()), func() { m.expire(k, e) })
	return token
}

func version(e *entry) string { return "token:" + strconv.FormatUint(e.epoch, 10) }

// ForgetPod drops every token of the pod and stops their timers. Call it
// when the pod leaves the desired state. Should the pod come back, a token
// its volumes still hold is reused if it is fresh.
func (m *Manager) ForgetPod(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, e := range m.tokens {
		if k.pod == uid {
			e.stop()
			delete(m.tokens, k)
		}
	}
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

// expire ends the epoch of e when its token is due: the next Version
// differs, so the volume is refreshed and Token requests a new one. A token
// of a pod that is gone is simply dropped. An entry that replaced e stays.
func (m *Manager) expire(k key, e *entry) {
	m.mu.Lock()
	current := !m.closed && m.tokens[k] == e
	if current {
		e.refresh = nil // it fired: nothing to stop (and a fake clock would deadlock)
		m.beginLocked(k)
	}
	m.mu.Unlock()
	if current {
		m.cfg.OnChange(k.pod)
	}
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

func podField(pod *v1.Pod) zap.Field { return zap.String("pod", pod.Namespace+"/"+pod.Name) }
