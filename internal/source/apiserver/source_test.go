package apiserver

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// within is how long a change in the (fake) API server may take to show.
const within = 5 * time.Second

// harness runs a Source against a fake clientset. The fake does not apply
// field selectors; the harness records the selectors the source asks for
// and every watch it opens, so tests can tell when a watch was stopped.
type harness struct {
	t       *testing.T
	client  *fake.Clientset
	src     *Source
	changes atomic.Int32
	// onChange, when set, also runs in every OnChange call.
	onChange atomic.Pointer[func()]

	// held holds the source's ConfigMap and Secret calls (holdLists).
	held *gates

	mu      sync.Mutex
	watches []*recordedWatch // guarded by mu
}

// recordedWatch is one watch the source opened.
type recordedWatch struct {
	watch.Interface
	resource, namespace, fields string
	stopped                     atomic.Bool
}

func (w *recordedWatch) Stop() {
	w.stopped.Store(true)
	w.Interface.Stop()
}

// newHarness serves objs, and the Node node-1 unless objs hold a Node.
func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	if !slices.ContainsFunc(objs, func(o runtime.Object) bool { _, ok := o.(*v1.Node); return ok }) {
		objs = append(objs, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	}
	return newBareHarness(t, objs...)
}

// newBareHarness serves exactly objs.
func newBareHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{t: t, client: fake.NewClientset(objs...), held: &gates{}}
	h.client.PrependWatchReactor("*", h.recordWatch)
	src, err := New(Config{Client: gatedClient{h.client, h.held}, NodeName: "node-1", Logger: zaptest.NewLogger(t), OnChange: h.changed})
	if err != nil {
		t.Fatal(err)
	}
	h.src = src
	return h
}

func (h *harness) changed() {
	h.changes.Add(1)
	if fn := h.onChange.Load(); fn != nil {
		(*fn)()
	}
}

func (h *harness) recordWatch(action k8stesting.Action) (bool, watch.Interface, error) {
	opts := action.(k8stesting.WatchActionImpl).ListOptions
	w, err := h.client.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
	if err != nil {
		return true, nil, err
	}
	rw := &recordedWatch{Interface: w, resource: action.GetResource().Resource, namespace: action.GetNamespace(), fields: opts.FieldSelector}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watches = append(h.watches, rw)
	return true, rw, nil
}

// watchesOf returns the watches opened on resource in namespace with the
// field selector fields.
func (h *harness) watchesOf(resource, namespace, fields string) (open, stopped int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.watches {
		if w.resource == resource && w.namespace == namespace && w.fields == fields {
			if w.stopped.Load() {
				stopped++
			} else {
				open++
			}
		}
	}
	return open, stopped
}

// run runs the source until the test ends, then checks Run returns nil.
func (h *harness) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.src.Run(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				h.t.Errorf("Run = %v, want nil", err)
			}
		case <-time.After(within):
			h.t.Errorf("Run did not return within %v of its context ending", within)
		}
	})
}

// synced runs the source and waits until its pods are listed.
func (h *harness) synced() {
	h.run()
	h.eventually("pods listed", func() (bool, string) { return h.src.Status().Synced, h.src.Status().Reason })
}

// eventually waits until cond holds.
func (h *harness) eventually(what string, cond func() (bool, string)) {
	h.t.Helper()
	h.eventuallyWithin(within, what, cond)
}

