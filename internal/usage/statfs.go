package usage

import (
	"golang.org/x/sys/unix"
)

// fsSize is what statfs says of a file system.
type fsSize struct {
	capacity, available, used uint64
	inodes, inodesFree        uint64
	// id is the file system's type and ID (f_type, f_fsid): zero when
	// it gives none.
	id fsID
}

// fsID is a file system's type and ID, as statfs says them.
type fsID struct {
	typ  int64
	fsid [2]int32
}

// sizeOf reads a statfs result as the kubelet does: used is what is not
// free, available what an unprivileged user may still take.
func sizeOf(st *unix.Statfs_t) fsSize {
	unit := uint64(st.Frsize) //nolint:gosec // G115: a block size is positive
	if unit == 0 {
		unit = uint64(st.Bsize) //nolint:gosec // G115: a block size is positive
	}
	return fsSize{
		capacity:   st.Blocks * unit,
		available:  st.Bavail * unit,
		used:       (st.Blocks - min(st.Bfree, st.Blocks)) * unit,
		inodes:     st.Files,
		inodesFree: st.Ffree,
		id:         fsIDOf(st),
	}
}

// statfs measures the file system at path.
func statfs(path string) (fsSize, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fsSize{}, err
	}
	return sizeOf(&st), nil
}

// measurement is the measurement of a file system by statfs alone.
func (s fsSize) measurement() Measurement {
	return Measurement{CapacityBytes: s.capacity, AvailableBytes: s.available, UsedBytes: s.used,
		Inodes: s.inodes, InodesFree: s.inodesFree, InodesUsed: s.inodes - min(s.inodesFree, s.inodes), Method: MethodStatfs}
}

// fsIDOf is the fsID of a statfs result; zero when the file system gives
// no ID (f_fsid 0): it cannot be told from another then.
func fsIDOf(st *unix.Statfs_t) fsID {
	if st.Fsid.Val == [2]int32{} {
		return fsID{}
	}
	return fsID{typ: st.Type, fsid: st.Fsid.Val}
}
