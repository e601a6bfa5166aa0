package atomicwriter

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"regexp"
	"strconv"
	"time"
)

const (
	dataLink = "..data"     // symlink to the current payload directory
	dataTmp  = "..data_tmp" // the next ..data, renamed over it
	tsLayout = "2006_01_02_15_04_05"
	dirMode  = os.FileMode(0o755)
)

// tsDirPattern matches the payload directories this package creates:
// ".." + UTC time in tsLayout + "." + random digits.
var tsDirPattern = regexp.MustCompile(`^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.\d+$`)

// writeDataDir writes the whole payload into a new timestamped directory and
// returns its name. On error nothing of it is left behind.
func (w *Writer) writeDataDir(root *os.Root, payload map[string]File) (string, error) {
	dir, err := mkdirTimestamped(root)
	if err != nil {
		return "", err
	}
	if err := w.writeTree(root, dir, payload); err != nil {
		return "", removePartial(root, dir, err)
	}
	return dir, nil
}

// mkdirTimestamped creates a fresh ..<time>.<digits> directory with mode
// 0755 exactly.
func mkdirTimestamped(root *os.Root) (string, error) {
	prefix := ".." + time.Now().UTC().Format(tsLayout) + "."
	for range 1000 {
		name := prefix + strconv.FormatUint(uint64(rand.Uint32()), 10) //nolint:gosec // G404: uniqueness, not secrecy: Mkdir fails on an existing name and the next is tried
		err := root.Mkdir(name, dirMode)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("create payload directory: %w", err)
		}
		if err := chmodDir(root, name, nil); err != nil {
			return "", removePartial(root, name, err)
		}
		return name, nil
	}
	return "", fmt.Errorf("create payload directory: no free name with prefix %q", prefix)
}

// writeTree creates the nested directories of payload inside dir, then its
// files, each in sorted order.
func (w *Writer) writeTree(root *os.Root, dir string, payload map[string]File) error {
	gids := dirGIDs(payload)
	for _, sub := range parentDirs(payload) {
		name := path.Join(dir, sub)
		if err := root.Mkdir(name, dirMode); err != nil {
			return fmt.Errorf("create directory %q: %w", sub, err)
		}
		if err := chmodDir(root, name, gids[sub]); err != nil {
			return err
		}
	}
	for _, p := range sortedPaths(payload) {
		if err := w.writeFile(root, dir, p, payload[p]); err != nil {
			return err
		}
	}
	return nil
}

// chmodDir sets a directory the writer just created to mode 0755 exactly,
// and its group to gid when set. Lchown never follows a symlink a container
// may have swapped in; Root.Chmod may at worst hit such a link itself, never
// anything outside the volume directory.
func chmodDir(root *os.Root, name string, gid *int64) error {
	if err := root.Chmod(name, dirMode); err != nil {
		return fmt.Errorf("chmod directory: %w", err)
	}
	if gid == nil {
		return nil
	}
	if err := root.Lchown(name, -1, int(*gid)); err != nil {
		return fmt.Errorf("chown directory: %w", err)
	}
	return nil
}

// dirGIDs gives each nested directory the GID of the first file (in sorted
// order) below it that has one.
func dirGIDs(payload map[string]File) map[string]*int64 {
	gids := map[string]*int64{}
	for _, p := range sortedPaths(payload) {
		gid := payload[p].GID
		for d := path.Dir(p); d != "." && gid != nil; d = path.Dir(d) {
			if gids[d] == nil {
				gids[d] = gid
			}
		}
	}
	return gids
}

// writeFile creates one payload file. O_EXCL never follows a symlink, and
// chown and chmod go through the open descriptor, so a link planted in the
// new directory cannot redirect them. The file is created 0600 so that its
// content is never readable under a looser mode than the final one.
func (w *Writer) writeFile(root *os.Root, dir, p string, f File) (retErr error) {
	if w.failWrite != nil {
		if err := w.failWrite(p); err != nil {
			return fmt.Errorf("write file %q: %w", p, err)
		}
	}
	fh, err := root.OpenFile(path.Join(dir, p), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create file %q: %w", p, err)
	}
	defer func() {
		if err := fh.Close(); err != nil && retErr == nil {
			retErr = fmt.Errorf("close file %q: %w", p, err)
		}
	}()
	if _, err := fh.Write(f.Data); err != nil {
		return fmt.Errorf("write file %q: %w", p, err)
	}
	return setOwnerAndMode(fh, p, f)
}

func setOwnerAndMode(fh *os.File, p string, f File) error {
	if f.UID != nil || f.GID != nil {
		if err := fh.Chown(idOrKeep(f.UID), idOrKeep(f.GID)); err != nil {
			return fmt.Errorf("chown file %q: %w", p, err)
		}
	}
	if err := fh.Chmod(f.Mode); err != nil {
		return fmt.Errorf("chmod file %q: %w", p, err)
	}
	return nil
}

// idOrKeep maps an unset owner to -1, which chown(2) leaves unchanged.
func idOrKeep(id *int64) int {
	if id == nil {
		return -1
	}
	return int(*id)
}

// removePartial removes a payload directory that never became current and
// returns cause, joined with any error removing it.
func removePartial(root *os.Root, dir string, cause error) error {
	if err := root.RemoveAll(dir); err != nil {
		return errors.Join(cause, fmt.Errorf("remove partial payload directory %q: %w", dir, err))
	}
	return cause
}