// eventuallyWithin waits up to d until cond holds.
func (h *harness) eventuallyWithin(d time.Duration, what string, cond func() (bool, string)) {
	h.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: not within %v; last: %s", what, d, state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// failList makes every list of resource whose field selector is fields
// fail, until the returned function is called.
func (h *harness) failList(resource, fields string) (recover func()) {
	var recovered atomic.Bool
	h.client.PrependReactor("list", resource, func(action k8stesting.Action) (bool, runtime.Object, error) {
		if recovered.Load() || action.(k8stesting.ListActionImpl).ListOptions.FieldSelector != fields {
			return false, nil, nil
		}
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	})
	return func() { recovered.Store(true) }
}

// listed reports whether resource was listed with the field selector fields.
func (h *harness) listed(resource, fields string) bool {
	for _, a := range h.client.Actions() {
		if l, ok := a.(k8stesting.ListActionImpl); ok && l.GetResource().Resource == resource && l.ListOptions.FieldSelector == fields {
			return true
		}
	}
	return false
}

func (h *harness) create(obj runtime.Object) {
	h.t.Helper()
	if err := h.client.Tracker().Create(gvr(obj), obj, namespaceOf(obj)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) update(obj runtime.Object) {
	h.t.Helper()
	if err := h.client.Tracker().Update(gvr(obj), obj, namespaceOf(obj)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) delete(obj runtime.Object) {
	h.t.Helper()
	m := obj.(metav1.Object)
	if err := h.client.Tracker().Delete(gvr(obj), m.GetNamespace(), m.GetName()); err != nil {
		h.t.Fatal(err)
	}
}

func gvr(obj runtime.Object) schema.GroupVersionResource {
	resource := map[string]string{"*v1.Pod": "pods", "*v1.ConfigMap": "configmaps", "*v1.Secret": "secrets", "*v1.Node": "nodes",
		"*v1.PersistentVolume": "persistentvolumes", "*v1.PersistentVolumeClaim": "persistentvolumeclaims"}[fmt.Sprintf("%T", obj)]
	return v1.SchemeGroupVersion.WithResource(resource)
}

func namespaceOf(obj runtime.Object) string { return obj.(metav1.Object).GetNamespace() }

func testPod(ns, name, node string, volumes ...v1.VolumeSource) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)}, Spec: v1.PodSpec{NodeName: node}}
	for i, s := range volumes {
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: fmt.Sprint("v", i), VolumeSource: s})
	}
	return p
}

func cmVolume(name string) v1.VolumeSource {
	return v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: name}}}
}

func secretVolume(name string) v1.VolumeSource {
	return v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: name}}
}

func configMap(ns, name, value string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": value}}
}

func podNames(pods []*v1.Pod) []string {
	names := []string{}
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return names
}

func TestNewValidatesConfig(t *testing.T) {
	ok := Config{Client: fake.NewClientset(), NodeName: "node-1", Logger: zap.NewNop()}
	if _, err := New(ok); err != nil {
		t.Fatalf("New(%+v) = %v", ok, err)
	}
	for name, tweak := range map[string]func(*Config){
		"no client": func(c *Config) { c.Client = nil },
		"no node":   func(c *Config) { c.NodeName = "" },
		"no logger": func(c *Config) { c.Logger = nil },
	} {
		cfg := ok
		tweak(&cfg)
		if s, err := New(cfg); err == nil || s != nil {
			t.Errorf("%s: New = %v, %v; want an error", name, s, err)
		}
	}
}

func TestStatus(t *testing.T) {
	h := newHarness(t)
	if st := h.src.Status(); st.Name != Name || st.Synced || !strings.Contains(st.Reason, "node-1") || st.Disconnected != "" {
		t.Errorf("Status before Run = %+v, want not synced with a reason naming the node", st)
	}
	recoverList := h.failList("pods", "spec.nodeName=node-1")
	h.run()
	h.eventually("pod list failure reported", func() (bool, string) {
		st := h.src.Status()
		return !st.Synced && strings.Contains(st.Reason, "not yet listed") && st.Disconnected == "API server unreachable: etcd is down",
			fmt.Sprintf("%+v", st)
	})
	recoverList()
	h.eventually("synced once the list succeeds", func() (bool, string) {
		st := h.src.Status()
		return st.Synced && st.Reason == "" && st.Disconnected == "", fmt.Sprintf("%+v", st)
	})
}

func TestPodsOfThisNodeSorted(t *testing.T) {
	h := newHarness(t,
		testPod("b", "x", "node-1"), testPod("a", "z", "node-2"), testPod("a", "y", "node-1"), testPod("a", "pending", ""),
		testPod("c", "a", "node-1"), testPod("a", "b", "node-1"), testPod("b", "a", "node-1"))
	if got := h.src.Pods(); len(got) != 0 {
		t.Errorf("Pods before Run = %v, want none", podNames(got))
	}
	h.synced()
	if got := fmt.Sprint(podNames(h.src.Pods())); got != "[a/b a/y b/a b/x c/a]" {
		t.Errorf("Pods = %s, want [a/b a/y b/a b/x c/a]", got)
	}
	if !h.listed("pods", "spec.nodeName=node-1") {
		t.Error("pods not listed with the field selector spec.nodeName=node-1")
	}

	changes := h.changes.Load()
	h.create(testPod("a", "new", "node-1"))
	h.eventually("added pod served", func() (bool, string) {
		got := fmt.Sprint(podNames(h.src.Pods()))
		return got == "[a/b a/new a/y b/a b/x c/a]", got
	})
	if h.changes.Load() == changes {
		t.Error("OnChange not called for an added pod")
	}
	changes = h.changes.Load()
	h.delete(testPod("b", "x", "node-1"))
	h.eventually("deleted pod gone", func() (bool, string) {
		got := fmt.Sprint(podNames(h.src.Pods()))
		return got == "[a/b a/new a/y b/a c/a]", got
	})
	if h.changes.Load() == changes {
		t.Error("OnChange not called for a deleted pod")
	}
}

