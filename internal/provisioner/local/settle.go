package local

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/durable"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
)

// RecordsDir, under the root, holds a record of each volume made for the
// cluster controller (a Tentative Provision) whose PV does not exist yet:
// written before the volume is made, removed by Commit or Abandon. A
// record left by a crash lets the next start take back a volume whose
// claim went away meanwhile: no PV ever pointed at it, so no pod used it.
const RecordsDir = ".provisioning"

const recordSuffix = ".json"

// pending is the record of one tentative volume.
type pending struct {
	PV string `json:"pv"`
	// Name is the volume's name under the root.
	Name string `json:"name"`
	// Capacity is the backend that makes it (AnnCapacity), "" for a plain
	// directory.
	Capacity  string    `json:"capacity,omitempty"`
	Namespace string    `json:"namespace"`
	Claim     string    `json:"claim"`
	ClaimUID  types.UID `json:"claimUID"`
}

var _ provisioner.Resumer = (*Provisioner)(nil)

func (p *Provisioner) recordsDir() string { return filepath.Join(p.cfg.Root, RecordsDir) }

// record writes down, before the volume is made, that it is made for
// req and has no PV yet.
func (p *Provisioner) record(req provisioner.Request, name, capacity string) error {
	b, err := json.Marshal(pending{PV: req.PVName, Name: name, Capacity: capacity,
		Namespace: req.Claim.Namespace, Claim: req.Claim.Name, ClaimUID: req.Claim.UID})
	if err != nil {
		return err
	}
	if err := makeRecordsDir(p.recordsDir()); err != nil {
		return err
	}
	if err := durable.WriteFile(p.recordsDir(), req.PVName+recordSuffix, b); err != nil {
		return fmt.Errorf("record the provisioning of PV %s: %w", req.PVName, err)
	}
	return nil
}

// makeRecordsDir creates dir (0700) unless it exists as a directory.
func makeRecordsDir(dir string) error {
	fi, err := os.Lstat(dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return fmt.Errorf("%s is not a directory", dir)
	}
	return os.Mkdir(dir, 0o700)
}

// Commit implements provisioner.Settler: the PV exists, the marker of a
// plain directory made for it goes (it is the PV's volume now), then the
// record.
func (p *Provisioner) Commit(_ context.Context, pv *v1.PersistentVolume) error {
	if r, err := p.readRecord(pv.Name + recordSuffix); err == nil && r.Capacity == "" {
		if err := storagedir.Unmark(p.cfg.Root, r.Name, r.PV); err != nil {
			return fmt.Errorf("the volume of PV %s exists: %w", pv.Name, err)
		}
	}
	if err := durable.Remove(p.recordsDir(), pv.Name+recordSuffix); err != nil {
		return fmt.Errorf("remove the record of the provisioning of PV %s: %w", pv.Name, err)
	}
	return nil
}

// Abandon implements provisioner.Settler: pv will never be used. A plain
// directory is removed only when this provisioning made it (its marker
// names pv) and nothing else was written in it: one Provision found there
// is kept, and kept says why. A volume of enforced capacity, which its
// backend's journal shows was made for pv, is deleted (never archived).
// Then the record goes.
func (p *Provisioner) Abandon(ctx context.Context, _ provisioner.Request, pv *v1.PersistentVolume) (string, error) {
	if !isEnforced(pv) {
		return p.abandonDir(ctx, pv)
	}
	pv = pv.DeepCopy()
	pv.Annotations[provisioner.AnnArchiveOnDelete] = "false"
	if err := p.Delete(ctx, pv); err != nil {
		return "", err
	}
	return "", p.Commit(ctx, pv)
}

// abandonDir takes back the plain directory of pv when this provisioning
// made it (storagedir.RemoveMarked), then forgets the record.
func (p *Provisioner) abandonDir(ctx context.Context, pv *v1.PersistentVolume) (string, error) {
	name, err := p.ownedName(pv)
	if err != nil {
		return "", fmt.Errorf("abandon local volume of PV %s: %w (nothing deleted)", pv.Name, err)
	}
	out, err := mount.Bounded(ctx, func() (storagedir.Outcome, error) { return storagedir.RemoveMarked(p.cfg.Root, name, pv.Name) })
	if err != nil {
		return "", fmt.Errorf("abandon local volume of PV %s: %w", pv.Name, err)
	}
	var kept string
	switch out {
	case storagedir.Removed:
		p.changed()
		p.log.Info("local volume of an abandoned provisioning removed", zap.String("pv", pv.Name))
	case storagedir.KeptNotMade:
		kept = fmt.Sprintf("%s is kept: it was there before this provisioning (it has no %s naming %s)",
			filepath.Join(p.cfg.Root, name), storagedir.MarkerName, pv.Name)
	case storagedir.KeptNotEmpty:
		kept = fmt.Sprintf("%s is kept: files were written in it after it was made", filepath.Join(p.cfg.Root, name))
	}
	if err := durable.Remove(p.recordsDir(), pv.Name+recordSuffix); err != nil {
		return kept, fmt.Errorf("remove the record of the provisioning of PV %s: %w", pv.Name, err)
	}
	return kept, nil
}

// Unsettled implements provisioner.Resumer: the records a crash left. A
// record that cannot be read is logged and left alone.
func (p *Provisioner) Unsettled(context.Context) ([]provisioner.Unsettled, error) {
	names, err := durable.Names(p.recordsDir(), recordSuffix)
	if err != nil {
		return nil, fmt.Errorf("list the records of unfinished provisionings: %w", err)
	}
	var out []provisioner.Unsettled
	for _, n := range names {
		r, err := p.readRecord(n)
		if err != nil {
			p.log.Warn("record of an unfinished provisioning left alone", zap.String("record", filepath.Join(p.recordsDir(), n)), zap.Error(err))
			continue
		}
		out = append(out, r.unsettled(p))
	}
	return out, nil
}

func (p *Provisioner) readRecord(file string) (pending, error) {
	var r pending
	b, err := os.ReadFile(filepath.Join(p.recordsDir(), file)) //nolint:gosec // G304: a record under the root, which only root can reach
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	switch {
	case err != nil:
		return r, err
	case r.PV+recordSuffix != file || r.PV != strings.TrimPrefix(r.PV, ".") || dirName(r.Namespace, r.Claim, r.PV) != r.Name:
		return r, fmt.Errorf("record names PV %q, volume %q and claim %s/%s, which do not go together", r.PV, r.Name, r.Namespace, r.Claim)
	}
	return r, nil
}

// unsettled is the PV that Provision would have described for r, and its
// claim.
func (r pending) unsettled(p *Provisioner) provisioner.Unsettled {
	ann := map[string]string{provisioner.AnnProvisionedBy: provisioner.LocalName, provisioner.AnnArchiveOnDelete: "false"}
	if r.Capacity != "" {
		ann[AnnCapacity] = r.Capacity
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: r.PV, Annotations: ann},
		Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: filepath.Join(p.cfg.Root, r.Name)}},
			NodeAffinity:           nodeAffinity(p.cfg.NodeName),
		},
	}
	claim := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Claim, UID: r.ClaimUID}}
	return provisioner.Unsettled{PV: pv, Claim: claim}
}
