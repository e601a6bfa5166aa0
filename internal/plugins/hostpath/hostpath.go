// Package hostpath implements hostPath volumes. As in the kubelet nothing is
// mounted: the host path is checked against the volume's type (and created
// for DirectoryOrCreate and FileOrCreate) and reported as the volume's path.
//
// It never modifies or deletes anything that exists on the host path.
package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Name is the plugin's kubelet name.
const Name = "kubernetes.io/host-path"

// Plugin checks hostPath volumes.
type Plugin struct {
	// HostRoot is where the host's root file system is visible to the agent:
	// "/" (or "") on the host itself, e.g. "/host" in a container. Paths are
	// checked below it and reported as host paths.
	HostRoot string
}

var (
	_ volume.Plugin    = (*Plugin)(nil)
	_ volume.Validator = (*Plugin)(nil)
)

// Name implements volume.Plugin.
func (p *Plugin) Name() string { return Name }

// CanSupport implements volume.Plugin.
func (p *Plugin) CanSupport(v *v1.Volume) bool { return v.HostPath != nil }

// Validate rejects relative paths, paths with a ".." element and unknown types.
func (p *Plugin) Validate(spec *volume.Spec) error {
	hp := spec.Volume.HostPath
	if !filepath.IsAbs(hp.Path) {
		return fmt.Errorf("hostPath.path %q must be absolute", hp.Path)
	}
	for _, elem := range strings.Split(hp.Path, "/") {
		if elem == ".." {
			return fmt.Errorf("hostPath.path %q must not contain '..'", hp.Path)
		}
	}
	if _, ok := checks[hostPathType(hp)]; !ok {
		return fmt.Errorf("hostPath.type %q is not a known type", hostPathType(hp))
	}
	return nil
}

// SetUp checks the host path against the volume's type.
func (p *Plugin) SetUp(ctx context.Context, spec *volume.Spec, _ string) (volume.Result, error) {
	hp := spec.Volume.HostPath
	check, ok := checks[hostPathType(hp)]
	if !ok {
		return volume.Result{}, fmt.Errorf("hostPath.type %q is not a known type", hostPathType(hp))
	}
	local := filepath.Join(p.HostRoot, hp.Path)
	if _, err := mount.Bounded(ctx, func() (struct{}, error) { return struct{}{}, check(local) }); err != nil {
		return volume.Result{}, fmt.Errorf("hostPath %s (type %s): %w", hp.Path, hostPathType(hp), err)
	}
	return volume.Result{Path: hp.Path}, nil
}

// TearDown does nothing: data on the host is never touched.
func (p *Plugin) TearDown(context.Context, string) error { return nil }

func hostPathType(hp *v1.HostPathVolumeSource) v1.HostPathType {
	if hp.Type == nil {
		return v1.HostPathUnset
	}
	return *hp.Type
}

// checks maps each type to its check, following the kubelet.
var checks = map[v1.HostPathType]func(path string) error{
	v1.HostPathUnset:             func(string) error { return nil },
	v1.HostPathDirectoryOrCreate: directoryOrCreate,
	v1.HostPathDirectory:         isType(fs.ModeDir, "a directory"),
	v1.HostPathFileOrCreate:      fileOrCreate,
	v1.HostPathFile:              isType(0, "a file"),
	v1.HostPathSocket:            isType(fs.ModeSocket, "a socket"),
	v1.HostPathCharDev:           isType(fs.ModeDevice|fs.ModeCharDevice, "a character device"),
	v1.HostPathBlockDev:          isType(fs.ModeDevice, "a block device"),
}

// isType checks that path exists and has the given file type.
func isType(want fs.FileMode, what string) func(string) error {
	return func(path string) error {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if fi.Mode().Type() != want {
			return fmt.Errorf("%s is not %s", path, what)
		}
		return nil
	}
}

// directoryOrCreate creates a missing directory with mode 0755 (and its
// parents), else checks that path is a directory.
func directoryOrCreate(path string) error {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(path, 0o755); err != nil {
			return err
		}
		return os.Chmod(path, 0o755)
	}
	return isType(fs.ModeDir, "a directory")(path)
}

// fileOrCreate creates a missing file with mode 0644 (its parent must
// exist), else checks that path is a file.
func fileOrCreate(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		if err := f.Chmod(0o644); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	return isType(0, "a file")(path)
}
