package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
)

// pauseEnv, for fault tests only, makes the provisioners wait this long
// between making a volume's storage and creating its PV.
const pauseEnv = "VOLUME_AGENT_TEST_PROVISION_PAUSE"

// provisioners are the dynamic provisioners --provisioners turns on.
type provisioners struct {
	local provisioner.Provisioner // nil when off
	pause time.Duration
}

// newProvisioners builds the provisioners --provisioners names.
func newProvisioners(o options, mounter mount.Mounter, log *zap.Logger) (*provisioners, error) {
	p := &provisioners{}
	if v := os.Getenv(pauseEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", pauseEnv, err)
		}
		p.pause = d
	}
	if o.provisioner(provLocal) {
		root, err := resolveLocalPathRoot(o.localPathRoot)
		if err != nil {
			return nil, err
		}
		l, err := local.New(local.Config{Root: root, NodeName: o.nodeName, Mounter: mounter, Logger: log})
		if err != nil {
			return nil, err
		}
		p.local = l
	}
	return p, nil
}

// forBinder lists the provisioners manifest mode's binder uses.
func (p *provisioners) forBinder() []provisioner.Provisioner {
	var out []provisioner.Provisioner
	if p.local != nil {
		out = append(out, p.local)
	}
	return out
}

// runners lists the controllers cluster mode runs: the local provisioner
// on every agent, for the claims scheduled to its node.
func (p *provisioners) runners(client kubernetes.Interface, o options, log *zap.Logger) (map[string]runner, error) {
	r := map[string]runner{}
	if p.local != nil {
		c, err := provisioner.New(provisioner.Config{Client: client, Provisioner: p.local, Node: o.nodeName, Logger: log, PauseAfterStorage: p.pause})
		if err != nil {
			return nil, err
		}
		r["local provisioner"] = c
	}
	return r, nil
}

// leading runs f under leader election while it holds the Lease of name.
type leading struct {
	election provisioner.Election
	name     string
	run      func(context.Context) error
}

func (l leading) Run(ctx context.Context) error {
	return provisioner.RunLeading(ctx, l.election, l.name, l.run)
}

// resolveLocalPathRoot creates --local-path-root when it is missing (0711:
// the claims' directory names are not for other users to list) and
// resolves its symlinks once, as the root dir's are: the local
// provisioner works below a path without symlinks, and its PVs record it.
func resolveLocalPathRoot(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", fmt.Errorf("--local-path-root: %w", err)
	}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("--local-path-root: %w", err)
	}
	return filepath.Abs(resolved)
}
