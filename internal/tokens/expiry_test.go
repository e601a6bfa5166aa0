package tokens

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// suspendedClock is a fake clock whose wall time can jump ahead without
// its timers firing, as after a suspend: timers run on the monotonic clock,
// which stops while the machine sleeps.
type suspendedClock struct {
	*clocktesting.FakeClock

	mu    sync.Mutex
	slept time.Duration // guarded by mu
}

func (c *suspendedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.FakeClock.Now().Add(c.slept)
}

func (c *suspendedClock) sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept += d
}

func TestWallClockExpiryWithoutTimer(t *testing.T) {
	h := newHarness(t)
	suspended := &suspendedClock{FakeClock: h.clock}
	h.m.cfg.Clock = suspended
	pod, src := testPod("app", "uid-1", ""), &v1.ServiceAccountTokenProjection{}
	first := h.token(pod, src)
	version := h.m.Version(pod, src)
	changes := h.changes.Load()

	suspended.sleep(47 * time.Minute)
	if v := h.m.Version(pod, src); v != version {
		t.Fatalf("Version changed to %q before the refresh point", v)
	}
	suspended.sleep(time.Minute) // 48 minutes: 80% of the hour
	if h.changes.Load() != changes {
		t.Fatal("the test's clock fired the refresh timer; it must not")
	}
	due := h.m.Version(pod, src)
	if due == version {
		t.Fatalf("Version past the refresh point by the wall clock = %q, want a new one", due)
	}
	if h.changes.Load() != changes+1 {
		t.Errorf("OnChange called %d times when Version found the token due, want once", h.changes.Load()-changes)
	}
	second := h.token(pod, src)
	if second == first || len(h.calls()) != 2 {
		t.Fatalf("Token past the refresh point by the wall clock = %q after %d requests, want a new token", second, len(h.calls()))
	}
	if v := h.m.Version(pod, src); v != due {
		t.Errorf("Version after the new token = %q, want %q, the Version its refresh was planned at", v, due)
	}
}

// TestTokenPastTheRefreshPointChangesVersion: a Token call that finds the
// cached token due before any Version did (a set-up planned before the
// refresh point) mints a new one and changes the Version, so that the
// other volumes holding the old token are refreshed too.
func TestTokenPastTheRefreshPointChangesVersion(t *testing.T) {
	h := newHarness(t)
	suspended := &suspendedClock{FakeClock: h.clock}
	h.m.cfg.Clock = suspended
	pod, src := testPod("app", "uid-1", ""), &v1.ServiceAccountTokenProjection{}
	first := h.token(pod, src)
	version := h.m.Version(pod, src)
	suspended.sleep(48 * time.Minute)
	if second := h.token(pod, src); second == first {
		t.Fatal("Token past the refresh point returned the old token")
	}
	if h.changes.Load() != 1 {
		t.Errorf("OnChange called %d times, want once", h.changes.Load())
	}
	if v := h.m.Version(pod, src); v == version {
		t.Errorf("Version = %q after the token was replaced, as before: other volumes would keep the old token", v)
	}
}

// TestDueTimesUseTheWallClock: the real clock's times carry a monotonic
// reading, which time.Time comparisons would use; the due times must not.
func TestDueTimesUseTheWallClock(t *testing.T) {
	h := newHarness(t)
	h.m.cfg.Clock = clock.RealClock{}
	pod, src := testPod("app", "uid-1", ""), &v1.ServiceAccountTokenProjection{}
	h.token(pod, src)
	defer h.m.ForgetPod(pod.UID) // stops the real timer
	h.m.mu.Lock()
	e := h.m.tokens[keyFor(pod, src)]
	h.m.mu.Unlock()
	if s := e.due.String(); strings.Contains(s, "m=") {
		t.Errorf("due time %s has a monotonic reading", s)
	}
}

func TestRefreshDelay(t *testing.T) {
	for _, tc := range []struct {
		lifetime time.Duration
		latest   time.Duration // the refresh point without jitter
	}{
		{600 * time.Second, 480 * time.Second},
		{3607 * time.Second, 2885600 * time.Millisecond},
		{48 * time.Hour, 24 * time.Hour},
		{365 * 24 * time.Hour, 24 * time.Hour},
	} {
		if got := refreshDelay(tc.lifetime, 0); got != tc.latest {
			t.Errorf("refreshDelay(%v, no jitter) = %v, want %v", tc.lifetime, got, tc.latest)
		}
		earliest := tc.latest * 9 / 10
		if got := refreshDelay(tc.lifetime, 0.99999); got < earliest || got >= tc.latest {
			t.Errorf("refreshDelay(%v, most jitter) = %v, want in [%v, %v)", tc.lifetime, got, earliest, tc.latest)
		}
	}
}

// TestJitter: with the default jitter, tokens minted at one time are due
// at different times, each between 90% and 100% of the refresh point.
func TestJitter(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	m := New(Config{Client: fake.NewClientset(), Logger: zap.NewNop(), Clock: clk})
	src := &v1.ServiceAccountTokenProjection{ExpirationSeconds: ptr.To[int64](600)}
	dues := map[time.Time]bool{}
	for i := range 50 {
		now := clk.Now()
		k := keyFor(testPod("app", string(rune('a'+i)), ""), src)
		m.mu.Lock()
		e := m.beginLocked(k)
		m.mu.Unlock()
		m.fill(k, e, []byte("t"), now, m.dueTime(now, 600*time.Second))
		due := e.due
		if d := due.Sub(now); d < 432*time.Second || d > 480*time.Second {
			t.Fatalf("refresh %v after issue, want between 432s (90%% of 480s) and 480s", d)
		}
		dues[due] = true
	}
	if len(dues) < 10 {
		t.Errorf("50 tokens minted at once are due at only %d distinct times", len(dues))
	}
}

func TestForgetPod(t *testing.T) {
	h := newHarness(t)
	gone, kept := testPod("gone", "uid-gone", ""), testPod("kept", "uid-kept", "")
	vault := &v1.ServiceAccountTokenProjection{Audience: "vault"}
	api := &v1.ServiceAccountTokenProjection{}
	h.token(gone, vault)
	h.token(gone, api)
	h.token(kept, api)
	changes := h.changes.Load()
	goneVersions := []string{h.m.Version(gone, vault), h.m.Version(gone, api)}
	keptVersion := h.m.Version(kept, api)

	h.m.ForgetPod(gone.UID)
	for i, src := range []*v1.ServiceAccountTokenProjection{vault, api} {
		if v := h.m.Version(gone, src); v == goneVersions[i] {
			t.Errorf("Version of a forgotten pod's token = %q, as before", v)
		}
	}
	if v := h.m.Version(kept, api); v != keptVersion {
		t.Error("ForgetPod changed another pod's Version")
	}
	if n := len(h.calls()); n != 3 || h.token(kept, api) != "TOKEN-3-default" {
		t.Error("ForgetPod dropped another pod's token")
	}
	h.clock.Step(48 * time.Minute)
	if got := h.changes.Load() - changes; got != 1 {
		t.Errorf("OnChange called %d times at the refresh point, want once (the forgotten pod's timers are stopped)", got)
	}
	if got := h.changed.Load(); got != kept.UID {
		t.Errorf("OnChange named pod %v at the refresh point, want %s, whose token is due", got, kept.UID)
	}
	if _, err := h.m.Token(context.Background(), kept, api, nil); err != nil || len(h.calls()) != 4 {
		t.Errorf("the kept pod's token was not refreshed: %v, %d requests", err, len(h.calls()))
	}
}
