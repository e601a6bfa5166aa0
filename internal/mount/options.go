package mount

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// flagOption is a mount option that mount(2) takes as a flag: it sets the
// flag, or clears it when clear is true ("rw" clears MS_RDONLY).
type flagOption struct {
	flag  uintptr
	clear bool
}

// flagOptions are the options mount(8) turns into mount(2) flags, as
// mount(8) documents them.
var flagOptions = map[string]flagOption{
	"defaults":      {},
	"ro":            {flag: unix.MS_RDONLY},
	"rw":            {flag: unix.MS_RDONLY, clear: true},
	"nosuid":        {flag: unix.MS_NOSUID},
	"suid":          {flag: unix.MS_NOSUID, clear: true},
	"nodev":         {flag: unix.MS_NODEV},
	"dev":           {flag: unix.MS_NODEV, clear: true},
	"noexec":        {flag: unix.MS_NOEXEC},
	"exec":          {flag: unix.MS_NOEXEC, clear: true},
	"nosymfollow":   {flag: unix.MS_NOSYMFOLLOW},
	"noatime":       {flag: unix.MS_NOATIME},
	"atime":         {flag: unix.MS_NOATIME, clear: true},
	"nodiratime":    {flag: unix.MS_NODIRATIME},
	"diratime":      {flag: unix.MS_NODIRATIME, clear: true},
	"relatime":      {flag: unix.MS_RELATIME},
	"norelatime":    {flag: unix.MS_RELATIME, clear: true},
	"strictatime":   {flag: unix.MS_STRICTATIME},
	"nostrictatime": {flag: unix.MS_STRICTATIME, clear: true},
	"sync":          {flag: unix.MS_SYNCHRONOUS},
	"async":         {flag: unix.MS_SYNCHRONOUS, clear: true},
	"dirsync":       {flag: unix.MS_DIRSYNC},
	"bind":          {flag: unix.MS_BIND},
}

// perMountFlags are the flags a bind mount can carry: they belong to the
// mount, not to the file system, so a bind remount applies them. The
// others (sync, dirsync) belong to the file system, which a bind shares.
const perMountFlags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC |
	unix.MS_NOSYMFOLLOW | atimeFlags

// atimeFlags choose how access times are kept; a remount without any of
// them keeps the mount's current choice.
const atimeFlags = unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME | unix.MS_STRICTATIME

// tmpfsOptions are the options a tmpfs takes as data (see tmpfs(5)),
// without their values.
var tmpfsOptions = []string{"size", "nr_blocks", "nr_inodes", "mode", "uid", "gid", "huge", "mpol", "inode32", "inode64", "noswap"}

// PerMountOptions returns the options of opts that a bind mount applies
// itself (ro, nosuid, noexec, the atime choices…), for the bind of a mount
// that has taken every option already: a device's global mount.
func PerMountOptions(opts []string) []string {
	var out []string
	for _, opt := range opts {
		if f, ok := flagOptions[opt]; ok && f.flag&perMountFlags != 0 {
			out = append(out, opt)
		}
	}
	return out
}

// syscallMount is a Mount as mount(2) takes it: flags, and a file system
// data string.
type syscallMount struct {
	flags uintptr
	data  string
}

// bind reports whether the mount is a bind mount.
func (s syscallMount) bind() bool { return s.flags&unix.MS_BIND != 0 }

// byCall reports whether m can be made by mount(2) alone: a tmpfs or a
// bind mount. Every other type may need mount(8)'s helper (mount.nfs) or
// its handling of devices, and goes through mount(8).
func byCall(m Mount) bool {
	return m.Type == "tmpfs" || slices.Contains(m.Options, "bind")
}

// parseOptions turns m's options into mount(2)'s flags and data. An option
// mount(2) would drop — any data option of a bind mount, a file system flag
// on a bind mount, an option tmpfs does not know — is an error, never
// silently ignored.
func parseOptions(m Mount) (syscallMount, error) {
	var s syscallMount
	var data []string
	for _, opt := range m.Options {
		if f, ok := flagOptions[opt]; ok {
			if f.clear {
				s.flags &^= f.flag
			} else {
				s.flags |= f.flag
			}
			continue
		}
		if err := checkDataOption(m, opt); err != nil {
			return s, err
		}
		data = append(data, opt)
	}
	if s.bind() && s.flags&^(perMountFlags|unix.MS_BIND) != 0 {
		return s, fmt.Errorf("mount options %q: sync and dirsync belong to the file system and cannot be set by a bind mount", m.Options)
	}
	s.data = strings.Join(data, ",")
	return s, nil
}

// checkDataOption accepts opt when it is a tmpfs option of a tmpfs mount;
// a bind mount takes none (mount(2) ignores them).
// A comma would smuggle in further options, so it is refused everywhere.
func checkDataOption(m Mount, opt string) error {
	key, _, _ := strings.Cut(opt, "=")
	switch {
	case strings.Contains(opt, ","):
		return fmt.Errorf("mount option %q holds a comma: give each option on its own", opt)
	case slices.Contains(m.Options, "bind"):
		return fmt.Errorf("mount option %q has no meaning for a bind mount", opt)
	case m.Type == "tmpfs" && slices.Contains(tmpfsOptions, key):
		return nil
	}
	return fmt.Errorf("unknown mount option %q for a %s mount", opt, m.Type)
}
