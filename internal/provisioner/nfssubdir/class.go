package nfssubdir

import (
	"fmt"
	"path"
	"slices"
	"strings"

	storagev1 "k8s.io/api/storage/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

// The class parameters.
const (
	ParamServer      = "server"
	ParamPath        = "path"
	ParamPathPattern = "pathPattern"
)

// knownParams are the parameters a class may have: any other is refused,
// so that a misspelt archiveOnDelete or pathPattern is an error and not a
// silent default.
var knownParams = []string{ParamServer, ParamPath, ParamPathPattern, provisioner.ParamArchiveOnDelete}

// class is a StorageClass's parameters, checked.
type class struct {
	name    string
	export  export
	archive bool
	pattern string   // "" for the default <namespace>-<claim>-<pv name>
	options []string // the class's mountOptions
}

// parseClass reads and checks the parameters of sc. A server, path or
// mount option that mount(8) could read as something else (a leading '-',
// a comma, whitespace) is refused, as the NFS plugin refuses it.
func parseClass(sc *storagev1.StorageClass) (class, error) {
	for k := range sc.Parameters {
		if !slices.Contains(knownParams, k) {
			return class{}, fmt.Errorf("StorageClass %s: unknown parameter %q (want %s)", sc.Name, k, strings.Join(knownParams, ", "))
		}
	}
	c := class{
		name:    sc.Name,
		export:  export{server: sc.Parameters[ParamServer], path: sc.Parameters[ParamPath]},
		pattern: sc.Parameters[ParamPathPattern],
		options: sc.MountOptions,
	}
	if err := c.export.check(); err != nil {
		return class{}, fmt.Errorf("StorageClass %s: parameter %w", sc.Name, err)
	}
	c.export.path = path.Clean(c.export.path) // "/e/" and "/e" are one export, one mount
	if err := checkOptions(c.options); err != nil {
		return class{}, fmt.Errorf("StorageClass %s: mountOptions: %w", sc.Name, err)
	}
	if _, ok := sc.Parameters[ParamPathPattern]; ok {
		if err := checkPattern(c.pattern); err != nil {
			return class{}, fmt.Errorf("StorageClass %s: parameter pathPattern %q: %w", sc.Name, c.pattern, err)
		}
	}
	archive, err := provisioner.ArchiveOnDelete(sc)
	if err != nil {
		return class{}, err
	}
	c.archive = archive
	return c, nil
}

// export is an NFS export: server:path.
type export struct{ server, path string }

// String is server:path, as the export annotation records it.
func (e export) String() string { return e.server + ":" + e.path }

// check refuses what mount(8) could misread, and a server holding '/'
// (which no host name or address does) so that String parses back.
func (e export) check() error {
	switch {
	case e.server == "":
		return fmt.Errorf("%s is required", ParamServer)
	case strings.HasPrefix(e.server, "-") || strings.ContainsAny(e.server, " \t\n\r,/\x00"):
		return fmt.Errorf("%s %q may not start with '-' or hold whitespace, a comma or '/'", ParamServer, e.server)
	case !bracketsWhole(e.server):
		return fmt.Errorf("%s %q may hold '[' and ']' only around the whole address, as in [fd00::1]", ParamServer, e.server)
	case !path.IsAbs(e.path):
		return fmt.Errorf("%s %q must be an absolute export path", ParamPath, e.path)
	case strings.ContainsAny(e.path, " \t\n\r,\x00"):
		return fmt.Errorf("%s %q may not hold whitespace or a comma", ParamPath, e.path)
	}
	return nil
}

// bracketsWhole reports whether server holds no '[' or ']' but, perhaps,
// one pair around all of it, as the NFS plugin requires: mount.nfs reads
// "[a]:x:/e" as server a, path x:/e.
func bracketsWhole(server string) bool {
	if inner, ok := strings.CutPrefix(server, "["); ok {
		if inner, ok = strings.CutSuffix(inner, "]"); ok {
			server = inner
		}
	}
	return !strings.ContainsAny(server, "[]")
}

// parseExport reads back export.String: the server holds no '/', so the
// first ":/" ends it (an IPv6 server holds colons, but never ":/").
func parseExport(s string) (export, error) {
	i := strings.Index(s, ":/")
	if i < 0 {
		return export{}, fmt.Errorf("%q is not server:/path", s)
	}
	e := export{server: s[:i], path: s[i+1:]}
	return e, e.check()
}

// checkOptions refuses a mount option mount(8) could misread.
func checkOptions(opts []string) error {
	for _, o := range opts {
		if o == "" || strings.HasPrefix(o, "-") || strings.ContainsAny(o, " \t\n\r,\x00") {
			return fmt.Errorf("option %q may not be empty, start with '-' or hold whitespace or a comma", o)
		}
	}
	return nil
}
