package local

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
)

// ErrNoRoom marks a volume that does not fit in what the root has left:
// its free space less what the volumes of enforced capacity may still
// write.
var ErrNoRoom = errors.New("not enough room")

// Room is how many bytes a new volume can still be given: the root file
// system's free space (for unprivileged users: root's reserve is not
// counted on) less what the volumes of enforced capacity may still take,
// their sizes less what they already take. A volume writing its data moves
// bytes from the second figure to the first, so Room changes only when a
// volume is made, grown or deleted, or when something else writes to the
// file system. Plain directories (enforce "false") promise nothing.
func (p *Provisioner) Room(ctx context.Context) (int64, error) {
	return p.room(ctx, "")
}

// room is Room with what the volume except may still take counted as free:
// a retried Provision of a volume that exists already needs no more room.
func (p *Provisioner) room(ctx context.Context, except string) (int64, error) {
	st, err := mount.Bounded(ctx, func() (unix.Statfs_t, error) {
		var st unix.Statfs_t
		err := unix.Statfs(p.cfg.Root, &st)
		return st, err
	})
	if err != nil {
		return 0, fmt.Errorf("statfs local path root %s: %w", p.cfg.Root, err)
	}
	free := int64(st.Bavail) * st.Bsize //nolint:gosec // G115: a file system's free bytes fit in int64
	if p.cfg.Capacity == nil {
		return free, nil
	}
	promised, err := p.cfg.Capacity.Promised(ctx)
	if err != nil {
		return 0, fmt.Errorf("local path root %s: %w", p.cfg.Root, err)
	}
	for name, n := range promised {
		if name != except {
			free -= n
		}
	}
	return max(0, free), nil
}

// makeRoom checks, for a volume name of size bytes about to be made or
// grown by grow bytes, that the root has room for it. The caller holds
// p.roomMu until the volume is made, so that two volumes never both take
// the last room.
func (p *Provisioner) makeRoom(ctx context.Context, name string, grow int64) error {
	room, err := p.room(ctx, name)
	if err != nil {
		return err
	}
	if grow > room {
		return fmt.Errorf("%w: it needs %s, and the local path root %s has %s left (its free space less what the volumes of enforced capacity may still write)",
			ErrNoRoom, bytesString(grow), p.cfg.Root, bytesString(room))
	}
	return nil
}

// footprint is how many bytes of the root a volume of enforced capacity
// of size bytes may take: its size, or more where the backend says so
// (an ext4 image holds its file system's metadata besides).
func (p *Provisioner) footprint(size int64, block bool) int64 {
	if f, ok := p.cfg.Capacity.(capacity.Footprinter); ok {
		return f.Footprint(size, block)
	}
	return size
}

// bytesString gives n bytes in the units of a claim's request.
func bytesString(n int64) string {
	return resource.NewQuantity(n, resource.BinarySI).String()
}

// changed tells Config.OnChange that Room may have changed.
func (p *Provisioner) changed() {
	if p.cfg.OnChange != nil {
		p.cfg.OnChange()
	}
}
