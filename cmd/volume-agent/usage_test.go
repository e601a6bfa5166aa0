package main

import (
	"slices"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/csi"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/plugins/emptydir"
	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
	"github.com/volume-agent/volume-agent/internal/plugins/local"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	provlocal "github.com/volume-agent/volume-agent/internal/provisioner/local"
	volumeusage "github.com/volume-agent/volume-agent/internal/usage"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// The targets are the Mounted emptyDir and claim volumes of desired pods,
// but not a claim on a hostPath PV, nor any other volume.
func TestUsageTargets(t *testing.T) {
	desired, actual := dsw.New(nil), asw.New(nil)
	desired.SetPod(dsw.Pod{UID: "u", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{
		{Name: "cache", Plugin: emptydir.Name},
		{Name: "config", Plugin: "kubernetes.io/configmap"},
		{Name: "host-claim", SpecName: "logs", Claim: "logs", PV: "host-claim", Plugin: hostpath.Name},
		{Name: "pending", Plugin: emptydir.Name},
		{Name: "pv-1", SpecName: "data", Claim: "data", PV: "pv-1", Plugin: local.Name},
		{Name: "uncertain", Plugin: emptydir.Name},
	}})
	for _, v := range []asw.Volume{
		{Name: "cache", Plugin: emptydir.Name, Path: "/r/cache", State: asw.Mounted},
		{Name: "config", Plugin: "kubernetes.io/configmap", Path: "/r/config", State: asw.Mounted},
		{Name: "host-claim", Plugin: hostpath.Name, Path: "/", State: asw.Mounted},
		{Name: "pv-1", Plugin: local.Name, Path: "/r/pv-1", State: asw.Mounted},
		{Name: "uncertain", Plugin: emptydir.Name, Path: "/r/uncertain", State: asw.Uncertain},
	} {
		v.PodUID = "u"
		actual.Set(v)
	}
	var got []string
	for _, tg := range (usageTargets{desired: desired, actual: actual}).UsageTargets() {
		got = append(got, tg.Namespace+"/"+tg.Pod+" "+tg.Volume+" claim="+tg.Claim+" "+tg.Path)
	}
	want := []string{"ns/web cache claim= /r/cache", "ns/web data claim=data /r/pv-1"}
	if !slices.Equal(got, want) {
		t.Fatalf("targets %q\nwant %q", got, want)
	}
}

// A disk emptyDir's sizeLimit is watched; a Memory emptyDir's is its
// tmpfs's size, and an emptyDir without one has none.
func TestWatchedSizeLimit(t *testing.T) {
	mi := resource.MustParse("1Mi")
	zero := resource.MustParse("0")
	vol := func(src v1.EmptyDirVolumeSource) dsw.Volume {
		return dsw.Volume{Name: "v", Plugin: emptydir.Name, Spec: &volume.Spec{Volume: &v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{EmptyDir: &src}}}}
	}
	for name, tc := range map[string]struct {
		d    dsw.Volume
		want int64
	}{
		"disk with sizeLimit":   {vol(v1.EmptyDirVolumeSource{SizeLimit: &mi}), 1 << 20},
		"disk without":          {vol(v1.EmptyDirVolumeSource{}), 0},
		"disk with zero":        {vol(v1.EmptyDirVolumeSource{SizeLimit: &zero}), 0},
		"memory with sizeLimit": {vol(v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: &mi}), 0},
		"no spec":               {dsw.Volume{Name: "v", Plugin: emptydir.Name}, 0},
		"a claim":               {dsw.Volume{Name: "pv", Plugin: local.Name, Claim: "c"}, 0},
	} {
		if got := watchedSizeLimit(tc.d); got != tc.want {
			t.Errorf("%s: %d, want %d", name, got, tc.want)
		}
	}
}

type fakeSizeLimitEvents struct{ got []string }

func (f *fakeSizeLimitEvents) SizeLimitExceeded(spec *volume.Spec, message string) {
	f.got = append(f.got, spec.Volume.Name+": "+message)
}

func (f *fakeSizeLimitEvents) LimitNotEnforced(spec *volume.Spec, message string) {
	f.got = append(f.got, spec.Volume.Name+" not enforced: "+message)
}

