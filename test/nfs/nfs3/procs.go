package nfs3

import (
	"context"
	"fmt"

	"github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/xdr"
)

// Procedures go-nfs-client has no constant for (RFC 1813).
const (
	procFSStat = 18
)

// Write stability (stable_how).
const fileSync = 2

// Create modes (createmode3).
const (
	createUnchecked = 0
	createGuarded   = 1
)

// Mount returns the root file handle of the export at path (MOUNT
// protocol version 3, MNT).
func (c *Client) Mount(ctx context.Context, path string) ([]byte, error) {
	r, err := c.Call(ctx, nfs.MountProg, nfs.MountVers, nfs.MountProc3MNT, path)
	if err != nil {
		return nil, err
	}
	status, err := xdr.ReadUint32(r)
	if err != nil {
		return nil, fmt.Errorf("decode MNT reply: %w", err)
	}
	if status != 0 {
		// mountstat3 shares its values with nfsstat3.
		return nil, Error(status)
	}
	fh, err := xdr.ReadOpaque(r)
	if err != nil {
		return nil, fmt.Errorf("decode MNT reply: %w", err)
	}
	return fh, nil
}

// call makes NFS procedure proc and decodes its results into res, which may
// be nil when nothing past the status matters.
func (c *Client) call(ctx context.Context, proc uint32, res any, args ...any) error {
	r, err := c.Call(ctx, nfs.Nfs3Prog, nfs.Nfs3Vers, proc, args...)
	if err != nil {
		return err
	}
	status, err := xdr.ReadUint32(r)
	if err != nil {
		return fmt.Errorf("decode status of NFS procedure %d: %w", proc, err)
	}
	if status != 0 {
		return Error(status)
	}
	if res == nil {
		return nil
	}
	if err := xdr.Read(r, res); err != nil {
		return fmt.Errorf("decode results of NFS procedure %d: %w", proc, err)
	}
	return nil
}

// GetAttr returns the attributes of fh.
func (c *Client) GetAttr(ctx context.Context, fh []byte) (*nfs.Fattr, error) {
	var res nfs.Fattr
	if err := c.call(ctx, nfs.NFSProc3GetAttr, &res, fh); err != nil {
		return nil, err
	}
	return &res, nil
}

// SetAttr changes the attributes of fh, without a guard.
func (c *Client) SetAttr(ctx context.Context, fh []byte, attr nfs.Sattr3) error {
	noGuard := uint32(0)
	return c.call(ctx, nfs.NFSProc3SetAttr, nil, fh, attr, noGuard)
}

// Lookup returns the handle and attributes of name in directory dir.
func (c *Client) Lookup(ctx context.Context, dir []byte, name string) ([]byte, *nfs.Fattr, error) {
	var res struct {
		FH   []byte
		Attr nfs.PostOpAttr
	}
	if err := c.call(ctx, nfs.NFSProc3Lookup, &res, nfs.Diropargs3{FH: dir, Filename: name}); err != nil {
		return nil, nil, err
	}
	if !res.Attr.IsSet {
		return c.withAttr(ctx, res.FH)
	}
	return res.FH, &res.Attr.Attr, nil
}

// ReadLink returns the target of symbolic link fh.
func (c *Client) ReadLink(ctx context.Context, fh []byte) (string, error) {
	var res struct {
		Attr   nfs.PostOpAttr
		Target string
	}
	if err := c.call(ctx, nfs.NFSProc3Readlink, &res, fh); err != nil {
		return "", err
	}
	return res.Target, nil
}

// Read reads up to count bytes of fh at off.
func (c *Client) Read(ctx context.Context, fh []byte, off uint64, count uint32) (data []byte, eof bool, err error) {
	args := struct {
		FH     []byte
		Offset uint64
		Count  uint32
	}{fh, off, count}
	var res struct {
		Attr  nfs.PostOpAttr
		Count uint32
		EOF   bool
		Data  []byte
	}
	if err := c.call(ctx, nfs.NFSProc3Read, &res, args); err != nil {
		return nil, false, err
	}
	return res.Data, res.EOF, nil
}

