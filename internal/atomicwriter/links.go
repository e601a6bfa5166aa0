package atomicwriter

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrCollision is wrapped by the error a write returns when something the
// writer did not create (a container's file or directory) sits at ..data or
// at one of the payload's top-level names. The writer never deletes it.
var ErrCollision = errors.New("entry not created by the writer")

// checkCollisions fails, before anything is written, when ..data or a
// top-level name of the payload exists and is not a symlink. Symlinks there
// are taken as the writer's (possibly tampered with) and are replaced.
func checkCollisions(root *os.Root, names []string) error {
	for _, name := range append([]string{dataLink}, names...) {
		info, err := root.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("inspect %q: %w", name, err)
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			return collision(name, info)
		}
	}
	return nil
}

func collision(name string, info fs.FileInfo) error {
	return fmt.Errorf("%w: %q is a %s, not a symlink; remove it to let the payload be written",
		ErrCollision, name, kind(info))
}

func kind(info fs.FileInfo) string {
	switch {
	case info.IsDir():
		return "directory"
	case info.Mode().IsRegular():
		return "regular file"
	}
	return "special file"
}

// switchData points ..data at dir with one rename(2), which readers see
// either before or after, never in between.
func switchData(root *os.Root, dir string) error {
	if err := replaceLink(root, dataLink, dir); err != nil {
		return fmt.Errorf("switch %s to %q: %w", dataLink, dir, err)
	}
	return nil
}

// replaceLink atomically makes name a symlink to target, through ..data_tmp.
// rename(2) replaces a symlink (or file) at name without following it.
func replaceLink(root *os.Root, name, target string) error {
	if err := root.Remove(dataTmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale %s: %w", dataTmp, err)
	}
	if err := root.Symlink(target, dataTmp); err != nil {
		return fmt.Errorf("create %s: %w", dataTmp, err)
	}
	if err := root.Rename(dataTmp, name); err != nil {
		_ = root.Remove(dataTmp) // best effort; the next write removes it too
		return fmt.Errorf("rename %s: %w", dataTmp, err)
	}
	return nil
}

// ensureLinks makes every top-level name a symlink to ..data/name.
func ensureLinks(root *os.Root, names []string) error {
	for _, name := range names {
		if err := ensureLink(root, name); err != nil {
			return fmt.Errorf("link %q: %w", name, err)
		}
	}
	return nil
}

func ensureLink(root *os.Root, name string) error {
	want := linkTarget(name)
	info, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return root.Symlink(want, name)
	}
	if err != nil {
		return err
	}
	if info.Mode()&fs.ModeSymlink == 0 {
		return collision(name, info)
	}
	if got, err := root.Readlink(name); err == nil && got == want {
		return nil
	}
	return replaceLink(root, name, want)
}

func linkTarget(name string) string {
	return dataLink + "/" + name
}

// removeStaleLinks removes, of the volume directory's entries, the
// top-level links of the writer's form (name -> ..data/name) whose name is
// not in keep. Any other entry, a container's symlink included, is left alone.
func removeStaleLinks(root *os.Root, entries []fs.DirEntry, keep []string) error {
	wanted := map[string]bool{}
	for _, name := range keep {
		wanted[name] = true
	}
	var errs []error
	for _, e := range entries {
		if isStaleLink(root, e, wanted) {
			if err := root.Remove(e.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove link %q: %w", e.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

func isStaleLink(root *os.Root, e fs.DirEntry, wanted map[string]bool) bool {
	if e.Type()&fs.ModeSymlink == 0 || wanted[e.Name()] {
		return false
	}
	target, err := root.Readlink(e.Name())
	return err == nil && target == linkTarget(e.Name())
}

// removeStaleTmp removes, when the volume directory's entries hold one, a
// ..data_tmp symlink left by a write that stopped between creating it and
// renaming it over ..data. Anything else there is left to replaceLink.
func removeStaleTmp(root *os.Root, entries []fs.DirEntry) error {
	for _, e := range entries {
		if e.Name() != dataTmp || e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		if err := root.Remove(dataTmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale %s: %w", dataTmp, err)
		}
	}
	return nil
}

// removeStaleDirs removes, of the volume directory's entries, every
// timestamped payload directory but current: the previous payload and any
// left by a crashed write. A symlink with such a name is not a directory the
// writer made and is left alone; RemoveAll unlinks symlinks inside the
// directories instead of following them.
func removeStaleDirs(root *os.Root, entries []fs.DirEntry, current string) error {
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || e.Name() == current || !tsDirPattern.MatchString(e.Name()) {
			continue
		}
		if err := root.RemoveAll(e.Name()); err != nil {
			errs = append(errs, fmt.Errorf("remove old payload directory %q: %w", e.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// readTopLevel lists the volume directory without following any entry.
func readTopLevel(root *os.Root) ([]fs.DirEntry, error) {
	d, err := root.Open(".")
	if err != nil {
		return nil, fmt.Errorf("open volume directory: %w", err)
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("list volume directory: %w", err)
	}
	return entries, nil
}
