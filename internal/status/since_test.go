package status

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
)

// sinceFixture is a Server over worlds that notify it, with a clock the
// test moves.
type sinceFixture struct {
	srv *Server
	w   Worlds
	now time.Time
}

func newSinceFixture() *sinceFixture {
	f := &sinceFixture{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	// Each change is recorded as Run's recorder would, before the next.
	notify := func() { f.srv.Notify(); f.srv.recordPending() }
	f.w = Worlds{Desired: dsw.New(notify), Actual: asw.New(notify)}
	f.srv = New(Config{Worlds: f.w, Logger: zap.NewNop(), Now: func() time.Time { return f.now }})
	return f
}

// since returns the state and since of volume name of pod uid, as served.
func (f *sinceFixture) since(t *testing.T, uid, name string) (string, time.Time) {
	t.Helper()
	p, ok := f.srv.cfg.Worlds.Pod(uid)
	if !ok {
		t.Fatalf("pod %s not found", uid)
	}
	for _, v := range p.Volumes {
		if v.Name == name {
			return v.State, v.Since
		}
	}
	t.Fatalf("pod %s has no volume %s: %+v", uid, name, p.Volumes)
	return "", time.Time{}
}

// TestSinceIsWhenTheStateChanged: since is the time of the change that
// brought the state, even when nobody asked the API in between, and a
// volume that kept its state keeps its since.
func TestSinceIsWhenTheStateChanged(t *testing.T) {
	f := newSinceFixture()
	t0 := f.now
	f.w.Desired.SetPod(dsw.Pod{UID: "p", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{wanted("a", cm, "1"), wanted("b", ed, "1")}})

	f.now = t0.Add(time.Minute)
	t1 := f.now
	f.w.Actual.Set(setUp("p", "a", cm, "1", asw.Mounted))
	f.now = t0.Add(time.Hour) // the API is asked only now
	for _, tc := range []struct {
		volume, state string
		since         time.Time
	}{{"a", Mounted, t1}, {"b", Pending, t0}} {
		if state, since := f.since(t, "p", tc.volume); state != tc.state || !since.Equal(tc.since) {
			t.Errorf("volume %s: %s since %v, want %s since %v", tc.volume, state, since, tc.state, tc.since)
		}
	}

	t2 := f.now
	f.w.Desired.SetError(dsw.Key{PodUID: "p", Volume: "b"}, "mount failed")
	f.now = t2.Add(time.Minute)
	f.w.Desired.SetError(dsw.Key{PodUID: "p", Volume: "b"}, "mount failed again") // still Failed
	if state, since := f.since(t, "p", "b"); state != Failed || !since.Equal(t2) {
		t.Errorf("volume b: %s since %v, want Failed since %v", state, since, t2)
	}
}

// TestSinceIsWholeSecondsUTC: the API serves since in UTC to the second.
func TestSinceIsWholeSecondsUTC(t *testing.T) {
	f := newSinceFixture()
	f.now = time.Date(2026, 3, 4, 5, 6, 7, 890_000_000, time.FixedZone("CET", 3600))
	f.w.Desired.SetPod(dsw.Pod{UID: "p", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{wanted("a", cm, "1")}})
	want := time.Date(2026, 3, 4, 4, 6, 7, 0, time.UTC)
	if _, since := f.since(t, "p", "a"); since != want {
		t.Errorf("since = %v, want %v", since, want)
	}
}

// TestSinceForgetsWhatWent: the records of a deleted pod, and of a volume
// the pod no longer has, are dropped; a volume that comes back starts
// again.
func TestSinceForgetsWhatWent(t *testing.T) {
	f := newSinceFixture()
	t0 := f.now
	f.w.Desired.SetPod(dsw.Pod{UID: "p", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{wanted("a", cm, "1"), wanted("b", ed, "1")}})
	f.w.Desired.SetPod(dsw.Pod{UID: "q", Namespace: "ns", Name: "db", Volumes: []dsw.Volume{wanted("a", cm, "1")}})
	f.now = t0.Add(time.Minute)
	f.w.Desired.SetPod(dsw.Pod{UID: "p", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{wanted("a", cm, "1")}})
	f.w.Desired.DeletePod("q")
	clock := f.srv.cfg.Worlds.clock
	clock.mu.Lock()
	pods := len(clock.pods)
	_, keptB := clock.pods["p"]["b"]
	clock.mu.Unlock()
	if pods != 1 || keptB {
		t.Fatalf("records after deletes: %d pods (want 1), volume b kept: %v", pods, keptB)
	}
	f.w.Desired.SetPod(dsw.Pod{UID: "p", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{wanted("a", cm, "1"), wanted("b", ed, "1")}})
	if _, since := f.since(t, "p", "b"); !since.Equal(f.now) {
		t.Errorf("volume b back: since %v, want %v", since, f.now)
	}
	if _, since := f.since(t, "p", "a"); !since.Equal(t0) {
		t.Errorf("volume a: since %v, want %v (unchanged)", since, t0)
	}
}

// TestRunRecordsStatesWithoutReaders: with the server running, a change is
// recorded by its recorder goroutine, with nobody asking the API.
func TestRunRecordsStatesWithoutReaders(t *testing.T) {
	var srv *Server
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := Worlds{Desired: dsw.New(func() { srv.Notify() }), Actual: asw.New(func() { srv.Notify() })}
	srv = New(Config{Addr: "127.0.0.1:0", Worlds: w, Logger: zap.NewNop(), Now: func() time.Time { return now }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	w.Desired.SetPod(dsw.Pod{UID: "p", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{wanted("a", cm, "1")}})
	clock := srv.cfg.Worlds.clock
	deadline := time.Now().Add(5 * time.Second)
	for {
		clock.mu.Lock()
		s, ok := clock.pods["p"]["a"]
		clock.mu.Unlock()
		if ok {
			if s.state != Pending || !s.at.Equal(now) {
				t.Errorf("recorded %+v, want Pending at %v", s, now)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the change was never recorded")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
