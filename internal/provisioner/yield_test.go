package provisioner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// csiPV is a CSI PV of the local driver, as the external-provisioner makes
// it: provisioned-by the driver's name, with its finalizer.
func csiPV(name, node string) *v1.PersistentVolume {
	pv := releasedPV(name, LocalName, node, v1.PersistentVolumeReclaimDelete)
	pv.Spec.Local = nil
	pv.Spec.CSI = &v1.CSIPersistentVolumeSource{Driver: LocalName, VolumeHandle: "ns-" + name}
	pv.Finalizers = []string{FinalizerExternalProvisioner}
	return pv
}

// finalized adds the external-provisioner's finalizer (and the PV
// protection one) to pv.
func finalized(pv *v1.PersistentVolume) *v1.PersistentVolume {
	pv.Finalizers = []string{"kubernetes.io/pv-protection", FinalizerExternalProvisioner}
	return pv
}

func TestKeepPlan(t *testing.T) {
	terminating := finalized(releasedPV("t", LocalName, "node-a", v1.PersistentVolumeReclaimDelete))
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	for _, tc := range []struct {
		name                   string
		pv                     *v1.PersistentVolume
		provisioner, node      string
		reannotate, unfinalize bool
	}{
		{"in-tree local of the driver's name, finalized", finalized(releasedPV("a", LocalName, "node-a", v1.PersistentVolumeReclaimDelete)), LocalName, "node-a", true, true},
		{"in-tree local of the driver's name", releasedPV("a", LocalName, "node-a", v1.PersistentVolumeReclaimDelete), LocalName, "node-a", true, false},
		{"in-tree local of the legacy name, finalized", finalized(releasedPV("a", LegacyLocalName, "node-a", v1.PersistentVolumeReclaimDelete)), LocalName, "node-a", false, true},
		{"in-tree local of the legacy name", releasedPV("a", LegacyLocalName, "node-a", v1.PersistentVolumeReclaimDelete), LocalName, "node-a", false, false},
		{"terminating in-tree local", terminating, LocalName, "node-a", true, true},
		{"CSI PV", csiPV("a", "node-a"), LocalName, "node-a", false, false},
		{"another node's", finalized(releasedPV("a", LocalName, "node-b", v1.PersistentVolumeReclaimDelete)), LocalName, "node-a", false, false},
		{"another provisioner's", finalized(releasedPV("a", "example.com/other", "node-a", v1.PersistentVolumeReclaimDelete)), LocalName, "node-a", false, false},
		{"a provisioner without a legacy name", finalized(releasedPV("a", NFSSubdirName, "node-a", v1.PersistentVolumeReclaimDelete)), NFSSubdirName, "node-a", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			re, un := keepPlan(tc.pv, tc.provisioner, legacyName(tc.provisioner), tc.node)
			if re != tc.reannotate || un != tc.unfinalize {
				t.Errorf("keepPlan = %v, %v; want %v, %v", re, un, tc.reannotate, tc.unfinalize)
			}
		})
	}
}

func TestKept(t *testing.T) {
	pv := finalized(releasedPV("a", LocalName, "node-a", v1.PersistentVolumeReclaimDelete))
	pv.ResourceVersion = "42"
	got, did := kept(pv, LegacyLocalName, true, true)
	if got.ResourceVersion != "42" || got.Annotations[AnnProvisionedBy] != LegacyLocalName || got.Annotations[AnnArchiveOnDelete] != pv.Annotations[AnnArchiveOnDelete] ||
		!slices.Equal(got.Finalizers, []string{"kubernetes.io/pv-protection"}) {
		t.Errorf("kept = %+v", got.ObjectMeta)
	}
	if pv.Annotations[AnnProvisionedBy] != LocalName || len(pv.Finalizers) != 2 {
		t.Errorf("the PV read was changed: %+v", pv.ObjectMeta)
	}
	if !strings.Contains(did, LegacyLocalName) || !strings.Contains(did, FinalizerExternalProvisioner) {
		t.Errorf("described as %q", did)
	}
	// The finalizer alone: the annotation stays.
	if got, did := kept(pv, LegacyLocalName, false, true); got.Annotations[AnnProvisionedBy] != LocalName || strings.Contains(did, "annotation") {
		t.Errorf("kept without re-annotation = %v, %q", got.Annotations, did)
	}
}

func TestCSIDriverMustBeTheLocalProvisioner(t *testing.T) {
	client := fake.NewClientset()
	for _, cfg := range []Config{
		{Client: client, Provisioner: &fakeProvisioner{}, CSIDriver: LegacyLocalName},
		{Client: client, Provisioner: &fakeProvisioner{}, CSIDriver: "example.com/other"},
	} {
		cfg.Logger = zap.NewNop()
		if _, err := New(cfg); err == nil {
			t.Errorf("New accepted CSIDriver %q", cfg.CSIDriver)
		}
	}
}

