package status

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
)

// BenchmarkPodsAfterEvent measures the answers of the status API after one
// change (a content version of one pod moves on and is written) on a node of
// 110 and 1,000 ready pods with four volumes each: GET /v1/pods, and GET
// /v1/pods/{uid}?wait= of a ready pod, which answers at once.
func BenchmarkPodsAfterEvent(b *testing.B) {
	for _, pods := range []int{110, 1000} {
		for _, path := range []string{"/v1/pods", "/v1/pods/pod-7?wait=5s"} {
			b.Run(fmt.Sprintf("pods=%d/get=%s", pods, path), func(b *testing.B) {
				worlds, desired := benchWorlds(pods, 4)
				srv := New(Config{Worlds: worlds, Logger: zap.NewNop()})
				h := srv.Handler()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					benchChange(worlds, desired, i%pods, fmt.Sprint(i+2))
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
					if rec.Code != http.StatusOK {
						b.Fatalf("GET %s = %d: %s", path, rec.Code, rec.Body)
					}
					i++
				}
			})
		}
	}
}

// benchWorlds returns worlds with n pods of vols mounted volumes each, and
// the desired pods.
func benchWorlds(n, vols int) (Worlds, []dsw.Pod) {
	w := Worlds{Desired: dsw.New(nil), Actual: asw.New(nil)}
	var pods []dsw.Pod
	for i := range n {
		uid := fmt.Sprintf("pod-%d", i)
		p := dsw.Pod{UID: types.UID(uid), Namespace: "ns", Name: uid}
		for j := range vols {
			name := fmt.Sprintf("v%d", j)
			p.Volumes = append(p.Volumes, wanted(name, cm, "1"))
			w.Actual.Set(setUp(uid, name, cm, "1", asw.Mounted))
		}
		w.Desired.SetPod(p)
		pods = append(pods, p)
	}
	return w, pods
}

// benchChange moves the content version of pod i's first volume to version
// and records it as written.
func benchChange(w Worlds, pods []dsw.Pod, i int, version string) {
	p := pods[i]
	p.Volumes = slices.Clone(p.Volumes)
	p.Volumes[0].Version = version
	w.Desired.SetPod(p)
	w.Actual.Set(setUp(string(p.UID), p.Volumes[0].Name, cm, version, asw.Mounted))
}

// BenchmarkWakeNotReady measures what a waiting request does at a change
// of its pod that leaves it not ready (three of four volumes mounted):
// check=ready is the fast check it makes now (check=ready-reused: in the
// buffers of its poll, as from its second look on), check=status the
// status it computed before.
func BenchmarkWakeNotReady(b *testing.B) {
	worlds, _ := benchWorlds(110, 4)
	worlds.Actual.Set(setUp("pod-7", "v3", cm, "1", asw.Uncertain))
	srv := New(Config{Worlds: worlds, Logger: zap.NewNop()})
	b.Run("check=ready", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if srv.cfg.Worlds.Ready("pod-7") {
				b.Fatal("ready")
			}
		}
	})
	b.Run("check=ready-reused", func(b *testing.B) { // as a waiting request looks again: its poll's buffers
		var r readiness
		b.ReportAllocs()
		for b.Loop() {
			if r.ready(srv.cfg.Worlds, "pod-7") {
				b.Fatal("ready")
			}
		}
	})
	b.Run("check=status", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if p, _ := srv.cfg.Worlds.Pod("pod-7"); p.Ready {
				b.Fatal("ready")
			}
		}
	})
}
