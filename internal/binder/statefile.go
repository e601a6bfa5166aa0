package binder

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/volume-agent/volume-agent/internal/reclaim"
)

// The versions of the state file's format. Version 2 adds records'
// provisioned PersistentVolumes; it is written only when a record has one,
// so that an agent from before provisioning refuses the file rather than
// drop those PersistentVolumes, and leave their storage behind, unknowingly.
// Version 3 adds the reclaim step of released storage; it is written only
// when a record has one, so that an agent from before deferred deletion
// refuses the file rather than take storage moved aside for gone, and
// forget it. Version 4 adds records of provisionings under way; it is
// written only when there is one, so that an agent from before them
// refuses the file rather than forget storage made just before a crash.
// Version 5 adds the claims made for generic ephemeral volumes; it is
// written only when there is one, so that an agent from before refuses
// the file rather than forget them (and make nothing of their volumes).
// Version 6 adds snapshots, and provisionings made from a data source; it
// is written only when there is one, so that an agent from before refuses
// the file rather than forget snapshots (left behind for ever) or make an
// empty volume for a claim that asked for a copy.
const (
	stateVersion              = 1
	stateVersionProvisioned   = 2
	stateVersionReclaim       = 3
	stateVersionProvisionings = 4
	stateVersionEphemeral     = 5
	stateVersionSnapshots     = 6
)

// stateFile is the content of claims.json.
type stateFile struct {
	Version  int      `json:"version"`
	Bindings []record `json:"bindings"`
	// Ephemeral are the claims made for generic ephemeral volumes, by
	// namespace and name.
	Ephemeral []madeClaim `json:"ephemeralClaims,omitempty"`
	// Snapshots are the snapshots taken for VolumeSnapshots.
	Snapshots []snapRecord `json:"snapshots,omitempty"`
}

// store reads and writes the state file.
type store struct {
	path string
	// write replaces the file's content; tests make it fail like a full disk.
	write func(path string, data []byte) error
}

func newStore(path string) store {
	return store{path: path, write: writeFileAtomic}
}

// loadState reads the records and the made claims. A missing file holds
// none; a file that cannot be read or is not valid is an error, never "no
// bindings": that would let every claim bind again, perhaps to another
// PersistentVolume.
func (st store) loadState() (records, madeClaims, error) {
	rs, made, _, err := st.loadAll()
	return rs, made, err
}

// loadAll is loadState with the snapshot records.
func (st store) loadAll() (records, madeClaims, snapRecords, error) {
	data, err := os.ReadFile(st.path)
	if errors.Is(err, os.ErrNotExist) {
		return records{}, madeClaims{}, snapRecords{}, nil
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read binder state: %w", err)
	}
	f, err := decode(data)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("binder state %s is not valid: %w; the agent does not guess bindings, "+
			"which could move claims to other PersistentVolumes: restore or repair the file, "+
			"or move it away to forget every binding (claims then bind again from scratch)", st.path, err)
	}
	return f.recs, f.made, f.snaps, nil
}

// checkMissing refuses a state file that is missing while traces (nil:
// none) show that claims were bound before.
func (st store) checkMissing(traces func() ([]string, error)) error {
	if traces == nil {
		return nil
	}
	if _, err := os.Lstat(st.path); !errors.Is(err, os.ErrNotExist) {
		return nil // there, or unreadable: loadState says which
	}
	found, err := traces()
	if err != nil {
		return fmt.Errorf("binder state %s is missing, and whether claims were bound before cannot be told: %w", st.path, err)
	}
	if len(found) == 0 {
		return nil
	}
	shown := found
	if len(shown) > 3 {
		shown = append(shown[:3:3], fmt.Sprintf("and %d more", len(found)-3))
	}
	return fmt.Errorf("binder state %s is missing, but claims were bound before (%s): the agent does not bind claims again "+
		"from scratch, which could give one claim's data to another; restore the file from a backup, or, to start from "+
		"scratch knowingly, write {\"version\": 1, \"bindings\": []} to it", st.path, strings.Join(shown, ", "))
}

