package provisioner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// fakeProvisioner records its calls. The fake clientset stands in for the
// API server here; test/e2e runs the controller against a real one.
type fakeProvisioner struct {
	mu        sync.Mutex
	provision []string // PV names
	deleted   []string
	aside     []string
	restored  []string
	err       error
}

func (f *fakeProvisioner) Name() string { return LocalName }

func (f *fakeProvisioner) Provision(_ context.Context, req Request) (Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.provision = append(f.provision, req.PVName)
	if f.err != nil {
		return Volume{}, f.err
	}
	return Volume{Source: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/data/" + req.PVName}},
		NodeAffinity: affinity(req.SelectedNode), Annotations: map[string]string{AnnArchiveOnDelete: "false"}}, nil
}

func (f *fakeProvisioner) Delete(_ context.Context, pv *v1.PersistentVolume) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, pv.Name)
	return nil
}

func (f *fakeProvisioner) MoveAside(_ context.Context, pv *v1.PersistentVolume) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.aside = append(f.aside, pv.Name)
	return nil
}

func (f *fakeProvisioner) Restore(_ context.Context, pv *v1.PersistentVolume) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restored = append(f.restored, pv.Name)
	return nil
}

func (f *fakeProvisioner) reclaims() (aside, restored []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.aside...), append([]string(nil), f.restored...)
}

func (f *fakeProvisioner) calls() (provision, deleted []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.provision...), append([]string(nil), f.deleted...)
}

func affinity(node string) *v1.VolumeNodeAffinity {
	return &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
	}}}}
}

func class(name, provisioner string) *storagev1.StorageClass {
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &wffc}
}

func claim(name, class, provisioner, node string) *v1.PersistentVolumeClaim {
	ann := map[string]string{AnnStorageProvisioner: provisioner}
	if node != "" {
		ann[AnnSelectedNode] = node
	}
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Annotations: ann},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class),
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}},
		},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending},
	}
}

// run starts a controller for node over objs and returns its client.
func run(t *testing.T, p Provisioner, node string, objs ...runtime.Object) *fake.Clientset {
	t.Helper()
	client, _ := runWith(t, Config{Provisioner: p, Node: node}, objs...)
	return client
}

// runWith starts a controller of cfg (its Client and Logger set here) over
// objs and returns its client and the controller.
func runWith(t *testing.T, cfg Config, objs ...runtime.Object) (*fake.Clientset, *Controller) {
	t.Helper()
	client := fake.NewClientset(objs...)
	return client, start(t, client, cfg)
}