func TestObjectLookups(t *testing.T) {
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}, Data: map[string][]byte{"k": []byte("v")}}
	h := newHarness(t,
		testPod("ns", "app", "node-1", cmVolume("cm"), cmVolume("missing"), cmVolume("broken"), secretVolume("s")),
		configMap("ns", "cm", "1"), configMap("ns", "unreferenced", "1"), configMap("ns", "broken", "1"), secret)
	objs := h.src.Objects()
	if _, err := objs.ConfigMap("ns", "cm"); !errors.Is(err, volume.ErrNotReady) {
		t.Errorf("ConfigMap before Run: %v, want ErrNotReady", err)
	}
	h.failList("configmaps", "metadata.name=broken")
	h.failGet("configmaps", apierrors.NewServiceUnavailable("etcd is down"), "broken")
	h.synced()
	h.eventually("configMap cm served", func() (bool, string) {
		cm, err := objs.ConfigMap("ns", "cm")
		return err == nil && cm.Data["k"] == "1", fmt.Sprint(err)
	})

	if _, err := objs.ConfigMap("ns", "unreferenced"); !errors.Is(err, volume.ErrNotReady) || !strings.Contains(err.Error(), "not watched") {
		t.Errorf("ConfigMap no pod refers to: %v, want not watched (ErrNotReady)", err)
	}
	h.eventually("missing configMap not found", func() (bool, string) {
		_, err := objs.ConfigMap("ns", "missing")
		return errors.Is(err, volume.ErrNotFound), fmt.Sprint(err)
	})
	if _, err := objs.ConfigMap("ns", "missing"); errors.Is(err, volume.ErrNotReady) || !strings.Contains(err.Error(), "ns/missing") {
		t.Errorf("missing configMap: %v, want only ErrNotFound, naming it", err)
	}
	h.eventually("broken configMap's list attempted", func() (bool, string) { return h.listed("configmaps", "metadata.name=broken"), "" })
	if _, err := objs.ConfigMap("ns", "broken"); !errors.Is(err, volume.ErrNotReady) || errors.Is(err, volume.ErrNotFound) {
		t.Errorf("configMap whose list and read fail: %v, want ErrNotReady", err)
	}
	h.eventually("secret served", func() (bool, string) {
		s, err := objs.Secret("ns", "s")
		return err == nil && string(s.Data["k"]) == "v", fmt.Sprint(err)
	})
	if _, err := objs.Secret("ns", "cm"); !errors.Is(err, volume.ErrNotReady) {
		t.Errorf("Secret named like a configMap: %v, want not watched", err)
	}
	for _, name := range []string{"cm", "missing"} {
		if open, _ := h.watchesOf("configmaps", "ns", "metadata.name="+name); open != 1 {
			t.Errorf("configMap %s: %d open watches with field selector metadata.name=%s, want 1", name, open, name)
		}
	}

	changes := h.changes.Load()
	h.update(configMap("ns", "cm", "2"))
	h.eventually("updated configMap served", func() (bool, string) {
		cm, err := objs.ConfigMap("ns", "cm")
		return err == nil && cm.Data["k"] == "2", fmt.Sprint(cm, err)
	})
	if h.changes.Load() == changes {
		t.Error("OnChange not called for an updated configMap")
	}
	changes = h.changes.Load()
	h.delete(configMap("ns", "cm", "2"))
	h.eventually("deleted configMap not found", func() (bool, string) {
		_, err := objs.ConfigMap("ns", "cm")
		return errors.Is(err, volume.ErrNotFound), fmt.Sprint(err)
	})
	if h.changes.Load() == changes {
		t.Error("OnChange not called for a deleted configMap")
	}
	changes = h.changes.Load()
	h.create(configMap("ns", "missing", "late"))
	h.eventually("created configMap served", func() (bool, string) {
		cm, err := objs.ConfigMap("ns", "missing")
		return err == nil && cm.Data["k"] == "late", fmt.Sprint(err)
	})
	if h.changes.Load() == changes {
		t.Error("OnChange not called for a created configMap")
	}
}

