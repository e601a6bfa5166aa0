package nfssubdir

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/plugins/nfs"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// ExportMounter mounts an NFS export on a directory and takes it down: the
// agent's *nfs.Plugin. SetUp on a directory mounted already checks the
// mount — a live one is kept, a stale one mounted again — rather than
// mount on top of it; its Result.Path is where the export's files are.
// TearDown unmounts and removes the empty mount point, nothing else.
type ExportMounter interface {
	SetUp(ctx context.Context, spec *volume.Spec, dir string) (volume.Result, error)
	TearDown(ctx context.Context, dir string) error
}

var _ ExportMounter = (*nfs.Plugin)(nil)

// maxReadable bounds the readable part of a mount directory's name.
const maxReadable = 48

// mountName names the mount directory of export e mounted with options:
// the server and path with every byte but [A-Za-z0-9._-] made '_', cut to
// maxReadable, then a hash of all three, so that two exports (or one
// export with two sets of options, which cannot share a mount) never share
// a directory, and the name is one safe path element whatever the class
// says. The same export and options always get the same name, so a mount
// an earlier run left is found and reused, never stacked.
func mountName(e export, options []string) string {
	sum := sha256.Sum256([]byte(e.server + "\x00" + e.path + "\x00" + strings.Join(options, ",")))
	readable := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-':
			return r
		}
		return '_'
	}, e.server+e.path)
	if len(readable) > maxReadable {
		readable = readable[:maxReadable]
	}
	return readable + "-" + hex.EncodeToString(sum[:6])
}

// exportSpec is the volume the NFS plugin mounts for export e: a PV with
// its nfs source and the mount options.
func exportSpec(e export, options []string) *volume.Spec {
	return &volume.Spec{
		Volume: &v1.Volume{Name: "export"},
		PV: &v1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "nfs-subdir-export"},
			Spec: v1.PersistentVolumeSpec{
				MountOptions:           options,
				PersistentVolumeSource: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: e.server, Path: e.path}},
			},
		},
	}
}

// mountExport mounts e with options, or checks the mount there already,
// within the provisioner's timeout, and returns where its files are. The
// caller holds ops shared.
func (p *Provisioner) mountExport(ctx context.Context, e export, options []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	dir := filepath.Join(p.mountsDir, mountName(e, options))
	res, err := p.exports.SetUp(ctx, exportSpec(e, options), dir)
	if err != nil {
		return "", fmt.Errorf("mount export %s: %w", e, err)
	}
	// storagedir wants a base without symlinks: resolve those above the
	// mount point, on the local disk, and ask nothing of the mount itself.
	parent, err := filepath.EvalSymlinks(filepath.Dir(res.Path))
	if err != nil {
		return "", fmt.Errorf("mount export %s: %w", e, err)
	}
	return filepath.Join(parent, filepath.Base(res.Path)), nil
}

// Close takes down every export mount under the mounts directory: those
// this provisioner mounted and any an earlier run of the agent left
// behind. It waits for the Provision and Delete calls in flight, and
// holds off new ones until it returns; the provisioner stays usable, and
// a later call mounts its export again. The agent calls it when it loses
// the leadership and at shutdown (and may at start, to take down what a
// crash left). A mount that cannot be taken down (busy) stays, with an
// error; the others are taken down all the same.
func (p *Provisioner) Close(ctx context.Context) error {
	p.ops.Lock()
	defer p.ops.Unlock()
	entries, err := os.ReadDir(p.mountsDir) // names only: nothing is asked of the mounts
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list export mounts: %w", err)
	}
	var errs []error
	for _, entry := range entries {
		dir := filepath.Join(p.mountsDir, entry.Name())
		if err := p.tearDown(ctx, dir); err != nil {
			errs = append(errs, fmt.Errorf("unmount export mount %s: %w", dir, err))
			continue
		}
		p.log.Info("export unmounted", zap.String("dir", dir))
	}
	return errors.Join(errs...)
}

func (p *Provisioner) tearDown(ctx context.Context, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return p.exports.TearDown(ctx, dir)
}