// Write writes data to fh at off, stable on the server's disk before it
// answers (FILE_SYNC), and returns how much it wrote.
func (c *Client) Write(ctx context.Context, fh []byte, off uint64, data []byte) (uint32, error) {
	args := struct {
		FH     []byte
		Offset uint64
		Count  uint32
		Stable uint32
		Data   []byte
	}{fh, off, uint32(len(data)), fileSync, data}
	var res struct {
		Wcc       nfs.WccData
		Count     uint32
		Committed uint32
		Verf      uint64
	}
	if err := c.call(ctx, nfs.NFSProc3Write, &res, args); err != nil {
		return 0, err
	}
	return res.Count, nil
}

// newObject is the result of CREATE, MKDIR and SYMLINK.
type newObject struct {
	FH     nfs.PostOpFH3
	Attr   nfs.PostOpAttr
	DirWcc nfs.WccData
}

// created returns the handle and attributes of an object the server just
// created as name in dir, looking up what the reply left out.
func (c *Client) created(ctx context.Context, res *newObject, dir []byte, name string) ([]byte, *nfs.Fattr, error) {
	switch {
	case !res.FH.IsSet:
		return c.Lookup(ctx, dir, name)
	case !res.Attr.IsSet:
		return c.withAttr(ctx, res.FH.FH)
	}
	return res.FH.FH, &res.Attr.Attr, nil
}

func (c *Client) withAttr(ctx context.Context, fh []byte) ([]byte, *nfs.Fattr, error) {
	attr, err := c.GetAttr(ctx, fh)
	if err != nil {
		return nil, nil, err
	}
	return fh, attr, nil
}

// Create creates regular file name in dir with permission bits mode. With
// exclusive, it fails if name exists (GUARDED); otherwise an existing file
// is kept (UNCHECKED).
func (c *Client) Create(ctx context.Context, dir []byte, name string, mode uint32, exclusive bool) ([]byte, *nfs.Fattr, error) {
	how := struct {
		Mode uint32
		Attr nfs.Sattr3
	}{Mode: createUnchecked, Attr: nfs.Sattr3{Mode: nfs.SetMode{SetIt: true, Mode: mode}}}
	if exclusive {
		how.Mode = createGuarded
	}
	var res newObject
	if err := c.call(ctx, nfs.NFSProc3Create, &res, nfs.Diropargs3{FH: dir, Filename: name}, how); err != nil {
		return nil, nil, err
	}
	return c.created(ctx, &res, dir, name)
}

// Mkdir creates directory name in dir with permission bits mode.
func (c *Client) Mkdir(ctx context.Context, dir []byte, name string, mode uint32) ([]byte, *nfs.Fattr, error) {
	attr := nfs.Sattr3{Mode: nfs.SetMode{SetIt: true, Mode: mode}}
	var res newObject
	if err := c.call(ctx, nfs.NFSProc3Mkdir, &res, nfs.Diropargs3{FH: dir, Filename: name}, attr); err != nil {
		return nil, nil, err
	}
	return c.created(ctx, &res, dir, name)
}

// Symlink creates symbolic link name in dir, pointing to target.
func (c *Client) Symlink(ctx context.Context, dir []byte, name, target string) ([]byte, *nfs.Fattr, error) {
	var res newObject
	if err := c.call(ctx, nfs.NFSProc3Symlink, &res, nfs.Diropargs3{FH: dir, Filename: name}, nfs.Sattr3{}, target); err != nil {
		return nil, nil, err
	}
	return c.created(ctx, &res, dir, name)
}

// Remove removes the non-directory name from dir.
func (c *Client) Remove(ctx context.Context, dir []byte, name string) error {
	return c.call(ctx, nfs.NFSProc3Remove, nil, nfs.Diropargs3{FH: dir, Filename: name})
}

