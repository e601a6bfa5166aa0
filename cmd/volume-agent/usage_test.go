package main

import (
	"slices"
	"testing"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/plugins/emptydir"
	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
	"github.com/volume-agent/volume-agent/internal/plugins/local"
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
