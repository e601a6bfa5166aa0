package tokens

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness runs a Manager against a fake clientset whose TokenRequest API
// answers like the API server: a fresh token valid for the requested time.
type harness struct {
	t       *testing.T
	m       *Manager
	clock   *clocktesting.FakeClock
	logs    *observer.ObservedLogs
	changes atomic.Int32
	changed atomic.Value // the UID of the last OnChange call

	mu       sync.Mutex
	requests []tokenRequest // guarded by mu
	fail     error          // guarded by mu; returned instead of a token when set
	skew     time.Duration  // guarded by mu; how far the API server's clock is behind ours
}

// tokenRequest is one call of the TokenRequest API.
type tokenRequest struct {
	namespace, account string
	spec               authenticationv1.TokenRequestSpec
	token              string
}

func newHarness(t *testing.T) *harness {
	core, logs := observer.New(zapcore.DebugLevel)
	h := &harness{t: t, clock: clocktesting.NewFakeClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)), logs: logs}
	client := fake.NewClientset()
	client.PrependReactor("create", "serviceaccounts", h.createToken)
	h.m = New(Config{Client: client, Logger: zap.New(core), OnChange: func(uid types.UID) {
		h.changed.Store(uid)
		h.changes.Add(1)
	}, Clock: h.clock,
		Jitter: func() float64 { return 0 }})
	return h
}

func (h *harness) createToken(action k8stesting.Action) (bool, runtime.Object, error) {
	if action.GetSubresource() != "token" {
		return false, nil, nil
	}
	create := action.(k8stesting.CreateActionImpl)
	req := create.GetObject().(*authenticationv1.TokenRequest)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fail != nil {
		return true, nil, h.fail
	}
	r := tokenRequest{namespace: create.GetNamespace(), account: create.Name, spec: *req.Spec.DeepCopy(),
		token: fmt.Sprintf("TOKEN-%d-%s", len(h.requests)+1, create.Name)}
	h.requests = append(h.requests, r)
	issued := h.clock.Now().Add(-h.skew)
	out := req.DeepCopy()
	out.Status = authenticationv1.TokenRequestStatus{
		Token:               r.token,
		ExpirationTimestamp: metav1.NewTime(issued.Add(time.Duration(*req.Spec.ExpirationSeconds) * time.Second)),
	}
	return true, out, nil
}

// calls returns the TokenRequest calls made so far.
func (h *harness) calls() []tokenRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]tokenRequest(nil), h.requests...)
}

// token calls Token with no token in the volume and fails the test on an
// error.
func (h *harness) token(pod *v1.Pod, src *v1.ServiceAccountTokenProjection) string {
	h.t.Helper()
	return h.tokenWith(pod, src, nil)
}

// tokenWith calls Token with current as the token in the volume.
func (h *harness) tokenWith(pod *v1.Pod, src *v1.ServiceAccountTokenProjection, current []byte) string {
	h.t.Helper()
	tok, err := h.m.Token(context.Background(), pod, src, current)
	if err != nil {
		h.t.Fatalf("Token: %v", err)
	}
	return string(tok)
}

func testPod(name, uid, account string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)},
		Spec:       v1.PodSpec{ServiceAccountName: account},
	}
}

func TestTokenRequestIsBoundToThePod(t *testing.T) {
	for _, tc := range []struct {
		name        string
		account     string
		src         v1.ServiceAccountTokenProjection
		wantAccount string
		wantAud     []string
		wantExp     int64
	}{
		{"defaults", "", v1.ServiceAccountTokenProjection{Path: "token"}, "default", nil, 3600},
		{"account, audience and expiration", "builder", v1.ServiceAccountTokenProjection{Audience: "vault", ExpirationSeconds: ptr.To[int64](600)},
			"builder", []string{"vault"}, 600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			pod := testPod("app", "uid-1", tc.account)
			if got := h.token(pod, &tc.src); got != "TOKEN-1-"+tc.wantAccount {
				t.Errorf("Token = %q, want the minted TOKEN-1-%s", got, tc.wantAccount)
			}
			calls := h.calls()
			if len(calls) != 1 {
				t.Fatalf("%d token requests, want 1", len(calls))
			}
			got := calls[0]
			if got.namespace != "ns" || got.account != tc.wantAccount {
				t.Errorf("token requested for %s/%s, want ns/%s", got.namespace, got.account, tc.wantAccount)
			}
			wantRef := authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "app", UID: "uid-1"}
			if got.spec.BoundObjectRef == nil || *got.spec.BoundObjectRef != wantRef {
				t.Errorf("BoundObjectRef = %+v, want %+v", got.spec.BoundObjectRef, wantRef)
			}
			if !reflect.DeepEqual(got.spec.Audiences, tc.wantAud) {
				t.Errorf("Audiences = %#v, want %#v", got.spec.Audiences, tc.wantAud)
			}
			if got.spec.ExpirationSeconds == nil || *got.spec.ExpirationSeconds != tc.wantExp {
				t.Errorf("ExpirationSeconds = %v, want %d", ptr.Deref(got.spec.ExpirationSeconds, -1), tc.wantExp)
			}
		})
	}
}

