package plugins

import (
	"go.uber.org/zap"
	mountutils "k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"

	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/configmap"
	"github.com/volume-agent/volume-agent/internal/plugins/downwardapi"
	"github.com/volume-agent/volume-agent/internal/plugins/emptydir"
	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
	"github.com/volume-agent/volume-agent/internal/plugins/local"
	"github.com/volume-agent/volume-agent/internal/plugins/nfs"
	"github.com/volume-agent/volume-agent/internal/plugins/projected"
	"github.com/volume-agent/volume-agent/internal/plugins/secret"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Config configures the default plugin set.
type Config struct {
	Mounter mount.Mounter
	// Root is the agent's (resolved) root directory.
	Root layout.Root
	// NodeName is this node's name.
	NodeName string
	// Logger is for what plugins log (a dead NFS mount forced off); may be
	// nil.
	Logger *zap.Logger
	// Tokens mints service account tokens; nil without an API server.
	Tokens projected.Tokens
	// HostRoot is where the host's root file system is mounted ("/" when
	// the agent runs on the host).
	HostRoot string
	// HostPathCheckers are the processes that check host paths (see
	// hostpath.Plugin.Checkers); nil checks in process.
	HostPathCheckers hostpath.Checkers
	// NoSwap mounts every tmpfs (secret, projected, emptyDir of medium
	// Memory) with noswap; only where the kernel supports it (see
	// mount.ProbeNoSwap).
	NoSwap bool
	// LocalRoot is the local provisioner's --local-path-root, resolved,
	// which holds the volumes of the CSI PVs of local.Driver; "" when the
	// local provisioner is off (such PVs are then refused, saying so).
	LocalRoot string
}

// Default returns a registry of every plugin the agent ships.
func Default(cfg Config) *Registry {
	l := &local.Plugin{Mounter: cfg.Mounter, HostRoot: cfg.HostRoot, NodeName: cfg.NodeName, Devices: devices(cfg), Logger: cfg.Logger}
	r, err := NewRegistry(
		&emptydir.Plugin{Mounter: cfg.Mounter, NoSwap: cfg.NoSwap, Limiter: emptydir.Btrfs{}},
		&hostpath.Plugin{HostRoot: cfg.HostRoot, Checkers: cfg.HostPathCheckers},
		&configmap.Plugin{Mounter: cfg.Mounter},
		&secret.Plugin{Mounter: cfg.Mounter, NoSwap: cfg.NoSwap},
		&downwardapi.Plugin{Mounter: cfg.Mounter},
		&projected.Plugin{Mounter: cfg.Mounter, Tokens: cfg.Tokens, NoSwap: cfg.NoSwap},
		l,
		// CSI PVs of the local provisioner's driver are set up as the local
		// PVs it would have made, by the same plugin.
		&local.CSIPlugin{Local: l, Root: cfg.LocalRoot},
		nfs.New(cfg.Logger),
	)
	if err != nil {
		panic(err) // the list above is fixed: a duplicate is a programming error
	}
	return r
}

// devices mounts local PVs' block devices under the root; there is none
// without a root (unit tests) or without the privilege to mount.
func devices(cfg Config) *local.Devices {
	if cfg.Root == "" || !mount.Privileged(cfg.Mounter) {
		return nil
	}
	return &local.Devices{
		Dir:       cfg.Root.PluginMountsDir(local.Name),
		PodsDir:   cfg.Root.PodsDir(),
		Mounter:   cfg.Mounter,
		Formatter: mountutils.NewSafeFormatAndMount(mountutils.NewWithoutSystemd(""), utilexec.New()),
	}
}

// All lists the registry's plugins (for tests and docs).
func (r *Registry) All() []volume.Plugin { return append([]volume.Plugin(nil), r.plugins...) }
