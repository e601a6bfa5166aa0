package binder

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
)

// contentWorld is a world with the local provisioner running and taking
// snapshots, local class "fast", claim "data" (uid u1, 1Gi) Bound to the
// volume it made, VolumeSnapshot "snap" of it (uid s1) Ready as
// snapshot-a, and the claims given, each used by a pod.
func contentWorld(claims ...*v1.PersistentVolumeClaim) (world, records) {
	fast := localClass("fast")
	data := newClaim("data", "1Gi", claimUID("u1"), claimClass("fast"))
	pv := localPV(data, fast)
	w := planWorld(append([]*v1.PersistentVolumeClaim{data}, claims...), nil)
	w.classes = classesByName([]*storagev1.StorageClass{fast, localClass("plain", "enforce", "false"), newClass("other")})
	w.provisioners = map[string]bool{provisioner.LocalName: true, testProvisioner: true}
	w.snapshotters = map[string]bool{provisioner.LocalName: true}
	w.snapshots = []*volumesnapshot.VolumeSnapshot{newSnapshot("snap", "s1", "data")}
	w.snapRecs = snapRecords{"snapshot-a": {Namespace: "default", Name: "snap", UID: "s1", Handle: "snapshot-a",
		Provisioner: provisioner.LocalName, Claim: "data", ClaimUID: "u1", PV: pv, Step: snapReady, Size: "1Gi"}}
	for _, c := range w.claims {
		w.pods = append(w.pods, podUsing("pod-"+c.Name, c.Name))
	}
	return w, records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: PhaseBound, Provisioned: pv}}
}