func TestTokenIsCached(t *testing.T) {
	h := newHarness(t)
	pod, src := testPod("app", "uid-1", ""), &v1.ServiceAccountTokenProjection{}
	first := h.token(pod, src)
	if second := h.token(pod, src); second != first {
		t.Errorf("second Token = %q, want the cached %q", second, first)
	}
	if n := len(h.calls()); n != 1 {
		t.Errorf("%d token requests for two Token calls, want 1", n)
	}
	if h.changes.Load() != 0 {
		t.Errorf("OnChange called %d times after minting and a cached Token, want never: Version did not change", h.changes.Load())
	}
}

// TestMintingLeavesTheVersion: the token a set-up mints belongs to the
// Version the set-up was planned at, so no refresh follows the set-up. The
// Version changes when the token is due, and the token minted then belongs
// to the new Version.
func TestMintingLeavesTheVersion(t *testing.T) {
	h := newHarness(t)
	pod, src := testPod("app", "uid-1", ""), &v1.ServiceAccountTokenProjection{}
	planned := h.m.Version(pod, src)
	if v := h.m.Version(pod, src); v != planned {
		t.Fatalf("Version before any token changed from %q to %q between two calls", planned, v)
	}
	first := h.token(pod, src)
	if v := h.m.Version(pod, src); v != planned {
		t.Fatalf("Version after the set-up's minting = %q, want %q, the Version it was planned at (a refresh would follow)", v, planned)
	}
	h.token(pod, src)
	if v := h.m.Version(pod, src); v != planned {
		t.Errorf("Version changed from %q to %q without a new token", planned, v)
	}
	h.clock.Step(48 * time.Minute)
	due := h.m.Version(pod, src)
	if due == planned || h.changes.Load() != 1 {
		t.Fatalf("Version at the refresh point = %q after %d OnChange calls, want a new one (not %q) after one", due, h.changes.Load(), planned)
	}
	if got := h.token(pod, src); got == first || len(h.calls()) != 2 {
		t.Fatalf("Token at the refresh point = %q after %d requests, want a new token from a second request", got, len(h.calls()))
	}
	if v := h.m.Version(pod, src); v != due {
		t.Errorf("Version after the refresh's minting = %q, want %q, the Version the refresh was planned at", v, due)
	}
}

// TestForgottenPodGetsANewVersion: a pod forgotten and listed again gets a
// Version its volumes were not set up at, so that they are refreshed and
// their tokens found, cached and timed for refresh again.
func TestForgottenPodGetsANewVersion(t *testing.T) {
	h := newHarness(t)
	pod, src := testPod("app", "uid-1", ""), &v1.ServiceAccountTokenProjection{}
	before := h.m.Version(pod, src)
	h.token(pod, src)
	h.m.ForgetPod(pod.UID)
	if v := h.m.Version(pod, src); v == before {
		t.Errorf("Version after ForgetPod = %q, the Version the volume was set up at: the volume would not be refreshed", v)
	}
}

