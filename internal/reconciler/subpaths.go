package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

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
	return r.removePodSubPaths(ctx, a.pod)
}

// removePodSubPaths is RemovePod, bounded and on one line, for a pod
// that may have subPath mounts (subPathsMayExist); for any other it does
// nothing, which saves a pod without subPaths the listing and rmdir of a
// volume-subpaths directory that was never made, at each teardown of its
// volumes and at its cleanup. The caller holds the pod's lock alone: no
// preparation of the pod runs meanwhile.
func (r *Reconciler) removePodSubPaths(ctx context.Context, uid types.UID) error {
	s := r.cfg.SubPaths
	if s == nil || !r.subPathsMayExist(uid) {
		return nil
	}
	_, err := mount.Bounded(ctx, func() (struct{}, error) { return struct{}{}, s.RemovePod(ctx, uid) })
	if err != nil {
		return mount.OneLine(fmt.Errorf("remove the pod's subPath mounts: %w", err))
	}
	r.subPathPods.forget(uid)
	return nil
}

// subPathsMayExist reports whether pod uid may have subPath mounts, or
// their directories, on disk: when its directory was found at start (a
// crash may have left them, whatever the actual state says now), when a
// preparation asked for mounts or failed since its mounts were last
// removed (subPathPods), or when the actual state shows a volume found
// on disk or a recorded outcome with a mount. Only a pod none of these
// is true of is spared RemovePod: nothing but Prepare makes subPath
// mounts, and every call of it goes through subPathPods.
func (r *Reconciler) subPathsMayExist(uid types.UID) bool {
	if r.subPathPods.has(uid) {
		return true
	}
	if d, ok := r.cfg.Actual.PodDir(uid); ok && d.Reconstructed {
		return true
	}
	vols, _ := r.cfg.Actual.PodVolumes(uid)
	for _, v := range vols {
		if v.Reconstructed || (v.SubPaths != nil && len(v.SubPaths.Mounts) > 0) {
			return true
		}
	}
	return false
}

// subPathPods is the set of pods that may have subPath mounts on disk
// although the actual state may no longer say so: pods whose directory
// was found at start, and pods a preparation asked mounts for (or failed
// for) since their mounts were last removed. A pod leaves it when
// RemovePod succeeds under the pod's lock alone, or when its directory
// is forgotten; it holds at most one entry per pod directory known.
type subPathPods struct {
	mu   sync.Mutex
	pods map[types.UID]bool // guarded by mu
}

func (s *subPathPods) note(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods == nil {
		s.pods = map[types.UID]bool{}
	}
	s.pods[uid] = true
}

func (s *subPathPods) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, uid)
}

func (s *subPathPods) has(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pods[uid]
}

// notingSubPaths is a SubPaths that notes in pods every pod a
// preparation may leave a mount of: one that asks for mounts (noted
// before it starts, so that one cut short still counts) or fails (its
// removal of mounts no longer wanted may have left some).
type notingSubPaths struct {
	SubPaths
	pods *subPathPods
}

func (n notingSubPaths) Prepare(ctx context.Context, uid types.UID, volume, path string, wants []subpath.Want) (*subpath.Outcome, error) {
	if len(wants) > 0 {
		n.pods.note(uid)
	}
	o, err := n.SubPaths.Prepare(ctx, uid, volume, path, wants)
	if err != nil {
		n.pods.note(uid)
	}
	return o, err
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
