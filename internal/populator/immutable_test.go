package populator

import (
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.uber.org/zap/zaptest"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins"
	"github.com/volume-agent/volume-agent/internal/plugins/local"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// withActual is a harness whose populator sees an actual state.
func withActual(t *testing.T, src source.Source) (*harness, *asw.World) {
	actual := asw.New(nil)
	desired := dsw.New(nil)
	p := New(Config{Sources: []source.Source{src}, Desired: desired, Actual: actual,
		Plugins: plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1"}), Logger: zaptest.NewLogger(t), Resync: time.Hour})
	return &harness{p: p, desired: desired}, actual
}

func TestSetUpVolumeRemovedFromSpecIsKept(t *testing.T) {
	src := newSource("manifests", true, testPod("u1", "web", emptyDirVolume("data"), emptyDirVolume("other")))
	h, actual := withActual(t, src)
	h.p.Populate()
	actual.Set(asw.Volume{PodUID: "u1", Name: "data", Plugin: "kubernetes.io/empty-dir", State: asw.Mounted})

	src.setPods(testPod("u1", "web", emptyDirVolume("other")))
	h.p.Populate()
	v := h.volume(t, "u1", "data")
	if !strings.Contains(v.Problem, "not in the pod's spec") || v.Plugin != "" || !v.Kept {
		t.Fatalf("volume = %+v; want it kept with a problem and no plugin (so it is neither set up nor torn down)", v)
	}
	// A volume that was never set up simply goes.
	src.setPods(testPod("u1", "web"))
	h.p.Populate()
	if _, ok := h.desired.Volume(dsw.Key{PodUID: "u1", Volume: "other"}); ok {
		t.Error("a volume that was never set up was kept after it left the spec")
	}
	h.volume(t, "u1", "data") // still kept
}

// After a restart the desired state starts empty: what is set up is known
// only from disk. A volume found there for a pod whose spec no longer lists
// it is kept all the same.
func TestVolumeFoundOnDiskAndMissingFromTheSpecIsKept(t *testing.T) {
	src := newSource("manifests", true, testPod("u1", "web", emptyDirVolume("other")))
	h, actual := withActual(t, src)
	actual.Set(asw.Volume{PodUID: "u1", Name: "data", Plugin: "kubernetes.io/empty-dir", State: asw.Uncertain, Reconstructed: true})
	h.p.Populate()
	v := h.volume(t, "u1", "data")
	if !v.Kept || v.Plugin != "" || !strings.Contains(v.Problem, "kept until the pod is deleted") {
		t.Fatalf("volume = %+v; want the volume found on disk kept", v)
	}
	if v := h.volume(t, "u1", "other"); v.Kept || v.Problem != "" {
		t.Fatalf("volume in the spec = %+v; want it plain", v)
	}
}

func TestSetUpVolumeChangingPluginIsKept(t *testing.T) {
	src := newSource("manifests", true, testPod("u1", "web", emptyDirVolume("data")))
	h, actual := withActual(t, src)
	h.p.Populate()
	actual.Set(asw.Volume{PodUID: "u1", Name: "data", Plugin: "kubernetes.io/empty-dir", State: asw.Mounted})

	src.setPods(testPod("u1", "web", configMapVolume("data", "app")))
	h.p.Populate()
	v := h.volume(t, "u1", "data")
	if !strings.Contains(v.Problem, "changed from kubernetes.io/empty-dir to kubernetes.io/configmap") || v.Plugin != "" {
		t.Fatalf("volume = %+v; want the emptyDir kept with a problem", v)
	}
	// Without a set-up volume, a change of type is just the new spec.
	src.setPods(testPod("u2", "api", configMapVolume("cfg", "app")))
	h.p.Populate()
	if v := h.volume(t, "u2", "cfg"); v.Problem != "" || v.Plugin != "kubernetes.io/configmap" {
		t.Fatalf("volume = %+v; want a plain configMap volume", v)
	}
}

// problems records the problems reported as events.
type problems struct {
	mu   sync.Mutex
	msgs []string // guarded by mu
}

func (p *problems) SetUpFailed(spec *volume.Spec, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, spec.Pod.Name+"/"+spec.Volume.Name+": "+err.Error())
}

func (p *problems) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.msgs)
}