// With the CSI driver on, the claims naming it are the external-
// provisioner's: no PV, no event; those naming the legacy name are still
// provisioned here, with in-tree PVs that name it.
func TestCSIDriverClaimsAreLeftToTheExternalProvisioner(t *testing.T) {
	p := &fakeProvisioner{}
	client, _ := runWith(t, Config{Provisioner: p, Node: "node-a", CSIDriver: LocalName},
		class("csi", LocalName), class("old", LegacyLocalName),
		claim("csi", "csi", LocalName, "node-a"), claim("old", "old", LegacyLocalName, "node-a"))
	var pv *v1.PersistentVolume
	eventually(t, "the PV of the legacy-named claim", func() (bool, string) {
		var err error
		pv, err = getPV(t, client, "pvc-uid-old")
		return err == nil, fmt.Sprint(err)
	})
	if by := pv.Annotations[AnnProvisionedBy]; by != LegacyLocalName || pv.Spec.Local == nil {
		t.Errorf("PV of the legacy-named claim: %s = %q, source %+v", AnnProvisionedBy, by, pv.Spec.PersistentVolumeSource)
	}
	time.Sleep(200 * time.Millisecond) // the CSI claim would be provisioned by now
	if made, _ := p.calls(); !slices.Equal(made, []string{"pvc-uid-old"}) {
		t.Errorf("provisioned %v, want only pvc-uid-old", made)
	}
	if _, err := getPV(t, client, "pvc-uid-csi"); !apierrors.IsNotFound(err) {
		t.Errorf("a PV for the CSI driver's claim: %v", err)
	}
	events, _ := client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	for _, e := range events.Items {
		if e.InvolvedObject.Name == "csi" {
			t.Errorf("event on the CSI driver's claim: %s %s", e.Reason, e.Message)
		}
	}
}

// Without the CSI driver, both names are served, as before.
func TestWithoutCSIDriverBothNamesAreServed(t *testing.T) {
	p := &fakeProvisioner{}
	client := run(t, p, "node-a", class("csi", LocalName), class("old", LegacyLocalName),
		claim("csi", "csi", LocalName, "node-a"), claim("old", "old", LegacyLocalName, "node-a"))
	for _, name := range []string{"pvc-uid-csi", "pvc-uid-old"} {
		eventually(t, "PV "+name, func() (bool, string) {
			_, err := getPV(t, client, name)
			return err == nil, fmt.Sprint(err)
		})
	}
}

