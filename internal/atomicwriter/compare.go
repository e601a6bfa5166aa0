package atomicwriter

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
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
func (w *Writer) matches(root *os.Root, dir string, payload map[string]File) bool {
	c := &comparison{root: root, top: dir, payload: payload, dirs: map[string]bool{}, beforeOpen: w.beforeOpen}
	for _, d := range parentDirs(payload) {
		c.dirs[d] = true
	}
	return c.walk("") == nil && c.files == len(payload)
}

// comparison is one walk of the current payload directory. A container may
// swap any entry of it for a FIFO or a device between the listing and the
// open, so every open is one that cannot block (see open), and what is
// compared is what the open descriptor shows, not what the listing said.
type comparison struct {
	root       *os.Root
	top        string            // the payload directory
	payload    map[string]File   // the wanted payload
	dirs       map[string]bool   // the nested directories payload needs
	files      int               // regular files met so far
	beforeOpen func(name string) // see Writer.beforeOpen
}

// walk compares the directory rel (relative to top, "" for top itself) and
// everything below it.
func (c *comparison) walk(rel string) error {
	entries, err := c.readDir(rel)
	if err != nil {
		return errDiffers
	}
	for _, e := range entries {
		child := path.Join(rel, e.Name())
		switch {
		case e.IsDir() && c.dirs[child]:
			err = c.walk(child)
		case e.Type().IsRegular():
			c.files++
			err = c.file(child)
		default:
			err = errDiffers
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readDir lists the directory rel. O_DIRECTORY fails the open of anything
// else before it is opened.
func (c *comparison) readDir(rel string) ([]fs.DirEntry, error) {
	d, err := c.open(rel, syscall.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.ReadDir(-1)
}

// file compares the file rel with the payload's file there. Only a regular
// file, as fstat of the open descriptor shows it, can match, and its content
// is read from that descriptor.
func (c *comparison) file(rel string) error {
	f, ok := c.payload[rel]
	if !ok {
		return errDiffers
	}
	fh, err := c.open(rel, 0)
	if err != nil {
		return errDiffers
	}
	defer fh.Close()
	info, err := fh.Stat()
	if err != nil || !infoMatches(info, f) {
		return errDiffers
	}
	// One byte more than wanted tells a file that grew since the fstat.
	data, err := io.ReadAll(io.LimitReader(fh, int64(len(f.Data))+1))
	if err != nil || !bytes.Equal(data, f.Data) {
		return errDiffers
	}
	return nil
}

// open opens rel read-only without blocking: with O_NONBLOCK, opening a FIFO
// (or a device that honours it) returns at once instead of waiting for the
// other end, and the caller rejects it through the descriptor. os.Root keeps
// the open inside the volume directory; it still resolves a symlink within
// it despite O_NOFOLLOW, which is harmless as only what the descriptor shows
// is compared.
func (c *comparison) open(rel string, flag int) (*os.File, error) {
	name := path.Join(c.top, rel)
	if c.beforeOpen != nil {
		c.beforeOpen(name)
	}
	return c.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|flag, 0)
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
