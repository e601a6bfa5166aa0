package csi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/volume-agent/volume-agent/internal/durable"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
)

// RecordsDir, under the local path root, holds the driver's records: a
// file per volume, and a file per snapshot in its SnapshotRecordsDir.
const RecordsDir = ".csi"

// SnapshotRecordsDir, under RecordsDir, holds the records of the
// snapshots the driver took.
const SnapshotRecordsDir = "snapshots"

const recordSuffix = ".json"

// record is what the driver knows of one volume it made.
type record struct {
	// ID is the volume ID: its name under the root.
	ID string `json:"id"`
	// Name is the CreateVolume name it was made for (its idempotency key).
	Name string `json:"name"`
	// Capacity is the backend that made it (local.AnnCapacity), "" for a
	// plain directory.
	Capacity string `json:"capacity,omitempty"`
	Archive  bool   `json:"archive,omitempty"`
	Block    bool   `json:"block,omitempty"`
	// Size in bytes (0 for a plain directory): what CreateVolume made, or
	// NodeExpandVolume grew it to.
	Size int64 `json:"size"`
	// SourceSnapshot or SourceVolume: what it was made from.
	SourceSnapshot string    `json:"sourceSnapshot,omitempty"`
	SourceVolume   string    `json:"sourceVolume,omitempty"`
	Created        time.Time `json:"created"`
	// DeleteAt, once DeleteVolume was first asked, is when it may be
	// deleted (--reclaim-delay later). A NodePublishVolume clears it.
	DeleteAt *time.Time `json:"deleteAt,omitempty"`
}

func (r *record) id() string { return r.ID }

// vol is the lower-level API's view of r.
func (r *record) vol() local.Vol {
	return local.Vol{Name: r.ID, Capacity: r.Capacity, Archive: r.Archive, Block: r.Block, Owner: r.Name}
}

// snapRecord is what the driver knows of one snapshot it took. The
// capacity backend also holds the snapshots manifest mode's binder takes
// through the same local provisioner: a snapshot without a snapRecord is
// not the driver's, and no CSI call lists, restores or deletes it.
type snapRecord struct {
	// ID is the snapshot ID: the backend's name of the snapshot, the
	// CreateSnapshot name.
	ID string `json:"id"`
	// Source is the ID of the volume it is of.
	Source string `json:"source"`
	// Created is when the record was written, before the snapshot was
	// taken.
	Created time.Time `json:"created"`
	// DeleteAt, once DeleteSnapshot was first asked, is when it may be
	// deleted (--reclaim-delay later). A CreateSnapshot of the same name
	// and source clears it.
	DeleteAt *time.Time `json:"deleteAt,omitempty"`
}

func (r *snapRecord) id() string { return r.ID }

// identified is a record: it names what it is of.
type identified interface{ id() string }

// store reads and writes the records of one kind (what: "volume" or
// "snapshot"), a file each, in one directory.
type store[R any, P interface {
	*R
	identified
}] struct {
	dir  string
	what string
}

// records are the volumes' records; snapRecords the snapshots'.
type (
	records     = store[record, *record]
	snapRecords = store[snapRecord, *snapRecord]
)

// ensure creates the records directory (0700) unless it exists as one.
func (s store[R, P]) ensure() error {
	fi, err := os.Lstat(s.dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return fmt.Errorf("%s is not a directory", s.dir)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return os.Mkdir(s.dir, 0o700)
}

// get reads the record of id; nil, nil when there is none.
func (s store[R, P]) get(id string) (P, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, id+recordSuffix)) //nolint:gosec // G304: id was checked to be one path element
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the record of %s %s: %w", s.what, id, err)
	}
	r := P(new(R))
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("record of %s %s in %s: %w: remove the record if the %s is gone", s.what, id, s.dir, err, s.what)
	}
	if r.id() != id {
		return nil, fmt.Errorf("record of %s %s in %s names %s %q: refusing it", s.what, id, s.dir, s.what, r.id())
	}
	return r, nil
}

// put writes r durably.
func (s store[R, P]) put(r P) error {
	if err := s.ensure(); err != nil {
		return fmt.Errorf("records directory: %w", err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return durable.WriteFile(s.dir, r.id()+recordSuffix, b)
}

// remove forgets id durably.
func (s store[R, P]) remove(id string) error {
	return durable.Remove(s.dir, id+recordSuffix)
}

// all lists every record; a record that cannot be read is skipped.
func (s store[R, P]) all() ([]P, error) {
	names, err := durable.Names(s.dir, recordSuffix)
	if err != nil {
		return nil, err
	}
	var out []P
	for _, n := range names {
		r, err := s.get(strings.TrimSuffix(n, recordSuffix))
		if err == nil && r != nil {
			out = append(out, r)
		}
	}
	return out, nil
}
