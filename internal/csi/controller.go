package csi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
)

// The CreateVolume parameters the external-provisioner adds with
// --extra-create-metadata: they name the directory as the local
// provisioner names a claim's (<namespace>-<claim>-<PV name>).
const (
	paramPVCName      = "csi.storage.k8s.io/pvc/name"
	paramPVCNamespace = "csi.storage.k8s.io/pvc/namespace"
	paramPVName       = "csi.storage.k8s.io/pv/name"
	csiParamPrefix    = "csi.storage.k8s.io/"
)

// paramsClass stands for the StorageClass in errors about CreateVolume
// parameters: the external-provisioner passes a class's parameters, not
// its name.
const paramsClass = "(of the CreateVolume parameters)"

// defaultSize is the size of a volume whose CreateVolume gives no
// capacity range.
const defaultSize = 1 << 30

// sizeUnit: sizes are rounded up to whole 4 KiB blocks, as the capacity
// backends do.
const sizeUnit = 4096

// maxListEntries bounds one ListSnapshots page when the caller sets none.
const maxListEntries = 1000

// ControllerGetCapabilities: not EXPAND_VOLUME; the node service grows
// volumes (NodeExpandVolume), as csi-resizer has no node-local mode.
func (d *Driver) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	var caps []*csipb.ControllerServiceCapability
	for _, t := range []csipb.ControllerServiceCapability_RPC_Type{
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csipb.ControllerServiceCapability_RPC_GET_CAPACITY,
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csipb.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csipb.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csipb.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csipb.ControllerServiceCapability_RPC_GET_SNAPSHOT,
		csipb.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		caps = append(caps, &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{
			Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csipb.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// checkID refuses a volume or snapshot ID that cannot be one of ours,
// before anything is touched.
func checkID(what, id string) error {
	if id == "" {
		return status.Errorf(codes.InvalidArgument, "%s ID is required", what)
	}
	if err := local.ValidName(id); err != nil {
		return status.Errorf(codes.NotFound, "%s ID %q cannot be one of this driver's: %v", what, id, err)
	}
	return nil
}

// checkCaps refuses capabilities the driver does not serve: access by
// more than one node, and block volumes where there can be none.
func checkCaps(caps []*csipb.VolumeCapability, enforce bool) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	for _, c := range caps {
		if err := checkCap(c, enforce); err != nil {
			return err
		}
	}
	return nil
}

func checkCap(c *csipb.VolumeCapability, enforce bool) error {
	if c == nil || c.GetAccessMode() == nil {
		return status.Error(codes.InvalidArgument, "a volume capability has no access mode")
	}
	switch m := c.GetAccessMode().GetMode(); m {
	case csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
	default:
		return status.Errorf(codes.InvalidArgument, "access mode %s%s: the volumes of %s are on one node's disk, so only the modes of one node are served: "+
			"a claim's ReadWriteOnce or ReadWriteOncePod; ReadOnlyMany and ReadWriteMany are modes of several nodes. "+
			"Use ReadWriteOnce or ReadWriteOncePod, and readOnly: true on the pod's persistentVolumeClaim volume to mount it read-only", m, claimMode(m), Name)
	}
	switch {
	case c.GetBlock() != nil:
		if !enforce {
			return status.Errorf(codes.InvalidArgument, "a raw block volume needs a class with %s \"true\" (an image of the claim's size)", local.ParamEnforce)
		}
	case c.GetMount() != nil:
		if fs := c.GetMount().GetFsType(); fs != "" && fs != "ext4" && fs != "btrfs" {
			return status.Errorf(codes.InvalidArgument, "fsType %q: the volumes are directories of the local path root's file system; leave fsType unset", fs)
		}
	default:
		return status.Error(codes.InvalidArgument, "a volume capability is neither mount nor block")
	}
	return nil
}

// claimMode names the claim access mode Kubernetes asks a CSI driver for
// as m, for the modes the driver refuses: " (a claim's ReadOnlyMany)",
// or "" for a mode no claim asks for.
func claimMode(m csipb.VolumeCapability_AccessMode_Mode) string {
	switch m {
	case csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return " (a claim's ReadOnlyMany)"
	case csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		return " (a claim's ReadWriteMany)"
	}
	return ""
}

// isBlock reports whether caps ask for a raw block volume.
func isBlock(caps []*csipb.VolumeCapability) bool {
	return slices.ContainsFunc(caps, func(c *csipb.VolumeCapability) bool { return c.GetBlock() != nil })
}

// size is what a capacity range asks for: its required bytes (or
// defaultSize, under the limit) rounded up to sizeUnit.
func size(r *csipb.CapacityRange) (int64, error) {
	req, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || limit < 0 {
		return 0, status.Error(codes.InvalidArgument, "capacity range: negative bytes")
	}
	if limit > 0 && req > limit {
		return 0, status.Errorf(codes.InvalidArgument, "capacity range: required %d bytes is more than the limit %d", req, limit)
	}
	n := req
	if n == 0 {
		n = defaultSize
		if limit > 0 && limit < n {
			n = limit
		}
	}
	n = (n + sizeUnit - 1) / sizeUnit * sizeUnit
	if limit > 0 && n > limit {
		return 0, status.Errorf(codes.OutOfRange, "capacity range: %d bytes rounded up to whole 4 KiB blocks is %d, over the limit %d", req, n, limit)
	}
	return n, nil
}

// checkTopology refuses requirements that do not let the volume be on
// this node.
func (d *Driver) checkTopology(req *csipb.TopologyRequirement) error {
	if req == nil {
		return nil
	}
	ours := func(ts []*csipb.Topology) bool {
		return slices.ContainsFunc(ts, func(t *csipb.Topology) bool {
			v, ok := t.GetSegments()[TopologyKey]
			return ok && v == d.cfg.NodeName
		})
	}
	switch {
	case len(req.GetRequisite()) > 0 && !ours(req.GetRequisite()):
		return status.Errorf(codes.ResourceExhausted, "accessibility requirements: the requisite topologies do not include this node (%s=%s): "+
			"this driver makes volumes only on the node it runs on; the external-provisioner must run with --node-deployment", TopologyKey, d.cfg.NodeName)
	case len(req.GetRequisite()) == 0 && len(req.GetPreferred()) > 0 && !ours(req.GetPreferred()):
		return status.Errorf(codes.ResourceExhausted, "accessibility requirements: the preferred topologies do not include this node (%s=%s): "+
			"this driver makes volumes only on the node it runs on", TopologyKey, d.cfg.NodeName)
	}
	return nil
}

func (d *Driver) topology() []*csipb.Topology {
	return []*csipb.Topology{{Segments: map[string]string{TopologyKey: d.cfg.NodeName}}}
}

// volumeName is the ID of the volume CreateVolume's req makes: named as
// the local provisioner names a claim's when the external-provisioner
// says which claim, the CreateVolume name alone otherwise.
func volumeName(req *csipb.CreateVolumeRequest) string {
	p := req.GetParameters()
	ns, claim := p[paramPVCNamespace], p[paramPVCName]
	if ns == "" || claim == "" {
		return req.GetName()
	}
	return local.DirName(ns, claim, req.GetName())
}

// CreateVolume makes a volume on this node (or finds the one an earlier
// call of the same name made) through the local provisioner.
func (d *Driver) CreateVolume(ctx context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "CreateVolume: a name is required")
	}
	id := volumeName(req)
	if err := local.ValidName(id); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "CreateVolume %s: volume %v", req.GetName(), err)
	}
	params := map[string]string{}
	for k, v := range req.GetParameters() {
		if !strings.HasPrefix(k, csiParamPrefix) {
			params[k] = v
		}
	}
	pp, err := local.ParseParams(paramsClass, params)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "CreateVolume %s: %v", req.GetName(), err)
	}
	if err := checkCaps(req.GetVolumeCapabilities(), pp.Enforce); err != nil {
		return nil, err
	}
	if err := d.checkTopology(req.GetAccessibilityRequirements()); err != nil {
		return nil, err
	}
	n, err := size(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	spec := local.Spec{Name: id, Params: pp, Block: isBlock(req.GetVolumeCapabilities())}
	if pp.Enforce {
		spec.Size = n
	}
	want := &record{ID: id, Name: req.GetName(), Archive: pp.Archive, Block: spec.Block, Size: spec.Size}
	if pp.Enforce {
		want.Capacity = d.cfg.Local.Kind()
	}
	unlock := d.locks.Lock(id)
	defer unlock()
	if err := d.content(ctx, req.GetVolumeContentSource(), &spec, want); err != nil {
		return nil, err
	}
	if err := d.cfg.Local.CheckSpec(paramsClass, spec); err != nil {
		code := codes.InvalidArgument
		if errors.Is(err, local.ErrTooSmall) {
			code = codes.OutOfRange
		}
		return nil, status.Errorf(code, "CreateVolume %s: %v", req.GetName(), err)
	}
	have, err := d.recs.get(id)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "CreateVolume %s: %v", req.GetName(), err)
	}
	if have != nil && !sameVolume(have, want) {
		return nil, status.Errorf(codes.AlreadyExists, "CreateVolume %s: volume %s exists with other parameters (size %d, capacity %q, block %t, source %q%q): "+
			"give the new volume another name", req.GetName(), id, have.Size, have.Capacity, have.Block, have.SourceSnapshot, have.SourceVolume)
	}
	if have == nil {
		want.Created = d.cfg.Now().UTC()
		if err := d.recs.put(want); err != nil {
			return nil, status.Errorf(codes.Internal, "CreateVolume %s: record it before making it: %v", req.GetName(), err)
		}
		have = want
	}
	if _, err := d.cfg.Local.CreateVolume(ctx, spec); err != nil {
		return nil, d.createFailed(req.GetName(), have, err)
	}
	d.log.Info("CSI volume made", zap.String("volume", id), zap.Int64("bytes", have.Size), zap.String("capacity", have.Capacity))
	return &csipb.CreateVolumeResponse{Volume: d.volume(have, req.GetVolumeContentSource())}, nil
}

