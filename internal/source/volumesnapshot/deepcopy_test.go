package volumesnapshot

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A copy is equal to its original and shares nothing with it: the
// manifest source hands out shared, read-only objects, and a change to a
// copy must never reach them.
func TestDeepCopySharesNothing(t *testing.T) {
	claim, class, ready, msg := "data", "local", true, "x"
	size := resource.MustParse("1Gi")
	s := &VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "s", Labels: map[string]string{"a": "b"}},
		Spec:   VolumeSnapshotSpec{Source: VolumeSnapshotSource{PersistentVolumeClaimName: &claim}, VolumeSnapshotClassName: &class},
		Status: &VolumeSnapshotStatus{ReadyToUse: &ready, RestoreSize: &size, Error: &VolumeSnapshotError{Message: &msg}}}
	c := s.DeepCopy()
	if !equality.Semantic.DeepEqual(s, c) {
		t.Fatalf("copy %+v differs from %+v", c, s)
	}
	*c.Spec.Source.PersistentVolumeClaimName, *c.Spec.VolumeSnapshotClassName, c.Labels["a"] = "other", "other", "c"
	*c.Status.ReadyToUse, *c.Status.Error.Message = false, "y"
	if s.ClaimName() != "data" || s.ClassName() != "local" || s.Labels["a"] != "b" || !*s.Status.ReadyToUse || *s.Status.Error.Message != "x" {
		t.Errorf("a change to the copy reached the original: %+v", s)
	}
	vc := &VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Driver: "d", Parameters: map[string]string{"k": "v"}, DeletionPolicy: DeletionPolicyDelete}
	cc := vc.DeepCopy()
	cc.Parameters["k"] = "w"
	if vc.Parameters["k"] != "v" || !equality.Semantic.DeepEqual(vc.DeepCopyObject(), vc) {
		t.Errorf("class copy shares its parameters: %+v", vc)
	}
}