// saveState writes rs, made and snaps atomically and durably.
func (st store) saveState(rs records, made madeClaims, snaps snapRecords) error {
	version := stateVersion
	if len(made) > 0 {
		version = stateVersionEphemeral
	}
	if len(snaps) > 0 {
		version = stateVersionSnapshots
	}
	for _, r := range rs {
		switch {
		case r.Source != nil || (r.Provisioning != nil && r.Provisioning.Content != nil):
			version = max(version, stateVersionSnapshots)
		case r.Provisioning != nil:
			version = max(version, stateVersionProvisionings)
		case r.Reclaim != reclaim.State{}:
			version = max(version, stateVersionReclaim)
		case r.Provisioned != nil:
			version = max(version, stateVersionProvisioned)
		}
	}
	data, err := json.MarshalIndent(stateFile{Version: version, Bindings: rs.sorted(), Ephemeral: made.sorted(), Snapshots: snaps.sorted()}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode binder state: %w", err)
	}
	return st.write(st.path, append(data, '\n'))
}

// removeTemps removes temporary files a crash in save left behind.
func (st store) removeTemps() error {
	temps, err := filepath.Glob(filepath.Join(filepath.Dir(st.path), tempPrefix(st.path)+"*"))
	if err != nil {
		return err
	}
	for _, name := range temps {
		if err := os.Remove(name); err != nil {
			return fmt.Errorf("remove stale temporary file: %w", err)
		}
	}
	return nil
}

// decoded is the content of a state file, indexed.
type decoded struct {
	recs  records
	made  madeClaims
	snaps snapRecords
}

func decode(data []byte) (decoded, error) {
	var f stateFile
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		return decoded{}, err
	}
	if dec.More() {
		return decoded{}, errors.New("trailing data after the JSON object")
	}
	switch {
	case f.Version == 0:
		return decoded{}, errors.New("no version field")
	case f.Version < stateVersion || f.Version > stateVersionSnapshots:
		return decoded{}, fmt.Errorf("version %d is not %d to %d (written by another version of the agent?)",
			f.Version, stateVersion, stateVersionSnapshots)
	}
	rs, err := index(f.Bindings)
	if err != nil {
		return decoded{}, err
	}
	made, err := indexMade(f.Ephemeral)
	if err != nil {
		return decoded{}, err
	}
	snaps, err := indexSnapshots(f.Snapshots)
	return decoded{recs: rs, made: made, snaps: snaps}, err
}

// indexSnapshots checks the snapshot records and keys them by handle.
func indexSnapshots(list []snapRecord) (snapRecords, error) {
	snaps := make(snapRecords, len(list))
	keys := map[snapKey]bool{}
	for i, r := range list {
		switch {
		case r.Namespace == "" || r.Name == "" || r.Handle == "" || r.Provisioner == "" || r.Claim == "" || r.PV == nil:
			return nil, fmt.Errorf("snapshot %d lacks a namespace, name, handle, provisioner, claim or pv", i)
		case r.Step != snapTaking && r.Step != snapReady && r.Step != snapDeleting:
			return nil, fmt.Errorf("snapshot %d (VolumeSnapshot %s): step %q is not Taking, Ready or Deleting", i, r.key(), r.Step)
		case r.Step == snapReady && r.Size == "":
			return nil, fmt.Errorf("snapshot %d (VolumeSnapshot %s): Ready without its size", i, r.key())
		case hasHandle(snaps, r.Handle):
			return nil, fmt.Errorf("snapshot %q is in two records", r.Handle)
		case keys[r.key()]:
			return nil, fmt.Errorf("VolumeSnapshot %s (uid %q) is in two records", r.key(), r.UID)
		}
		snaps[r.Handle] = r
		keys[r.key()] = true
	}
	return snaps, nil
}

