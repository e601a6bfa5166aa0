package provisioner

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func getPV(t *testing.T, client *fake.Clientset, name string) (*v1.PersistentVolume, error) {
	t.Helper()
	return client.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
}

// A released PV with policy Delete is first recorded Aside with its
// deleteAfter, then its storage moved aside; nothing is deleted before the
// delay. Its reclaim policy set to Retain restores the storage and clears
// the record; the PV stays Released, as Kubernetes leaves a Retain PV.
func TestReleasedStorageWaitsForTheDelayAndCanBeRestored(t *testing.T) {
	p := &fakeProvisioner{}
	start := time.Now()
	client, _ := runWith(t, Config{Provisioner: p, Node: "node-a", ReclaimDelay: time.Hour},
		releasedPV("gone", LocalName, "node-a", v1.PersistentVolumeReclaimDelete))
	eventually(t, "moved aside", func() (bool, string) {
		aside, _ := p.reclaims()
		return len(aside) == 1, fmt.Sprint(aside)
	})
	pv, err := getPV(t, client, "gone")
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339, pv.Annotations[AnnDeleteAfter])
	if pv.Annotations[AnnReclaimStep] != "Aside" || err != nil || at.Before(start.Add(time.Hour-2*time.Second)) || at.After(time.Now().Add(time.Hour)) {
		t.Errorf("annotations %v; want step Aside and deleteAfter an hour from now", pv.Annotations)
	}
	time.Sleep(100 * time.Millisecond)
	if _, deleted := p.calls(); len(deleted) != 0 {
		t.Fatalf("deleted before the delay: %v", deleted)
	}

	pv.Spec.PersistentVolumeReclaimPolicy = v1.PersistentVolumeReclaimRetain
	if _, err := client.CoreV1().PersistentVolumes().Update(context.Background(), pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "restored and the record cleared", func() (bool, string) {
		pv, err := getPV(t, client, "gone")
		_, restored := p.reclaims()
		_, step := pv.Annotations[AnnReclaimStep]
		_, after := pv.Annotations[AnnDeleteAfter]
		return err == nil && len(restored) == 1 && !step && !after, fmt.Sprint(restored, pv.Annotations, err)
	})
	if _, deleted := p.calls(); len(deleted) != 0 {
		t.Errorf("deleted although restored: %v", deleted)
	}
}

