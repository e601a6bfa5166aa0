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
		gone := err == nil // every rmdir, the pod directory's last, succeeded
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
		r.forgetPod(a, log, gone)
		return nil
	}
}

// forgetPod forgets a's pod once its directory is removed: its record on
// disk (only when the directory is really gone: one left with content the
// agent did not create keeps its record, so that a restart knows whose it
// is), the directory in the actual state, what the desired state knew of
// its removal. gone says that the cleanup saw the directory go (its rmdir
// succeeded, or found it missing); otherwise it is looked at.
func (r *Reconciler) forgetPod(a action, log *zap.Logger, gone bool) {
	if !gone {
		_, err := os.Lstat(r.cfg.Root.PodDir(a.pod))
		gone = errors.Is(err, os.ErrNotExist)
	}
	if gone {
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
//
// It lists only what rmdir cannot remove: each volume's teardown removed
// its directory, so a plugin directory is listed only when its rmdir
// finds it not empty, and the pod directory's own rmdir tells whether
// anything (volumeDevices/, which only a pod with a block volume has, or
// what someone else put there) is left beside volumes/.
func removePodDir(root layout.Root, a action) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	volumes := root.VolumesDir(a.pod)
	plugins, err := subdirs(volumes)
	keep(err)
	for _, plugin := range plugins {
		dir := filepath.Join(volumes, plugin)
		if err := rmdir(dir); !isNotEmpty(err) {
			keep(err)
			continue
		}
		vols, err := subdirs(dir)
		keep(err)
		for _, v := range vols {
			keep(rmdir(filepath.Join(dir, v)))
		}
		keep(rmdir(dir))
	}
	keep(rmdir(volumes))
	pod := root.PodDir(a.pod)
	if err := rmdir(pod); !isNotEmpty(err) {
		keep(err)
		return first
	}
	// Published devices are files: their teardown removes them, and an
	// entry left in a plugin's directory stops its rmdir with ENOTEMPTY.
	devices := root.DevicesDir(a.pod)
	plugins, err = subdirs(devices)
	keep(err)
	for _, plugin := range plugins {
		keep(rmdir(filepath.Join(devices, plugin)))
	}
	keep(rmdir(devices))
	keep(rmdir(pod))
	return first
}

// isNotEmpty reports whether err is rmdir's of a directory that holds
// something.
func isNotEmpty(err error) bool {
	return errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST)
}

// subdirs lists the real directories (not symlinks) in dir; a missing dir
// has none. It reads dir with getdents64 on a descriptor of its own, and
// stats only an entry whose type the file system does not give.
func subdirs(dir string) ([]string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	var names []string
	err = mount.ReadDirents(fd, nil, func(batch []mount.Dirent) error {
		for _, e := range batch {
			typ := e.Type
			if typ == unix.DT_UNKNOWN {
				var st unix.Stat_t
				if err := unix.Fstatat(fd, e.Name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					continue // gone meanwhile, or not ours to look at: its parent's rmdir says so
				}
				if st.Mode&unix.S_IFMT == unix.S_IFDIR {
					typ = unix.DT_DIR
				}
			}
			if typ == unix.DT_DIR {
				names = append(names, e.Name)
			}
		}
		return nil
	})
	if err != nil {
		return names, &os.PathError{Op: "read", Path: dir, Err: err}
	}
	return names, nil
}

func rmdir(dir string) error {
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}