// createFailed turns a failure to make r into a gRPC error. A refusal
// before anything was made (no room) forgets r.
func (d *Driver) createFailed(name string, r *record, err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, local.ErrNoRoom):
		code = codes.ResourceExhausted
	case errors.Is(err, local.ErrTooSmall):
		code = codes.OutOfRange
	case errors.Is(err, capacity.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, capacity.ErrExists):
		code = codes.AlreadyExists
	case errors.Is(err, capacity.ErrNestedSubvolumes):
		code = codes.FailedPrecondition
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		code = codes.DeadlineExceeded
	}
	if code == codes.ResourceExhausted || code == codes.OutOfRange || code == codes.NotFound || code == codes.FailedPrecondition {
		if rerr := d.recs.remove(r.ID); rerr != nil {
			d.log.Warn("record of a refused volume kept", zap.String("volume", r.ID), zap.Error(rerr))
		}
	}
	return status.Errorf(code, "CreateVolume %s: %v", name, err)
}

// sameVolume reports whether have is what want asks for again.
func sameVolume(have, want *record) bool {
	return have.Name == want.Name && have.Capacity == want.Capacity && have.Archive == want.Archive && have.Block == want.Block &&
		have.Size == want.Size && have.SourceSnapshot == want.SourceSnapshot && have.SourceVolume == want.SourceVolume
}