// A step recorded by an earlier run is finished while the PV is Released
// with policy Delete: Deleting deletes the storage and the PV; Aside past
// its deleteAfter is deleted. An unknown step is not acted on.
func TestRecordedStepsAreFinished(t *testing.T) {
	deleting := releasedPV("deleting", LocalName, "node-a", v1.PersistentVolumeReclaimDelete)
	deleting.Annotations[AnnReclaimStep] = "Deleting"
	due := releasedPV("due", LocalName, "node-a", v1.PersistentVolumeReclaimDelete)
	due.Annotations[AnnReclaimStep] = "Aside"
	due.Annotations[AnnDeleteAfter] = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	unknown := releasedPV("unknown", LocalName, "node-a", v1.PersistentVolumeReclaimDelete)
	unknown.Annotations[AnnReclaimStep] = "Shredding"
	p := &fakeProvisioner{}
	client, _ := runWith(t, Config{Provisioner: p, Node: "node-a", ReclaimDelay: time.Hour}, deleting, due, unknown)
	for _, name := range []string{"deleting", "due"} {
		eventually(t, name+" deleted", func() (bool, string) {
			_, err := getPV(t, client, name)
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	}
	time.Sleep(100 * time.Millisecond)
	if _, deleted := p.calls(); len(deleted) != 2 {
		t.Errorf("storage deleted for %v, want deleting and due", deleted)
	}
	if _, err := getPV(t, client, "unknown"); err != nil {
		t.Errorf("a PV with an unknown step was touched: %v", err)
	}
}

// A recorded step never overrides the PV's live state (evidence.Step): a
// step written on a PV that is Bound, or whose policy is Retain, and
// storage aside whose PV is now bound to another claim or to none, are
// left as they are; each PV says why (AnnReclaimRefused) and gets one
// Warning event.
func TestRecordedStepsNeverOverrideLiveFacts(t *testing.T) {
	live := claim("live", "local", LocalName, "node-a")
	live.Status.Phase = v1.ClaimBound
	bound := func(name string, policy v1.PersistentVolumeReclaimPolicy, step string) *v1.PersistentVolume {
		pv := releasedPV(name, LocalName, "node-a", policy)
		pv.Status.Phase = v1.VolumeBound
		pv.Spec.ClaimRef = &v1.ObjectReference{Namespace: "ns", Name: "live", UID: live.UID}
		pv.Annotations[AnnReclaimStep] = step
		if step == "Aside" {
			pv.Annotations[AnnDeleteAfter] = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
		}
		return pv
	}
	retained := releasedPV("retained", LocalName, "node-a", v1.PersistentVolumeReclaimRetain)
	retained.Annotations[AnnReclaimStep] = "Deleting"
	rebound := bound("rebound", v1.PersistentVolumeReclaimRetain, "Aside")
	rebound.Annotations[AnnReleasedBy] = "uid-released-rebound"
	cleared := releasedPV("cleared", LocalName, "node-a", v1.PersistentVolumeReclaimDelete)
	cleared.Status.Phase, cleared.Spec.ClaimRef = v1.VolumeAvailable, nil
	cleared.Annotations[AnnReclaimStep] = "Aside"
	cleared.Annotations[AnnDeleteAfter] = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	cleared.Annotations[AnnReleasedBy] = "uid-released-cleared"
	pvs := map[string]string{ // name: a part of the reason
		"bound-delete": "is not Released", "bound-retain": "has a reclaim policy other than Delete",
		"bound-aside": "the claim that released it is not recorded", "retained": "has a reclaim policy other than Delete",
		"rebound": "not to the claim that released it (UID uid-released-rebound)", "cleared": "names no claim now",
	}
	p := &fakeProvisioner{}
	client, _ := runWith(t, Config{Provisioner: p, Node: "node-a"}, class("local", LocalName), live,
		bound("bound-delete", v1.PersistentVolumeReclaimDelete, "Deleting"), bound("bound-retain", v1.PersistentVolumeReclaimRetain, "Deleting"),
		bound("bound-aside", v1.PersistentVolumeReclaimDelete, "Aside"), retained, rebound, cleared)
	for name, why := range pvs {
		eventually(t, name+" refused, and why recorded", func() (bool, string) {
			pv, err := getPV(t, client, name)
			return err == nil && strings.Contains(pv.Annotations[AnnReclaimRefused], why), fmt.Sprint(pv.Annotations, err)
		})
	}
	eventually(t, "one event per refused PV", func() (bool, string) {
		list, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		var got []string
		for _, e := range list.Items {
			if e.Reason == ReasonVolumeReclaimRefused && e.Type == v1.EventTypeWarning && e.Count <= 1 {
				got = append(got, e.InvolvedObject.Name)
			}
		}
		return err == nil && len(got) == len(pvs), fmt.Sprint(got, err)
	})
	time.Sleep(100 * time.Millisecond)
	_, deleted := p.calls()
	aside, restored := p.reclaims()
	if len(deleted)+len(aside)+len(restored) != 0 {
		t.Errorf("storage deleted for %v, moved aside for %v, restored for %v; want nothing done", deleted, aside, restored)
	}

	// The step removed, the reason goes with it.
	patch := fmt.Sprintf(`{"metadata": {"annotations": {%q: null}}}`, AnnReclaimStep)
	if _, err := client.CoreV1().PersistentVolumes().Patch(context.Background(), "bound-delete", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the reason removed with the step", func() (bool, string) {
		pv, err := getPV(t, client, "bound-delete")
		_, refused := pv.Annotations[AnnReclaimRefused]
		return err == nil && !refused, fmt.Sprint(pv.Annotations, err)
	})
}

// Before it deletes, the controller reads the PV again from the API
// server: a PV whose cached copy is Released with policy Delete, but
// whose policy is Retain there, is refused, not deleted.
func TestDeletionIsConfirmedByTheAPIServer(t *testing.T) {
	stale := releasedPV("stale", LocalName, "node-a", v1.PersistentVolumeReclaimDelete)
	stale.Annotations[AnnReclaimStep] = "Deleting"
	stale.Annotations[AnnReleasedBy] = "uid-released-stale"
	client := fake.NewClientset(stale)
	var gets atomic.Int32
	client.PrependReactor("get", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() != "stale" {
			return false, nil, nil
		}
		gets.Add(1)
		now := stale.DeepCopy()
		now.Spec.PersistentVolumeReclaimPolicy = v1.PersistentVolumeReclaimRetain
		return true, now, nil
	})
	p := &fakeProvisioner{}
	start(t, client, Config{Provisioner: p, Node: "node-a"})
	eventually(t, "the deletion refused", func() (bool, string) {
		obj, err := client.Tracker().Get(v1.SchemeGroupVersion.WithResource("persistentvolumes"), "", "stale") // not through the reactor
		if err != nil {
			return false, err.Error()
		}
		ann := obj.(*v1.PersistentVolume).Annotations
		return strings.Contains(ann[AnnReclaimRefused], "reclaim policy other than Delete"), fmt.Sprint(ann)
	})
	if _, deleted := p.calls(); len(deleted) != 0 || gets.Load() == 0 {
		t.Errorf("storage deleted for %v after %d reads of the PV; want none deleted after a read", deleted, gets.Load())
	}
}

