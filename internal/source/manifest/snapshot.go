package manifest

import (
	"cmp"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
)

// The kinds a manifest may define: StorageClass in storage.k8s.io/v1,
// VolumeSnapshot and VolumeSnapshotClass in snapshot.storage.k8s.io/v1, the
// others in the core "v1" group version.
const (
	kindPod          = "Pod"
	kindConfigMap    = "ConfigMap"
	kindSecret       = "Secret"
	kindPV           = "PersistentVolume"
	kindPVC          = "PersistentVolumeClaim"
	kindNode         = "Node"
	kindStorageClass = "StorageClass"
	kindList         = "List"

	kindVolumeSnapshot      = volumesnapshot.KindVolumeSnapshot
	kindVolumeSnapshotClass = volumesnapshot.KindVolumeSnapshotClass
)

// namespaced tells, for every supported object kind, whether it lives in a namespace.
var namespaced = map[string]bool{
	kindPod: true, kindConfigMap: true, kindSecret: true, kindPVC: true,
	kindPV: false, kindNode: false, kindStorageClass: false,
	kindVolumeSnapshot: true, kindVolumeSnapshotClass: false,
}

// apiVersionOf is the apiVersion of every supported object kind.
var apiVersionOf = map[string]string{
	kindPod: "v1", kindConfigMap: "v1", kindSecret: "v1", kindPVC: "v1", kindPV: "v1", kindNode: "v1",
	kindStorageClass:   "storage.k8s.io/v1",
	kindVolumeSnapshot: volumesnapshot.APIVersion, kindVolumeSnapshotClass: volumesnapshot.APIVersion,
}

// key identifies an object: two documents with the same key are duplicates.
type key struct {
	kind      string
	namespace string // empty for cluster-scoped kinds
	name      string
}

func (k key) String() string {
	if k.namespace == "" {
		return k.kind + " " + k.name
	}
	return k.kind + " " + k.namespace + "/" + k.name
}

// object is one decoded, validated and normalized manifest object.
type object struct {
	key key
	obj runtime.Object // *v1.Pod, *v1.ConfigMap, *v1.Secret, *v1.PersistentVolume, *storagev1.StorageClass, ...
	// version is the object's metadata.resourceVersion: a hash of its content.
	version string
	// at says where the object was defined within its file.
	at where
}

// snapshot is the state handed out at one moment. It is built whole by the
// scanner and never modified after publication.
type snapshot struct {
	pods    []*v1.Pod // this node's pods, sorted by namespace/name
	objects map[key]runtime.Object
	// versions holds every object's version, to tell whether state changed.
	versions map[key]string
	status   source.Status
}

func initialSnapshot() *snapshot {
	return &snapshot{
		objects:  map[key]runtime.Object{},
		versions: map[key]string{},
		status:   source.Status{Name: sourceName, Reason: "initial scan not done"},
	}
}

// newSnapshot indexes objs and keeps the pods bound to nodeName.
func newSnapshot(objs []object, nodeName string, status source.Status) *snapshot {
	snap := &snapshot{
		objects:  make(map[key]runtime.Object, len(objs)),
		versions: make(map[key]string, len(objs)),
		status:   status,
	}
	for _, o := range objs {
		snap.objects[o.key] = o.obj
		snap.versions[o.key] = o.version
		if pod, ok := o.obj.(*v1.Pod); ok && pod.Spec.NodeName == nodeName {
			snap.pods = append(snap.pods, pod)
		}
	}
	slices.SortFunc(snap.pods, func(a, b *v1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return snap
}

// equal reports whether a consumer could tell a and b apart. Objects are
// compared by version, which is a hash of their content.
func (a *snapshot) equal(b *snapshot) bool {
	sa, sb := a.status, b.status
	return sa.Synced == sb.Synced && sa.Reason == sb.Reason && sa.ListingSince.Equal(sb.ListingSince) &&
		slices.Equal(sa.Errors, sb.Errors) && maps.Equal(a.versions, b.versions)
}