// The reporter logs one warn line and, with a cluster, sends the event
// on the pod's spec.
func TestSizeLimitReporter(t *testing.T) {
	desired := dsw.New(nil)
	mi := resource.MustParse("1Mi")
	desired.SetPod(dsw.Pod{UID: "u", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{{Name: "scratch", Plugin: emptydir.Name,
		Spec: &volume.Spec{Pod: &v1.Pod{}, Volume: &v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: &mi}}}}}}})
	core, logs := observer.New(zap.WarnLevel)
	ev := &fakeSizeLimitEvents{}
	s := volumeusage.Stat{Target: volumeusage.Target{Key: dsw.Key{PodUID: "u", Volume: "scratch"}, Namespace: "ns", Pod: "web", Volume: "scratch", SizeLimit: 1 << 20},
		Measurement: volumeusage.Measurement{UsedBytes: 2 << 20, SizeLimitBytes: 1 << 20}}
	sizeLimitReporter{desired: desired, events: ev, log: zap.New(core)}.SizeLimitExceeded(s)
	want := []string{`scratch: Usage of EmptyDir volume "scratch" exceeds the limit "1Mi": 2097152 bytes used`}
	if !slices.Equal(ev.got, want) {
		t.Errorf("events %q, want %q", ev.got, want)
	}
	entries := logs.All()
	if len(entries) != 1 || entries[0].Message != "emptyDir volume over its sizeLimit" || entries[0].ContextMap()["sizeLimit"] != "1Mi" {
		t.Errorf("log %+v, want one warn line", entries)
	}
	// Manifest mode: no recorder, the log line only.
	sizeLimitReporter{desired: desired, log: zap.New(core)}.SizeLimitExceeded(s)
	if n := logs.Len(); n != 2 {
		t.Errorf("%d log lines, want 2", n)
	}

	// A limit not enforced: the event on the pod says why.
	ev.got = nil
	s.NotEnforced = "btrfs quotas are off"
	sizeLimitReporter{desired: desired, events: ev, log: zap.New(core)}.LimitNotEnforced(s)
	if want := []string{`scratch not enforced: The size of volume "scratch" is not enforced: btrfs quotas are off`}; !slices.Equal(ev.got, want) {
		t.Errorf("events %q, want %q", ev.got, want)
	}
}

// A claim's limit is made again only on a volume the local provisioner
// made on btrfs: an in-tree local PV says so in its annotation, a CSI PV of
// the local driver in its volume context; another driver's says nothing,
// and a read-only claim takes none.
func TestQuotaLimit(t *testing.T) {
	gi := resource.MustParse("1Gi")
	claim := func(pv v1.PersistentVolume, readOnly bool) dsw.Volume {
		pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: gi}
		vol := &v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data", ReadOnly: readOnly}}}
		return dsw.Volume{Name: "pv", Claim: "data", Spec: &volume.Spec{Volume: vol, PV: &pv}}
	}
	csiPV := func(driver, kind string) v1.PersistentVolume {
		return v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{
			CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "h", VolumeAttributes: map[string]string{csi.ContextCapacity: kind}}}}}
	}
	inTree := func(kind string) v1.PersistentVolume {
		pv := v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/l/v"}}}}
		pv.Annotations = map[string]string{provlocal.AnnCapacity: kind}
		return pv
	}
	for name, tc := range map[string]struct {
		d    dsw.Volume
		want int64
	}{
		"in-tree on btrfs":         {claim(inTree("btrfs"), false), 1 << 30},
		"in-tree image":            {claim(inTree("image"), false), 0},
		"in-tree read-only":        {claim(inTree("btrfs"), true), 0},
		"CSI on btrfs":             {claim(csiPV(provisioner.LocalName, "btrfs"), false), 1 << 30},
		"CSI image":                {claim(csiPV(provisioner.LocalName, "image"), false), 0},
		"CSI plain directory":      {claim(csiPV(provisioner.LocalName, ""), false), 0},
		"another driver's context": {claim(csiPV("other.example.com", "btrfs"), false), 0},
	} {
		if got := quotaLimit(tc.d); got != tc.want {
			t.Errorf("%s: %d, want %d", name, got, tc.want)
		}
	}
}

// An enforced claim's qgroups are reached where its volume is: an
// in-tree local PV's path under --host-root, a CSI PV's handle under the
// local path root.
func TestUsageTargetsQuotaPath(t *testing.T) {
	gi := resource.MustParse("1Gi")
	pvs := map[string]*v1.PersistentVolume{
		"in-tree": {Spec: v1.PersistentVolumeSpec{Capacity: v1.ResourceList{v1.ResourceStorage: gi},
			PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/l/ns-a-pv-1"}}}},
		"csi": {Spec: v1.PersistentVolumeSpec{Capacity: v1.ResourceList{v1.ResourceStorage: gi},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: provisioner.LocalName,
				VolumeHandle: "ns-b-pv-2", VolumeAttributes: map[string]string{csi.ContextCapacity: "btrfs"}}}}},
	}
	pvs["in-tree"].Annotations = map[string]string{provlocal.AnnCapacity: "btrfs"}
	desired, actual := dsw.New(nil), asw.New(nil)
	var vols []dsw.Volume
	for name, pv := range pvs {
		vol := &v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}
		vols = append(vols, dsw.Volume{Name: name, Claim: name, PV: name, Plugin: local.Name, Spec: &volume.Spec{Volume: vol, PV: pv}})
		actual.Set(asw.Volume{PodUID: "u", Name: name, Plugin: local.Name, Path: "/r/" + name, State: asw.Mounted})
	}
	desired.SetPod(dsw.Pod{UID: "u", Namespace: "ns", Name: "web", Volumes: vols})
	got := map[string]string{}
	for _, tg := range (usageTargets{desired: desired, actual: actual, hostRoot: "/host", localRoot: "/local"}).UsageTargets() {
		got[tg.Volume] = tg.QuotaPath
	}
	want := map[string]string{"in-tree": "/host/l/ns-a-pv-1", "csi": "/local/ns-b-pv-2"}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: QuotaPath %q, want %q", name, got[name], w)
		}
	}
}