// indexMade checks the made claims and keys them by namespace and name.
func indexMade(list []madeClaim) (madeClaims, error) {
	made := make(madeClaims, len(list))
	for i, m := range list {
		c := m.Claim
		switch {
		case c == nil || c.Namespace == "" || c.Name == "" || c.UID == "" || m.PodUID == "" || m.Volume == "":
			return nil, fmt.Errorf("ephemeral claim %d lacks a claim (namespace, name, uid), podUID or volume", i)
		case made[keyOf(c).String()] != madeClaim{}:
			return nil, fmt.Errorf("ephemeral claim %s is made twice", keyOf(c))
		case c.UID != madeUID(m.PodUID, m.Volume, m.Nonce):
			return nil, fmt.Errorf("ephemeral claim %s: its uid %q is not the one made for pod %s, volume %q and its nonce", keyOf(c), c.UID, m.PodUID, m.Volume)
		}
		made[keyOf(c).String()] = m
	}
	return made, nil
}

// index checks the records and keys them by PersistentVolume.
func index(bindings []record) (records, error) {
	rs := make(records, len(bindings))
	claims := make(map[claimKey]bool, len(bindings))
	for i, r := range bindings {
		switch {
		case r.Namespace == "" || r.Name == "" || r.PV == "":
			return nil, fmt.Errorf("binding %d lacks a namespace, name or pv", i)
		case r.Phase != PhaseBound && r.Phase != PhaseReleased && r.Phase != phaseProvisioning:
			return nil, fmt.Errorf("binding %d (claim %s): phase %q is neither Bound nor Released", i, r.claim(), r.Phase)
		case (r.Phase == phaseProvisioning) != (r.Provisioning != nil):
			return nil, fmt.Errorf("binding %d (claim %s): phase %q with a provisioning %v", i, r.claim(), r.Phase, r.Provisioning != nil)
		case r.Provisioning != nil && (r.Provisioned != nil || r.Provisioning.Claim == nil || r.Provisioning.Class == nil || r.Provisioning.Provisioner == ""):
			return nil, fmt.Errorf("binding %d (claim %s): a provisioning under way without its claim, class or provisioner, or with a PersistentVolume", i, r.claim())
		case r.Provisioned != nil && r.Provisioned.Name != r.PV:
			return nil, fmt.Errorf("binding %d (claim %s): its provisioned PersistentVolume is named %q, not %q",
				i, r.claim(), r.Provisioned.Name, r.PV)
		case r.Reclaim != reclaim.State{} && (r.Phase != PhaseReleased || !r.deletable()):
			return nil, fmt.Errorf("binding %d (claim %s): a reclaim step on a record that is not a released, provisioned PersistentVolume with reclaim policy Delete", i, r.claim())
		case reclaim.Valid(r.Reclaim) != nil:
			return nil, fmt.Errorf("binding %d (claim %s): %w", i, r.claim(), reclaim.Valid(r.Reclaim))
		case rs[r.PV] != record{}:
			return nil, fmt.Errorf("PersistentVolume %q is in two bindings", r.PV)
		case claims[r.claim()]:
			return nil, fmt.Errorf("claim %s (uid %q) is in two bindings", r.claim(), r.UID)
		}
		rs[r.PV] = r
		claims[r.claim()] = true
	}
	return rs, nil
}

// writeFileAtomic replaces path with data: a reader, or a start after a
// crash, sees the old content or the new one, never a part, and the new one
// is on disk when it returns.
func writeFileAtomic(path string, data []byte) (retErr error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tempPrefix(path))
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if retErr != nil {
			_ = os.Remove(f.Name())
		}
	}()
	_, err = f.Write(data)
	err = errors.Join(err, f.Chmod(0o644), f.Sync(), f.Close())
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	return nil
}

func tempPrefix(path string) string { return "." + filepath.Base(path) + ".tmp-" }

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir) //nolint:gosec // G304: the state file's directory under --root-dir
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

func hasHandle(snaps snapRecords, handle string) bool {
	_, ok := snaps[handle]
	return ok
}
