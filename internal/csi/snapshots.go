package csi

import (
	"context"
	"errors"
	"slices"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
)

// The driver's snapshots are those it has a record of (snapRecord),
// written before the snapshot is taken: the capacity backend also holds
// manifest mode's snapshots, which no CSI call lists, restores or
// deletes. A snapshot is deleted as a volume is: after the reclaim delay
// from the first DeleteSnapshot (deletionOf), recorded first, and never
// while a volume is being made from it (the capacity backend refuses).

// CreateSnapshot takes a snapshot of a volume of enforced capacity, or
// finds the one an earlier call of the same name and source took. Asked
// again for a snapshot whose deletion is pending (its content made
// again), it clears the pending deletion.
func (d *Driver) CreateSnapshot(ctx context.Context, req *csipb.CreateSnapshotRequest) (*csipb.CreateSnapshotResponse, error) {
	name, source := req.GetName(), req.GetSourceVolumeId()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "CreateSnapshot: a name is required")
	}
	if err := local.ValidName(name); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "CreateSnapshot: snapshot %v", err)
	}
	if source == "" {
		return nil, status.Error(codes.InvalidArgument, "CreateSnapshot: a source volume ID is required")
	}
	unlock := d.locks.Lock("snapshot/" + name)
	defer unlock()
	have, err := d.snaps.get(name)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "CreateSnapshot %s: %v", name, err)
	}
	if err := d.nameFree(ctx, name, source, have); err != nil {
		return nil, err
	}
	r, err := d.known("CreateSnapshot: source", source)
	if err != nil {
		return nil, err
	}
	unlockVol := d.locks.Lock(r.ID)
	defer unlockVol()
	if r.Capacity == "" {
		return nil, status.Errorf(codes.InvalidArgument, "CreateSnapshot: volume %s is a plain directory (%s \"false\"): it has no snapshots (a copy of a live directory is not point-in-time); "+
			"use a class with %s: \"true\"", r.ID, local.ParamEnforce, local.ParamEnforce)
	}
	if err := d.recordSnapshot(name, r.ID, have); err != nil {
		return nil, err
	}
	s, err := d.cfg.Local.SnapshotVolume(ctx, r.vol(), name)
	if err != nil {
		d.forgetUntaken(ctx, name)
		return nil, snapshotErr("CreateSnapshot "+name, err)
	}
	return &csipb.CreateSnapshotResponse{Snapshot: csiSnapshot(s)}, nil
}

// nameFree refuses the snapshot name of the volume source when the name
// is the driver's snapshot of another volume (have), or a snapshot the
// driver did not take.
func (d *Driver) nameFree(ctx context.Context, name, source string, have *snapRecord) error {
	if have != nil {
		if have.Source != source {
			return status.Errorf(codes.AlreadyExists, "CreateSnapshot: snapshot %s exists, of volume %s, not %s: give the new snapshot another name", name, have.Source, source)
		}
		return nil
	}
	if info, err := d.cfg.Local.SnapshotInfo(ctx, name); err == nil {
		return status.Errorf(codes.AlreadyExists, "CreateSnapshot: snapshot %s exists, of volume %s, and was not taken by %s (manifest mode's?): give the new snapshot another name",
			name, info.Source, Name)
	}
	return nil
}

// recordSnapshot writes down, before the snapshot name of the volume
// source is taken, that the driver takes it; a record there already
// (have: a retry, or the content made again) loses its pending deletion.
func (d *Driver) recordSnapshot(name, source string, have *snapRecord) error {
	switch {
	case have == nil:
		r := &snapRecord{ID: name, Source: source, Created: d.cfg.Now().UTC()}
		if err := d.snaps.put(r); err != nil {
			return status.Errorf(codes.Internal, "CreateSnapshot %s: record it before taking it: %v", name, err)
		}
	case have.DeleteAt != nil:
		have.DeleteAt = nil
		if err := d.snaps.put(have); err != nil {
			return status.Errorf(codes.Internal, "CreateSnapshot %s: clear its pending deletion: %v", name, err)
		}
		d.log.Info("pending deletion of a CSI snapshot cleared: it is asked for again", zap.String("snapshot", name))
	}
	return nil
}

