package volumesnapshot

import "k8s.io/apimachinery/pkg/runtime"

// DeepCopy returns a copy of s that shares nothing with it.
func (s *VolumeSnapshot) DeepCopy() *VolumeSnapshot {
	if s == nil {
		return nil
	}
	out := &VolumeSnapshot{TypeMeta: s.TypeMeta}
	meta := s.ObjectMeta
	meta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Source.PersistentVolumeClaimName = copyString(s.Spec.Source.PersistentVolumeClaimName)
	out.Spec.Source.VolumeSnapshotContentName = copyString(s.Spec.Source.VolumeSnapshotContentName)
	out.Spec.VolumeSnapshotClassName = copyString(s.Spec.VolumeSnapshotClassName)
	if st := s.Status; st != nil {
		c := &VolumeSnapshotStatus{
			BoundVolumeSnapshotContentName: copyString(st.BoundVolumeSnapshotContentName),
			CreationTime:                   st.CreationTime.DeepCopy(),
			VolumeGroupSnapshotName:        copyString(st.VolumeGroupSnapshotName),
		}
		if st.ReadyToUse != nil {
			ready := *st.ReadyToUse
			c.ReadyToUse = &ready
		}
		if st.RestoreSize != nil {
			size := st.RestoreSize.DeepCopy()
			c.RestoreSize = &size
		}
		if e := st.Error; e != nil {
			c.Error = &VolumeSnapshotError{Time: e.Time.DeepCopy(), Message: copyString(e.Message)}
		}
		out.Status = c
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (s *VolumeSnapshot) DeepCopyObject() runtime.Object { return s.DeepCopy() }

// DeepCopy returns a copy of c that shares nothing with it.
func (c *VolumeSnapshotClass) DeepCopy() *VolumeSnapshotClass {
	if c == nil {
		return nil
	}
	out := &VolumeSnapshotClass{TypeMeta: c.TypeMeta, Driver: c.Driver, DeletionPolicy: c.DeletionPolicy}
	meta := c.ObjectMeta
	meta.DeepCopyInto(&out.ObjectMeta)
	if c.Parameters != nil {
		out.Parameters = make(map[string]string, len(c.Parameters))
		for k, v := range c.Parameters {
			out.Parameters[k] = v
		}
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (c *VolumeSnapshotClass) DeepCopyObject() runtime.Object { return c.DeepCopy() }

func copyString(p *string) *string {
	if p == nil {
		return nil
	}
	s := *p
	return &s
}
