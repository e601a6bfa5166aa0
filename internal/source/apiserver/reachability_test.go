package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/watchlist"
)

// tlsHandshakeTimeout is what a list gets from a hung API server: net/http's
// handshake time-out, a net.Error whose Timeout() is true.
type tlsHandshakeTimeout struct{}

func (tlsHandshakeTimeout) Error() string   { return "net/http: TLS handshake timeout" }
func (tlsHandshakeTimeout) Timeout() bool   { return true }
func (tlsHandshakeTimeout) Temporary() bool { return true }

func getError(err error) error {
	return &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/api/v1/pods", Err: err}
}

func TestReachabilityObserve(t *testing.T) {
	live := context.Background()
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name      string
		ctx       context.Context
		err       error
		reachable bool
	}{
		{"answer", live, nil, true},
		{"forbidden", live, apierrors.NewForbidden(gr, "", errors.New("RBAC")), true},
		{"unauthorized", live, apierrors.NewUnauthorized("token expired"), true},
		{"resource expired", live, apierrors.NewResourceExpired("too old"), true},
		{"too many requests", live, apierrors.NewTooManyRequests("slow down", 1), true},
		{"not found", live, apierrors.NewNotFound(gr, ""), true},
		{"internal error", live, apierrors.NewInternalError(errors.New("etcd")), false},
		{"service unavailable", live, apierrors.NewServiceUnavailable("etcd is down"), false},
		{"gateway time-out", live, apierrors.NewTimeoutError("request timed out", 1), false},
		{"connection refused", live, getError(syscall.ECONNREFUSED), false},
		{"TLS handshake time-out", live, getError(tlsHandshakeTimeout{}), false},
		{"HTTP/2 connection lost", live, getError(errors.New("http2: client connection lost")), false},
		{"deadline of the call", live, getError(context.DeadlineExceeded), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &reachability{}
			r.observe(tc.ctx, tc.err)
			if got := r.current() == nil; got != tc.reachable {
				t.Errorf("after %v: reachable = %v, want %v", tc.err, got, tc.reachable)
			}
			if !tc.reachable && !errors.Is(r.current(), tc.err) {
				t.Errorf("current() = %v, want the call's error %v", r.current(), tc.err)
			}
			r.observe(stopped, tc.err)
			r.observe(stopped, getError(context.Canceled))
			if got := r.current() == nil; got != tc.reachable {
				t.Errorf("calls of a stopping informer changed reachable to %v", got)
			}
			r.observe(live, nil)
			if err := r.current(); err != nil {
				t.Errorf("after an answer: %v, want reachable", err)
			}
		})
	}
	var r *reachability
	r.observe(live, errors.New("x"))
	if err := r.current(); err != nil {
		t.Errorf("nil reachability = %v", err)
	}
}

// TestUnreachableFromPodAndNodeWatchesOnly: the calls of the pod and Node
// informers decide whether the API server is reachable, in both
// directions; failing calls of per-object watches and of the lazily started
// informers do not.
func TestUnreachableFromPodAndNodeWatchesOnly(t *testing.T) {
	h := newHarness(t, testPod("ns", "app", "node-1", cmVolume("cm")))
	var podsDown, nodeDown atomic.Bool
	refused := getError(syscall.ECONNREFUSED)
	h.client.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch r := a.GetResource().Resource; {
		case r == "pods" && podsDown.Load(), r == "nodes" && nodeDown.Load():
			return true, nil, refused
		case r == "configmaps", r == "persistentvolumes":
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		return false, nil, nil
	})
	h.client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if r := a.GetResource().Resource; r == "pods" && podsDown.Load() || r == "nodes" && nodeDown.Load() {
			return true, nil, refused
		}
		return false, nil, nil
	})
	h.synced()
	_, _ = h.src.PersistentVolume("pv") // starts the PV informer, whose list fails
	h.eventually("configMap and PV lists failed", func() (bool, string) {
		errs := strings.Join(h.src.Status().Errors, "\n")
		return strings.Contains(errs, "configmaps ns/cm") && strings.Contains(errs, "persistentVolumes"), errs
	})
	if st := h.src.Status(); st.Disconnected != "" {
		t.Errorf("Status with failing per-object and PV watches = %+v, want connected", st)
	}

	for _, down := range []*atomic.Bool{&podsDown, &nodeDown} {
		down.Store(true)
		h.stopWatches() // the connection breaks: the informer watches again
		h.eventually("unreachable", func() (bool, string) {
			st := h.src.Status()
			return st.Synced && st.Disconnected == "API server unreachable: "+refused.Error(), fmt.Sprintf("%+v", st)
		})
		down.Store(false)
		// The informer retries with the reflector's backoff (0.8 s doubling,
		// jittered): the next call may take a few seconds.
		h.eventuallyWithin(15*time.Second, "reachable again", func() (bool, string) {
			st := h.src.Status()
			return st.Synced && st.Disconnected == "", fmt.Sprintf("%+v", st)
		})
	}
}

// stopWatches ends every open watch, as a broken connection does.
func (h *harness) stopWatches() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.watches {
		if !w.stopped.Load() {
			w.Interface.Stop()
		}
	}
}

// TestPodAndNodeInformersListPlainly: the informers whose calls judge
// reachability list with LIST requests, whose time-outs fail the call,
// while the others may use watch-list streams.
func TestPodAndNodeInformersListPlainly(t *testing.T) {
	real, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	sel := fields.Everything()
	if watchlist.DoesClientNotSupportWatchListSemantics(listWatch[*v1.PodList](real, real.CoreV1().Pods(""), sel)) {
		t.Error("a real clientset's list-watch refuses watch-list streams")
	}
	if !watchlist.DoesClientNotSupportWatchListSemantics(listWatch[*v1.PodList](plainLists{real}, real.CoreV1().Pods(""), sel)) {
		t.Error("plainLists does not refuse watch-list streams")
	}
}