// TestOneTokenPerVersion: two set-ups that ask at once in one epoch (two
// volumes of a pod with the same token source) both get the token stored
// first, so that the volumes of one Version hold one token; a token that
// arrives after its pod was forgotten is written but not cached.
func TestOneTokenPerVersion(t *testing.T) {
	h := newHarness(t)
	pod, src := testPod("app", "uid-1", ""), &v1.ServiceAccountTokenProjection{}
	k := keyFor(pod, src)
	h.m.mu.Lock()
	e, _ := h.m.currentLocked(k)
	h.m.mu.Unlock()
	now := h.clock.Now()
	if got := h.m.fill(k, e, []byte("first"), now, now.Add(time.Hour)); string(got) != "first" {
		t.Fatalf("fill = %q, want first", got)
	}
	if got := h.m.fill(k, e, []byte("second"), now, now.Add(time.Hour)); string(got) != "first" {
		t.Errorf("second fill of one epoch = %q, want the epoch's token, first", got)
	}
	if got := h.token(pod, src); got != "first" {
		t.Errorf("Token = %q, want first", got)
	}
	h.m.ForgetPod(pod.UID)
	if got := h.m.fill(k, e, []byte("late"), now, now.Add(time.Hour)); string(got) != "late" {
		t.Errorf("fill after ForgetPod = %q, want late", got)
	}
	h.m.mu.Lock()
	_, cached := h.m.tokens[k]
	h.m.mu.Unlock()
	if cached {
		t.Error("a token that arrived after its pod was forgotten is cached")
	}
}

// TestRefresh checks when a token is replaced: at 80% of its lifetime,
// but after at most 24 hours.
func TestRefresh(t *testing.T) {
	for _, tc := range []struct {
		name    string
		exp     int64
		refresh time.Duration
	}{
		{"default hour", 0, 48 * time.Minute},
		{"ten minutes", 600, 480 * time.Second},
		{"a week, capped at a day", 7 * 24 * 3600, 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			pod, src := testPod("app", "uid-1", ""), &v1.ServiceAccountTokenProjection{}
			if tc.exp != 0 {
				src.ExpirationSeconds = &tc.exp
			}
			first := h.token(pod, src)
			version := h.m.Version(pod, src)
			changes := h.changes.Load()

			h.clock.Step(tc.refresh - time.Second)
			if h.changes.Load() != changes || h.m.Version(pod, src) != version {
				t.Fatalf("token refreshed %v before 80%% of its lifetime (or 24h)", time.Second)
			}
			if got := h.token(pod, src); got != first {
				t.Fatalf("Token before the refresh = %q, want the cached %q", got, first)
			}

			h.clock.Step(time.Second)
			if h.changes.Load() != changes+1 {
				t.Fatalf("OnChange called %d times at the refresh time, want once", h.changes.Load()-changes)
			}
			if h.m.Version(pod, src) == version {
				t.Fatal("Version unchanged at the refresh time")
			}
			if got := h.token(pod, src); got == first {
				t.Fatalf("Token after the refresh = %q, the old token", got)
			}
			if n := len(h.calls()); n != 2 {
				t.Errorf("%d token requests, want 2", n)
			}
		})
	}
}

// TestRefreshIgnoresClockSkew: the lifetime is measured on the API server's
// answer, not against our clock, so a node whose clock runs ahead of the
// API server's does not see fresh tokens as expired and mint new ones in a
// loop.
func TestRefreshIgnoresClockSkew(t *testing.T) {
	h := newHarness(t)
	h.mu.Lock()
	h.skew = 15 * time.Minute // the API server is 15 minutes behind
	h.mu.Unlock()
	pod, src := testPod("app", "uid-1", ""), &v1.ServiceAccountTokenProjection{ExpirationSeconds: ptr.To[int64](600)}
	h.token(pod, src)
	changes := h.changes.Load()
	h.clock.Step(time.Second)
	if h.changes.Load() != changes {
		t.Fatal("a ten-minute token refreshed after a second because the node's clock is ahead")
	}
	h.clock.Step(480*time.Second - time.Second)
	if h.changes.Load() != changes+1 {
		t.Errorf("OnChange called %d times at 80%% of the lifetime, want once", h.changes.Load()-changes)
	}
}