// What a claim with a data source is made from, or why it waits or is
// refused; it is never bound to a PersistentVolume of the source.
func TestPlanContent(t *testing.T) {
	snapGroup := volumesnapshot.Group
	fromSnap := claimFrom(snapGroup, "VolumeSnapshot", "snap")
	fromData := claimFrom("", "PersistentVolumeClaim", "data")
	tests := []struct {
		name    string
		claim   *v1.PersistentVolumeClaim
		change  func(w *world)
		content *contentIntent // recorded with the provisioning; nil: none recorded
		pending string         // contained in the claim's pending reason
	}{
		{"a restore", newClaim("c", "1Gi", claimUID("u2"), claimClass("fast"), fromSnap), nil,
			&contentIntent{Kind: "VolumeSnapshot", Name: "snap", Snapshot: "snapshot-a"}, `provisioning PersistentVolume "pvc-u2"`},
		{"a restore through spec.dataSource", newClaim("c", "2Gi", claimUID("u2"), claimClass("fast"), func(c *v1.PersistentVolumeClaim) {
			c.Spec.DataSource = &v1.TypedLocalObjectReference{APIGroup: &snapGroup, Kind: "VolumeSnapshot", Name: "snap"}
		}), nil, &contentIntent{Kind: "VolumeSnapshot", Name: "snap", Snapshot: "snapshot-a"}, `provisioning PersistentVolume "pvc-u2"`},
		{"a clone", newClaim("c", "1Gi", claimUID("u2"), claimClass("fast"), fromData), nil,
			&contentIntent{Kind: "PersistentVolumeClaim", Name: "data"}, `provisioning PersistentVolume "pvc-u2"`},
		{"a clone, a PersistentVolume of the source fits: not bound to it", newClaim("c", "1Gi", claimUID("u2"), claimClass("fast"), fromData),
			func(w *world) { w.pvs = []*v1.PersistentVolume{newPV("pv-a", "5Gi", pvClass("fast"))} },
			&contentIntent{Kind: "PersistentVolumeClaim", Name: "data"}, `provisioning PersistentVolume "pvc-u2"`},
		{"a snapshot not there", newClaim("c", "1Gi", claimUID("u2"), claimClass("fast"), claimFrom(snapGroup, "VolumeSnapshot", "nope")), nil,
			nil, "waiting for VolumeSnapshot default/nope, its data source, to exist"},
		{"a snapshot not ready", newClaim("c", "1Gi", claimUID("u2"), claimClass("fast"), fromSnap), func(w *world) {
			r := w.snapRecs["snapshot-a"]
			r.Step, r.Size = snapTaking, ""
			w.snapRecs = snapRecords{"snapshot-a": r}
		}, nil, "waiting for VolumeSnapshot default/snap, its data source, to be ready to use"},
		{"a claim to clone not there", newClaim("c", "1Gi", claimUID("u2"), claimClass("fast"), claimFrom("", "PersistentVolumeClaim", "nope")), nil,
			nil, "waiting for claim default/nope, its data source, to exist"},
		{"smaller than the snapshot", newClaim("c", "500Mi", claimUID("u2"), claimClass("fast"), fromSnap), nil,
			nil, "spec.resources.requests.storage 500Mi is less than the 1Gi the VolumeSnapshot default/snap it restores holds"},
		{"smaller than the claim it clones", newClaim("c", "500Mi", claimUID("u2"), claimClass("fast"), fromData), nil,
			nil, "spec.resources.requests.storage 500Mi is less than the 1Gi the claim default/data it clones has"},
		{"a plain-directory class", newClaim("c", "1Gi", claimUID("u2"), claimClass("plain"), fromSnap), nil,
			nil, `StorageClass "plain" makes plain directories (enforce "false"), and a volume is never made from a data source (VolumeSnapshot "snap")`},
		{"a class of another provisioner", newClaim("c", "1Gi", claimUID("u2"), claimClass("other"), fromData), nil,
			nil, `StorageClass "other" names provisioner "test.io/fake", which cannot make a volume from a data source (PersistentVolumeClaim "data")`},
		{"an unsupported kind", newClaim("c", "1Gi", claimUID("u2"), claimClass("fast"), claimFrom("example.com", "Backup", "b")), nil,
			nil, `data source Backup "b" (apiGroup "example.com") is not supported`},
		{"a claim of another API group", newClaim("c", "1Gi", claimUID("u2"), claimClass("fast"), claimFrom("example.com", "PersistentVolumeClaim", "data")), nil,
			nil, `data source PersistentVolumeClaim "data" (apiGroup "example.com") is not supported`},
		{"another namespace", newClaim("c", "1Gi", claimUID("u2"), claimClass("fast"), func(c *v1.PersistentVolumeClaim) {
			ns := "team"
			fromData(c)
			c.Spec.DataSourceRef.Namespace = &ns
		}), nil, nil, `spec.dataSourceRef.namespace "team": a data source in another namespace is not supported`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, prev := contentWorld(tt.claim)
			if tt.change != nil {
				tt.change(&w)
			}
			o := plan(w, prev)
			if why := o.pending[keyOf(tt.claim)]; !strings.Contains(why, tt.pending) {
				t.Errorf("pending reason %q, want it to contain %q", why, tt.pending)
			}
			r := o.recs["pvc-u2"]
			if tt.content == nil {
				if _, ok := o.recs["pvc-u2"]; ok || len(o.recs) != 1 {
					t.Errorf("records %v; want only data's", o.recs)
				}
				return
			}
			if r.Phase != phaseProvisioning || r.Provisioning.Content == nil {
				t.Fatalf("record %+v; want a provisioning with content", r)
			}
			got := *r.Provisioning.Content
			if got.Kind != tt.content.Kind || got.Name != tt.content.Name || got.Snapshot != tt.content.Snapshot ||
				(tt.content.Kind == "PersistentVolumeClaim") != (got.Volume != nil && got.Volume.Name == "pvc-u1") {
				t.Errorf("content %+v, want %+v (a clone of pvc-u1)", got, tt.content)
			}
			if len(o.provisions) != 1 || o.provisions[0].content != r.Provisioning.Content {
				t.Errorf("provisions %+v; want one, with the recorded content", o.provisions)
			}
		})
	}
}

