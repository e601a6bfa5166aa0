package contentdir

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Existing turns a lookup's result into the object, or nil when it does
// not exist (the payload functions decide whether that is an error).
// Other lookup errors are wrapped with what, e.g. "configMap ns/name".
func Existing[T metav1.Object](obj T, err error, what string) (T, error) {
	var none T
	switch {
	case errors.Is(err, volume.ErrNotFound):
		return none, nil
	case err != nil:
		return none, fmt.Errorf("get %s: %w", what, err)
	}
	return obj, nil
}

// ObjectVersion is an object's uid@resourceVersion, or "absent" when the
// lookup found nothing; other lookup errors are returned.
func ObjectVersion[T metav1.Object](obj T, err error) (string, error) {
	switch {
	case errors.Is(err, volume.ErrNotFound):
		return "absent", nil
	case err != nil:
		return "", err
	}
	return string(obj.GetUID()) + "@" + obj.GetResourceVersion(), nil
}

// Publish gives the pod's fsGroup ownership of the payload (unless the
// agent runs unprivileged) and makes dir hold exactly it.
func (d Dir) Publish(ctx context.Context, spec *volume.Spec, dir string, payload Payload) (volume.Result, error) {
	if mount.Privileged(d.Mounter) {
		ApplyFsGroup(spec.Pod, payload)
	}
	swap, err := d.SetUp(ctx, dir, payload)
	if err != nil {
		return volume.Result{}, err
	}
	return volume.Result{Path: dir, Swap: swap}, nil
}