// start starts a controller of cfg over client (cfg's Client and Logger
// set here) until the test ends.
func start(t *testing.T, client *fake.Clientset, cfg Config) *Controller {
	t.Helper()
	cfg.Client, cfg.Logger = client, zap.NewNop()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return c
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestProvisionsOnlyTheClaimsOfThisNode(t *testing.T) {
	p := &fakeProvisioner{}
	mine := claim("mine", "local", LocalName, "node-a")
	client := run(t, p, "node-a", class("local", LocalName), class("other", "example.com/other"), mine,
		claim("theirs", "local", LocalName, "node-b"),
		claim("unscheduled", "local", LocalName, ""),
		claim("other-class", "other", "example.com/other", "node-a"))
	eventually(t, "the PV of the claim of node-a", func() (bool, string) {
		_, err := client.CoreV1().PersistentVolumes().Get(context.Background(), "pvc-uid-mine", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	pv, _ := client.CoreV1().PersistentVolumes().Get(context.Background(), "pvc-uid-mine", metav1.GetOptions{})
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != mine.UID || ref.Name != "mine" || ref.Namespace != "ns" {
		t.Errorf("claimRef = %+v", ref)
	}
	if pv.Annotations[AnnProvisionedBy] != LocalName || pv.Spec.PersistentVolumeReclaimPolicy != v1.PersistentVolumeReclaimDelete ||
		pv.Spec.Capacity.Storage().String() != "2Gi" || pv.Spec.StorageClassName != "local" || !OnNode(pv, "node-a") {
		t.Errorf("PV = %+v", pv)
	}
	time.Sleep(200 * time.Millisecond) // other claims would be provisioned by now
	if got, _ := p.calls(); len(got) != 1 || got[0] != "pvc-uid-mine" {
		t.Errorf("provisioned %v, want only pvc-uid-mine", got)
	}
}

func TestRescheduleRemovesSelectedNode(t *testing.T) {
	p := &fakeProvisioner{err: fmt.Errorf("%w: disk full", ErrReschedule)}
	client := run(t, p, "node-a", class("local", LocalName), claim("c", "local", LocalName, "node-a"))
	eventually(t, "selected-node removed", func() (bool, string) {
		c, err := client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "c", metav1.GetOptions{})
		_, has := c.Annotations[AnnSelectedNode]
		return err == nil && !has, fmt.Sprint(c.Annotations, err)
	})
	if _, err := client.CoreV1().PersistentVolumes().Get(context.Background(), "pvc-uid-c", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a PV was created after a failure: %v", err)
	}
}

func TestOtherFailuresKeepTheNodeAndRetry(t *testing.T) {
	p := &fakeProvisioner{err: errors.New("transient")}
	client := run(t, p, "node-a", class("local", LocalName), claim("c", "local", LocalName, "node-a"))
	eventually(t, "a retry", func() (bool, string) {
		got, _ := p.calls()
		return len(got) >= 2, fmt.Sprint(got)
	})
	c, _ := client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "c", metav1.GetOptions{})
	if c.Annotations[AnnSelectedNode] != "node-a" {
		t.Errorf("selected-node = %q after a transient failure", c.Annotations[AnnSelectedNode])
	}
}

// releasedPV is a PV Released by the claim ns/released-<name>, which no
// longer exists.
func releasedPV(name, by, node string, policy v1.PersistentVolumeReclaimPolicy) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Annotations: map[string]string{AnnProvisionedBy: by}},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeReclaimPolicy: policy, NodeAffinity: affinity(node),
			PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/data/" + name}},
			ClaimRef:               &v1.ObjectReference{Namespace: "ns", Name: "released-" + name, UID: types.UID("uid-released-" + name)}},
		Status: v1.PersistentVolumeStatus{Phase: v1.VolumeReleased},
	}
}

func TestDeletesOnlyReleasedPVsItServes(t *testing.T) {
	p := &fakeProvisioner{}
	bound := releasedPV("bound", LocalName, "node-a", v1.PersistentVolumeReclaimDelete)
	bound.Status.Phase = v1.VolumeBound
	client := run(t, p, "node-a",
		releasedPV("gone", LocalName, "node-a", v1.PersistentVolumeReclaimDelete),
		releasedPV("retained", LocalName, "node-a", v1.PersistentVolumeReclaimRetain),
		releasedPV("elsewhere", LocalName, "node-b", v1.PersistentVolumeReclaimDelete),
		releasedPV("foreign", "example.com/other", "node-a", v1.PersistentVolumeReclaimDelete),
		bound)
	eventually(t, "the released PV deleted", func() (bool, string) {
		_, err := client.CoreV1().PersistentVolumes().Get(context.Background(), "gone", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	time.Sleep(200 * time.Millisecond)
	if _, deleted := p.calls(); len(deleted) != 1 || deleted[0] != "gone" {
		t.Errorf("storage deleted for %v, want only gone", deleted)
	}
	list, _ := client.CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{})
	if len(list.Items) != 4 {
		t.Errorf("%d PVs left, want 4", len(list.Items))
	}
}

func TestArchiveOnDelete(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    bool
		wantErr bool
	}{{"", false, false}, {"true", true, false}, {"False", false, false}, {"TRUE", true, false}, {"yes", false, true}} {
		c := class("c", LocalName)
		if tc.value != "" {
			c.Parameters = map[string]string{ParamArchiveOnDelete: tc.value}
		}
		got, err := ArchiveOnDelete(c)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ArchiveOnDelete(%q) = %v, %v", tc.value, got, err)
		}
	}
}

// fakeSettler is a fakeProvisioner that settles: it records Commit and
// Abandon, and Abandon keeps the storage, saying why.
type fakeSettler struct {
	fakeProvisioner
	settled chan string // "commit <pv>", "abandon <pv>"
	pvs     chan []string
}

func (f *fakeSettler) Commit(_ context.Context, pv *v1.PersistentVolume) error {
	f.settled <- "commit " + pv.Name
	return nil
}

func (f *fakeSettler) Abandon(_ context.Context, req Request, pv *v1.PersistentVolume) (string, error) {
	var names []string
	for _, p := range req.PVs() {
		names = append(names, p.Name)
	}
	f.pvs <- names
	f.settled <- "abandon " + pv.Name
	return "it was there before", nil
}

