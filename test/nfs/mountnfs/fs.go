package main

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/willscott/go-nfs-client/nfs"
	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/test/nfs/nfs3"
)

// nfsFS is what the nodes of one mount share: the NFS client, the mount's
// settings, and the file handles the server gave out.
type nfsFS struct {
	client *nfs3.Client
	cfg    config
	chunk  int // largest READ or WRITE payload

	mu sync.Mutex
	// handles maps a file id (inode number on the server) to the latest
	// handle the server gave for it. Nodes look their handle up here
	// rather than keeping one: go-fuse may keep an older node for a file
	// id than the one a lookup made, and the test server (go-nfs)
	// issues a new handle when a file is renamed. Guarded by mu.
	handles map[uint64][]byte
}

func (f *nfsFS) remember(fileid uint64, fh []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handles[fileid] = fh
}

func (f *nfsFS) handle(fileid uint64) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.handles[fileid]
}

// op bounds one file system request: a soft mount's requests fail after
// the major timeout, and every request ends when the kernel interrupts it
// because its caller got a signal. Ignoring the interrupt would leave a
// killed caller in D state until the server answered.
func (f *nfsFS) op(ctx context.Context) (context.Context, context.CancelFunc) {
	if f.cfg.soft {
		return context.WithTimeout(ctx, f.cfg.majorTimeout())
	}
	return context.WithCancel(ctx)
}

// errno is the error a file system call sees for err.
func errno(err error) syscall.Errno {
	var status nfs3.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &status):
		return status.Errno()
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	default:
		// A soft timeout (context.DeadlineExceeded), as the Linux
		// client reports it, or a reply that made no sense.
		return syscall.EIO
	}
}

// node is a file, directory or symbolic link on the server.
type node struct {
	fs.Inode
	fsys *nfsFS
}

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeReader     = (*node)(nil)
	_ fs.NodeWriter     = (*node)(nil)
	_ fs.NodeFlusher    = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeSymlinker  = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeLinker     = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
)

func (n *node) fh() []byte { return n.fsys.handle(n.StableAttr().Ino) }

// child returns the node for an object the server just named, and fills
// in its attributes.
func (n *node) child(ctx context.Context, fh []byte, attr *nfs.Fattr, out *fuse.EntryOut) *fs.Inode {
	n.fsys.remember(attr.Fileid, fh)
	fillAttr(attr, &out.Attr)
	id := fs.StableAttr{Mode: out.Mode & syscall.S_IFMT, Ino: attr.Fileid}
	return n.NewInode(ctx, &node{fsys: n.fsys}, id)
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, cancel := n.fsys.op(ctx)
	defer cancel()
	fh, attr, err := n.fsys.client.Lookup(ctx, n.fh(), name)
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, fh, attr, out), 0
}

func (n *node) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctx, cancel := n.fsys.op(ctx)
	defer cancel()
	attr, err := n.fsys.client.GetAttr(ctx, n.fh())
	if err != nil {
		return errno(err)
	}
	fillAttr(attr, &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx2, cancel := n.fsys.op(ctx)
	defer cancel()
	if err := n.fsys.client.SetAttr(ctx2, n.fh(), sattr(in)); err != nil {
		return errno(err)
	}
	return n.Getattr(ctx, f, out)
}

// Open keeps no state: NFSv3 reads and writes by file handle.
func (n *node) Open(context.Context, uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, 0, 0
}

func (n *node) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	ctx, cancel := n.fsys.op(ctx)
	defer cancel()
	fh := n.fh()
	got := dest[:0]
	for len(got) < len(dest) {
		want := min(len(dest)-len(got), n.fsys.chunk)
		data, eof, err := n.fsys.client.Read(ctx, fh, uint64(off)+uint64(len(got)), uint32(want))
		if err != nil {
			return nil, errno(err)
		}
		got = append(got, data...)
		if eof || len(data) == 0 {
			break
		}
	}
	return fuse.ReadResultData(got), 0
}

