package apiserver

import (
	"errors"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// TestClaimsReadByGET: with the claim and PV lists refused, as for a node
// identity, lookups read each object by GET and see it appear, change and
// go without a watch.
func TestClaimsReadByGET(t *testing.T) {
	h := newHarness(t)
	h.denyList("persistentvolumeclaims")
	h.denyList("persistentvolumes")
	h.synced()
	claim := func() (string, error) {
		c, err := h.src.PersistentVolumeClaim("ns", "data")
		if err != nil {
			return "", err
		}
		return string(c.Status.Phase), nil
	}
	h.eventually("claim not found", func() (bool, string) {
		_, err := claim()
		return errors.Is(err, volume.ErrNotFound), fmt.Sprint(err)
	})
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data"}, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending}}
	h.create(pvc)
	h.eventually("claim Pending", func() (bool, string) {
		phase, err := claim()
		return phase == "Pending", fmt.Sprint(phase, err)
	})
	pvc.Status.Phase = v1.ClaimBound
	h.update(pvc)
	h.eventuallyWithin(10*time.Second, "claim Bound", func() (bool, string) {
		phase, err := claim()
		return phase == "Bound", fmt.Sprint(phase, err)
	})
	h.create(&v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}})
	h.eventually("PV found", func() (bool, string) {
		_, err := h.src.PersistentVolume("pv-1")
		return err == nil, fmt.Sprint(err)
	})
	if errs := h.src.watchErrors(); len(errs) != 0 {
		t.Errorf("watch errors %v, want none once claims and PVs are read by GET", errs)
	}
}
