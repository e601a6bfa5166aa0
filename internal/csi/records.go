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

// RecordsDir, under the local path root, holds the driver's records.
const RecordsDir = ".csi"

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

// vol is the lower-level API's view of r.
func (r *record) vol() local.Vol {
	return local.Vol{Name: r.ID, Capacity: r.Capacity, Archive: r.Archive, Block: r.Block, Owner: r.Name}
}

// records reads and writes the records in one directory.
type records struct{ dir string }

// ensure creates the records directory (0700) unless it exists as one.
func (rs records) ensure() error {
	fi, err := os.Lstat(rs.dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return fmt.Errorf("%s is not a directory", rs.dir)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return os.Mkdir(rs.dir, 0o700)
}

// get reads the record of id; nil, nil when there is none.
func (rs records) get(id string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(rs.dir, id+recordSuffix)) //nolint:gosec // G304: id was checked to be one path element
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the record of volume %s: %w", id, err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("record of volume %s in %s: %w: remove the record if the volume is gone", id, rs.dir, err)
	}
	if r.ID != id {
		return nil, fmt.Errorf("record of volume %s in %s names volume %q: refusing it", id, rs.dir, r.ID)
	}
	return &r, nil
}

// put writes r durably.
func (rs records) put(r *record) error {
	if err := rs.ensure(); err != nil {
		return fmt.Errorf("records directory: %w", err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return durable.WriteFile(rs.dir, r.ID+recordSuffix, b)
}

// remove forgets id durably.
func (rs records) remove(id string) error {
	return durable.Remove(rs.dir, id+recordSuffix)
}

// all lists every record; a record that cannot be read is skipped.
func (rs records) all() ([]*record, error) {
	names, err := durable.Names(rs.dir, recordSuffix)
	if err != nil {
		return nil, err
	}
	var out []*record
	for _, n := range names {
		r, err := rs.get(strings.TrimSuffix(n, recordSuffix))
		if err == nil && r != nil {
			out = append(out, r)
		}
	}
	return out, nil
}
