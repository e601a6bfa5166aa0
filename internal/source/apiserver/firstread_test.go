package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// failGet makes every GET of resource fail with err; of the named objects
// only, when names are given.
func (h *harness) failGet(resource string, err error, names ...string) {
	h.client.PrependReactor("get", resource, func(action k8stesting.Action) (bool, runtime.Object, error) {
		if len(names) > 0 && !slices.Contains(names, action.(k8stesting.GetAction).GetName()) {
			return false, nil, nil
		}
		return true, nil, err
	})
}

// holdConfigMapLists makes every list of ConfigMaps wait until the
// returned function is called, as a first list waits for the API server's
// watch cache. (Secrets go through the same code.)
func (h *harness) holdConfigMapLists() (release func()) { return h.held.hold("list configmaps") }

// holdConfigMapGets is holdConfigMapLists for GETs.
func (h *harness) holdConfigMapGets() (release func()) { return h.held.hold("get configmaps") }

// gates holds calls of the source's client until released. A fake's
// reactor runs under the fake's lock, so a reactor that waited would stall
// every call, Actions() included; gates wait outside it.
type gates struct {
	mu      sync.Mutex
	closed  map[string]chan struct{} // "verb resource" → held until closed; guarded by mu
	arrived map[string]int           // calls that came to a gate; guarded by mu
}

func (g *gates) hold(call string) (release func()) {
	ch := make(chan struct{})
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		g.closed, g.arrived = map[string]chan struct{}{}, map[string]int{}
	}
	g.closed[call] = ch
	return func() { close(ch) }
}

// calls returns how many calls came to the gate of call.
func (g *gates) calls(call string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.arrived[call]
}

func (g *gates) wait(ctx context.Context, call string) {
	g.mu.Lock()
	ch := g.closed[call]
	if ch != nil {
		g.arrived[call]++
	}
	g.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

// gatedClient is the fake clientset with ConfigMap lists and GETs going
// through gates.
type gatedClient struct {
	*fake.Clientset
	gates *gates
}

func (c gatedClient) CoreV1() corev1client.CoreV1Interface {
	return gatedCore{c.Clientset.CoreV1(), c.gates}
}

type gatedCore struct {
	corev1client.CoreV1Interface
	gates *gates
}

func (c gatedCore) ConfigMaps(ns string) corev1client.ConfigMapInterface {
	return gatedConfigMaps{c.CoreV1Interface.ConfigMaps(ns), c.gates}
}

type gatedConfigMaps struct {
	corev1client.ConfigMapInterface
	gates *gates
}

func (c gatedConfigMaps) List(ctx context.Context, opts metav1.ListOptions) (*v1.ConfigMapList, error) {
	c.gates.wait(ctx, "list configmaps")
	return c.ConfigMapInterface.List(ctx, opts)
}

func (c gatedConfigMaps) Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1.ConfigMap, error) {
	c.gates.wait(ctx, "get configmaps")
	return c.ConfigMapInterface.Get(ctx, name, opts)
}

// gets counts the GETs of the named object of resource.
func (h *harness) gets(resource, name string) int {
	n := 0
	for _, a := range h.client.Actions() {
		if g, ok := a.(k8stesting.GetAction); ok && a.GetVerb() == "get" && a.GetResource().Resource == resource && g.GetName() == name {
			n++
		}
	}
	return n
}

func forbidden(resource string) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", errors.New("RBAC: get not granted"))
}

// TestDirectReadAnswersBeforeTheWatchLists: a pod's ConfigMaps are found,
// or known to be missing, by their direct reads while their watches have
// not listed yet; an OnChange follows the answers; and the watches, started
// after the reads, carry later changes.
func TestDirectReadAnswersBeforeTheWatchLists(t *testing.T) {
	h := newHarness(t, configMap("ns", "cm", "1"))
	h.synced()
	release := h.holdConfigMapLists()
	var answered atomic.Bool // set by the OnChange that first sees both answers
	look := func() {
		_, errCM := h.src.Objects().ConfigMap("ns", "cm")
		_, errMissing := h.src.Objects().ConfigMap("ns", "missing")
		if errCM == nil && errors.Is(errMissing, volume.ErrNotFound) {
			answered.Store(true)
		}
	}
	h.onChange.Store(&look)
	h.create(testPod("ns", "app", "node-1", cmVolume("cm"), cmVolume("missing")))
	h.eventually("an OnChange whose lookups see the direct reads' answers", func() (bool, string) {
		_, errMissing := h.src.Objects().ConfigMap("ns", "missing")
		return answered.Load(), fmt.Sprint(errMissing)
	})
	if h.listed("configmaps", "metadata.name=cm") || h.listed("configmaps", "metadata.name=missing") {
		t.Fatal("a held list answered")
	}
	release()
	h.update(configMap("ns", "cm", "2"))
	h.create(configMap("ns", "missing", "late"))
	h.eventually("changes after the reads served by the watches", func() (bool, string) {
		cm, err := h.src.Objects().ConfigMap("ns", "cm")
		late, errLate := h.src.Objects().ConfigMap("ns", "missing")
		return err == nil && cm.Data["k"] == "2" && errLate == nil && late.Data["k"] == "late", fmt.Sprint(err, errLate)
	})
}

