package binder

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/volume-agent/volume-agent/internal/evidence"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
)

// pass runs one binding pass and reports whether the binder's state
// changed. It binds nothing until the inner source is synced: a
// PersistentVolume may be in a file that has not parsed yet; meanwhile
// every claim without a binding says so, naming what the source waits for
// (waitingForSource). The records
// plan decides are written before they are published, so no view shows a
// binding that is not on disk. The provisioning operations plan asks for
// start only once its records are on disk: a deletion only for a release
// that is recorded.
func (s *Source) pass(ctx context.Context) bool {
	prev := s.current()
	st := s.inner.Status()
	if !st.Synced {
		return s.publish(waitingForSource(prev, withMade(s.inner.PersistentVolumeClaims(), prev.made, s.inner.Pods()), st))
	}
	w := world{
		listing:      evidence.Listing{Source: st.Name, Synced: st.Synced, Authoritative: st.Authoritative, Since: st.ListingSince},
		pods:         s.inner.Pods(),
		claims:       s.inner.PersistentVolumeClaims(),
		pvs:          s.inner.PersistentVolumes(),
		node:         thisNode(s.inner.Node(), s.nodeName),
		classes:      classesByName(s.inner.StorageClasses()),
		provisioners: s.ops.names(),
		expanders:    s.ops.expanders(),
		ops:          s.ops.st,
		now:          time.Now(),
		settle:       s.settle,
		delay:        s.delay,
		inUse:        s.inUse,
		newNonce:     s.newNonce,
		snapshots:    s.inner.VolumeSnapshots(),
		snapClasses:  snapshotClassesByName(s.inner.VolumeSnapshotClasses()),
		snapshotters: s.ops.snapshotterNames(),
		snapRecs:     prev.snaps,
	}
	made, refused := makeClaims(w, prev.made, prev.recs)
	w.claims, w.made = withMade(w.claims, made, w.pods), made
	s.obs = observe(s.obs, w, prev.recs)
	w.obs = s.obs
	o := plan(w, prev.recs)
	s.due = o.due
	s.waitsOnUse.Store(o.waitsOnUse)
	next := &state{recs: prev.recs, made: prev.made, snaps: prev.snaps, refused: refused, pending: o.pending, held: o.held, resizing: o.resizing,
		snapPending: o.snapPending, snapHeld: o.snapHeld, synced: true}
	recorded := true
	if !maps.Equal(o.recs, prev.recs) || !maps.Equal(made, prev.made) || !maps.Equal(o.snaps, prev.snaps) {
		if err := s.store.saveState(o.recs, made, o.snaps); err != nil {
			recorded = false
			next.writeErr = err.Error()
			notRecorded(o, prev.recs, next.pending, err)
			s.log.Warn("claim bindings not recorded", zap.Error(err))
		} else {
			next.recs, next.made, next.snaps = o.recs, made, o.snaps
			s.logMade(prev.made, made)
			s.logEvents(o.events)
		}
	}
	next.listed = withMade(nil, next.made, w.pods)
	if recorded {
		s.ops.recorded(o.recs, o.snaps)
		s.ops.start(ctx, o)
	}
	next.lost = lostClaims(next.recs, w)
	s.logChanges(prev, next)
	s.logRefused(prev.refused, next.refused)
	return s.publish(next)
}

// waitingForSource is prev with every claim that has no Bound record
// pending because the inner source is not synced (st): binding waits, and
// says for which files and why, rather than leave claims Pending in
// silence.
func waitingForSource(prev *state, claims []*v1.PersistentVolumeClaim, st source.Status) *state {
	why := "claims are bound once every manifest file has parsed; " + st.Reason
	if len(st.Errors) > 0 {
		why += " (" + strings.Join(st.Errors, "; ") + ")"
	}
	next := *prev
	next.pending = map[claimKey]string{}
	for _, c := range claims {
		if _, ok := prev.recs.bound(keyOf(c)); !ok {
			next.pending[keyOf(c)] = why
		}
	}
	return &next
}

func classesByName(classes []*storagev1.StorageClass) map[string]*storagev1.StorageClass {
	byName := make(map[string]*storagev1.StorageClass, len(classes))
	for _, c := range classes {
		byName[c.Name] = c
	}
	return byName
}

