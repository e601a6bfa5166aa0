package nfs3

import (
	"fmt"
	"syscall"

	"github.com/willscott/go-nfs-client/nfs"
)

// Error is an NFSv3 status other than NFS3_OK (RFC 1813, nfsstat3), as the
// server answered it.
type Error uint32

func (e Error) Error() string {
	name, ok := statusNames[uint32(e)]
	if !ok {
		name = fmt.Sprintf("NFS3 status %d", uint32(e))
	}
	return name + ": " + e.Errno().Error()
}

// Errno is what a local file system call should fail with, as the Linux
// NFS client maps it (fs/nfs/nfs3xdr.c), except that statuses the kernel
// maps to errnos user space never sees are given ones it knows.
func (e Error) Errno() syscall.Errno {
	if errno, ok := errnos[uint32(e)]; ok {
		return errno
	}
	return syscall.EIO
}

const (
	statusJukebox = 10008 // missing from go-nfs-client
)

var errnos = map[uint32]syscall.Errno{
	nfs.NFS3ErrPerm:        syscall.EPERM,
	nfs.NFS3ErrNoEnt:       syscall.ENOENT,
	nfs.NFS3ErrIO:          syscall.EIO,
	nfs.NFS3ErrNXIO:        syscall.ENXIO,
	nfs.NFS3ErrAcces:       syscall.EACCES,
	nfs.NFS3ErrExist:       syscall.EEXIST,
	nfs.NFS3ErrXDev:        syscall.EXDEV,
	nfs.NFS3ErrNoDev:       syscall.ENODEV,
	nfs.NFS3ErrNotDir:      syscall.ENOTDIR,
	nfs.NFS3ErrIsDir:       syscall.EISDIR,
	nfs.NFS3ErrInval:       syscall.EINVAL,
	nfs.NFS3ErrFBig:        syscall.EFBIG,
	nfs.NFS3ErrNoSpc:       syscall.ENOSPC,
	nfs.NFS3ErrROFS:        syscall.EROFS,
	nfs.NFS3ErrMLink:       syscall.EMLINK,
	nfs.NFS3ErrNameTooLong: syscall.ENAMETOOLONG,
	nfs.NFS3ErrNotEmpty:    syscall.ENOTEMPTY,
	nfs.NFS3ErrDQuot:       syscall.EDQUOT,
	nfs.NFS3ErrStale:       syscall.ESTALE,
	nfs.NFS3ErrRemote:      syscall.EREMOTE,
	nfs.NFS3ErrBadHandle:   syscall.ESTALE, // kernel: EBADHANDLE
	nfs.NFS3ErrNotSync:     syscall.EIO,    // kernel: ENOTSYNC
	nfs.NFS3ErrBadCookie:   syscall.EIO,    // kernel: EBADCOOKIE
	nfs.NFS3ErrNotSupp:     syscall.EOPNOTSUPP,
	nfs.NFS3ErrTooSmall:    syscall.EIO, // kernel: ETOOSMALL
	nfs.NFS3ErrServerFault: syscall.EREMOTEIO,
	nfs.NFS3ErrBadType:     syscall.EINVAL, // kernel: EBADTYPE
	statusJukebox:          syscall.EAGAIN,
}

var statusNames = map[uint32]string{
	nfs.NFS3ErrPerm:        "NFS3ERR_PERM",
	nfs.NFS3ErrNoEnt:       "NFS3ERR_NOENT",
	nfs.NFS3ErrIO:          "NFS3ERR_IO",
	nfs.NFS3ErrNXIO:        "NFS3ERR_NXIO",
	nfs.NFS3ErrAcces:       "NFS3ERR_ACCES",
	nfs.NFS3ErrExist:       "NFS3ERR_EXIST",
	nfs.NFS3ErrXDev:        "NFS3ERR_XDEV",
	nfs.NFS3ErrNoDev:       "NFS3ERR_NODEV",
	nfs.NFS3ErrNotDir:      "NFS3ERR_NOTDIR",
	nfs.NFS3ErrIsDir:       "NFS3ERR_ISDIR",
	nfs.NFS3ErrInval:       "NFS3ERR_INVAL",
	nfs.NFS3ErrFBig:        "NFS3ERR_FBIG",
	nfs.NFS3ErrNoSpc:       "NFS3ERR_NOSPC",
	nfs.NFS3ErrROFS:        "NFS3ERR_ROFS",
	nfs.NFS3ErrMLink:       "NFS3ERR_MLINK",
	nfs.NFS3ErrNameTooLong: "NFS3ERR_NAMETOOLONG",
	nfs.NFS3ErrNotEmpty:    "NFS3ERR_NOTEMPTY",
	nfs.NFS3ErrDQuot:       "NFS3ERR_DQUOT",
	nfs.NFS3ErrStale:       "NFS3ERR_STALE",
	nfs.NFS3ErrRemote:      "NFS3ERR_REMOTE",
	nfs.NFS3ErrBadHandle:   "NFS3ERR_BADHANDLE",
	nfs.NFS3ErrNotSync:     "NFS3ERR_NOT_SYNC",
	nfs.NFS3ErrBadCookie:   "NFS3ERR_BAD_COOKIE",
	nfs.NFS3ErrNotSupp:     "NFS3ERR_NOTSUPP",
	nfs.NFS3ErrTooSmall:    "NFS3ERR_TOOSMALL",
	nfs.NFS3ErrServerFault: "NFS3ERR_SERVERFAULT",
	nfs.NFS3ErrBadType:     "NFS3ERR_BADTYPE",
	statusJukebox:          "NFS3ERR_JUKEBOX",
}
