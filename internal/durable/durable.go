// Package durable writes and removes small record files so that a crash
// (a SIGKILL, a power cut) leaves either the old state or the new one,
// never a torn file and never a step the disk forgot: a temporary file is
// written and fsynced, renamed over the record, and the directory fsynced;
// a removal is followed by an fsync of the directory.
package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// tmpPrefix and tmpSuffix frame the temporary file of a record being
// written; Names skips such files and removes them.
const (
	tmpPrefix = "."
	tmpSuffix = ".tmp"
)

// WriteFile writes b as the file name in dir (mode 0600), durably. Neither
// the temporary file nor the record is opened through a symlink.
func WriteFile(dir, name string, b []byte) error {
	if err := validName(name); err != nil {
		return err
	}
	tmp := filepath.Join(dir, tmpPrefix+name+tmpSuffix)
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "open", Path: tmp, Err: err}
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	return SyncDir(dir)
}

// Remove removes the file name in dir, durably; a file already gone is no
// error.
func Remove(dir, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return SyncDir(dir)
}

// Names lists the records in dir whose names end in suffix, and removes
// the temporary files of writes a crash cut short. A missing dir holds
// none.
func Names(dir, suffix string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, de := range des {
		n := de.Name()
		switch {
		case strings.HasPrefix(n, tmpPrefix) && strings.HasSuffix(n, tmpSuffix):
			_ = os.Remove(filepath.Join(dir, n)) // never renamed into place
		case strings.HasSuffix(n, suffix) && de.Type().IsRegular():
			names = append(names, n)
		}
	}
	return names, nil
}

// SyncDir fsyncs the directory dir, so that a rename or removal in it
// outlives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir) //nolint:gosec // G304: a directory of the agent's own records
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || strings.HasPrefix(name, tmpPrefix) {
		return fmt.Errorf("record name %q: want a file name not starting with %q", name, tmpPrefix)
	}
	return nil
}