// content sets the data source of s and r from src: a snapshot or a
// volume of this driver.
func (d *Driver) content(ctx context.Context, src *csipb.VolumeContentSource, s *local.Spec, r *record) error {
	switch {
	case src == nil:
		return nil
	case src.GetSnapshot() != nil:
		id := src.GetSnapshot().GetSnapshotId()
		if err := checkID("source snapshot", id); err != nil {
			return err
		}
		_, info, err := d.snapshot(ctx, "CreateVolume: source snapshot", id)
		if err != nil {
			return err
		}
		s.Content, s.ContentSize, r.SourceSnapshot = &capacity.Source{Snapshot: id}, info.Size, id
	case src.GetVolume() != nil:
		id := src.GetVolume().GetVolumeId()
		if err := checkID("source volume", id); err != nil {
			return err
		}
		rec, err := d.recs.get(id)
		if err != nil {
			return status.Errorf(codes.Internal, "CreateVolume: source volume %s: %v", id, err)
		}
		if rec == nil {
			return status.Errorf(codes.NotFound, "CreateVolume: source volume %s: no such volume of this driver on node %s", id, d.cfg.NodeName)
		}
		if rec.Capacity == "" {
			return status.Errorf(codes.InvalidArgument, "CreateVolume: source volume %s is a plain directory (%s \"false\"): it cannot be cloned; "+
				"use a class with %s: \"true\"", id, local.ParamEnforce, local.ParamEnforce)
		}
		s.Content, s.ContentSize, r.SourceVolume = &capacity.Source{Volume: id}, rec.Size, id
	default:
		return status.Error(codes.InvalidArgument, "CreateVolume: a volume content source is neither a snapshot nor a volume")
	}
	if !s.Enforce {
		return status.Errorf(codes.InvalidArgument, "CreateVolume: a plain directory (%s \"false\") cannot be made from a snapshot or a volume: "+
			"a copy of a live directory is not point-in-time and its size is not enforced; use a class with %s: \"true\"", local.ParamEnforce, local.ParamEnforce)
	}
	return nil
}