// TestImmutableReadOnce: an immutable object is read once and served from
// then on: by its direct read, with no watch at all, or, where the agent
// may not get objects, by its watch, which is then stopped.
func TestImmutableReadOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		denyGet bool
		watches int // opened, all stopped in the end
	}{
		{name: "read directly", watches: 0},
		{name: "read by its watch", denyGet: true, watches: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frozen := configMap("ns", "frozen", "1")
			frozen.Immutable = ptr.To(true)
			h := newHarness(t, testPod("ns", "app", "node-1", cmVolume("frozen")), frozen)
			if tc.denyGet {
				h.failGet("configmaps", forbidden("configmaps"))
			}
			objs := h.src.Objects()
			// Look the object up without pause while it arrives and is
			// frozen, so that the race detector sees lookups concurrent
			// with the freeze.
			read := make(chan error, 1)
			go func() {
				deadline := time.Now().Add(within)
				for {
					_, err := objs.ConfigMap("ns", "frozen")
					if err == nil || time.Now().After(deadline) {
						read <- err
						return
					}
				}
			}()
			h.synced()
			if err := <-read; err != nil {
				t.Fatalf("immutable configMap not served: %v", err)
			}
			h.eventually("no watch open", func() (bool, string) {
				open, stopped := h.watchesOf("configmaps", "ns", "metadata.name=frozen")
				return open == 0 && stopped == tc.watches, fmt.Sprintf("%d open, %d stopped", open, stopped)
			})
			// Another pod event re-derives the watches: the frozen object
			// stays, neither read nor watched again.
			h.create(testPod("ns", "other", "node-1", cmVolume("frozen")))
			h.eventually("second pod served", func() (bool, string) { return len(h.src.Pods()) == 2, "" })
			if cm, err := objs.ConfigMap("ns", "frozen"); err != nil || cm.Data["k"] != "1" {
				t.Errorf("immutable configMap after it was read: %v, %v", cm, err)
			}
			if open, stopped := h.watchesOf("configmaps", "ns", "metadata.name=frozen"); open+stopped != tc.watches {
				t.Errorf("immutable configMap watched %d times, want %d", open+stopped, tc.watches)
			}
			if n := h.gets("configmaps", "frozen"); n != 1 {
				t.Errorf("immutable configMap's direct read tried %d times, want once", n)
			}
		})
	}
}

// TestUnreferencedObjectUnwatched: when no pod refers to an object any
// more, its watch stops; when one does again, it is watched again.
func TestUnreferencedObjectUnwatched(t *testing.T) {
	pod := testPod("ns", "app", "node-1", cmVolume("cm"), secretVolume("s"))
	h := newHarness(t, pod, configMap("ns", "cm", "1"), &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}})
	h.synced()
	objs := h.src.Objects()
	h.eventually("configMap served", func() (bool, string) { _, err := objs.ConfigMap("ns", "cm"); return err == nil, fmt.Sprint(err) })

	changed := pod.DeepCopy()
	changed.Spec.Volumes = changed.Spec.Volumes[1:] // the secret only
	h.update(changed)
	h.eventually("configMap watch stopped", func() (bool, string) {
		open, stopped := h.watchesOf("configmaps", "ns", "metadata.name=cm")
		return open == 0 && stopped == 1, fmt.Sprintf("%d open, %d stopped", open, stopped)
	})
	if _, err := objs.ConfigMap("ns", "cm"); !errors.Is(err, volume.ErrNotReady) {
		t.Errorf("configMap no pod refers to: %v, want not watched", err)
	}
	if open, _ := h.watchesOf("secrets", "ns", "metadata.name=s"); open != 1 {
		t.Errorf("%d open watches of the secret still referred to, want 1", open)
	}

	h.delete(pod)
	h.eventually("secret watch stopped with the last pod", func() (bool, string) {
		open, stopped := h.watchesOf("secrets", "ns", "metadata.name=s")
		return open == 0 && stopped == 1, fmt.Sprintf("%d open, %d stopped", open, stopped)
	})

	h.create(pod)
	h.eventually("configMap served again", func() (bool, string) { _, err := objs.ConfigMap("ns", "cm"); return err == nil, fmt.Sprint(err) })
}

