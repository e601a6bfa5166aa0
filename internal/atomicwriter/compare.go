package atomicwriter

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// errDiffers stops the walk of the current payload at the first difference.
var errDiffers = errors.New("payload differs")

// currentDataDir returns the payload directory ..data points at, or "" when
// there is none the writer could have made: ..data missing, pointing
// anywhere but at a timestamped directory in the volume, or at a symlink.
func currentDataDir(root *os.Root) string {
	target, err := root.Readlink(dataLink)
	if err != nil || !tsDirPattern.MatchString(target) {
		return ""
	}
	info, err := root.Lstat(target)
	if err != nil || !info.IsDir() {
		return ""
	}
	return target
}

// matches reports whether dir holds exactly payload: the same set of files
// and directories, each file with the same bytes, mode and (where the
// payload sets them) owner. Anything unexpected, a symlink included, or any
// error reading dir counts as a difference, which a rewrite repairs.
func matches(root *os.Root, dir string, payload map[string]File) bool {
	dirs := map[string]bool{}
	for _, d := range parentDirs(payload) {
		dirs[d] = true
	}
	files := 0
	err := fs.WalkDir(root.FS(), dir, func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == dir {
			return err
		}
		rel := strings.TrimPrefix(name, dir+"/")
		switch {
		case d.IsDir() && dirs[rel]:
			return nil
		case d.Type().IsRegular():
			files++
			return fileMatches(root, name, d, payload, rel)
		}
		return errDiffers
	})
	return err == nil && files == len(payload)
}

// fileMatches compares one regular file of the current payload with the
// payload's file at rel. Cheap checks come first; content is read last.
func fileMatches(root *os.Root, name string, d fs.DirEntry, payload map[string]File, rel string) error {
	f, ok := payload[rel]
	if !ok {
		return errDiffers
	}
	info, err := d.Info()
	if err != nil || !infoMatches(info, f) {
		return errDiffers
	}
	data, err := root.ReadFile(name)
	if err != nil || !bytes.Equal(data, f.Data) {
		return errDiffers
	}
	return nil
}

func infoMatches(info fs.FileInfo, f File) bool {
	if !info.Mode().IsRegular() || info.Mode().Perm() != f.Mode || info.Size() != int64(len(f.Data)) {
		return false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	return idMatches(f.UID, st.Uid) && idMatches(f.GID, st.Gid)
}

func idMatches(want *int64, got uint32) bool {
	return want == nil || *want == int64(got)
}
