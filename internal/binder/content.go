package binder

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
)

// The data sources a claim may name.
const (
	kindClaim    = "PersistentVolumeClaim"
	kindSnapshot = volumesnapshot.KindVolumeSnapshot
)

// contentIntent is what a provisioning makes its volume from, recorded
// with its request: the source's kind and name, as the claim named it,
// and what the provisioner is given: the PersistentVolume of the claim it
// clones (a read-only snapshot, at the moment the provisioning was
// recorded), or the handle of the snapshot it restores. Exactly one of
// Volume and Snapshot is set.
type contentIntent struct {
	Kind     string               `json:"kind"`
	Name     string               `json:"name"`
	Volume   *v1.PersistentVolume `json:"volume,omitempty"`
	Snapshot string               `json:"snapshot,omitempty"`
}

// dataSourceOf is the data source claim c names: spec.dataSourceRef, else
// spec.dataSource; nil when it names none.
func dataSourceOf(c *v1.PersistentVolumeClaim) *v1.TypedObjectReference {
	if ref := c.Spec.DataSourceRef; ref != nil {
		return ref
	}
	if ref := c.Spec.DataSource; ref != nil {
		return &v1.TypedObjectReference{APIGroup: ref.APIGroup, Kind: ref.Kind, Name: ref.Name}
	}
	return nil
}

// content decides what claim c, which names a data source, is made from:
// the volume of a claim of its namespace Bound to a volume the local
// provisioner made (a clone), or a snapshot of its namespace that is
// ready. It returns why not instead: a source not there yet, or not
// ready, makes the claim wait; one the agent cannot make a volume from
// refuses it. A claim never asks for less than its source holds.
func (o *outcome) content(w world, c *v1.PersistentVolumeClaim) (*contentIntent, string) {
	ref := dataSourceOf(c)
	group := ""
	if ref.APIGroup != nil {
		group = *ref.APIGroup
	}
	switch {
	case ref.Namespace != nil && *ref.Namespace != "" && *ref.Namespace != c.Namespace:
		return nil, fmt.Sprintf("spec.dataSourceRef.namespace %q: a data source in another namespace is not supported; "+
			"name a claim or VolumeSnapshot of namespace %q", *ref.Namespace, c.Namespace)
	case group == "" && ref.Kind == kindClaim:
		return o.cloneOf(w, c, ref.Name)
	case group == volumesnapshot.Group && ref.Kind == kindSnapshot:
		return o.restoreOf(w, c, ref.Name)
	}
	return nil, fmt.Sprintf("data source %s %q (apiGroup %q) is not supported: the agent makes a volume from a PersistentVolumeClaim "+
		"(a clone) or a VolumeSnapshot (apiGroup %s), nothing else", ref.Kind, ref.Name, group, volumesnapshot.Group)
}

// cloneOf decides on a clone of claim name for c.
func (o *outcome) cloneOf(w world, c *v1.PersistentVolumeClaim, name string) (*contentIntent, string) {
	src := w.claimNamed(c.Namespace, name)
	if src == nil {
		return nil, fmt.Sprintf("waiting for claim %s/%s, its data source, to exist", c.Namespace, name)
	}
	r, ok := o.recs.bound(keyOf(src))
	if !ok {
		return nil, fmt.Sprintf("waiting for claim %s/%s, its data source, to be bound (a claim is provisioned once a pod uses it)", c.Namespace, name)
	}
	if why := snapshottable(w, r); why != "" {
		return nil, "its data source cannot be cloned: " + why
	}
	if why := tooSmall(c, capacityOf(r.Provisioned), "claim "+keyOf(src).String()+" it clones has"); why != "" {
		return nil, why
	}
	return &contentIntent{Kind: kindClaim, Name: name, Volume: r.Provisioned}, ""
}

// restoreOf decides on a restore of VolumeSnapshot name for c.
func (o *outcome) restoreOf(w world, c *v1.PersistentVolumeClaim, name string) (*contentIntent, string) {
	var s *volumesnapshot.VolumeSnapshot
	for _, vs := range w.snapshots {
		if vs.Namespace == c.Namespace && vs.Name == name {
			s = vs
		}
	}
	if s == nil {
		return nil, fmt.Sprintf("waiting for VolumeSnapshot %s/%s, its data source, to exist", c.Namespace, name)
	}
	r, ok := w.snapRecs.of(snapKeyOf(s))
	if !ok || r.Step != snapReady {
		why := fmt.Sprintf("waiting for VolumeSnapshot %s/%s, its data source, to be ready to use", c.Namespace, name)
		if pending := o.snapPending[snapKeyOf(s)]; pending != "" {
			why += ": " + pending
		}
		return nil, why
	}
	size, err := resource.ParseQuantity(r.Size)
	if err != nil {
		return nil, fmt.Sprintf("VolumeSnapshot %s/%s: its recorded size %q is not a quantity: %v", c.Namespace, name, r.Size, err)
	}
	if why := tooSmall(c, size, "VolumeSnapshot "+r.key().String()+" it restores holds"); why != "" {
		return nil, why
	}
	return &contentIntent{Kind: kindSnapshot, Name: name, Snapshot: r.Handle}, ""
}

// tooSmall says why c, which asks for less than have, cannot be made from
// a source of that size (what names it), or "".
func tooSmall(c *v1.PersistentVolumeClaim, have resource.Quantity, what string) string {
	want := c.Spec.Resources.Requests[v1.ResourceStorage]
	if want.Cmp(have) >= 0 {
		return ""
	}
	return fmt.Sprintf("spec.resources.requests.storage %s is less than the %s the %s: a volume made from a source is at least as large; "+
		"ask for %s or more", quantity(want), quantity(have), what, quantity(have))
}

// contentClassProblem says why class cannot make a volume from content,
// or "": only the local provisioner makes volumes from a source, and
// never a plain directory (enforce "false"), whose copy of a live volume
// would not be point-in-time, and whose size nothing enforces.
func contentClassProblem(class *storagev1.StorageClass, content *contentIntent) string {
	switch {
	case provisioner.Canonical(class.Provisioner) != provisioner.LocalName:
		return fmt.Sprintf("StorageClass %q names provisioner %q, which cannot make a volume from a data source (%s %q); "+
			"use a class of %q", class.Name, class.Provisioner, content.Kind, content.Name, provisioner.LocalName)
	case strings.EqualFold(class.Parameters[local.ParamEnforce], "false"):
		return fmt.Sprintf("StorageClass %q makes plain directories (%s \"false\"), and a volume is never made from a data source (%s %q) "+
			"as one: a copy of a live plain directory is not point-in-time and its size is not enforced; use a class with %s: \"true\"",
			class.Name, local.ParamEnforce, content.Kind, content.Name, local.ParamEnforce)
	}
	return ""
}