// A volume with a spec problem is never attempted, so no operation reports
// it: the populator reports each new problem once.
func TestSpecProblemIsReportedOnce(t *testing.T) {
	bad := v1.Volume{Name: "vol", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "x"}}}
	src := newSource("api", true, testPod("u1", "web", bad, emptyDirVolume("data")))
	rec := &problems{}
	h := newHarness(t, src)
	h.p.cfg.Recorder = rec
	for range 3 {
		h.p.Populate()
	}
	if rec.count() != 1 || !strings.Contains(rec.msgs[0], "web/vol: csi volumes are not supported") {
		t.Fatalf("events = %q; want one for the csi volume", rec.msgs)
	}
	src.setPods(testPod("u1", "web", v1.Volume{Name: "vol"}, emptyDirVolume("data")))
	h.p.Populate()
	h.p.Populate()
	if rec.count() != 2 {
		t.Fatalf("events = %q; want one more for the new problem", rec.msgs)
	}
}

// nfsPV is an NFS PV bound to claim ns/claim, read-only or not.
func nfsPV(name, claim string, readOnly bool) *v1.PersistentVolume {
	pv := localPV(name, claim)
	pv.Spec.Local, pv.Spec.NodeAffinity = nil, nil
	pv.Spec.NFS = &v1.NFSVolumeSource{Server: "10.0.0.1", Path: "/export", ReadOnly: readOnly}
	return pv
}

// readOnlyClaim is claimVolume, readOnly or not.
func readOnlyClaim(name, claim string, readOnly bool) v1.Volume {
	v := claimVolume(name, claim)
	v.PersistentVolumeClaim.ReadOnly = readOnly
	return v
}