// receive waits for a value from ch, up to 10 s.
func receive[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received in 10 s")
	}
	var zero T
	return zero
}

func newSettler() *fakeSettler {
	return &fakeSettler{settled: make(chan string, 10), pvs: make(chan []string, 10)}
}

func TestSettlerCommitsOnceThePVExists(t *testing.T) {
	p := newSettler()
	client := run(t, p, "node-a", class("local", LocalName), claim("c", "local", LocalName, "node-a"))
	if got := receive(t, p.settled); got != "commit pvc-uid-c" {
		t.Fatalf("settled %q, want a commit of pvc-uid-c", got)
	}
	if _, err := client.CoreV1().PersistentVolumes().Get(context.Background(), "pvc-uid-c", metav1.GetOptions{}); err != nil {
		t.Fatalf("committed before the PV existed: %v", err)
	}
	if _, deleted := p.calls(); len(deleted) != 0 {
		t.Errorf("storage deleted for %v", deleted)
	}
}

// TestClaimDeletedWhileProvisioningIsAbandoned deletes the claim while the
// controller pauses between the storage and the PV: a Settler is asked to
// abandon the storage (it may keep it), never to Delete it, no PV is made,
// and the event says why the storage stays.
func TestClaimDeletedWhileProvisioningIsAbandoned(t *testing.T) {
	p := newSettler()
	c := claim("c", "local", LocalName, "node-a")
	other := releasedPV("other", LocalName, "node-b", v1.PersistentVolumeReclaimRetain)
	client := fake.NewClientset(class("local", LocalName), c, other)
	ctrl, err := New(Config{Client: client, Provisioner: p, Node: "node-a", Logger: zap.NewNop(), PauseAfterStorage: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- ctrl.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	eventually(t, "Provision called", func() (bool, string) {
		got, _ := p.calls()
		return len(got) == 1, fmt.Sprint(got)
	})
	if err := client.CoreV1().PersistentVolumeClaims("ns").Delete(context.Background(), "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, p.settled); got != "abandon pvc-uid-c" {
		t.Fatalf("settled %q, want an abandon of pvc-uid-c", got)
	}
	if got := receive(t, p.pvs); len(got) != 1 || got[0] != "other" {
		t.Errorf("Abandon was given the PVs %v, want other", got)
	}
	if _, deleted := p.calls(); len(deleted) != 0 {
		t.Errorf("storage deleted for %v, want it abandoned only", deleted)
	}
	if _, err := client.CoreV1().PersistentVolumes().Get(context.Background(), "pvc-uid-c", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("PV of the deleted claim: %v, want not found", err)
	}
	eventually(t, "a ProvisioningAbandoned event", func() (bool, string) {
		list, _ := client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
		for _, e := range list.Items {
			if e.Reason == ReasonProvisioningAbandoned && strings.Contains(e.Message, "it was there before") {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(list.Items), " events")
	})
}

// A claim with a selector, an attributes class or a data source is refused
// with an event and never provisioned, as the external provisioners do: a
// claim made from a snapshot or a claim never gets an empty volume.
func TestUnsupportedClaimsAreRefused(t *testing.T) {
	withSelector := claim("sel", "local", LocalName, "node-a")
	withSelector.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"disk": "ssd"}}
	withVAC := claim("vac", "local", LocalName, "node-a")
	withVAC.Spec.VolumeAttributesClassName = ptr.To("gold")
	withSource := claim("clone", "local", LocalName, "node-a")
	withSource.Spec.DataSource = &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "sel"}
	withSourceRef := claim("restore", "local", LocalName, "node-a")
	withSourceRef.Spec.DataSourceRef = &v1.TypedObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "snap"}
	p := &fakeProvisioner{}
	client := run(t, p, "node-a", class("local", LocalName), withSelector, withVAC, withSource, withSourceRef)
	for _, name := range []string{"sel", "vac", "clone", "restore"} {
		eventually(t, "a ProvisioningFailed event on "+name, func() (bool, string) {
			events, err := client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range events.Items {
				if e.InvolvedObject.Name == name && e.Reason == ReasonProvisioningFailed && strings.Contains(e.Message, "not supported") {
					return true, ""
				}
			}
			return false, fmt.Sprint(len(events.Items), " events")
		})
	}
	if made, _ := p.calls(); len(made) != 0 {
		t.Errorf("provisioned %v, want nothing", made)
	}
}

