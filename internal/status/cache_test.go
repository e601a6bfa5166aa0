package status

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
)

// TestCachedPodsAnswerTheSameBytes changes both worlds at random and checks
// after every change that GET /v1/pods answers, byte for byte, what
// encoding Worlds.Pods() answers: the cache never serves a stale pod or
// a stale since.
func TestCachedPodsAnswerTheSameBytes(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 2))
	// Each change is recorded as Run's recorder would, before the next.
	var srv *Server
	record := func() { srv.Notify(); srv.recordPending() }
	worlds := Worlds{Desired: dsw.New(record), Actual: asw.New(record)}
	// A clock that moves at every reading: an answer with a stale since
	// differs from a fresh one.
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tick := func() time.Time { now = now.Add(time.Second); return now }
	srv = New(Config{Worlds: worlds, Logger: zap.NewNop(), Now: tick})
	for step := range 2000 {
		changeWorldsAtRandom(rng, worlds)
		if rng.IntN(3) > 0 {
			continue // several changes between two answers
		}
		got := httptest.NewRecorder()
		srv.Handler().ServeHTTP(got, httptest.NewRequest(http.MethodGet, "/v1/pods", nil))
		want := httptest.NewRecorder()
		writeJSON(want, http.StatusOK, map[string][]Pod{"pods": srv.cfg.Worlds.Pods()})
		if got.Body.String() != want.Body.String() || got.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("seed %d, step %d: /v1/pods answered\n%s\nwant\n%s", seed, step, got.Body, want.Body)
		}
	}
}

func changeWorldsAtRandom(rng *rand.Rand, w Worlds) {
	uid := fmt.Sprintf("p%d", rng.IntN(5))
	name := []string{"a", "b"}[rng.IntN(2)]
	version := fmt.Sprint(rng.IntN(3))
	switch rng.IntN(6) {
	case 0, 1:
		p := dsw.Pod{UID: types.UID(uid), Namespace: "ns", Name: []string{"web", "db"}[rng.IntN(2)], Volumes: []dsw.Volume{wanted(name, cm, version)}}
		if rng.IntN(3) == 0 {
			p.Volumes = append(p.Volumes, dsw.Volume{Name: "c", Problem: "items[0].path <must> be relative & clean", Kept: rng.IntN(2) == 0})
		}
		w.Desired.SetPod(p)
	case 2:
		w.Desired.DeletePod(types.UID(uid))
	case 3:
		w.Actual.Set(setUp(uid, name, cm, version, []asw.State{asw.Mounted, asw.Uncertain}[rng.IntN(2)]))
	case 4:
		w.Actual.Delete(dsw.Key{PodUID: types.UID(uid), Volume: name})
	case 5:
		w.Desired.SetError(dsw.Key{PodUID: types.UID(uid), Volume: name}, []string{"", "mount failed"}[rng.IntN(2)])
	}
}
