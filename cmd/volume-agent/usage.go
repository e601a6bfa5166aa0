package main

import (
	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/plugins/emptydir"
	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
	volumeusage "github.com/volume-agent/volume-agent/internal/usage"
)

// usageTargets are the volumes whose usage is measured: every emptyDir
// and claim volume of a desired pod that is set up (Mounted), named as
// its pod's spec names it. A claim bound to a hostPath PV is left out, as
// the kubelet leaves hostPath out: its path is any directory of the host,
// "/" included, and walking it is not the agent's business.
type usageTargets struct {
	desired *dsw.World
	actual  *asw.World
}

var _ volumeusage.Targets = usageTargets{}

func (t usageTargets) UsageTargets() []volumeusage.Target {
	var out []volumeusage.Target
	for _, p := range t.desired.Pods() {
		for _, d := range p.Volumes {
			if (d.Plugin != emptydir.Name && d.Claim == "") || d.Plugin == hostpath.Name {
				continue
			}
			key := dsw.Key{PodUID: p.UID, Volume: d.Name}
			a, ok := t.actual.Get(key)
			if !ok || a.State != asw.Mounted || a.Path == "" {
				continue
			}
			name := d.SpecName
			if name == "" {
				name = d.Name
			}
			out = append(out, volumeusage.Target{Key: key, Namespace: p.Namespace, Pod: p.Name, Volume: name, Claim: d.Claim, Path: a.Path})
		}
	}
	return out
}
