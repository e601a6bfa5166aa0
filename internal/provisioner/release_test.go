package provisioner

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
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

// A step recorded by an earlier run is finished: Deleting deletes the
// storage and the PV whatever the policy says now; Aside past its
// deleteAfter is deleted.
func TestRecordedStepsAreFinished(t *testing.T) {
	deleting := releasedPV("deleting", LocalName, "node-a", v1.PersistentVolumeReclaimRetain)
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
