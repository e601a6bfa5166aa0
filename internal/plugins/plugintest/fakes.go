package plugintest

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// Objects is an in-memory volume.Objects. Maps are keyed by "namespace/name";
// a missing entry gives volume.ErrNotFound.
type Objects struct {
	ConfigMaps map[string]*v1.ConfigMap
	Secrets    map[string]*v1.Secret
	Claims     map[string]*v1.PersistentVolumeClaim
	// PVs is keyed by name.
	PVs map[string]*v1.PersistentVolume
}

var _ volume.Objects = Objects{}

// ConfigMap implements volume.Objects.
func (o Objects) ConfigMap(namespace, name string) (*v1.ConfigMap, error) {
	if cm, ok := o.ConfigMaps[namespace+"/"+name]; ok {
		return cm, nil
	}
	return nil, fmt.Errorf("configMap %s/%s: %w", namespace, name, volume.ErrNotFound)
}

// Secret implements volume.Objects.
func (o Objects) Secret(namespace, name string) (*v1.Secret, error) {
	if s, ok := o.Secrets[namespace+"/"+name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("secret %s/%s: %w", namespace, name, volume.ErrNotFound)
}

// PersistentVolumeClaim implements volume.Objects.
func (o Objects) PersistentVolumeClaim(namespace, name string) (*v1.PersistentVolumeClaim, error) {
	if c, ok := o.Claims[namespace+"/"+name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("persistentVolumeClaim %s/%s: %w", namespace, name, volume.ErrNotFound)
}

// PersistentVolume implements volume.Objects.
func (o Objects) PersistentVolume(name string) (*v1.PersistentVolume, error) {
	if pv, ok := o.PVs[name]; ok {
		return pv, nil
	}
	return nil, fmt.Errorf("persistentVolume %s: %w", name, volume.ErrNotFound)
}

// Tokens mints the fixed token "token-for-<serviceAccountName>/<audience>"
// and reports Ver as its version. It ignores the token a volume holds.
type Tokens struct{ Ver string }

// Token implements projected.Tokens.
func (k Tokens) Token(_ context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection, _ []byte) ([]byte, error) {
	return []byte("token-for-" + pod.Spec.ServiceAccountName + "/" + src.Audience), nil
}

// Version implements projected.Tokens.
func (k Tokens) Version(*v1.Pod, *v1.ServiceAccountTokenProjection) string { return k.Ver }