// TestLegacyLocalNameIsServed: a class and claim naming the local
// provisioner's first name, volume-agent.io/local, are provisioned by the
// provisioner now named local.volume-agent.io; the PV keeps the class's
// name (an older agent still knows it as its own) and is deleted by the
// same controller once released.
func TestLegacyLocalNameIsServed(t *testing.T) {
	if Canonical(LegacyLocalName) != LocalName || Canonical(NFSSubdirName) != NFSSubdirName || Canonical("") != "" {
		t.Fatalf("Canonical maps %q to %q", LegacyLocalName, Canonical(LegacyLocalName))
	}
	p := &fakeProvisioner{}
	client := run(t, p, "node-a", class("old", LegacyLocalName), claim("old", "old", LegacyLocalName, "node-a"))
	var pv *v1.PersistentVolume
	eventually(t, "the PV of the claim of the legacy-named class", func() (bool, string) {
		var err error
		pv, err = client.CoreV1().PersistentVolumes().Get(context.Background(), "pvc-uid-old", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	if by := pv.Annotations[AnnProvisionedBy]; by != LegacyLocalName {
		t.Errorf("%s = %q, want the class's %q", AnnProvisionedBy, by, LegacyLocalName)
	}
	p2 := &fakeProvisioner{}
	run(t, p2, "node-a", releasedPV("legacy", LegacyLocalName, "node-a", v1.PersistentVolumeReclaimDelete))
	eventually(t, "the storage of a released PV provisioned by the legacy name deleted", func() (bool, string) {
		_, deleted := p2.calls()
		return slices.Equal(deleted, []string{"legacy"}), fmt.Sprint(deleted)
	})
}

// fakeResumer is a fakeProvisioner with records of unsettled provisionings.
type fakeResumer struct {
	fakeProvisioner
	left                 []Unsettled
	committed, abandoned []string // guarded by fakeProvisioner.mu
}

func (f *fakeResumer) Unsettled(context.Context) ([]Unsettled, error) { return f.left, nil }

func (f *fakeResumer) Commit(_ context.Context, pv *v1.PersistentVolume) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.committed = append(f.committed, pv.Name)
	return nil
}

func (f *fakeResumer) Abandon(_ context.Context, _ Request, pv *v1.PersistentVolume) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.abandoned = append(f.abandoned, pv.Name)
	return "", nil
}

func (f *fakeResumer) settled() (committed, abandoned []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.committed), slices.Clone(f.abandoned)
}

// TestLeftoversSettledAtStart: of three provisionings a crash left
// unsettled, the one whose PV exists is committed, the one whose claim is
// gone (deleted, or deleted and made again with another UID) abandoned,
// and the one whose claim waits is left to its provisioning.
func TestLeftoversSettledAtStart(t *testing.T) {
	unsettled := func(name string) Unsettled {
		return Unsettled{PV: &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-uid-" + name}},
			Claim: &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}}
	}
	p := &fakeResumer{left: []Unsettled{unsettled("made"), unsettled("gone"), unsettled("again"), unsettled("waits")}}
	made := releasedPV("pvc-uid-made", LocalName, "node-a", v1.PersistentVolumeReclaimDelete)
	made.Status.Phase = v1.VolumeBound
	again := claim("again", "local", LocalName, "")
	again.UID = "uid-again-2"
	run(t, p, "node-a", class("local", LocalName), made, again, claim("waits", "local", LocalName, ""))
	eventually(t, "leftovers settled", func() (bool, string) {
		committed, abandoned := p.settled()
		return slices.Equal(committed, []string{"pvc-uid-made"}) && slices.Equal(abandoned, []string{"pvc-uid-gone", "pvc-uid-again"}),
			fmt.Sprintf("committed %v, abandoned %v", committed, abandoned)
	})
}

// TestBackoffAtMostAMinute: a claim whose provisioning keeps failing (on a
// cause the operator fixes, such as quotas off) is tried again at least
// once a minute, so the fix is taken up within a minute, with no restart.
func TestBackoffAtMostAMinute(t *testing.T) {
	rl := newRateLimiter()
	k := key{namespace: "default", name: "data"}
	var last time.Duration
	for range 30 {
		last = rl.When(k)
	}
	if last != time.Minute {
		t.Errorf("backoff after 30 failures %v; want a minute", last)
	}
}