func TestRequestError(t *testing.T) {
	h := newHarness(t)
	denied := errors.New("serviceaccounts \"builder\" is forbidden")
	h.mu.Lock()
	h.fail = denied
	h.mu.Unlock()
	pod, src := testPod("app", "uid-1", "builder"), &v1.ServiceAccountTokenProjection{}
	planned := h.m.Version(pod, src)
	tok, err := h.m.Token(context.Background(), pod, src, nil)
	if err == nil || tok != nil {
		t.Fatalf("Token = %q, %v; want no token and an error", tok, err)
	}
	if !errors.Is(err, denied) || !strings.Contains(err.Error(), "service account ns/builder") {
		t.Errorf("error %q does not wrap the API error or name the service account", err)
	}
	if v := h.m.Version(pod, src); v != planned {
		t.Errorf("Version after a failed request = %q, want %q as before: the set-up is retried, not refreshed", v, planned)
	}
	h.mu.Lock()
	h.fail = nil
	h.mu.Unlock()
	if got := h.token(pod, src); got == "" {
		t.Error("no token once the API server answers again")
	}
}

func TestDistinctTokens(t *testing.T) {
	h := newHarness(t)
	base := v1.ServiceAccountTokenProjection{Audience: "vault", ExpirationSeconds: ptr.To[int64](600)}
	pod := testPod("app", "uid-1", "")
	other := base
	other.Audience = "other"
	shorter := base
	shorter.ExpirationSeconds = ptr.To[int64](601)
	seen := map[string]string{}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		src  v1.ServiceAccountTokenProjection
	}{
		{"base", pod, base},
		{"other audience", pod, other},
		{"other expiration", pod, shorter},
		{"other pod", testPod("app2", "uid-2", ""), base},
		{"same name, new pod UID", testPod("app", "uid-3", ""), base},
		{"other service account", testPod("app", "uid-1", "builder"), base},
	} {
		got := h.token(tc.pod, &tc.src)
		if prev, ok := seen[got]; ok {
			t.Errorf("%s got the token of %s", tc.name, prev)
		}
		seen[got] = tc.name
	}
	if n := len(h.calls()); n != 6 {
		t.Errorf("%d token requests for 6 distinct tokens, want 6", n)
	}
	if got := h.token(pod, &base); seen[got] != "base" {
		t.Errorf("base again got the token of %q, want the cached base token", seen[got])
	}
}

func TestRunStopsTimers(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.m.Run(ctx) }()
	src := &v1.ServiceAccountTokenProjection{}
	for i := range 3 {
		h.token(testPod(fmt.Sprint("app", i), fmt.Sprint("uid-", i), ""), src)
	}
	kept := testPod("app0", "uid-0", "")
	version, token := h.m.Version(kept, src), h.token(kept, src)
	if !h.clock.HasWaiters() {
		t.Fatal("no refresh timers after minting tokens")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if h.clock.HasWaiters() {
		t.Error("refresh timers still set after Run returned")
	}
	// While the agent stops, nothing is refreshed: Version stays.
	if v, got := h.m.Version(kept, src), h.token(kept, src); v != version || got != token || len(h.calls()) != 3 {
		t.Errorf("after Run returned: Version %q, token %q after %d requests; want %q, the cached %q, 3", v, got, len(h.calls()), version, token)
	}
	changes := h.changes.Load()
	h.clock.Step(25 * time.Hour)
	if v := h.m.Version(kept, src); h.changes.Load() != changes || v != version {
		t.Errorf("after Run returned, past the refresh point: %d OnChange calls, Version %q; want none, %q", h.changes.Load()-changes, v, version)
	}
	if got := h.token(kept, src); got == token {
		t.Error("after Run returned, past the refresh point, Token returned the due token")
	}
	// A token minted during shutdown is returned but not cached: no timer.
	h.token(testPod("late", "uid-late", ""), &v1.ServiceAccountTokenProjection{})
	if h.clock.HasWaiters() {
		t.Error("a token minted after Run returned set a refresh timer")
	}
}

func TestTokensNeverLogged(t *testing.T) {
	h := newHarness(t)
	pod := testPod("app", "uid-1", "")
	for _, aud := range []string{"", "vault"} {
		h.token(pod, &v1.ServiceAccountTokenProjection{Audience: aud})
	}
	h.clock.Step(time.Hour)
	h.token(pod, &v1.ServiceAccountTokenProjection{})
	if h.logs.FilterMessage("token issued").Len() != 3 {
		t.Fatalf("%d \"token issued\" logs, want 3 (the test must see the logs it checks)", h.logs.FilterMessage("token issued").Len())
	}
	for _, e := range h.logs.All() {
		line := e.Message + " " + fmt.Sprint(e.ContextMap())
		if strings.Contains(line, "TOKEN-") {
			t.Errorf("token in log: %s", line)
		}
	}
}