// TestReadOnlyOfARunningPodCannotChange: a volume set up writable whose
// spec now asks readOnly (the pod's claim volume, the NFS PV, the PV's
// mount options, an inline NFS volume), or the reverse, is kept as set up,
// with a problem naming the volume, the pod, the change, the field and
// what to do; the decision rests on the actual state alone, whether the
// volume was set up since start or found mounted on disk. A volume whose
// mount is not known (found on disk unmounted, a published device) is set
// up as its spec asks.
func TestReadOnlyOfARunningPodCannotChange(t *testing.T) {
	withOpts := func(pv *v1.PersistentVolume, opts ...string) *v1.PersistentVolume {
		pv.Spec.MountOptions = opts
		return pv
	}
	inline := v1.Volume{Name: "share", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "10.0.0.1", Path: "/export", ReadOnly: true}}}
	for _, tc := range []struct {
		name   string
		vol    v1.Volume
		pv     *v1.PersistentVolume // ns/data's PV, pv-1
		actual asw.Volume           // set up for the pod; its name and plugin are filled in
		want   string               // a problem's substrings, or none
	}{
		{name: "claim edited to readOnly", vol: readOnlyClaim("vol", "data", true), pv: localPV("pv-1", "data"),
			actual: asw.Volume{State: asw.Mounted, Access: asw.ReadWrite},
			want:   `volume "vol" of running pod ns/web changed from read-write to readOnly (persistentVolumeClaim.readOnly): a pod's volumes cannot change; the read-write mount is kept until the pod is deleted; delete the pod and create it again to have it mounted readOnly`},
		{name: "claim edited to read-write", vol: readOnlyClaim("vol", "data", false), pv: localPV("pv-1", "data"),
			actual: asw.Volume{State: asw.Mounted, Access: asw.ReadOnly},
			want:   `changed from readOnly to read-write (persistentVolumeClaim.readOnly): a pod's volumes cannot change; the readOnly mount is kept until the pod is deleted`},
		{name: "found mounted writable at start", vol: readOnlyClaim("vol", "data", true), pv: localPV("pv-1", "data"),
			actual: asw.Volume{State: asw.Uncertain, Reconstructed: true, Access: asw.ReadWrite}, want: "changed from read-write to readOnly"},
		{name: "found mounted read-only at start", vol: readOnlyClaim("vol", "data", false), pv: localPV("pv-1", "data"),
			actual: asw.Volume{State: asw.Uncertain, Reconstructed: true, Access: asw.ReadOnly}, want: "changed from readOnly to read-write"},
		{name: "NFS PV edited to readOnly", vol: readOnlyClaim("vol", "data", false), pv: nfsPV("pv-1", "data", true),
			actual: asw.Volume{State: asw.Mounted, Access: asw.ReadWrite},
			want:   "changed from read-write to readOnly (persistentVolumeClaim.readOnly or spec.nfs.readOnly of PersistentVolume pv-1)"},
		{name: "PV mount options edited to ro", vol: readOnlyClaim("vol", "data", false), pv: withOpts(localPV("pv-1", "data"), "ro"),
			actual: asw.Volume{State: asw.Mounted, Access: asw.ReadWrite},
			want:   "changed from read-write to readOnly (persistentVolumeClaim.readOnly or the mount options of PersistentVolume pv-1)"},
		{name: "inline NFS edited to readOnly", vol: inline, actual: asw.Volume{State: asw.Mounted, Access: asw.ReadWrite},
			want: `volume "share" of running pod ns/web changed from read-write to readOnly (nfs.readOnly)`},
		{name: "as set up", vol: readOnlyClaim("vol", "data", true), pv: localPV("pv-1", "data"), actual: asw.Volume{State: asw.Mounted, Access: asw.ReadOnly}},
		{name: "read-only by the PV's mount options, as set up", vol: readOnlyClaim("vol", "data", false), pv: withOpts(localPV("pv-1", "data"), "ro"),
			actual: asw.Volume{State: asw.Uncertain, Reconstructed: true, Access: asw.ReadOnly}},
		{name: "found on disk without a mount", vol: readOnlyClaim("vol", "data", true), pv: localPV("pv-1", "data"),
			actual: asw.Volume{State: asw.Uncertain, Reconstructed: true}},
		{name: "published device", vol: readOnlyClaim("vol", "data", true), pv: blockPV(), actual: asw.Volume{State: asw.Mounted, Block: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newSource("manifests", true, testPod("u1", "web", tc.vol))
			a := tc.actual
			a.PodUID, a.Name, a.Plugin = "u1", tc.vol.Name, "kubernetes.io/nfs"
			if tc.pv != nil {
				claim := boundClaim("data", "pv-1")
				claim.Spec.VolumeMode = tc.pv.Spec.VolumeMode
				src.objects = plugintest.Objects{Claims: map[string]*v1.PersistentVolumeClaim{"ns/data": claim}, PVs: map[string]*v1.PersistentVolume{"pv-1": tc.pv}}
				a.Name = "pv-1"
				if tc.pv.Spec.Local != nil {
					a.Plugin = local.Name
				}
			}
			h, actual := withActual(t, src)
			actual.Set(a)
			h.p.Populate()
			got := h.volume(t, "u1", a.Name)
			switch {
			case tc.want == "" && (got.Problem != "" || got.Plugin != a.Plugin):
				t.Fatalf("volume = %+v; want it served by %s, without a problem", got, a.Plugin)
			case tc.want != "" && (!strings.Contains(got.Problem, tc.want) || got.Plugin != "" || got.Kept):
				t.Fatalf("volume = %+v; want it kept as set up (no plugin), with a problem saying %q", got, tc.want)
			case tc.want != "" && tc.vol.PersistentVolumeClaim != nil && (got.SpecName != "vol" || got.Claim != "data" || got.PV != "pv-1"):
				t.Fatalf("volume = %+v; want it named vol, of claim data and PV pv-1", got)
			}
		})
	}
}