// snapshotErr maps an error of the snapshot what.
func snapshotErr(what string, err error) error {
	switch {
	case errors.Is(err, capacity.ErrNotFound):
		return status.Errorf(codes.NotFound, "%s: no such snapshot", what)
	case errors.Is(err, capacity.ErrBlockSnapshot):
		return status.Errorf(codes.InvalidArgument, "%s: %v", what, err)
	case errors.Is(err, capacity.ErrNestedSubvolumes):
		return status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
	case errors.Is(err, capacity.ErrSnapshotBusy):
		return status.Errorf(codes.FailedPrecondition, "%s: %v: retry once the volume is made", what, err)
	case errors.Is(err, capacity.ErrExists):
		return status.Errorf(codes.AlreadyExists, "%s: %v", what, err)
	case errors.Is(err, local.ErrNoRoom):
		return status.Errorf(codes.ResourceExhausted, "%s: %v", what, err)
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}

// ContextCapacity is the key of the volume context (a CSI PV's
// spec.csi.volumeAttributes) that names the backend a volume was made
// with: "btrfs", "image", or "" for a plain directory.
const ContextCapacity = "capacity"

// volume is the CSI description of r.
func (d *Driver) volume(r *record, src *csipb.VolumeContentSource) *csipb.Volume {
	return &csipb.Volume{VolumeId: r.ID, CapacityBytes: r.Size, ContentSource: src, AccessibleTopology: d.topology(),
		VolumeContext: map[string]string{ContextCapacity: r.Capacity}}
}

// DeleteVolume deletes (or archives) a volume after the reclaim delay:
// the first call records when it may go and refuses with
// FailedPrecondition saying when; a call after that deletes it through
// the local provisioner, which refuses while a mount shows it.
func (d *Driver) DeleteVolume(ctx context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "DeleteVolume: a volume ID is required")
	}
	if local.ValidName(id) != nil {
		return &csipb.DeleteVolumeResponse{}, nil // never one of ours: nothing to delete
	}
	unlock := d.locks.Lock(id)
	defer unlock()
	r, err := d.recs.get(id)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "DeleteVolume %s: %v", id, err)
	}
	if r == nil {
		return &csipb.DeleteVolumeResponse{}, nil
	}
	v := deletionOf(r.DeleteAt, d.cfg.Now().UTC(), d.cfg.ReclaimDelay)
	if v.Record {
		r.DeleteAt = &v.At
		if err := d.recs.put(r); err != nil {
			return nil, status.Errorf(codes.Internal, "DeleteVolume %s: record the deletion: %v", id, err)
		}
		d.log.Info("CSI volume to be deleted after the reclaim delay", zap.String("volume", id), zap.Time("at", v.At))
	}
	if v.Wait {
		return nil, status.Errorf(codes.FailedPrecondition, "DeleteVolume %s: the volume is kept until %s (--reclaim-delay %s) and deleted by the first call after that; "+
			"to keep it, set its PersistentVolume's persistentVolumeReclaimPolicy to Retain", id, v.At.Format(timeFormat), d.cfg.ReclaimDelay)
	}
	if err := d.cfg.Local.DeleteVolume(ctx, r.vol()); err != nil {
		if errors.Is(err, provisioner.ErrInUse) {
			return nil, status.Errorf(codes.FailedPrecondition, "DeleteVolume %s: %v: unpublish it first (delete the pods that use it)", id, err)
		}
		return nil, status.Errorf(codes.Internal, "DeleteVolume %s: %v", id, err)
	}
	if err := d.recs.remove(id); err != nil {
		return nil, status.Errorf(codes.Internal, "DeleteVolume %s: forget it: %v", id, err)
	}
	d.log.Info("CSI volume deleted", zap.String("volume", id), zap.Bool("archived", r.Archive))
	return &csipb.DeleteVolumeResponse{}, nil
}