// Write writes through to the server's disk (FILE_SYNC), so Flush and
// Fsync have nothing left to do.
func (n *node) Write(ctx context.Context, _ fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	ctx, cancel := n.fsys.op(ctx)
	defer cancel()
	fh := n.fh()
	var written int
	for written < len(data) {
		end := min(len(data), written+n.fsys.chunk)
		w, err := n.fsys.client.Write(ctx, fh, uint64(off)+uint64(written), data[written:end])
		if err != nil {
			return uint32(written), errno(err)
		}
		if w == 0 {
			return uint32(written), syscall.EIO
		}
		written += int(w)
	}
	return uint32(written), 0
}

func (n *node) Flush(context.Context, fs.FileHandle) syscall.Errno         { return 0 }
func (n *node) Fsync(context.Context, fs.FileHandle, uint32) syscall.Errno { return 0 }

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx, cancel := n.fsys.op(ctx)
	defer cancel()
	fh, attr, err := n.fsys.client.Create(ctx, n.fh(), name, mode&0o7777, flags&syscall.O_EXCL != 0)
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	return n.child(ctx, fh, attr, out), nil, 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, cancel := n.fsys.op(ctx)
	defer cancel()
	fh, attr, err := n.fsys.client.Mkdir(ctx, n.fh(), name, mode&0o7777)
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, fh, attr, out), 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, cancel := n.fsys.op(ctx)
	defer cancel()
	fh, attr, err := n.fsys.client.Symlink(ctx, n.fh(), name, target)
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, fh, attr, out), 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx, cancel := n.fsys.op(ctx)
	defer cancel()
	target, err := n.fsys.client.ReadLink(ctx, n.fh())
	if err != nil {
		return nil, errno(err)
	}
	return []byte(target), 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	ctx, cancel := n.fsys.op(ctx)
	defer cancel()
	return errno(n.fsys.client.Remove(ctx, n.fh(), name))
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	ctx, cancel := n.fsys.op(ctx)
	defer cancel()
	return errno(n.fsys.client.Rmdir(ctx, n.fh(), name))
}

// Rename supports plain renames only (no RENAME_NOREPLACE or
// RENAME_EXCHANGE, which NFSv3 lacks). The test server gives a renamed
// file a new handle, so the moved file's handle is looked up at once.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags != 0 {
		return syscall.EINVAL
	}
	ctx, cancel := n.fsys.op(ctx)
	defer cancel()
	to := newParent.(*node)
	if err := n.fsys.client.Rename(ctx, n.fh(), name, to.fh(), newName); err != nil {
		return errno(err)
	}
	if fh, attr, err := n.fsys.client.Lookup(ctx, to.fh(), newName); err == nil {
		n.fsys.remember(attr.Fileid, fh)
	}
	return 0
}

// Link is refused: go-nfs v0.0.4 decodes LINK's arguments as if they were
// SYMLINK's, so a LINK call would do something other than asked.
func (n *node) Link(context.Context, fs.InodeEmbedder, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EOPNOTSUPP
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ctx, cancel := n.fsys.op(ctx)
	defer cancel()
	entries, err := n.fsys.client.ReadDirPlus(ctx, n.fh())
	if err != nil {
		return nil, errno(err)
	}
	list := make([]fuse.DirEntry, 0, len(entries))
	for _, e := range entries {
		d := fuse.DirEntry{Name: e.FileName, Ino: e.FileId}
		if e.Attr.IsSet {
			d.Mode = fileType(e.Attr.Attr.Type)
		}
		if e.Handle.IsSet {
			n.fsys.remember(e.FileId, e.Handle.FH)
		}
		list = append(list, d)
	}
	return fs.NewListDirStream(list), 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	ctx, cancel := n.fsys.op(ctx)
	defer cancel()
	st, err := n.fsys.client.FSStat(ctx, n.fh())
	if err != nil {
		return errno(err)
	}
	const bsize = 4096
	*out = fuse.StatfsOut{
		Blocks: st.TotalBytes / bsize, Bfree: st.FreeBytes / bsize, Bavail: st.AvailBytes / bsize,
		Files: st.TotalFiles, Ffree: st.FreeFiles, Bsize: bsize, Frsize: bsize, NameLen: 255,
	}
	return 0
}

