package plugins

import (
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/configmap"
	"github.com/volume-agent/volume-agent/internal/plugins/downwardapi"
	"github.com/volume-agent/volume-agent/internal/plugins/emptydir"
	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
	"github.com/volume-agent/volume-agent/internal/plugins/projected"
	"github.com/volume-agent/volume-agent/internal/plugins/secret"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Config configures the default plugin set.
type Config struct {
	Mounter mount.Mounter
	// Tokens mints service account tokens; nil without an API server.
	Tokens projected.Tokens
	// HostRoot is where the host's root file system is mounted ("/" when
	// the agent runs on the host).
	HostRoot string
	// HostPathChecker is the command that starts a process to check a
	// host path in (see hostpath.Plugin.Checker); nil checks in process.
	HostPathChecker []string
}

// Default returns a registry of every plugin the agent ships.
func Default(cfg Config) *Registry {
	r, err := NewRegistry(
		&emptydir.Plugin{Mounter: cfg.Mounter},
		&hostpath.Plugin{HostRoot: cfg.HostRoot, Checker: cfg.HostPathChecker},
		&configmap.Plugin{Mounter: cfg.Mounter},
		&secret.Plugin{Mounter: cfg.Mounter},
		&downwardapi.Plugin{Mounter: cfg.Mounter},
		&projected.Plugin{Mounter: cfg.Mounter, Tokens: cfg.Tokens},
	)
	if err != nil {
		panic(err) // the list above is fixed: a duplicate is a programming error
	}
	return r
}

// All lists the registry's plugins (for tests and docs).
func (r *Registry) All() []volume.Plugin { return append([]volume.Plugin(nil), r.plugins...) }
