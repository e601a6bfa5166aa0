package provisioner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// expandingProvisioner is a fakeProvisioner that expands.
type expandingProvisioner struct {
	fakeProvisioner
	xmu      sync.Mutex
	expanded map[string]int64 // guarded by xmu; size by PV name
	err      error            // guarded by xmu
}

var _ Expander = (*expandingProvisioner)(nil)

func (p *expandingProvisioner) Expand(_ context.Context, pv *v1.PersistentVolume, size int64) error {
	p.xmu.Lock()
	defer p.xmu.Unlock()
	if p.err != nil {
		return p.err
	}
	p.expanded[pv.Name] = size
	return nil
}

func (p *expandingProvisioner) sizes() map[string]int64 {
	p.xmu.Lock()
	defer p.xmu.Unlock()
	out := map[string]int64{}
	for k, v := range p.expanded {
		out[k] = v
	}
	return out
}

// boundPair is claim name of class, asking for want, bound to its PV of
// 1Gi on node, made by provisioner.
func boundPair(name, class, provisioner, node, want string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	c := claim(name, class, provisioner, node)
	c.Spec.VolumeName = "pv-" + name
	c.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse(want)
	c.Status = v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + name, Annotations: map[string]string{AnnProvisionedBy: provisioner}},
		Spec: v1.PersistentVolumeSpec{
			Capacity:               v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/data/pv-" + name}},
			ClaimRef:               &v1.ObjectReference{Namespace: c.Namespace, Name: c.Name, UID: c.UID},
			StorageClassName:       class,
			NodeAffinity:           affinity(node),
		},
		Status: v1.PersistentVolumeStatus{Phase: v1.VolumeBound},
	}
	return c, pv
}

func pvCapacity(t *testing.T, client *fake.Clientset, name string) string {
	pv, err := client.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pv.Spec.Capacity.Storage().String()
}

// A bound claim that asks for more is expanded when its PV is this node's,
// made by this provisioner, and its class allows expansion; the PV's and
// the claim's capacity are recorded, and the claim's conditions cleared.
func TestResizesOnlyTheClaimsItServes(t *testing.T) {
	p := &expandingProvisioner{expanded: map[string]int64{}}
	grow := class("grow", LocalName)
	grow.AllowVolumeExpansion = ptr.To(true)
	fixed := class("fixed", LocalName)
	mine, minePV := boundPair("mine", "grow", LocalName, "node-a", "2Gi")
	other, otherPV := boundPair("other", "grow", LocalName, "node-b", "2Gi")
	notAllowed, notAllowedPV := boundPair("fixed", "fixed", LocalName, "node-a", "2Gi")
	client := run(t, p, "node-a", grow, fixed, mine, minePV, other, otherPV, notAllowed, notAllowedPV)
	eventually(t, "the claim expanded", func() (bool, string) {
		c, err := client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "mine", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return c.Status.Capacity.Storage().String() == "2Gi" && len(c.Status.Conditions) == 0 &&
			c.Status.AllocatedResources.Storage().String() == "2Gi", fmt.Sprintf("%+v", c.Status)
	})
	if got := pvCapacity(t, client, "pv-mine"); got != "2Gi" {
		t.Errorf("PV capacity %s, want 2Gi", got)
	}
	time.Sleep(200 * time.Millisecond)
	if got := p.sizes(); len(got) != 1 || got["pv-mine"] != 2<<30 {
		t.Errorf("expanded %v, want pv-mine only", got)
	}
	for _, name := range []string{"pv-other", "pv-fixed"} {
		if got := pvCapacity(t, client, name); got != "1Gi" {
			t.Errorf("%s capacity %s, want 1Gi", name, got)
		}
	}
}

// A request below the PV's capacity is refused with a Warning event.
func TestResizeRefusesShrink(t *testing.T) {
	p := &expandingProvisioner{expanded: map[string]int64{}}
	grow := class("grow", LocalName)
	grow.AllowVolumeExpansion = ptr.To(true)
	c, pv := boundPair("mine", "grow", LocalName, "node-a", "512Mi")
	client := run(t, p, "node-a", grow, c, pv)
	waitEvent(t, client, "is below the capacity 1Gi")
	if got := p.sizes(); len(got) != 0 {
		t.Errorf("expanded %v", got)
	}
}

// A failed growth is a Warning event; the claim stays Resizing and the PV
// keeps its capacity until it succeeds.
func TestResizeFailureKeepsResizing(t *testing.T) {
	p := &expandingProvisioner{expanded: map[string]int64{}, err: errors.New("disk on fire")}
	grow := class("grow", LocalName)
	grow.AllowVolumeExpansion = ptr.To(true)
	c, pv := boundPair("mine", "grow", LocalName, "node-a", "2Gi")
	client := run(t, p, "node-a", grow, c, pv)
	waitEvent(t, client, "disk on fire")
	got, err := client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "mine", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != v1.PersistentVolumeClaimResizing ||
		got.Status.AllocatedResources.Storage().String() != "2Gi" || got.Status.Capacity.Storage().String() != "1Gi" {
		t.Errorf("claim status %+v", got.Status)
	}
	if pvCap := pvCapacity(t, client, "pv-mine"); pvCap != "1Gi" {
		t.Errorf("PV capacity %s, want 1Gi", pvCap)
	}
}

// waitEvent waits for a VolumeResizeFailed Warning whose message contains msg.
func waitEvent(t *testing.T, client *fake.Clientset, msg string) {
	t.Helper()
	eventually(t, "the event", func() (bool, string) {
		evs, _ := client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
		for _, e := range evs.Items {
			if e.Reason == ReasonVolumeResizeFailed && e.Type == v1.EventTypeWarning && strings.Contains(e.Message, msg) {
				return true, ""
			}
		}
		return false, fmt.Sprint(evs.Items)
	})
}

// A claim whose expansion is done, passed again while the informer still
// shows its PV at the old size (the PV's update not seen yet), is left
// done: its capacity kept and no Resizing condition or resize status left
// behind for ever.
func TestResizeDoneWhileThePVCacheLags(t *testing.T) {
	p := &expandingProvisioner{expanded: map[string]int64{}}
	grow := class("grow", LocalName)
	grow.AllowVolumeExpansion = ptr.To(true)
	claim, stale := boundPair("mine", "grow", LocalName, "node-a", "2Gi")
	claim.Status.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi")
	grown := stale.DeepCopy()
	grown.Spec.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi")
	client := fake.NewClientset(grow, claim, grown)
	c, err := New(Config{Client: client, Logger: zap.NewNop(), Provisioner: p, Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		inf interface{ GetStore() cache.Store }
		obj any
	}{{c.factory.Core().V1().PersistentVolumes().Informer(), stale}, {c.factory.Storage().V1().StorageClasses().Informer(), grow}} {
		if err := o.inf.GetStore().Add(o.obj); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.resize(t.Context(), claim); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().PersistentVolumeClaims("ns").Get(t.Context(), "mine", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Capacity.Storage().String() != "2Gi" || len(got.Status.Conditions) != 0 || len(got.Status.AllocatedResourceStatuses) != 0 {
		t.Errorf("claim status %+v; want 2Gi, no Resizing condition, no resize in progress", got.Status)
	}
}