// Nothing is moved or deleted while a pod on this node has the PV set up;
// NotifyActual after the teardown lets it go on.
func TestNothingIsReclaimedWhileInUse(t *testing.T) {
	var busy atomic.Bool
	busy.Store(true)
	p := &fakeProvisioner{}
	client, c := runWith(t, Config{Provisioner: p, Node: "node-a", InUse: func(string) bool { return busy.Load() }},
		releasedPV("gone", LocalName, "node-a", v1.PersistentVolumeReclaimDelete))
	time.Sleep(200 * time.Millisecond)
	if aside, _ := p.reclaims(); len(aside) != 0 {
		t.Fatalf("moved aside while in use: %v", aside)
	}
	if pv, err := getPV(t, client, "gone"); err != nil || pv.Annotations[AnnReclaimStep] != "" {
		t.Fatalf("a step recorded while in use: %v, %v", pv.Annotations, err)
	}
	busy.Store(false)
	c.NotifyActual()
	eventually(t, "deleted", func() (bool, string) {
		_, err := getPV(t, client, "gone")
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// The claims' watch may deliver a claim's deletion after the PVs' watch
// delivered its PV's release: the PV, refused while the cache still held
// its claim, is reclaimed once the cache shows the claim gone, not at the
// informers' resync ten minutes later (the in-tree PV a real-node run
// once left for five minutes).
func TestReleaseSeenBeforeTheClaimsDeletion(t *testing.T) {
	p := &fakeProvisioner{}
	pv := releasedPV("gone", LegacyLocalName, "node-a", v1.PersistentVolumeReclaimDelete)
	pv.Status.Phase = v1.VolumeBound
	cl := claim("released-gone", "local", LegacyLocalName, "node-a")
	cl.UID, cl.Spec.VolumeName, cl.Status.Phase = pv.Spec.ClaimRef.UID, pv.Name, v1.ClaimBound
	client, c := runWith(t, Config{Provisioner: p, Node: "node-a"}, pv, cl)
	ctx := context.Background()

	pv.Status.Phase = v1.VolumeReleased
	if _, err := client.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the release synced with the claim still in the cache", func() (bool, string) {
		got, err := c.pvs.Get("gone")
		return err == nil && got.Status.Phase == v1.VolumeReleased && c.queue.Len() == 0, fmt.Sprint(got, err, c.queue.Len())
	})
	time.Sleep(200 * time.Millisecond)
	if aside, _ := p.reclaims(); len(aside) != 0 {
		t.Fatalf("moved aside while its claim exists: %v", aside)
	}

	if err := client.CoreV1().PersistentVolumeClaims("ns").Delete(ctx, cl.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the released PV deleted once its claim's deletion is seen", func() (bool, string) {
		_, err := getPV(t, client, "gone")
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// A pod's teardown that ends just after syncPV read InUse (true) calls
// NotifyActual before syncPV has recorded the PV as waiting for it: the
// PV is looked at again all the same, not at the informers' resync ten
// minutes later.
func TestTeardownEndingDuringTheInUseReadIsNotLost(t *testing.T) {
	var c *Controller
	var reads atomic.Int32
	inUse := func(string) bool {
		if reads.Add(1) == 1 {
			c.NotifyActual() // the teardown ends right after this read
			return true
		}
		return false
	}
	p := &fakeProvisioner{}
	client := fake.NewClientset(releasedPV("gone", LocalName, "node-a", v1.PersistentVolumeReclaimDelete))
	c, err := New(Config{Provisioner: p, Node: "node-a", InUse: inUse, Client: client, Logger: zap.NewNop()})
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
	eventually(t, "deleted", func() (bool, string) {
		_, err := getPV(t, client, "gone")
		return apierrors.IsNotFound(err), fmt.Sprint(err, " after ", reads.Load(), " reads of InUse")
	})
}
