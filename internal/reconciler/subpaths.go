package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/subpath"
)

// SubPaths prepares and removes the subPath mounts of pods' containers
// (subpath.Preparer).
type SubPaths interface {
	// Prepare makes the subPath mounts wants lists of the volume named
	// volume in the pod's spec, whose content is at path, keeps those
	// that are right and removes those of the volume no longer wanted.
	Prepare(ctx context.Context, uid types.UID, volume, path string, wants []subpath.Want) (*subpath.Outcome, error)
	// RemovePod takes every subPath mount of the pod off and removes it.
	RemovePod(ctx context.Context, uid types.UID) error
}

// prepareSubPaths prepares the subPath mounts of a's volume, set up at
// path. Without a SubPaths (the agent mounts nothing), it prepares none.
func (r *Reconciler) prepareSubPaths(ctx context.Context, a action, path string) (*subpath.Outcome, error) {
	if r.cfg.SubPaths == nil {
		return nil, nil
	}
	if r.noSubPathsToTouch(a) {
		// What Prepare would return: an empty outcome, which a later
		// subPath of the volume (a manifest edited under the same UID)
		// is compared with (plan.setups).
		return &subpath.Outcome{}, nil
	}
	return r.cfg.SubPaths.Prepare(ctx, a.pod, cmp.Or(a.desired.SpecName, a.volume), path, a.desired.SubPaths)
}

// noSubPathsToTouch reports whether a's set-up can skip Prepare, whose
// work would find nothing: the volume wants no subPath, no set-up of it
// has recorded a mount (or an attempt at one), its state is known (not
// Uncertain), and neither it nor its pod's directory was found on disk at
// start, where a crash may have left mounts no outcome records.
func (r *Reconciler) noSubPathsToTouch(a action) bool {
	switch {
	case len(a.desired.SubPaths) > 0, a.actual.Reconstructed, a.actual.State == asw.Uncertain:
		return false
	case a.actual != (asw.Volume{}) && (a.actual.SubPaths == nil || len(a.actual.SubPaths.Mounts) > 0):
		return false // set up before, and its outcome names mounts or is not known
	}
	return !r.podFoundAtStart(a.pod)
}

// removeSubPaths takes off every subPath mount of a's pod, before its
// volume is torn down (the mounts show the volume's content) or its
// directory removed (leftovers of a crash). It holds the pod's lock
// alone, so that the teardowns of the pod's volumes, which all begin
// with it, never remove the same mounts at once.
func (r *Reconciler) removeSubPaths(ctx context.Context, a action) error {
	if r.cfg.SubPaths == nil {
		return nil
	}
	unlock := r.pods.lock(a.pod)
	defer unlock()
	if r.wantedAgain(a) {
		return nil
	}
	return removePodSubPaths(ctx, r.cfg.SubPaths, a.pod)
}

// removePodSubPaths is RemovePod, bounded and on one line.
func removePodSubPaths(ctx context.Context, s SubPaths, uid types.UID) error {
	if s == nil {
		return nil
	}
	_, err := mount.Bounded(ctx, func() (struct{}, error) { return struct{}{}, s.RemovePod(ctx, uid) })
	if err != nil {
		return mount.OneLine(fmt.Errorf("remove the pod's subPath mounts: %w", err))
	}
	return nil
}

// logSubPaths logs the outcome of a volume's subPath preparation: a
// warning for each mount refused (by its spec, or when prepared), debug
// for the others.
func logSubPaths(log *zap.Logger, wants []subpath.Want, o *subpath.Outcome) {
	field := func(container string, index int, sub string) []zap.Field {
		return []zap.Field{zap.String("container", container), zap.Int("index", index), zap.String("subPath", sub)}
	}
	for _, w := range wants {
		if w.Problem != "" {
			log.Warn("subPath mount refused", append(field(w.Container, w.Index, w.Path), zap.String("error", w.Problem))...)
		}
	}
	if o == nil {
		return
	}
	for _, m := range o.Mounts {
		if m.Error != "" {
			log.Warn("subPath mount refused", append(field(m.Container, m.Index, m.SubPath), zap.String("error", m.Error))...)
			continue
		}
		log.Debug("subPath mount prepared", append(field(m.Container, m.Index, m.SubPath), zap.String("path", m.Path))...)
	}
}

// recordSetUp reports a volume's first set-up on its pod: a failure when
// the spec of one of its subPaths is refused (its container cannot start),
// a success otherwise.
func (r *Reconciler) recordSetUp(a action) {
	for _, w := range a.desired.SubPaths {
		if w.Problem != "" {
			r.cfg.Recorder.SetUpFailed(a.desired.Spec, errors.New(w.Problem))
			return
		}
	}
	r.cfg.Recorder.SetUpSucceeded(a.desired.Spec)
}
