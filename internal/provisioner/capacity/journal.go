package capacity

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// state is the step a volume's record says is under way.
type state string

const (
	creating  state = "creating"
	ready     state = "ready"
	expanding state = "expanding"
	deleting  state = "deleting"
	// archiving: the volume is being kept under the name Archive.
	archiving state = "archiving"
	// archived: the record is of an archive (its Name is the archive's),
	// kept until removed; From names the volume it was.
	archived state = "archived"
)

// record is what is written down about one volume before each step.
type record struct {
	Name    string `json:"name"`
	Backend string `json:"backend"`
	State   state  `json:"state"`
	// Size is the volume's size, or the size it is being given.
	Size int64 `json:"size"`
	// ID is the backend's own identifier: a btrfs subvolume ID.
	ID uint64 `json:"id,omitempty"`
	// Nested are the IDs of subvolumes found inside a btrfs volume being
	// deleted (their qgroups go too).
	Nested []uint64 `json:"nested,omitempty"`
	// Block marks a raw block volume (an image backend's image attached
	// to a loop device, never formatted or mounted): the device of a
	// claim of volumeMode Block.
	Block bool `json:"block,omitempty"`
	// Archive is the name the volume is being archived under (archiving).
	Archive string `json:"archive,omitempty"`
	// From is the name of the volume an archive was (archived).
	From string `json:"from,omitempty"`
	// UID is the identity of the volume (or snapshot) this record made:
	// a name reused after a deletion gets another one. Records written
	// before snapshots existed have none until a snapshot of them needs
	// it.
	UID string `json:"uid,omitempty"`
	// Origin is what a volume made by CreateFrom was made from.
	Origin *origin `json:"origin,omitempty"`
	// Reflinked: the image was made by a reflink, sharing its extents
	// with its source's until either is written (it counts in Promised
	// with all it may take).
	Reflinked bool `json:"reflinked,omitempty"`

	// The fields of a snapshot's record (Kind snapshotKind): Size is its
	// source volume's size, ID its subvolume (btrfs).

	// Kind is snapshotKind for a snapshot's record, empty for a volume's
	// or an archive's.
	Kind string `json:"kind,omitempty"`
	// Source is the volume the snapshot is of, SourceUID that volume's
	// UID when it was taken: a volume of the same name made later is
	// another volume.
	Source    string `json:"source,omitempty"`
	SourceUID string `json:"sourceUID,omitempty"`
	// Created is when the snapshot was taken.
	Created time.Time `json:"created,omitzero"`
	// Bytes is what the snapshot may take of the root (Snapshot.Bytes).
	Bytes int64 `json:"bytes,omitempty"`
}

// origin is what a volume was made from: a snapshot or another volume,
// by name and by the UID its record had then.
type origin struct {
	Snapshot    string `json:"snapshot,omitempty"`
	SnapshotUID string `json:"snapshotUID,omitempty"`
	Volume      string `json:"volume,omitempty"`
	VolumeUID   string `json:"volumeUID,omitempty"`
}

const recordSuffix = ".json"

// journal keeps one record file per volume in dir.
type journal struct{ dir string }

func (j journal) path(name string) string { return filepath.Join(j.dir, name+recordSuffix) }

// load returns the record of name, or ErrNotFound.
func (j journal) load(name string) (*record, error) {
	b, err := os.ReadFile(j.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read record of volume %s: %w", name, err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("parse record of volume %s: %w", name, err)
	}
	if r.Name != name {
		return nil, fmt.Errorf("record %s names volume %q", j.path(name), r.Name)
	}
	return &r, nil
}

// save writes r durably: a temporary file, fsync, rename over the record,
// fsync of the directory. A crash leaves the old record or the new one.
func (j journal) save(r *record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode record of volume %s: %w", r.Name, err)
	}
	tmp := filepath.Join(j.dir, "."+r.Name+".tmp")
	crashPoint()
	if err := writeSynced(tmp, b); err != nil {
		return fmt.Errorf("write record of volume %s: %w", r.Name, err)
	}
	crashPoint()
	defer crashPoint()
	if err := os.Rename(tmp, j.path(r.Name)); err != nil {
		return fmt.Errorf("write record of volume %s: %w", r.Name, err)
	}
	return j.syncDir()
}

// remove deletes the record of name; gone already is fine.
func (j journal) remove(name string) error {
	crashPoint()
	defer crashPoint()
	if err := os.Remove(j.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove record of volume %s: %w", name, err)
	}
	return j.syncDir()
}

// names lists the volumes that have a record, and removes temporary files
// a crash left behind.
func (j journal) names() ([]string, error) {
	des, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, fmt.Errorf("list volume records: %w", err)
	}
	var names []string
	for _, de := range des {
		n := de.Name()
		switch {
		case strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".tmp"):
			_ = os.Remove(filepath.Join(j.dir, n)) // a write that never got renamed
		case strings.HasSuffix(n, recordSuffix) && validName(strings.TrimSuffix(n, recordSuffix)) == nil:
			names = append(names, strings.TrimSuffix(n, recordSuffix))
		}
	}
	return names, nil
}

func (j journal) syncDir() error {
	d, err := os.Open(j.dir)
	if err != nil {
		return fmt.Errorf("sync volume records: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync volume records: %w", err)
	}
	return nil
}

func writeSynced(path string, b []byte) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
