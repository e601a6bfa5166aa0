package reconciler

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// mountTableTimeout bounds the one read of the mount table at start.
const mountTableTimeout = 30 * time.Second

// reconstruct rebuilds the actual state from the pod directories on disk.
// Every volume found is Uncertain: it is set up again if still wanted (which
// neither remounts nor rewrites what is right) and torn down otherwise, but
// only after every source has delivered its complete state. Volumes of
// plugins this agent does not know are left alone. A volume on a tmpfs
// keeps the options it was mounted with; whether they include noswap is
// read from the mount table, once for all volumes, and so is whether each
// volume's mount is read-only, which it keeps as long as its pod runs.
func (r *Reconciler) reconstruct(ctx context.Context) error {
	pods, found, err := r.cfg.Root.Scan()
	if err != nil {
		return fmt.Errorf("reconstruct actual state: %w", err)
	}
	readOnly, err := r.mountedReadOnly(ctx, found)
	if err != nil {
		return fmt.Errorf("reconstruct actual state: whether the volumes found on disk are mounted read-only: %w", err)
	}
	subPaths := 0
	foundAtStart := make(map[types.UID]bool, len(pods))
	for _, uid := range pods {
		r.cfg.Actual.AddPodDir(uid, true)
		// A crash may have left subPath mounts whatever the set-ups
		// after this start do: the pod's teardown looks for them.
		r.subPathPods.note(uid)
		subPaths += r.subPathsFound(uid)
		foundAtStart[uid] = true
	}
	r.foundAtStart.Store(&foundAtStart)
	r.namePodsFound(pods)
	noSwap := r.mountedNoSwap(ctx, len(found))
	swappable := 0
	for _, f := range found {
		swap := volume.SwapUnknown
		if has, ok := noSwap[f.Dir]; ok {
			swap = volume.SwapOf(has)
		}
		if r.addFound(f, swap, accessFound(f, readOnly)) && swap == volume.SwapAllowed {
			swappable++
		}
	}
	fields := []zap.Field{zap.Int("pods", len(pods)), zap.Int("volumes", len(found))}
	if subPaths > 0 {
		// Kept by the set-ups of their volumes while their pods are
		// wanted, taken off with the pods' teardowns otherwise.
		fields = append(fields, zap.Int("subPathMounts", subPaths))
	}
	if swappable > 0 {
		fields = append(fields, zap.Int("tmpfsWithoutNoswap", swappable))
	}
	r.log.Info("actual state reconstructed", fields...)
	// Made once here rather than looked for at each pod: best effort, as
	// a record's write and a pod's directories make them when missing.
	_ = r.records().MakeDir()
	_ = os.MkdirAll(r.cfg.Root.PodsDir(), 0o750)
	return nil
}

// mountedNoSwap reads, when there are volumes on disk, whether each tmpfs
// below the pods directory has noswap. Without it nothing is lost but the
// report: the volumes are reconstructed all the same.
func (r *Reconciler) mountedNoSwap(ctx context.Context, found int) map[string]bool {
	if found == 0 || r.cfg.MountedNoSwap == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, mountTableTimeout)
	defer cancel()
	noSwap, err := r.cfg.MountedNoSwap(ctx, r.cfg.Root.PodsDir())
	if err != nil {
		r.log.Info("the swap protection of volumes found on disk is not known", zap.Error(err))
	}
	return noSwap
}

// mountedReadOnly reads, when there are volume directories on disk,
// whether the mount on each is read-only. Published devices are left out:
// their mount says nothing of whether the device can be written.
func (r *Reconciler) mountedReadOnly(ctx context.Context, found []layout.Found) (map[string]bool, error) {
	if r.cfg.MountedReadOnly == nil {
		return nil, nil
	}
	var dirs []string
	for _, f := range found {
		if !f.Block {
			dirs = append(dirs, f.Dir)
		}
	}
	if len(dirs) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, mountTableTimeout)
	defer cancel()
	return r.cfg.MountedReadOnly(ctx, dirs)
}

// accessFound is the access of the volume f found on disk, from
// readOnly by mount point: unknown when it is not a mount point.
func accessFound(f layout.Found, readOnly map[string]bool) asw.Access {
	ro, ok := readOnly[f.Dir]
	if !ok || f.Block {
		return asw.AccessUnknown
	}
	return asw.AccessOf(ro)
}

// addFound records a volume found on disk, and reports whether it did.
func (r *Reconciler) addFound(f layout.Found, swap volume.Swap, access asw.Access) bool {
	log := r.log.With(zap.String("podUID", string(f.PodUID)), zap.String("volume", f.Volume), zap.String("plugin", f.Plugin))
	if _, ok := r.cfg.Plugins.Get(f.Plugin); !ok {
		log.Warn("leaving volume of an unknown plugin alone", zap.String("dir", f.Dir))
		return false
	}
	if prev, ok := r.cfg.Actual.Get(dsw.Key{PodUID: f.PodUID, Volume: f.Volume}); ok {
		// A volume directory and a published device of one name: only a
		// PersistentVolume whose volumeMode changed under a running pod
		// makes that. The first found (the directory) is kept; the device
		// stays as it is until an operator takes it off.
		log.Warn("leaving a published device alone: a volume directory of the same name was found", zap.String("dir", f.Dir), zap.String("kept", prev.Dir))
		return false
	}
	r.cfg.Actual.Set(asw.Volume{PodUID: f.PodUID, Name: f.Volume, Plugin: f.Plugin, Dir: f.Dir, Path: f.Dir, State: asw.Uncertain, Reconstructed: true, Swap: swap, Block: f.Block,
		Access: access})
	log.Debug("volume found on disk")
	return true
}

// namePodsFound gives the pod directories found at start the namespace,
// name and source their records say, and forgets the records whose
// directory is gone (a crash between the removal of the one and of the
// other). A directory without a readable record is of a pod whose source
// is not known: it goes only on the evidence of every source.
func (r *Reconciler) namePodsFound(pods []types.UID) {
	recs, err := r.records().Load()
	if err != nil {
		r.log.Warn("some pods found on disk have no readable record: they are torn down only once every source says they are gone", zap.Error(err))
	}
	found := make(map[types.UID]bool, len(pods))
	for _, uid := range pods {
		found[uid] = true
		if rec, ok := recs[uid]; ok {
			r.cfg.Actual.NameFoundPod(uid, rec.Namespace, rec.Name, rec.Source)
		}
	}
	for uid := range recs {
		if found[uid] {
			continue
		}
		if err := r.records().Remove(uid); err != nil {
			r.log.Warn("the record of a pod directory that is gone stays", zap.String("podUID", string(uid)), zap.Error(err))
		}
	}
}

// podFoundAtStart reports whether uid's directory was on disk when the
// agent started (or whether that is not known yet).
func (r *Reconciler) podFoundAtStart(uid types.UID) bool {
	found := r.foundAtStart.Load()
	return found == nil || (*found)[uid]
}

// subPathsFound counts the subPath mount points of pod uid found on disk.
func (r *Reconciler) subPathsFound(uid types.UID) int {
	n, err := r.cfg.Root.SubPathTargets(uid)
	if err != nil {
		r.log.Info("the subPath mounts of a pod found on disk could not all be listed; they go with the pod", zap.String("podUID", string(uid)), zap.Error(err))
	}
	return n
}