// notRecorded marks the claims that o would have bound, or begun to
// provision, Pending, with err.
func notRecorded(o outcome, prev records, pending map[claimKey]string, err error) {
	for _, r := range o.recs {
		_, had := prev[r.PV]
		if _, ok := prev.bound(r.claim()); r.Phase == PhaseBound && !ok {
			pending[r.claim()] = fmt.Sprintf("binding to PersistentVolume %q not recorded: %v", r.PV, err)
		} else if r.Phase == phaseProvisioning && !had {
			pending[r.claim()] = fmt.Sprintf("provisioning of PersistentVolume %q not recorded, so not begun: %v", r.PV, err)
		}
	}
}

// lostClaims returns the claims of Bound records whose PersistentVolume is
// not in w, with that PV's name. A provisioned one is in its record.
func lostClaims(rs records, w world) map[claimKey]string {
	pvs := make(map[string]bool, len(w.pvs))
	for _, pv := range w.pvs {
		pvs[pv.Name] = true
	}
	lost := map[claimKey]string{}
	for _, r := range rs {
		if r.Phase == PhaseBound && !pvs[r.PV] && r.Provisioned == nil {
			lost[r.claim()] = r.PV
		}
	}
	return lost
}

func (s *Source) logEvents(events []event) {
	for _, e := range events {
		if e.snapshot != "" {
			s.log.Info(e.msg, zap.String("volumeSnapshot", e.snapshot), zap.String("snapshot", e.pv))
			continue
		}
		s.log.Info(e.msg, zap.String("claim", e.claim.String()), zap.String("pv", e.pv))
	}
}

func snapshotClassesByName(classes []*volumesnapshot.VolumeSnapshotClass) map[string]*volumesnapshot.VolumeSnapshotClass {
	byName := make(map[string]*volumesnapshot.VolumeSnapshotClass, len(classes))
	for _, c := range classes {
		byName[c.Name] = c
	}
	return byName
}

// logChanges logs a claim's reason for not binding when it changes, and a
// claim becoming Lost or found again.
func (s *Source) logChanges(prev, next *state) {
	for k, why := range next.pending {
		if prev.pending[k] != why {
			s.log.Info("claim not bound", zap.String("claim", k.String()), zap.String("reason", why))
		}
	}
	for k, rs := range next.resizing {
		switch {
		case prev.resizing[k] == rs:
		case rs.refused:
			s.log.Warn("claim expansion refused", zap.String("claim", k.String()), zap.String("reason", rs.why))
		default:
			s.log.Info("claim being expanded", zap.String("claim", k.String()), zap.String("reason", rs.why))
		}
	}
	for k, pv := range next.lost {
		if _, ok := prev.lost[k]; !ok {
			s.log.Warn("claim lost: its PersistentVolume is gone", zap.String("claim", k.String()), zap.String("pv", pv))
		}
	}
	for k, pv := range prev.lost {
		if _, ok := next.lost[k]; !ok && next.recs[pv].claim() == k && next.recs[pv].Phase == PhaseBound {
			s.log.Info("lost claim's PersistentVolume is back", zap.String("claim", k.String()), zap.String("pv", pv))
		}
	}
}

// logMade logs the claims made for ephemeral volumes, and those forgotten,
// between prev and next.
func (s *Source) logMade(prev, next madeClaims) {
	for key, m := range next {
		if _, ok := prev[key]; !ok {
			s.log.Info("ephemeral volume claim made", zap.String("claim", key), zap.String("podUID", string(m.PodUID)), zap.String("volume", m.Volume))
		}
	}
	for key, m := range prev {
		if _, ok := next[key]; !ok {
			s.log.Info("ephemeral volume claim deleted", zap.String("claim", key), zap.String("podUID", string(m.PodUID)), zap.String("volume", m.Volume))
		}
	}
}

// logRefused logs a template that is not made into a claim when its reason
// changes.
func (s *Source) logRefused(prev, next map[string]string) {
	for key, why := range next {
		if prev[key] != why {
			s.log.Warn("ephemeral volume claim not made", zap.String("claim", key), zap.String("reason", why))
		}
	}
}
