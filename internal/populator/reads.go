package populator

import (
	"reflect"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// Kinds of the objects a volume's computation reads.
const (
	readConfigMap = iota
	readSecret
	readClaim
	readPV
)

// read is one lookup a volume's computation made, with what it found.
type read struct {
	kind            int
	namespace, name string
	obj             any // the object found, as returned (a typed nil when none)
	err             string
}

// unchanged reports whether the same lookup now finds the same thing: the
// same object (shared, read-only snapshots stay the same pointer while
// unchanged; a copy made at each lookup is compared by content) and the
// same error.
func (r read) unchanged(objs volume.Objects) bool {
	var obj any
	var err error
	switch r.kind {
	case readConfigMap:
		obj, err = objs.ConfigMap(r.namespace, r.name)
	case readSecret:
		obj, err = objs.Secret(r.namespace, r.name)
	case readClaim:
		obj, err = objs.PersistentVolumeClaim(r.namespace, r.name)
	case readPV:
		obj, err = objs.PersistentVolume(r.name)
	}
	return errorText(err) == r.err && (obj == r.obj || reflect.DeepEqual(obj, r.obj))
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// recorder is a volume.Objects that notes every lookup, so that the next
// pass can tell whether anything the volume was computed from changed.
type recorder struct {
	objects volume.Objects
	reads   []read
}

var _ volume.Objects = (*recorder)(nil)

func (r *recorder) note(kind int, namespace, name string, obj any, err error) {
	r.reads = append(r.reads, read{kind: kind, namespace: namespace, name: name, obj: obj, err: errorText(err)})
}

func (r *recorder) ConfigMap(namespace, name string) (*v1.ConfigMap, error) {
	cm, err := r.objects.ConfigMap(namespace, name)
	r.note(readConfigMap, namespace, name, cm, err)
	return cm, err
}

func (r *recorder) Secret(namespace, name string) (*v1.Secret, error) {
	s, err := r.objects.Secret(namespace, name)
	r.note(readSecret, namespace, name, s, err)
	return s, err
}

func (r *recorder) PersistentVolumeClaim(namespace, name string) (*v1.PersistentVolumeClaim, error) {
	c, err := r.objects.PersistentVolumeClaim(namespace, name)
	r.note(readClaim, namespace, name, c, err)
	return c, err
}

func (r *recorder) PersistentVolume(name string) (*v1.PersistentVolume, error) {
	pv, err := r.objects.PersistentVolume(name)
	r.note(readPV, "", name, pv, err)
	return pv, err
}
