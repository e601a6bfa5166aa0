package binder

import (
	"fmt"
	"time"

	"github.com/volume-agent/volume-agent/internal/reclaim"
)

// settleReleased decides on every Released record: bound again when its
// claim is back (its storage restored first when it was moved aside),
// dropped once its storage is deleted or once its static PersistentVolume
// has stayed removed for the reclaim delay, and, for storage the binder
// provisioned with reclaim policy Delete, moved aside and deleted as
// package reclaim decides. A record whose deletion began is never bound
// again, even to the claim that released it.
func (o *outcome) settleReleased(w world) {
	claims := w.claimSet()
	for _, r := range o.recs.sorted() {
		if r.Phase != PhaseReleased {
			continue
		}
		back := claims[r.claim()]
		switch {
		case w.ops.deleted[r.PV]:
			o.drop(r, "storage of released PersistentVolume deleted; binding dropped")
		case back && w.ops.restored[r.PV]:
			o.rebind(r, "claim bound again to the PersistentVolume it released; its storage is restored")
		case back && r.Reclaim.Step == reclaim.Released:
			o.rebind(r, "claim bound again to the PersistentVolume it released")
		case r.deletable() && w.provisioners[r.provisionedBy()]:
			o.reclaimStorage(w, r, back)
		case back:
			o.pending[r.claim()] = fmt.Sprintf("the PersistentVolume %q it released is pending deletion (%s), "+
				"and this agent does not run its provisioner %q to restore it", r.PV, r.Reclaim.Step, r.provisionedBy())
		case r.Provisioned == nil && o.pvRemoved(w, r.PV):
			o.drop(r, "binding dropped: its PersistentVolume has stayed removed from the manifests for the reclaim delay")
		}
	}
}

// rebind binds r to its claim again, its storage in place.
func (o *outcome) rebind(r record, msg string) {
	r.ReleasedAt, r.Reclaim = time.Time{}, reclaim.State{}
	o.set(r, PhaseBound, msg)
}

// reclaimStorage takes the storage of the Released, deletable record r one
// step further (reclaim.Next): the step is recorded first, and the driver
// runs the action once it is on disk. back says that r's claim is in the
// source again.
func (o *outcome) reclaimStorage(w world, r record, back bool) {
	busy := w.busy(r.PV)
	o.waitsOnUse = o.waitsOnUse || busy
	next, action := reclaim.Next(r.Reclaim, reclaim.Facts{Now: w.now, Delay: w.delay, Wanted: back, InUse: busy,
		MovedAside: w.ops.asided[r.PV]})
	if next != r.Reclaim {
		r.Reclaim = next
		o.recs[r.PV] = r
		o.events = append(o.events, event{msg: stepMessage(next), claim: r.claim(), pv: r.PV})
	}
	if due := reclaim.Due(next); due.After(w.now) { // past due waits for an operation or a teardown, which wake the loop
		o.dueAt(due)
	}
	if back {
		o.pending[r.claim()] = backWhile(r)
	}
	if action != reclaim.Wait {
		o.storage = append(o.storage, storageOp{action: action, provisioner: r.provisionedBy(), pv: r.Provisioned})
	}
}

func stepMessage(s reclaim.State) string {
	if s.Step == reclaim.Deleting {
		return "released storage is being deleted"
	}
	return "released storage set aside until its deletion"
}

// backWhile says why a claim back in the source waits for r, its Released
// record.
func backWhile(r record) string {
	if reclaim.Restorable(r.Reclaim) {
		return fmt.Sprintf("the PersistentVolume %q it released is being restored from pending deletion", r.PV)
	}
	return fmt.Sprintf("the PersistentVolume %q it released is being deleted (reclaim policy Delete); "+
		"the claim is provisioned again once it is gone", r.PV)
}