// fillAttr converts NFS attributes (fattr3) to FUSE's.
func fillAttr(a *nfs.Fattr, out *fuse.Attr) {
	*out = fuse.Attr{
		Ino: a.Fileid, Size: a.Filesize, Blocks: (a.Used + 511) / 512, Blksize: 4096,
		Atime: uint64(a.Atime.Seconds), Atimensec: a.Atime.Nseconds,
		Mtime: uint64(a.Mtime.Seconds), Mtimensec: a.Mtime.Nseconds,
		Ctime: uint64(a.Ctime.Seconds), Ctimensec: a.Ctime.Nseconds,
		Mode:  fileType(a.Type) | permissions(a.FileMode),
		Nlink: a.Nlink,
		Owner: fuse.Owner{Uid: a.UID, Gid: a.GID},
		Rdev:  uint32(unix.Mkdev(a.SpecData[0], a.SpecData[1])),
	}
}

// fileType maps an NFS file type (ftype3) to S_IF* bits.
func fileType(t uint32) uint32 {
	switch t {
	case nfs.NF3Dir:
		return syscall.S_IFDIR
	case nfs.NF3Lnk:
		return syscall.S_IFLNK
	case nfs.NF3Blk:
		return syscall.S_IFBLK
	case nfs.NF3Chr:
		return syscall.S_IFCHR
	case nfs.NF3Sock:
		return syscall.S_IFSOCK
	case nfs.NF3FIFO:
		return syscall.S_IFIFO
	default:
		return syscall.S_IFREG
	}
}

// permissions returns the permission bits of an NFS mode. RFC 1813 puts
// Unix mode bits there; go-nfs puts a Go os.FileMode, whose setuid,
// setgid and sticky bits sit elsewhere. Both are understood.
func permissions(mode uint32) uint32 {
	perm := mode & 0o7777
	goMode := os.FileMode(mode)
	for bit, unixBit := range map[os.FileMode]uint32{os.ModeSetuid: syscall.S_ISUID, os.ModeSetgid: syscall.S_ISGID, os.ModeSticky: syscall.S_ISVTX} {
		if goMode&bit != 0 {
			perm |= unixBit
		}
	}
	return perm
}

// sattr converts a FUSE SETATTR request to NFS's sattr3.
func sattr(in *fuse.SetAttrIn) nfs.Sattr3 {
	var s nfs.Sattr3
	if m, ok := in.GetMode(); ok {
		s.Mode = nfs.SetMode{SetIt: true, Mode: m & 0o7777}
	}
	if uid, ok := in.GetUID(); ok {
		s.UID = nfs.SetUID{SetIt: true, UID: uid}
	}
	if gid, ok := in.GetGID(); ok {
		s.GID = nfs.SetUID{SetIt: true, UID: gid}
	}
	if size, ok := in.GetSize(); ok {
		s.Size = nfs.SetSize{SetIt: true, Size: size}
	}
	if t, ok := in.GetATime(); ok {
		s.Atime = setTime(t, in.Valid&fuse.FATTR_ATIME_NOW != 0)
	}
	if t, ok := in.GetMTime(); ok {
		s.Mtime = setTime(t, in.Valid&fuse.FATTR_MTIME_NOW != 0)
	}
	return s
}

func setTime(t time.Time, now bool) nfs.SetTime {
	if now {
		return nfs.SetTime{SetIt: nfs.SetToServerTime}
	}
	return nfs.SetTime{SetIt: nfs.SetToClientTime, Time: nfs.NFS3Time{Seconds: uint32(t.Unix()), Nseconds: uint32(t.Nanosecond())}}
}
