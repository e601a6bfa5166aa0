package layout

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// Found is a volume directory found on disk.
type Found struct {
	PodUID types.UID
	Plugin string // unescaped plugin name
	Volume string
	Dir    string
	// Block: a published device (volumeMode Block) at Dir, a file below
	// volumeDevices, not a volume directory.
	Block bool
}

// Scan lists the pod directories and the volume directories below them,
// then the published devices. Entries that are not directories (or are
// symlinks) are skipped, at every level but the last of volumeDevices,
// where only regular files and block devices count: the agent made none
// of the others.
func (r Root) Scan() (pods []types.UID, volumes []Found, err error) {
	podNames, err := ReadDirs(r.PodsDir())
	if err != nil {
		return nil, nil, err
	}
	for _, p := range podNames {
		uid := types.UID(p)
		pods = append(pods, uid)
		plugins, err := ReadDirs(r.VolumesDir(uid))
		if err != nil {
			return nil, nil, err
		}
		for _, plugin := range plugins {
			vols, err := ReadDirs(r.PluginDir(uid, UnescapePluginName(plugin)))
			if err != nil {
				return nil, nil, err
			}
			for _, v := range vols {
				name := UnescapePluginName(plugin)
				volumes = append(volumes, Found{PodUID: uid, Plugin: name, Volume: v, Dir: r.VolumeDir(uid, name, v)})
			}
		}
		devices, err := r.scanDevices(uid)
		if err != nil {
			return nil, nil, err
		}
		volumes = append(volumes, devices...)
	}
	return pods, volumes, nil
}

// scanDevices lists the published devices of pod uid.
func (r Root) scanDevices(uid types.UID) ([]Found, error) {
	plugins, err := ReadDirs(r.DevicesDir(uid))
	if err != nil {
		return nil, err
	}
	var out []Found
	for _, plugin := range plugins {
		name := UnescapePluginName(plugin)
		files, err := readEntries(r.DevicePluginDir(uid, name), func(t os.FileMode) bool { return t.IsRegular() || t&os.ModeDevice != 0 && t&os.ModeCharDevice == 0 })
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			out = append(out, Found{PodUID: uid, Plugin: name, Volume: f, Dir: r.DevicePath(uid, name, f), Block: true})
		}
	}
	return out, nil
}

// ReadDirs lists the names of real directories in dir, sorted. A missing dir
// is empty, and so is a file or a symlink where dir should be: a symlink is
// never followed, or a planted link would make the agent tear down
// directories outside the root. (O_NOFOLLOW with O_DIRECTORY fails with
// ENOTDIR on a symlink, ELOOP without O_DIRECTORY.)
func ReadDirs(dir string) ([]string, error) {
	return readEntries(dir, os.FileMode.IsDir)
}

// readEntries lists the names of the entries of dir whose type (as the
// directory lists it, never following a symlink) passes keep, sorted; a
// missing dir, or a file or symlink where it should be, is empty.
func readEntries(dir string, keep func(os.FileMode) bool) ([]string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", dir, &os.PathError{Op: "open", Path: dir, Err: err})
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		if keep(e.Type()) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// SubPathTargets counts the subPath mount points of pod uid on disk
// (<volume>/<container>/<index> below SubPathsDir), mounted or not.
func (r Root) SubPathTargets(uid types.UID) (int, error) {
	dir := r.SubPathsDir(uid)
	vols, err := ReadDirs(dir)
	n := 0
	for _, v := range vols {
		containers, cerr := ReadDirs(filepath.Join(dir, v))
		err = errors.Join(err, cerr)
		for _, c := range containers {
			entries, eerr := os.ReadDir(filepath.Join(dir, v, c))
			if !errors.Is(eerr, os.ErrNotExist) {
				err = errors.Join(err, eerr)
			}
			n += len(entries)
		}
	}
	return n, err
}