// TestWatchStartsAfterTheDirectRead: what a watch lists is never older than
// what the direct read saw, because it is not sent before the read ends.
func TestWatchStartsAfterTheDirectRead(t *testing.T) {
	h := newHarness(t, configMap("ns", "cm", "1"))
	h.synced()
	release := h.holdConfigMapGets()
	h.create(testPod("ns", "app", "node-1", cmVolume("cm")))
	h.eventually("pod listed", func() (bool, string) { return len(h.src.Pods()) == 1, "" })
	h.eventually("read sent", func() (bool, string) { return h.held.calls("get configmaps") == 1, "" })
	if h.listed("configmaps", "metadata.name=cm") {
		t.Fatal("configMap listed while its direct read had not answered")
	}
	release()
	h.eventually("watch listed after the read", func() (bool, string) { return h.listed("configmaps", "metadata.name=cm"), "" })
}

// TestFailedDirectReadWaitsForTheWatch: a read the API server refuses (the
// RBAC grants list and watch only) or cannot answer is no answer: lookups
// wait for the watch — never "missing", never an error to report — and the
// API server is not judged unreachable from it.
func TestFailedDirectReadWaitsForTheWatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"forbidden", forbidden("configmaps")},
		{"unavailable", apierrors.NewServiceUnavailable("etcd is down")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, configMap("ns", "cm", "1"))
			h.failGet("configmaps", tc.err)
			h.synced()
			release := h.holdConfigMapLists()
			h.create(testPod("ns", "app", "node-1", cmVolume("cm")))
			h.eventually("read refused", func() (bool, string) { return h.gets("configmaps", "cm") == 1, "" })
			h.quiet()
			if _, err := h.src.Objects().ConfigMap("ns", "cm"); !errors.Is(err, volume.ErrNotReady) {
				t.Errorf("configMap whose read failed, before its watch listed: %v, want ErrNotReady", err)
			}
			if st := h.src.Status(); len(st.Errors) > 0 || st.Disconnected != "" {
				t.Errorf("Status after a failed direct read = %+v, want no errors and connected", st)
			}
			release()
			h.eventually("configMap found by its watch", func() (bool, string) {
				_, err := h.src.Objects().ConfigMap("ns", "cm")
				return err == nil, fmt.Sprint(err)
			})
		})
	}
}

// noTokens never has a token.
type noTokens struct{}

func (noTokens) TryAccept() bool { return false }

// TestDirectReadsNeedATokenNow: without a token the object is not read;
// its lookups wait for the watch.
func TestDirectReadsNeedATokenNow(t *testing.T) {
	h := newHarness(t, configMap("ns", "cm", "1"))
	h.src.configMaps.reader.tokens = noTokens{}
	h.synced()
	release := h.holdConfigMapLists()
	h.create(testPod("ns", "app", "node-1", cmVolume("cm")))
	h.eventually("pod listed", func() (bool, string) { return len(h.src.Pods()) == 1, "" })
	h.quiet()
	if _, err := h.src.Objects().ConfigMap("ns", "cm"); !errors.Is(err, volume.ErrNotReady) {
		t.Errorf("configMap not read, before its watch listed: %v, want ErrNotReady", err)
	}
	if n := h.gets("configmaps", "cm"); n != 0 {
		t.Errorf("%d direct reads without a token, want 0", n)
	}
	release()
	h.eventually("configMap found by its watch", func() (bool, string) {
		_, err := h.src.Objects().ConfigMap("ns", "cm")
		return err == nil, fmt.Sprint(err)
	})
}