// Rmdir removes the empty directory name from dir.
func (c *Client) Rmdir(ctx context.Context, dir []byte, name string) error {
	return c.call(ctx, nfs.NFSProc3RmDir, nil, nfs.Diropargs3{FH: dir, Filename: name})
}

// Rename renames fromName in fromDir to toName in toDir, replacing what
// toName named.
func (c *Client) Rename(ctx context.Context, fromDir []byte, fromName string, toDir []byte, toName string) error {
	return c.call(ctx, nfs.NFSProc3Rename, nil,
		nfs.Diropargs3{FH: fromDir, Filename: fromName}, nfs.Diropargs3{FH: toDir, Filename: toName})
}

// ReadDirPlus lists directory dir, with each entry's attributes where the
// server sent them. "." and ".." are left out.
func (c *Client) ReadDirPlus(ctx context.Context, dir []byte) ([]nfs.EntryPlus, error) {
	var entries []nfs.EntryPlus
	var cookie, verf uint64
	for {
		page, eof, next, err := c.readDirPlusPage(ctx, dir, cookie, verf)
		if err != nil {
			return nil, err
		}
		for _, e := range page {
			cookie = e.Cookie
			if e.FileName != "." && e.FileName != ".." {
				entries = append(entries, e)
			}
		}
		if eof || len(page) == 0 {
			return entries, nil
		}
		verf = next
	}
}

func (c *Client) readDirPlusPage(ctx context.Context, dir []byte, cookie, verf uint64) (page []nfs.EntryPlus, eof bool, nextVerf uint64, err error) {
	args := struct {
		FH       []byte
		Cookie   uint64
		Verf     uint64
		DirCount uint32
		MaxCount uint32
	}{dir, cookie, verf, 16 << 10, 64 << 10}
	r, err := c.Call(ctx, nfs.Nfs3Prog, nfs.Nfs3Vers, nfs.NFSProc3ReadDirPlus, args)
	if err != nil {
		return nil, false, 0, err
	}
	var status uint32
	var head struct {
		DirAttr nfs.PostOpAttr
		Verf    uint64
	}
	if err := read(r, &status); err != nil {
		return nil, false, 0, fmt.Errorf("decode READDIRPLUS status: %w", err)
	}
	if status != 0 {
		return nil, false, 0, Error(status)
	}
	if err := read(r, &head); err != nil {
		return nil, false, 0, fmt.Errorf("decode READDIRPLUS reply: %w", err)
	}
	for {
		// The entries are a linked list flattened as "optional-data":
		// each is preceded by a boolean saying whether one follows.
		var item struct {
			Follows bool          `xdr:"union"`
			Entry   nfs.EntryPlus `xdr:"unioncase=1"`
		}
		if err := read(r, &item); err != nil {
			return nil, false, 0, fmt.Errorf("decode READDIRPLUS entry: %w", err)
		}
		if !item.Follows {
			break
		}
		page = append(page, item.Entry)
	}
	if err := read(r, &eof); err != nil {
		return nil, false, 0, fmt.Errorf("decode READDIRPLUS end: %w", err)
	}
	return page, eof, head.Verf, nil
}

// FSStat is the space and file counts of a file system (FSSTAT).
type FSStat struct {
	Attr                   nfs.PostOpAttr
	TotalBytes, FreeBytes  uint64
	AvailBytes, TotalFiles uint64
	FreeFiles, AvailFiles  uint64
	Invarsec               uint32
}

// FSStat returns the space and file counts of the file system of fh.
func (c *Client) FSStat(ctx context.Context, fh []byte) (*FSStat, error) {
	var res FSStat
	if err := c.call(ctx, procFSStat, &res, fh); err != nil {
		return nil, err
	}
	return &res, nil
}

// FSInfo returns the transfer sizes the server supports (FSINFO).
func (c *Client) FSInfo(ctx context.Context, fh []byte) (*nfs.FSInfo, error) {
	var res nfs.FSInfo
	if err := c.call(ctx, nfs.NFSProc3FSInfo, &res, fh); err != nil {
		return nil, err
	}
	return &res, nil
}