// known returns the record of the volume id, or NotFound.
func (d *Driver) known(what, id string) (*record, error) {
	if err := checkID("volume", id); err != nil {
		return nil, err
	}
	r, err := d.recs.get(id)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%s %s: %v", what, id, err)
	}
	if r == nil {
		return nil, status.Errorf(codes.NotFound, "%s: volume %s is not a volume of %s on node %s", what, id, Name, d.cfg.NodeName)
	}
	return r, nil
}

// ValidateVolumeCapabilities confirms capabilities the volume serves.
func (d *Driver) ValidateVolumeCapabilities(_ context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	r, err := d.known("ValidateVolumeCapabilities", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "ValidateVolumeCapabilities: volume capabilities are required")
	}
	if err := checkCaps(req.GetVolumeCapabilities(), r.Capacity != ""); err != nil {
		return &csipb.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	if isBlock(req.GetVolumeCapabilities()) != r.Block {
		return &csipb.ValidateVolumeCapabilitiesResponse{Message: fmt.Sprintf("volume %s is a raw block volume: %t", r.ID, r.Block)}, nil
	}
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters()}}, nil
}

// GetCapacity is the room the local provisioner has for a new volume:
// the same figure the agent's own CSIStorageCapacity publisher uses.
func (d *Driver) GetCapacity(ctx context.Context, req *csipb.GetCapacityRequest) (*csipb.GetCapacityResponse, error) {
	if t := req.GetAccessibleTopology(); t != nil {
		if v, ok := t.GetSegments()[TopologyKey]; !ok || v != d.cfg.NodeName {
			return &csipb.GetCapacityResponse{}, nil
		}
	}
	pp, err := local.ParseParams(paramsClass, withoutCSIParams(req.GetParameters()))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "GetCapacity: %v", err)
	}
	if len(req.GetVolumeCapabilities()) > 0 && checkCaps(req.GetVolumeCapabilities(), pp.Enforce) != nil {
		return &csipb.GetCapacityResponse{}, nil
	}
	room, err := d.cfg.Local.Room(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "GetCapacity: %v", err)
	}
	return &csipb.GetCapacityResponse{AvailableCapacity: room}, nil
}

func withoutCSIParams(in map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		if !strings.HasPrefix(k, csiParamPrefix) {
			out[k] = v
		}
	}
	return out
}

// ListVolumes lists the driver's volumes on this node, by ID, a page at a
// time: the token is the index of the next entry.
func (d *Driver) ListVolumes(_ context.Context, req *csipb.ListVolumesRequest) (*csipb.ListVolumesResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "ListVolumes: max_entries is negative")
	}
	all, err := d.recs.all()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "ListVolumes: %v", err)
	}
	slices.SortFunc(all, func(a, b *record) int { return strings.Compare(a.ID, b.ID) })
	start, end, next, err := page(req.GetStartingToken(), int(req.GetMaxEntries()), len(all))
	if err != nil {
		return nil, status.Errorf(codes.Aborted, "ListVolumes: %v", err)
	}
	resp := &csipb.ListVolumesResponse{NextToken: next}
	for _, r := range all[start:end] {
		resp.Entries = append(resp.Entries, &csipb.ListVolumesResponse_Entry{Volume: d.volume(r, nil)})
	}
	return resp, nil
}

// page is the range [start, end) of n entries that a starting token and
// a maximum ask for, and the token of the page after it ("" for none).
func page(token string, maxEntries, n int) (int, int, string, error) {
	start := 0
	if token != "" {
		var err error
		start, err = strconv.Atoi(token)
		if err != nil || start < 0 || start > n {
			return 0, 0, "", fmt.Errorf("starting token %q is not one this driver gave: list from the start", token)
		}
	}
	if maxEntries == 0 || maxEntries > maxListEntries {
		maxEntries = maxListEntries
	}
	end := min(start+maxEntries, n)
	next := ""
	if end < n {
		next = strconv.Itoa(end)
	}
	return start, end, next, nil
}
