package binder

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/reclaim"
)

// TestDeleteNowIsRecordedBeforeItBegins: storage aside for an hour is
// deleted at once on request; the step Deleting is in the state file
// before the provisioner is asked, so an agent killed while the deletion
// fails (or runs) finishes it after the restart. A request for a bound
// claim, for another UID of the same name, or for storage not aside is
// refused and records nothing.
func TestDeleteNowIsRecordedBeforeItBegins(t *testing.T) {
	prov := &fakeProvisioner{}
	path := statePath(t)
	h := startWith(t, provInner(), path, []provisioner.Provisioner{prov}, withDelay(time.Hour), fastRetry)
	h.expect("bound", h.boundTo("data", "pvc-u1"))
	ctx := context.Background()
	req := DeleteNowRequest{Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", By: "test"}
	if err := h.b.DeleteNow(ctx, req); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "is Bound, not released") {
		t.Fatalf("DeleteNow of a bound claim = %v, want it refused", err)
	}
	h.update(func(f *fakeInner) { f.claims, f.pods = nil, keepAlive }, "aside", func() bool {
		cs := h.claimStatus("data")
		return len(cs) == 1 && cs[0].PendingDeletion != nil && cs[0].PendingDeletion.Step == "Aside" && cs[0].UID == "u1"
	})
	h.eventually("moved aside", func() bool { return len(prov.moved()) == 1 })
	other := req
	other.UID = "u2" // a new claim of the same name
	if err := h.b.DeleteNow(ctx, other); !errors.Is(err, ErrNoSuchStorage) {
		t.Fatalf("DeleteNow for another UID = %v, want no such storage", err)
	}
	if recs, _ := newStore(path).load(); recs["pvc-u1"].Reclaim.Step != reclaim.Aside {
		t.Fatalf("records %v after refusals; want pvc-u1 still Aside", recs)
	}
	prov.fail(nil, errPartlyDeleted)
	var err error
	h.eventually("the move's result taken in", func() bool {
		err = h.b.DeleteNow(ctx, req)
		return err == nil || !strings.Contains(err.Error(), "under way")
	})
	if err != nil {
		t.Fatalf("DeleteNow = %v", err)
	}
	if recs, _ := newStore(path).load(); recs["pvc-u1"].Reclaim.Step != reclaim.Deleting {
		t.Fatalf("records %v once DeleteNow returned; want pvc-u1 Deleting, recorded", recs)
	}
	h.eventually("deletion failing", func() bool { _, deleted := prov.calls(); return len(deleted) >= 1 })
	h.stop() // as a SIGKILL: the deletion is half done

	prov.fail(nil, nil)
	inner := provInner()
	inner.claims, inner.pods = nil, keepAlive
	h = startWith(t, inner, path, []provisioner.Provisioner{prov}, withDelay(time.Hour), fastRetry)
	h.expect("deleted after the restart", func() bool { return len(h.b.Claims()) == 0 })
	if recs, _ := newStore(path).load(); len(recs) != 0 {
		t.Errorf("records %v; want none once deleted", recs)
	}
}

// TestAsideStepIsLoggedAsSetAside: the Aside step's log line says set
// aside: a volume of enforced capacity (an image's mount, a subvolume) is
// kept in place, and its provisioner logs so for the same step.
func TestAsideStepIsLoggedAsSetAside(t *testing.T) {
	if m := stepMessage(reclaim.State{Step: reclaim.Aside, DeleteAfter: time.Now()}); strings.Contains(m, "moved") || !strings.Contains(m, "set aside") {
		t.Errorf("the Aside step is logged %q, want it set aside, not moved", m)
	}
}
