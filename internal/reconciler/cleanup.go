package reconciler

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/executor"
	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/mount"
)

// cleanup removes an unwanted pod's directory once its volumes are torn
// down. It holds the pod's lock, so no set-up of the same pod runs at the
// same time, and it looks again before it removes anything: a pod that came
// back, or has a volume set up again, keeps its directory.
func (r *Reconciler) cleanup(a action) executor.Op {
	return func(ctx context.Context) error {
		unlock := r.pods.lock(a.pod)
		defer unlock()
		if _, ok := r.cfg.Actual.PodDir(a.pod); !ok {
			return nil // removed meanwhile (by its last volume's teardown)
		}
		log := r.log.With(podFields(a)...)
		if r.podInUse(a) {
			log.Debug("skipping cleanup of a pod directory in use again")
			return nil
		}
		start := time.Now()
		err := r.removePodSubPaths(ctx, a.pod)
		if err == nil {
			_, err = mount.Bounded(ctx, func() (struct{}, error) { return struct{}{}, removePodDir(r.cfg.Root, a) })
		}
		err = mount.OneLine(err)
		took := time.Since(start)
		switch {
		case err == nil:
			log.Info("pod directory removed", zap.Duration("duration", took))
		case errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EBUSY):
			log.Warn("pod directory holds content the agent did not create; leaving it", zap.String("dir", r.cfg.Root.PodDir(a.pod)), zap.Error(err))
			err = nil
		default:
			r.cfg.Actual.SetPodDirError(a.pod, err.Error())
			log.Warn("pod directory cleanup failed", zap.Duration("duration", took), zap.Error(err))
		}
		r.observe(a, start, err)
		if err != nil {
			return err
		}
		r.forgetPod(a, log)
		return nil
	}
}

// forgetPod forgets a's pod once its directory is removed: its record on
// disk (only when the directory is really gone: one left with content the
// agent did not create keeps its record, so that a restart knows whose it
// is), the directory in the actual state, what the desired state knew of
// its removal.
func (r *Reconciler) forgetPod(a action, log *zap.Logger) {
	if _, err := os.Lstat(r.cfg.Root.PodDir(a.pod)); errors.Is(err, os.ErrNotExist) {
		if err := r.records().Remove(a.pod); err != nil {
			// A record without a directory is forgotten at the next start.
			log.Warn("the record of a removed pod directory stays", zap.Error(err))
		}
	}
	r.cfg.Actual.RemovePodDir(a.pod)
	r.subPathPods.forget(a.pod)
	r.cfg.Desired.Forget(a.pod)
}

// podInUse reports whether a's pod is wanted again or has a volume set up.
func (r *Reconciler) podInUse(a action) bool {
	if _, wanted := r.cfg.Desired.Pod(a.pod); wanted {
		return true
	}
	vols, _ := r.cfg.Actual.PodVolumes(a.pod)
	return len(vols) > 0
}

// removePodDir removes the levels of <root>/pods/<uid> the agent owns, with
// rmdir only: the empty volume directories of each plugin directory, the
// plugin directories, volumes/, the plugin directories of volumeDevices/
// and volumeDevices/ itself, and the pod directory. It never enters a
// volume directory — whatever is inside one (data of a plugin the agent
// does not know, a mount) stops it with ENOTEMPTY or EBUSY — and never
// follows a symlink. It returns the first error after removing all it can.
func removePodDir(root layout.Root, a action) error {
	volumes := root.VolumesDir(a.pod)
	plugins, err := subdirs(volumes)
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	keep(err)
	for _, plugin := range plugins {
		dir := filepath.Join(volumes, plugin)
		vols, err := subdirs(dir)
		keep(err)
		for _, v := range vols {
			keep(rmdir(filepath.Join(dir, v)))
		}
		keep(rmdir(dir))
	}
	keep(rmdir(volumes))
	// Published devices are files: their teardown removes them, and an
	// entry left in a plugin's directory stops its rmdir with ENOTEMPTY.
	devices := root.DevicesDir(a.pod)
	plugins, err = subdirs(devices)
	keep(err)
	for _, plugin := range plugins {
		keep(rmdir(filepath.Join(devices, plugin)))
	}
	keep(rmdir(devices))
	keep(rmdir(root.PodDir(a.pod)))
	return first
}

// subdirs lists the real directories (not symlinks) in dir; a missing dir
// has none.
func subdirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, err
}

func rmdir(dir string) error {
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}
