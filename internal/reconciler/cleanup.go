package reconciler

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/executor"
)

// cleanup removes an unwanted pod's directory once its volumes are torn
// down. It only ever removes empty directories (rmdir): anything left inside
// — a volume of a plugin this agent does not know, a file somebody put there
// — stays, and the directory is no longer tracked until the next start.
func (r *Reconciler) cleanup(a action) executor.Op {
	return func(ctx context.Context) error {
		log := r.log.With(zap.String("podUID", string(a.pod)))
		err := removeEmptyTree(r.cfg.Root.PodDir(a.pod))
		switch {
		case err == nil:
			log.Debug("pod directory removed")
		case errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST):
			log.Info("pod directory holds content the agent did not create; leaving it", zap.Error(err))
		default:
			log.Info("pod directory cleanup failed", zap.Error(err))
			return err
		}
		r.cfg.Actual.RemovePodDir(a.pod)
		return nil
	}
}

// removeEmptyTree removes dir and the empty directories in it, depth first,
// without following symlinks. It returns the first error (ENOTEMPTY for a
// directory that holds anything else) after removing every empty directory
// it can: a foreign file in one subtree does not keep its empty siblings.
func removeEmptyTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var first error
	for _, e := range entries {
		if e.Type().IsDir() {
			if err := removeEmptyTree(filepath.Join(dir, e.Name())); err != nil && first == nil {
				first = err
			}
		}
	}
	if first != nil {
		return first
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}
