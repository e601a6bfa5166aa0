package apiserver

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// TestLookupsAreRetriedOnSyncAndFailure: OnChange comes after every change
// a lookup would see, not only after an object's events: a watch whose
// first list is empty, a list the API server refuses, and the same for the
// PV and PVC informers that start on first use. Each case looks up in
// OnChange, as the populator does, and needs one call that sees the answer;
// otherwise the volume would wait for a slow resync.
func TestLookupsAreRetriedOnSyncAndFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pod     *v1.Pod
		deny    string // resource whose list is refused
		denyGet bool   // and its get too
		objs    []runtime.Object
		lookup  func(*Source) error
		want    func(error) bool
	}{{
		name:   "missing configMap",
		pod:    testPod("ns", "app", "node-1", cmVolume("missing")),
		lookup: func(s *Source) error { _, err := s.Objects().ConfigMap("ns", "missing"); return err },
		want:   func(err error) bool { return errors.Is(err, volume.ErrNotFound) },
	}, {
		name:   "forbidden secret",
		pod:    testPod("ns", "app", "node-1", secretVolume("s")),
		deny:   "secrets",
		lookup: func(s *Source) error { _, err := s.Objects().Secret("ns", "s"); return err },
		want:   apierrors.IsForbidden,
	}, {
		name:   "missing persistentVolume",
		pod:    testPod("ns", "app", "node-1"),
		lookup: func(s *Source) error { _, err := s.PersistentVolume("pv"); return err },
		want:   func(err error) bool { return errors.Is(err, volume.ErrNotFound) },
	}, {
		// A node identity: the Node authorizer refuses listing claims
		// but lets the node get those of its pods.
		name:   "persistentVolumeClaim list forbidden, read by GET",
		pod:    testPod("ns", "app", "node-1"),
		deny:   "persistentvolumeclaims",
		objs:   []runtime.Object{&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim"}}},
		lookup: func(s *Source) error { _, err := s.PersistentVolumeClaim("ns", "claim"); return err },
		want:   func(err error) bool { return err == nil },
	}, {
		name:    "persistentVolume list and get forbidden",
		pod:     testPod("ns", "app", "node-1"),
		deny:    "persistentvolumes",
		denyGet: true,
		lookup:  func(s *Source) error { _, err := s.PersistentVolume("pv"); return err },
		want:    apierrors.IsForbidden,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if tc.deny != "" {
				h.denyList(tc.deny)
			}
			if tc.denyGet {
				h.deny("get", tc.deny)
			}
			for _, o := range tc.objs {
				h.create(o)
			}
			// A slow answer, as from a real API server: the first list
			// ends after the OnChange that follows the pod's event.
			h.client.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
				time.Sleep(50 * time.Millisecond)
				return false, nil, nil
			})
			var armed atomic.Bool
			var seen atomic.Pointer[error] // what the last OnChange's lookup returned
			look := func() {
				if armed.Load() {
					err := tc.lookup(h.src)
					seen.Store(&err)
				}
			}
			h.onChange.Store(&look)
			h.synced()
			h.quiet()
			// Lookups start with the pod, after start-up, so that only what
			// follows the pod can wake them (the first one also starts the
			// PV and PVC informers).
			armed.Store(true)
			h.create(tc.pod)
			h.eventually("an OnChange whose lookup sees the answer", func() (bool, string) {
				last := seen.Load()
				if last == nil {
					return false, "no OnChange since the pod was created"
				}
				return tc.want(*last), fmt.Sprint(*last)
			})
		})
	}
}

// quiet waits until OnChange has not been called for a while, so that the
// notifications of start-up are over.
func (h *harness) quiet() {
	h.t.Helper()
	for {
		before := h.changes.Load()
		time.Sleep(200 * time.Millisecond)
		if h.changes.Load() == before {
			return
		}
	}
}