// A claim naming the legacy name whose class (made again under its name)
// names the CSI driver is served by neither: a Warning says so.
func TestClaimAndClassDisagreeing(t *testing.T) {
	p := &fakeProvisioner{}
	client, _ := runWith(t, Config{Provisioner: p, Node: "node-a", CSIDriver: LocalName},
		class("c", LocalName), claim("mixed", "c", LegacyLocalName, "node-a"))
	eventually(t, "a ProvisioningFailed event", func() (bool, string) {
		events, _ := client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
		for _, e := range events.Items {
			if e.InvolvedObject.Name == "mixed" && e.Reason == ReasonProvisioningFailed && strings.Contains(e.Message, "recreate the claim") {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(events.Items), " events")
	})
	if made, _ := p.calls(); len(made) != 0 {
		t.Errorf("provisioned %v", made)
	}
}

// updates records the names of the PVs the controller updates.
func updates(client *fake.Clientset) func() []string {
	var mu sync.Mutex
	var got []string // guarded by mu
	client.PrependReactor("update", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if a.GetSubresource() == "" {
			got = append(got, a.(k8stesting.UpdateAction).GetObject().(*v1.PersistentVolume).Name)
		}
		return false, nil, nil
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// With the CSI driver on, the in-tree local PVs of this node that name the
// driver are made to name the legacy name, and the external-provisioner's
// finalizer goes from every in-tree PV of this node's provisioner; a CSI
// PV, another node's and another provisioner's are left alone. A released
// one is then reclaimed as ever.
func TestInTreePVsAreKeptFromTheExternalProvisioner(t *testing.T) {
	bound := finalized(releasedPV("bound", LocalName, "node-a", v1.PersistentVolumeReclaimDelete))
	bound.Status.Phase = v1.VolumeBound
	legacy := finalized(releasedPV("legacy", LegacyLocalName, "node-a", v1.PersistentVolumeReclaimRetain))
	terminating := finalized(releasedPV("terminating", LocalName, "node-a", v1.PersistentVolumeReclaimDelete))
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	untouched := []*v1.PersistentVolume{
		csiPV("csi", "node-a"),
		finalized(releasedPV("elsewhere", LocalName, "node-b", v1.PersistentVolumeReclaimRetain)),
		finalized(releasedPV("foreign", "example.com/other", "node-a", v1.PersistentVolumeReclaimRetain)),
	}
	objs := []runtime.Object{bound, legacy, terminating,
		finalized(releasedPV("released", LocalName, "node-a", v1.PersistentVolumeReclaimDelete))}
	for _, pv := range untouched {
		objs = append(objs, pv.DeepCopy())
	}
	p := &fakeProvisioner{}
	client := fake.NewClientset(objs...)
	updated := updates(client)
	start(t, client, Config{Provisioner: p, Node: "node-a", CSIDriver: LocalName})

	for _, tc := range []struct{ name, by string }{{"bound", LegacyLocalName}, {"legacy", LegacyLocalName}, {"terminating", LegacyLocalName}} {
		eventually(t, tc.name+" kept from the external-provisioner", func() (bool, string) {
			pv, err := getPV(t, client, tc.name)
			return err == nil && pv.Annotations[AnnProvisionedBy] == tc.by && !slices.Contains(pv.Finalizers, FinalizerExternalProvisioner) &&
				slices.Contains(pv.Finalizers, "kubernetes.io/pv-protection"), fmt.Sprint(pv.Annotations, pv.Finalizers, err)
		})
	}
	eventually(t, "the released PV reclaimed", func() (bool, string) {
		_, err := getPV(t, client, "released")
		_, deleted := p.calls()
		return apierrors.IsNotFound(err) && slices.Equal(deleted, []string{"released"}), fmt.Sprint(deleted, err)
	})
	eventually(t, "an event on each PV kept", func() (bool, string) {
		events, _ := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		var on []string
		for _, e := range events.Items {
			if e.Reason == ReasonKeptFromCSIDriver {
				on = append(on, e.InvolvedObject.Name)
			}
		}
		slices.Sort(on)
		return slices.Equal(on, []string{"bound", "legacy", "released", "terminating"}), fmt.Sprint(on)
	})
	for _, want := range untouched {
		pv, err := getPV(t, client, want.Name)
		if err != nil || pv.Annotations[AnnProvisionedBy] != want.Annotations[AnnProvisionedBy] || !slices.Equal(pv.Finalizers, want.Finalizers) {
			t.Errorf("%s changed: %v %v %v", want.Name, pv.Annotations, pv.Finalizers, err)
		}
	}
	for _, name := range updated() {
		if slices.ContainsFunc(untouched, func(pv *v1.PersistentVolume) bool { return pv.Name == name }) {
			t.Errorf("%s updated", name)
		}
	}
	// Idempotent: once kept, a PV is left as it is; an update of it
	// enqueues it again and changes nothing (one event each, seen once).
	for _, name := range []string{"bound", "legacy", "terminating"} {
		pv, _ := getPV(t, client, name)
		pv.Labels = map[string]string{"touch": "1"}
		if _, err := client.CoreV1().PersistentVolumes().Update(context.Background(), pv, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	events, _ := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	for _, e := range events.Items {
		if e.Reason == ReasonKeptFromCSIDriver && e.Count > 1 {
			t.Errorf("%s kept %d times", e.InvolvedObject.Name, e.Count)
		}
	}
	for _, name := range []string{"bound", "legacy", "terminating"} {
		if pv, err := getPV(t, client, name); err != nil || pv.Labels["touch"] != "1" || pv.Annotations[AnnProvisionedBy] != LegacyLocalName {
			t.Errorf("%s after the touch: %v %v %v", name, pv.Labels, pv.Annotations, err)
		}
	}
}

// Without the CSI driver, in-tree PVs are not re-annotated and no
// finalizer is removed.
func TestWithoutCSIDriverPVsAreNotChanged(t *testing.T) {
	bound := finalized(releasedPV("bound", LocalName, "node-a", v1.PersistentVolumeReclaimDelete))
	bound.Status.Phase = v1.VolumeBound
	client := fake.NewClientset(bound)
	updated := updates(client)
	start(t, client, Config{Provisioner: &fakeProvisioner{}, Node: "node-a"})
	time.Sleep(300 * time.Millisecond)
	if got := updated(); len(got) != 0 {
		t.Errorf("updated %v", got)
	}
}

// A CSI PV carries the driver's name as provisioned-by, as the agent's own
// PVs do; it is the driver's (DeleteVolume) to delete, never this
// controller's, whether the CSI driver is on or not.
func TestCSIPVsAreNeverReclaimedHere(t *testing.T) {
	for _, driver := range []string{"", LocalName} {
		p := &fakeProvisioner{}
		client, _ := runWith(t, Config{Provisioner: p, Node: "node-a", CSIDriver: driver}, csiPV("csi", "node-a"),
			releasedPV("gone", LocalName, "node-a", v1.PersistentVolumeReclaimDelete))
		eventually(t, "the in-tree PV reclaimed", func() (bool, string) {
			_, deleted := p.calls()
			return slices.Equal(deleted, []string{"gone"}), fmt.Sprint(deleted)
		})
		time.Sleep(100 * time.Millisecond)
		pv, err := getPV(t, client, "csi")
		if aside, _ := p.reclaims(); err != nil || len(aside) != 1 || pv.Annotations[AnnReclaimStep] != "" {
			t.Errorf("CSIDriver %q: the CSI PV was reclaimed: %v, aside %v, %v", driver, err, aside, pv.Annotations)
		}
	}
}