// forgetUntaken forgets the snapshot name after a CreateSnapshot failed,
// unless the backend has it ready: a record of nothing is kept by no one.
func (d *Driver) forgetUntaken(ctx context.Context, name string) {
	if _, err := d.cfg.Local.SnapshotInfo(ctx, name); !errors.Is(err, capacity.ErrNotFound) {
		return
	}
	if err := d.snaps.remove(name); err != nil {
		d.log.Warn("record of a snapshot not taken kept", zap.String("snapshot", name), zap.Error(err))
	}
}

func csiSnapshot(s capacity.Snapshot) *csipb.Snapshot {
	return &csipb.Snapshot{SnapshotId: s.Name, SourceVolumeId: s.Source, SizeBytes: s.Size,
		CreationTime: timestamppb.New(s.Created), ReadyToUse: true}
}

// snapshot returns the driver's snapshot id, as its record and the
// backend know it; NotFound (naming what asked) when the driver has no
// record of it (not its snapshot: none, or manifest mode's), when the
// backend has no such snapshot ready, or when the backend's is of
// another volume than the record says (not the one the driver took).
func (d *Driver) snapshot(ctx context.Context, what, id string) (*snapRecord, capacity.Snapshot, error) {
	r, err := d.snaps.get(id)
	if err != nil {
		return nil, capacity.Snapshot{}, status.Errorf(codes.Internal, "%s %s: %v", what, id, err)
	}
	if r == nil {
		return nil, capacity.Snapshot{}, status.Errorf(codes.NotFound, "%s %s: no such snapshot of %s on node %s", what, id, Name, d.cfg.NodeName)
	}
	s, err := d.cfg.Local.SnapshotInfo(ctx, id)
	if err != nil {
		return nil, capacity.Snapshot{}, snapshotErr(what+" "+id, err)
	}
	if s.Source != r.Source {
		return nil, capacity.Snapshot{}, status.Errorf(codes.NotFound, "%s %s: the snapshot of that name is of volume %s, not of volume %s, which %s took it of",
			what, id, s.Source, r.Source, Name)
	}
	return r, s, nil
}

// DeleteSnapshot deletes one of the driver's snapshots after the reclaim
// delay: the first call records when it may go and refuses with
// FailedPrecondition saying when; a call after that deletes it through
// the local provisioner, which refuses while a volume is being made from
// it. A snapshot that is gone, or is not the driver's, is not an error
// (and another's is left alone).
func (d *Driver) DeleteSnapshot(ctx context.Context, req *csipb.DeleteSnapshotRequest) (*csipb.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "DeleteSnapshot: a snapshot ID is required")
	}
	if local.ValidName(id) != nil {
		return &csipb.DeleteSnapshotResponse{}, nil // never one of ours: nothing to delete
	}
	unlock := d.locks.Lock("snapshot/" + id)
	defer unlock()
	r, err := d.snaps.get(id)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "DeleteSnapshot %s: %v", id, err)
	}
	if r == nil {
		return &csipb.DeleteSnapshotResponse{}, nil // not the driver's: gone, never taken, or another's
	}
	info, err := d.cfg.Local.SnapshotInfo(ctx, id)
	switch {
	case errors.Is(err, capacity.ErrNotFound):
		// Gone (a kill after the deletion, before the record went), or
		// cut short: nothing to keep, what is left goes.
		return deleted(d.forgetSnapshot(ctx, id, true))
	case err != nil:
		return nil, snapshotErr("DeleteSnapshot "+id, err)
	case info.Source != r.Source:
		d.log.Warn("CSI snapshot record forgotten: the snapshot of its name is of another volume, and is left alone",
			zap.String("snapshot", id), zap.String("volume", r.Source), zap.String("of", info.Source))
		return deleted(d.forgetSnapshot(ctx, id, false))
	}
	v := deletionOf(r.DeleteAt, d.cfg.Now().UTC(), d.cfg.ReclaimDelay)
	if v.Record {
		r.DeleteAt = &v.At
		if err := d.snaps.put(r); err != nil {
			return nil, status.Errorf(codes.Internal, "DeleteSnapshot %s: record the deletion: %v", id, err)
		}
		d.log.Info("CSI snapshot to be deleted after the reclaim delay", zap.String("snapshot", id), zap.Time("at", v.At))
	}
	if v.Wait {
		return nil, status.Errorf(codes.FailedPrecondition, "DeleteSnapshot %s: the snapshot is kept until %s (--reclaim-delay %s) and deleted by the first call after that; "+
			"to keep it, set its VolumeSnapshotContent's deletionPolicy to Retain", id, v.At.Format(timeFormat), d.cfg.ReclaimDelay)
	}
	if err := d.forgetSnapshot(ctx, id, true); err != nil {
		return nil, err
	}
	d.log.Info("CSI snapshot deleted", zap.String("snapshot", id))
	return &csipb.DeleteSnapshotResponse{}, nil
}

