// Package podrecord keeps, beside each pod directory, a record of the pod
// it belongs to: its namespace, name, and the source it came from
// (<root>/pod-records/<uid>.json). A pod found on disk at start whose
// source does not list it is torn down only on that source's evidence
// (package evidence): an empty manifest directory says nothing about the
// pods of the API server, and the reverse.
//
// A record is written before its pod's directory is made and removed after
// the directory is gone, so a directory the agent made always has one,
// except after a power cut: records are written atomically (a temporary
// file renamed into place) but not fsynced, since a record that is lost or
// torn only makes its pod's origin unknown, and a pod of unknown origin is
// torn down only once every source gives evidence of its removal. Costing
// each new pod two fsyncs would buy nothing more.
package podrecord

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"k8s.io/apimachinery/pkg/types"
)

// Record is what is recorded of a pod.
type Record struct {
	UID       types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	// Source is the name of the source the pod came from ("manifests",
	// "api").
	Source string `json:"source"`
	// Recorded is when the record was first written.
	Recorded time.Time `json:"recorded"`
}

// suffix ends every record's file name; tmpMark marks a temporary file.
const (
	suffix  = ".json"
	tmpMark = ".tmp-"
)

// Store reads and writes the records in one directory.
type Store struct{ Dir string }

// Write records r, replacing any record of its UID: a temporary file of
// its own (O_EXCL), renamed into place. Raw system calls: an *os.File
// would cost four fcntls and a failing epoll_ctl, and os.Rename an lstat
// of the record first. The directory is made when missing.
func (s Store) Write(r Record) error {
	if err := validUID(r.UID); err != nil {
		return err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("record pod %s: %w", r.UID, err)
	}
	tmp := filepath.Join(s.Dir, "."+string(r.UID)+tmpMark+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(tmpCounter.Add(1), 10))
	fd, err := s.create(tmp)
	if err != nil {
		return fmt.Errorf("record pod %s: %w", r.UID, err)
	}
	err = writeAll(fd, tmp, append(data, '\n'))
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = &os.PathError{Op: "close", Path: tmp, Err: cerr}
	}
	if err == nil {
		if rerr := unix.Rename(tmp, s.path(r.UID)); rerr != nil {
			err = &os.LinkError{Op: "rename", Old: tmp, New: s.path(r.UID), Err: rerr}
		}
	}
	if err != nil {
		_ = unix.Unlink(tmp)
		return fmt.Errorf("record pod %s: %w", r.UID, err)
	}
	return nil
}

// tmpCounter tells apart the temporary files of one process.
var tmpCounter atomic.Uint64

// create makes the temporary file tmp, 0600, making the directory first
// when it is missing (the first record of a new root).
func (s Store) create(tmp string) (int, error) {
	const flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Open(tmp, flags, 0o600)
	if err == unix.ENOENT {
		if err := s.MakeDir(); err != nil {
			return -1, err
		}
		fd, err = unix.Open(tmp, flags, 0o600)
	}
	if err != nil {
		return -1, &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	return fd, nil
}

// MakeDir makes the records' directory (and its parents) when missing.
func (s Store) MakeDir() error {
	return os.MkdirAll(s.Dir, 0o700)
}

// writeAll writes data whole, as many write(2)s as it takes.
func writeAll(fd int, name string, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "write", Path: name, Err: err}
		}
		if n == 0 {
			return &os.PathError{Op: "write", Path: name, Err: io.ErrShortWrite}
		}
		data = data[n:]
	}
	return nil
}

// Remove forgets the record of uid; a record already gone is no error.
func (s Store) Remove(uid types.UID) error {
	if err := validUID(uid); err != nil {
		return err
	}
	if err := os.Remove(s.path(uid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("forget the record of pod %s: %w", uid, err)
	}
	return nil
}

// Load returns every record by UID, and removes the temporary files of
// writes a crash cut short. A record that cannot be read or parsed is left
// out (its pod's origin is then unknown) and named in the error, which
// does not stop the others from loading.
func (s Store) Load() (map[types.UID]Record, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[types.UID]Record{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pod records: %w", err)
	}
	out := make(map[types.UID]Record, len(entries))
	var errs []error
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, ".") && strings.Contains(name, tmpMark):
			_ = os.Remove(filepath.Join(s.Dir, name)) // never renamed into place
		case strings.HasSuffix(name, suffix) && e.Type().IsRegular():
			r, err := s.read(types.UID(strings.TrimSuffix(name, suffix)))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out[r.UID] = r
		}
	}
	return out, errors.Join(errs...)
}

func (s Store) read(uid types.UID) (Record, error) {
	data, err := os.ReadFile(s.path(uid))
	if err != nil {
		return Record{}, fmt.Errorf("read the record of pod %s: %w", uid, err)
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return Record{}, fmt.Errorf("record of pod %s: %w", uid, err)
	}
	if r.UID != uid || r.Source == "" {
		return Record{}, fmt.Errorf("record of pod %s: names pod %q and source %q", uid, r.UID, r.Source)
	}
	return r, nil
}

func (s Store) path(uid types.UID) string { return filepath.Join(s.Dir, string(uid)+suffix) }

// validUID refuses a UID that could not be a file name of its own.
func validUID(uid types.UID) error {
	u := string(uid)
	if u == "" || u == "." || u == ".." || strings.HasPrefix(u, ".") || strings.ContainsAny(u, "/\x00") {
		return fmt.Errorf("pod UID %q cannot name a record", uid)
	}
	return nil
}
