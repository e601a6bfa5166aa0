package btrfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxNested bounds the subvolumes Nested finds below one volume: a tenant
// making subvolumes without end costs its own volume (reported as beyond
// the bound, its limit not enforced) and at most this many tree searches
// and qgroup limits a pass, never the node.
const MaxNested = 256

// ErrTooManyNested: a volume holds more than MaxNested subvolumes.
var ErrTooManyNested = fmt.Errorf("more than %d subvolumes inside the volume", MaxNested)

// ioctls of btrfs (linux/btrfs.h): _IOWR(0x94, nr, 4096).
const (
	iocTreeSearch = 0xd0009411 // BTRFS_IOC_TREE_SEARCH
	iocInoLookup  = 0xd0009412 // BTRFS_IOC_INO_LOOKUP
)

// On-disk keys searched (linux/btrfs_tree.h).
const (
	rootTreeObjectID = 1   // BTRFS_ROOT_TREE_OBJECTID: the tree of subvolumes
	rootRefKey       = 156 // BTRFS_ROOT_REF_KEY: (parent, ROOT_REF, child)
	rootBackrefKey   = 144 // BTRFS_ROOT_BACKREF_KEY: (child, ROOT_BACKREF, parent)
)

// searchKey is struct btrfs_ioctl_search_key.
type searchKey struct {
	TreeID                   uint64
	MinObjectID, MaxObjectID uint64
	MinOffset, MaxOffset     uint64
	MinTransID, MaxTransID   uint64
	MinType, MaxType         uint32
	NrItems                  uint32
	_                        uint32
	_                        [4]uint64
}

// searchArgs is struct btrfs_ioctl_search_args: the key and the buffer
// the kernel fills with (header, item) pairs.
type searchArgs struct {
	Key searchKey
	Buf [4096 - unsafe.Sizeof(searchKey{})]byte
}

// searchHeaderSize is sizeof(struct btrfs_ioctl_search_header): transid,
// objectid, offset (u64), type, len (u32).
const searchHeaderSize = 32

// inoLookupArgs is struct btrfs_ioctl_ino_lookup_args.
type inoLookupArgs struct {
	TreeID, ObjectID uint64
	Name             [4080]byte
}

// Nested returns the ID of the subvolume whose root directory dir is, and
// the IDs of every subvolume below it, at any depth (at most MaxNested:
// past that, the first MaxNested and ErrTooManyNested). It reads the
// root tree's ROOT_REF items (BTRFS_IOC_TREE_SEARCH, CAP_SYS_ADMIN): one
// search per subvolume found, whatever the files in them, and no name a
// tenant chose is parsed or followed. dir is opened without following a
// symlink.
func Nested(dir string) (uint64, []uint64, error) {
	if err := absolute(dir); err != nil {
		return 0, nil, err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd) //nolint:errcheck // read only
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, nil, &os.PathError{Op: "fstat", Path: dir, Err: err}
	}
	if st.Ino != SubvolumeIno {
		return 0, nil, fmt.Errorf("%s is not a btrfs subvolume", dir)
	}
	id, err := subvolumeIDOf(fd)
	if err != nil {
		return 0, nil, &os.PathError{Op: "BTRFS_IOC_INO_LOOKUP", Path: dir, Err: err}
	}
	var found []uint64
	for next := []uint64{id}; len(next) > 0; {
		parent := next[0]
		next = next[1:]
		children, err := childSubvolumes(fd, parent)
		if err != nil {
			return 0, nil, &os.PathError{Op: "BTRFS_IOC_TREE_SEARCH", Path: dir, Err: err}
		}
		for _, c := range children {
			if len(found) == MaxNested {
				return id, found, ErrTooManyNested
			}
			found = append(found, c)
			next = append(next, c)
		}
	}
	return id, found, nil
}

// subvolumeIDOf is the ID of the subvolume holding the open file fd.
func subvolumeIDOf(fd int) (uint64, error) {
	args := inoLookupArgs{ObjectID: SubvolumeIno}
	if err := ioctl(fd, iocInoLookup, unsafe.Pointer(&args)); err != nil { //nolint:gosec // G103: the kernel's ioctl argument, sized as its request number says (TestIoctlArgSizes)
		return 0, err
	}
	return args.TreeID, nil
}

// childSubvolumes lists the subvolumes whose directory entry is in
// subvolume parent: the offsets of its ROOT_REF items.
func childSubvolumes(fd int, parent uint64) ([]uint64, error) {
	return search(fd, parent, rootRefKey)
}

// search lists the offsets of the root tree's items (objectID, typ, *),
// at most MaxNested+1.
func search(fd int, objectID uint64, typ uint32) ([]uint64, error) {
	var out []uint64
	parent := objectID
	args := searchArgs{Key: searchKey{TreeID: rootTreeObjectID, MinObjectID: parent, MaxObjectID: parent,
		MaxOffset: ^uint64(0), MaxTransID: ^uint64(0), MinType: typ, MaxType: typ}}
	for {
		args.Key.NrItems = 4096
		if err := ioctl(fd, iocTreeSearch, unsafe.Pointer(&args)); err != nil { //nolint:gosec // G103: the kernel's ioctl argument, sized as its request number says (TestIoctlArgSizes)
			return nil, err
		}
		n := int(args.Key.NrItems)
		if n == 0 {
			return out, nil
		}
		buf, last := args.Buf[:], uint64(0)
		for range n {
			if len(buf) < searchHeaderSize {
				return nil, errors.New("short search result")
			}
			itemID, offset := binary.NativeEndian.Uint64(buf[8:]), binary.NativeEndian.Uint64(buf[16:])
			itemType, size := binary.NativeEndian.Uint32(buf[24:]), binary.NativeEndian.Uint32(buf[28:])
			if int(size) > len(buf)-searchHeaderSize {
				return nil, errors.New("short search result")
			}
			buf = buf[searchHeaderSize+int(size):]
			if itemID == parent && itemType == typ {
				out = append(out, offset)
				if len(out) > MaxNested {
					return out, nil // the caller stops at the bound
				}
			}
			last = offset
		}
		if last == ^uint64(0) {
			return out, nil
		}
		args.Key.MinOffset = last + 1
	}
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// iocFsInfo is BTRFS_IOC_FS_INFO: _IOR(0x94, 31, 1024).
const iocFsInfo = 0x8400941f

// fsInfoArgs is struct btrfs_ioctl_fs_info_args, up to the fsid.
type fsInfoArgs struct {
	MaxID, NumDevices uint64
	FSID              [16]byte
	_                 [1024 - 32]byte
}

// outside returns where to run btrfs(8)'s qgroup commands for the
// subvolume dir: its parent directory when that is on the same btrfs
// (another subvolume), else dir. The kernel reserves room in the qgroups
// of the subvolume a command is run in, so in a volume over its limit
// (nested subvolumes written to before they were limited) the commands
// that would change a limit fail with EDQUOT.
func outside(dir string) string {
	parent := filepath.Dir(dir)
	a, errA := fsidOf(dir)
	b, errB := fsidOf(parent)
	if errA != nil || errB != nil || a != b {
		return dir
	}
	return parent
}

func fsidOf(path string) ([16]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return [16]byte{}, err
	}
	defer unix.Close(fd) //nolint:errcheck // read only
	var args fsInfoArgs
	if err := ioctl(fd, iocFsInfo, unsafe.Pointer(&args)); err != nil { //nolint:gosec // G103: the kernel's ioctl argument, sized as its request number says (TestIoctlArgSizes)
		return [16]byte{}, err
	}
	return args.FSID, nil
}