// deleted is DeleteSnapshot's answer when err is its outcome.
func deleted(err error) (*csipb.DeleteSnapshotResponse, error) {
	if err != nil {
		return nil, err
	}
	return &csipb.DeleteSnapshotResponse{}, nil
}

// forgetSnapshot deletes the snapshot id through the local provisioner
// (when del: gone already is done; refused while a volume is being made
// from it), then forgets its record. The caller holds its lock.
func (d *Driver) forgetSnapshot(ctx context.Context, id string, del bool) error {
	if del {
		if err := d.cfg.Local.DeleteSnapshot(ctx, id); err != nil {
			if errors.Is(err, capacity.ErrSnapshotBusy) {
				return status.Errorf(codes.FailedPrecondition, "DeleteSnapshot %s: %v", id, err)
			}
			return status.Errorf(codes.Internal, "DeleteSnapshot %s: %v", id, err)
		}
	}
	if err := d.snaps.remove(id); err != nil {
		return status.Errorf(codes.Internal, "DeleteSnapshot %s: forget it: %v", id, err)
	}
	return nil
}

// ListSnapshots lists the driver's snapshots that are taken, by name, a
// page at a time: the token is the index of the next entry.
func (d *Driver) ListSnapshots(ctx context.Context, req *csipb.ListSnapshotsRequest) (*csipb.ListSnapshotsResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "ListSnapshots: max_entries is negative")
	}
	out, err := d.snapshots(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "ListSnapshots: %v", err)
	}
	out = slices.DeleteFunc(out, func(s capacity.Snapshot) bool {
		return (req.GetSnapshotId() != "" && s.Name != req.GetSnapshotId()) || (req.GetSourceVolumeId() != "" && s.Source != req.GetSourceVolumeId())
	})
	start, end, next, err := page(req.GetStartingToken(), int(req.GetMaxEntries()), len(out))
	if err != nil {
		return nil, status.Errorf(codes.Aborted, "ListSnapshots: %v", err)
	}
	resp := &csipb.ListSnapshotsResponse{NextToken: next}
	for _, s := range out[start:end] {
		resp.Entries = append(resp.Entries, &csipb.ListSnapshotsResponse_Entry{Snapshot: csiSnapshot(s)})
	}
	return resp, nil
}

// snapshots are the backend's ready snapshots the driver has a record of
// (of the volume the record names), by name.
func (d *Driver) snapshots(ctx context.Context) ([]capacity.Snapshot, error) {
	recs, err := d.snaps.all()
	if err != nil {
		return nil, err
	}
	mine := map[string]string{} // source by snapshot
	for _, r := range recs {
		mine[r.ID] = r.Source
	}
	all, err := d.cfg.Local.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(all, func(s capacity.Snapshot) bool {
		source, ok := mine[s.Name]
		return !ok || source != s.Source
	})
	slices.SortFunc(out, func(a, b capacity.Snapshot) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// GetSnapshot describes one of the driver's snapshots (NotFound when
// there is none).
func (d *Driver) GetSnapshot(ctx context.Context, req *csipb.GetSnapshotRequest) (*csipb.GetSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if err := checkID("snapshot", id); err != nil {
		return nil, err
	}
	_, s, err := d.snapshot(ctx, "GetSnapshot", id)
	if err != nil {
		return nil, err
	}
	return &csipb.GetSnapshotResponse{Snapshot: csiSnapshot(s)}, nil
}
