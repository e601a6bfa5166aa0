// Package volumesnapshot holds the part of the snapshot.storage.k8s.io/v1
// API that manifest mode reads: VolumeSnapshot and VolumeSnapshotClass,
// with the upstream CRDs' field names, so that a manifest written for a
// cluster (or printed by kubectl get -o yaml) parses as it is.
//
// Why not the upstream client module
// (github.com/kubernetes-csi/external-snapshotter/client/v8): v8.7.0
// requires k8s.io/api, apimachinery and client-go v0.37, which would move
// every Kubernetes dependency of the agent for five structs; v8.6.0 still
// moves eight indirect modules. These types decode the same JSON. The
// package only declares types: it must never grow behaviour.
package volumesnapshot

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The API group and version.
const (
	Group      = "snapshot.storage.k8s.io"
	Version    = "v1"
	APIVersion = Group + "/" + Version
)

// The kinds.
const (
	KindVolumeSnapshot      = "VolumeSnapshot"
	KindVolumeSnapshotClass = "VolumeSnapshotClass"
)

// SchemeGroupVersion is the group version of the types.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// AddToScheme registers the types in s.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &VolumeSnapshot{}, &VolumeSnapshotClass{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// VolumeSnapshot is a request for a snapshot of a claim's volume.
type VolumeSnapshot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VolumeSnapshotSpec `json:"spec"`
	// Status is what a snapshot controller reports. A manifest's is
	// ignored: the agent reports its own (volume-agent claims).
	Status *VolumeSnapshotStatus `json:"status,omitempty"`
}

// VolumeSnapshotSpec says what to snapshot.
type VolumeSnapshotSpec struct {
	Source                  VolumeSnapshotSource `json:"source"`
	VolumeSnapshotClassName *string              `json:"volumeSnapshotClassName,omitempty"`
}

// VolumeSnapshotSource names the claim to snapshot, or a pre-provisioned
// snapshot (VolumeSnapshotContent); exactly one.
type VolumeSnapshotSource struct {
	PersistentVolumeClaimName *string `json:"persistentVolumeClaimName,omitempty"`
	VolumeSnapshotContentName *string `json:"volumeSnapshotContentName,omitempty"`
}

// VolumeSnapshotStatus is the status of the upstream API.
type VolumeSnapshotStatus struct {
	BoundVolumeSnapshotContentName *string              `json:"boundVolumeSnapshotContentName,omitempty"`
	CreationTime                   *metav1.Time         `json:"creationTime,omitempty"`
	ReadyToUse                     *bool                `json:"readyToUse,omitempty"`
	RestoreSize                    *resource.Quantity   `json:"restoreSize,omitempty"`
	Error                          *VolumeSnapshotError `json:"error,omitempty"`
	VolumeGroupSnapshotName        *string              `json:"volumeGroupSnapshotName,omitempty"`
}

// VolumeSnapshotError is an error of the upstream status.
type VolumeSnapshotError struct {
	Time    *metav1.Time `json:"time,omitempty"`
	Message *string      `json:"message,omitempty"`
}

// DeletionPolicy says what happens to a snapshot once its VolumeSnapshot
// is deleted.
type DeletionPolicy string

// The deletion policies.
const (
	DeletionPolicyDelete DeletionPolicy = "Delete"
	DeletionPolicyRetain DeletionPolicy = "Retain"
)

// VolumeSnapshotClass names the driver that takes snapshots and how.
type VolumeSnapshotClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Driver            string            `json:"driver"`
	Parameters        map[string]string `json:"parameters,omitempty"`
	DeletionPolicy    DeletionPolicy    `json:"deletionPolicy"`
}

// ClaimName is spec.source.persistentVolumeClaimName, or "".
func (s *VolumeSnapshot) ClaimName() string {
	if p := s.Spec.Source.PersistentVolumeClaimName; p != nil {
		return *p
	}
	return ""
}

// ClassName is spec.volumeSnapshotClassName, or "".
func (s *VolumeSnapshot) ClassName() string {
	if p := s.Spec.VolumeSnapshotClassName; p != nil {
		return *p
	}
	return ""
}