func TestPersistentVolumes(t *testing.T) {
	h := newHarness(t,
		&v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}},
		&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim"}, Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv1"}})
	if _, err := h.src.PersistentVolume("pv1"); !errors.Is(err, volume.ErrNotReady) {
		t.Errorf("PersistentVolume before Run: %v, want ErrNotReady", err)
	}
	if _, err := h.src.PersistentVolumeClaim("ns", "claim"); !errors.Is(err, volume.ErrNotReady) {
		t.Errorf("PersistentVolumeClaim before Run: %v, want ErrNotReady", err)
	}
	h.run()
	h.eventually("PV and PVC served", func() (bool, string) {
		pv, err1 := h.src.PersistentVolume("pv1")
		pvc, err2 := h.src.PersistentVolumeClaim("ns", "claim")
		return err1 == nil && pv.Name == "pv1" && err2 == nil && pvc.Spec.VolumeName == "pv1", fmt.Sprint(err1, err2)
	})
	if _, err := h.src.PersistentVolume("nope"); !errors.Is(err, volume.ErrNotFound) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("missing PV: %v, want ErrNotFound naming it", err)
	}
	if _, err := h.src.PersistentVolumeClaim("other", "claim"); !errors.Is(err, volume.ErrNotFound) || !strings.Contains(err.Error(), "other/claim") {
		t.Errorf("PVC of another namespace: %v, want ErrNotFound naming it", err)
	}
	changes := h.changes.Load()
	h.create(&v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv2"}})
	h.eventually("new PV served", func() (bool, string) { _, err := h.src.PersistentVolume("pv2"); return err == nil, fmt.Sprint(err) })
	if h.changes.Load() == changes {
		t.Error("OnChange not called for a new PV")
	}
}

func TestNode(t *testing.T) {
	h := newHarness(t, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"zone": "a"}}},
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}})
	if n := h.src.Node(); n != nil {
		t.Errorf("Node before Run = %v, want nil", n.Name)
	}
	h.run()
	h.eventually("node served", func() (bool, string) { n := h.src.Node(); return n != nil && n.Labels["zone"] == "a", "" })
	if !h.listed("nodes", "metadata.name=node-1") {
		t.Error("nodes not listed with the field selector metadata.name=node-1")
	}
	changes := h.changes.Load()
	h.update(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"zone": "b"}}})
	h.eventually("node update served", func() (bool, string) { n := h.src.Node(); return n.Labels["zone"] == "b", "" })
	if h.changes.Load() == changes {
		t.Error("OnChange not called for a node update")
	}
}

// TestRunJoinsEverything: Run returns once its context ends and leaves no
// goroutine behind, per-object watches included.
func TestRunJoinsEverything(t *testing.T) {
	h := newHarness(t, testPod("ns", "app", "node-1", cmVolume("cm"), secretVolume("s")), configMap("ns", "cm", "1"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.src.Run(ctx) }()
	h.eventually("per-object watches open", func() (bool, string) {
		cm, _ := h.watchesOf("configmaps", "ns", "metadata.name=cm")
		s, _ := h.watchesOf("secrets", "ns", "metadata.name=s")
		return cm == 1 && s == 1, fmt.Sprintf("configMap %d, secret %d", cm, s)
	})
	h.eventually("synced", func() (bool, string) { return h.src.Status().Synced, h.src.Status().Reason })
	h.eventually("only the long-running goroutines left", func() (bool, string) {
		n := runnerGoroutines()
		return n == 4, fmt.Sprintf("%d goroutines started by the runner, want 4 (pod and node informers, 2 per-object watches)", n)
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(within):
		t.Fatal("Run did not return after its context ended")
	}
	// Joined means done when Run returns: a goroutine may still be on its
	// way out (the deferred Done), but none may be inside the function.
	if n := runnerFunctions(); n != 0 {
		t.Errorf("%d functions started by the runner still running when Run returned", n)
	}
	goleak.VerifyNone(t)
}

// runnerGoroutines counts the goroutines running a function the source's
// runner started.
func runnerGoroutines() int { return strings.Count(stacks(), "apiserver.(*runner).run.func1(") }

// runnerFunctions counts the goroutines started by the runner that are
// still inside the function they were given (an informer's Run or the
// sync waiter), not just returning from it.
func runnerFunctions() int {
	n := 0
	for _, g := range strings.Split(stacks(), "\n\n") {
		if strings.Contains(g, "apiserver.(*runner).run.func1(") && (strings.Contains(g, "RunWithContext") || strings.Contains(g, "apiserver.whenSynced")) {
			n++
		}
	}
	return n
}

func stacks() string {
	buf := make([]byte, 1<<16)
	for {
		n := goruntime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}