// A snapshot whose VolumeSnapshot stayed removed for the reclaim delay is
// not deleted while a claim is being restored from it; nor is a claim
// released while a clone is being made of its volume.
func TestPlanSourcesKeptWhileInUse(t *testing.T) {
	restore := newClaim("c", "1Gi", claimUID("u2"), claimClass("fast"), claimFrom(volumesnapshot.Group, "VolumeSnapshot", "snap"))
	w, prev := contentWorld(restore)
	o := plan(w, prev) // records the restore's provisioning
	w.snapshots = nil
	w.obs.snapsSeen = map[snapKey]bool{{namespace: "default", name: "snap", uid: "s1"}: true}
	r := w.snapRecs["snapshot-a"]
	r.RemovedAt = planNow.Add(-w.delay)
	w.snapRecs = snapRecords{"snapshot-a": r}
	o = plan(w, o.recs)
	if s := o.snaps["snapshot-a"]; s.Step != snapReady || !strings.Contains(o.snapHeld["snapshot-a"], "not deleted while claim default/c is being restored from it") {
		t.Errorf("snapshot %+v, held %q; want Ready, held for the restore", s, o.snapHeld["snapshot-a"])
	}
	delete(o.recs, "pvc-u2") // the restore made and recorded: deleted now
	o = plan(w, o.recs)
	if s := o.snaps["snapshot-a"]; s.Step != snapDeleting || len(o.snapOps) != 1 {
		t.Errorf("snapshot %+v, ops %+v; want Deleting once no restore is under way", s, o.snapOps)
	}

	clone := newClaim("c", "1Gi", claimUID("u2"), claimClass("fast"), claimFrom("", "PersistentVolumeClaim", "data"))
	w, prev = contentWorld(clone)
	o = plan(w, prev)
	w = claimGone(listingSince(w, 0), keyOf(w.claims[0]), w.settle)
	w.claims, w.pods = w.claims[1:], w.pods[1:]
	w.listing.Since = planNow.Add(-time.Hour)
	o = plan(w, o.recs)
	if r := o.recs["pvc-u1"]; r.Phase != PhaseBound || !strings.Contains(o.held[r.claim()], "claim default/c is being cloned from it") {
		t.Errorf("source record %+v, held %q; want Bound, held for the clone", r, o.held[r.claim()])
	}
}

// A provisioning from a data source recorded before a crash is asked for
// again after the restart with the content recorded, whatever the source
// holds by then (the VolumeSnapshot gone, the clone's source claim
// gone): never as an empty volume.
func TestPlanRecordedContentProvisioning(t *testing.T) {
	fast := localClass("fast")
	restore := newClaim("c", "1Gi", claimUID("u2"), claimClass("fast"), claimFrom(volumesnapshot.Group, "VolumeSnapshot", "snap"))
	content := &contentIntent{Kind: "VolumeSnapshot", Name: "snap", Snapshot: "snapshot-a"}
	prev := records{"pvc-u2": {Namespace: "default", Name: "c", UID: "u2", PV: "pvc-u2", Phase: phaseProvisioning,
		Provisioning: &provisionIntent{Provisioner: provisioner.LocalName, Claim: restore, Class: fast, Content: content}}}
	w := planWorld(nil, nil) // the claim, its class and the VolumeSnapshot all gone
	w.provisioners = map[string]bool{provisioner.LocalName: true}
	o := plan(w, prev)
	if len(o.provisions) != 1 || o.provisions[0].content != content {
		t.Fatalf("provisions %+v; want the recorded one, with its content", o.provisions)
	}
	req, err := withContent(o.provisions[0].req, o.provisions[0].content)
	if err != nil || req.Content == nil || req.Content.Snapshot != "snapshot-a" || req.Content.Volume != nil {
		t.Errorf("request content %+v, %v; want snapshot-a", req.Content, err)
	}
	made := localPV(restore, fast)
	w.ops = opsState{made: map[string]*v1.PersistentVolume{"pvc-u2": made}}
	o = plan(w, prev)
	if r := o.recs["pvc-u2"]; r.Source == nil || *r.Source != (sourceRef{Kind: "VolumeSnapshot", Name: "snap"}) || r.Phase != PhaseReleased {
		t.Errorf("record once made %+v; want Released (its claim gone), from VolumeSnapshot snap", r)
	}
}