// The problem is reported once, as other spec problems are, and goes when
// the spec asks again what was set up.
func TestReadOnlyChangeReportedOnceAndUndone(t *testing.T) {
	objects := plugintest.Objects{Claims: map[string]*v1.PersistentVolumeClaim{"ns/data": boundClaim("data", "pv-1")},
		PVs: map[string]*v1.PersistentVolume{"pv-1": localPV("pv-1", "data")}}
	src := newSource("manifests", true, testPod("u1", "web", readOnlyClaim("vol", "data", false)))
	src.objects = objects
	h, actual := withActual(t, src)
	rec := &problems{}
	h.p.cfg.Recorder = rec
	h.p.Populate()
	before := h.volume(t, "u1", "pv-1")
	actual.Set(asw.Volume{PodUID: "u1", Name: "pv-1", Plugin: local.Name, State: asw.Mounted, Access: asw.ReadWrite, Version: before.Version})

	src.setPods(testPod("u1", "web", readOnlyClaim("vol", "data", true)))
	for range 3 {
		h.p.Populate()
	}
	if rec.count() != 1 || !strings.Contains(rec.msgs[0], "web/vol: volume \"vol\" of running pod ns/web changed from read-write to readOnly") {
		t.Fatalf("events = %q; want one for the change", rec.msgs)
	}
	src.setPods(testPod("u1", "web", readOnlyClaim("vol", "data", false)))
	h.p.Populate()
	if v := h.volume(t, "u1", "pv-1"); v.Problem != "" || v.Plugin != local.Name || v.ReadOnly || v.Version != before.Version {
		t.Fatalf("volume = %+v; want it as before the edit", v)
	}
}

// A claim removed from the manifests while its pod runs is still bound
// (the binder's view: volume.ClaimRemoved): the pod's volume keeps its
// name, its PV and its plugin, is kept as it is set up with a problem
// saying why (the binder's words), and there is no second volume "not in
// the pod's spec". Not set up, it is only refused.
func TestSetUpVolumeOfDeletedClaimIsKept(t *testing.T) {
	removed := boundClaim("data", "pv-1")
	why := "removed from the manifests but not released: a pod that is not terminated still names it"
	removed.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: volume.ClaimRemoved, Status: v1.ConditionTrue, Message: why}}
	for _, setUp := range []bool{true, false} {
		src := newSource("manifests", true, testPod("u1", "web", claimVolume("vol", "data")))
		src.objects = plugintest.Objects{Claims: map[string]*v1.PersistentVolumeClaim{"ns/data": removed},
			PVs: map[string]*v1.PersistentVolume{"pv-1": localPV("pv-1", "data")}}
		h, actual := withActual(t, src)
		if setUp {
			actual.Set(asw.Volume{PodUID: "u1", Name: "pv-1", Plugin: local.Name, State: asw.Mounted, SpecName: "vol", PV: "pv-1"})
		}
		h.p.Populate()
		got, _ := h.desired.Pod("u1")
		if len(got.Volumes) != 1 {
			t.Fatalf("set up %v: volumes = %+v; want the claim's volume alone", setUp, got.Volumes)
		}
		v := got.Volumes[0]
		if v.Name != "pv-1" || v.SpecName != "vol" || v.Claim != "data" || v.Plugin != local.Name || !v.Deleting || v.Kept != setUp ||
			!strings.HasPrefix(v.Problem, "claim ns/data "+why) || strings.HasSuffix(v.Problem, "; the volume stays set up as it is while this pod runs, and is released when the pod ends") != setUp {
			t.Fatalf("set up %v: volume = %+v", setUp, v)
		}
	}
}

// After a restart, a volume of a deleted claim found mounted is kept as
// set up; one found as a bare directory (its mount gone with a reboot) is
// not shown as set up, and is not set up either.
func TestVolumeOfDeletedClaimFoundOnDisk(t *testing.T) {
	removed := boundClaim("data", "pv-1")
	removed.DeletionTimestamp = &metav1.Time{}
	for access, kept := range map[asw.Access]bool{asw.ReadWrite: true, asw.AccessUnknown: false} {
		src := newSource("api", true, testPod("u1", "web", claimVolume("vol", "data")))
		src.objects = plugintest.Objects{Claims: map[string]*v1.PersistentVolumeClaim{"ns/data": removed},
			PVs: map[string]*v1.PersistentVolume{"pv-1": localPV("pv-1", "data")}}
		h, actual := withActual(t, src)
		actual.Set(asw.Volume{PodUID: "u1", Name: "pv-1", Plugin: local.Name, State: asw.Uncertain, Reconstructed: true, Access: access})
		h.p.Populate()
		v := h.volume(t, "u1", "pv-1")
		if v.Kept != kept || !v.Deleting || !strings.HasPrefix(v.Problem, "claim ns/data is being deleted") {
			t.Errorf("access %v: volume = %+v; want kept %v", access, v, kept)
		}
	}
}
