package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/csi"
	"github.com/volume-agent/volume-agent/internal/pluginreg"
)

// addCSI adds, when --csi-endpoint is set, the CSI driver over the local
// provisioner and the kubelet's registration socket to what runs, in
// manifest and in cluster mode alike.
func (a *agent) addCSI(o options, provs *provisioners, log *zap.Logger) error {
	if o.csiEndpoint == "" {
		return nil
	}
	if provs.local == nil {
		return fmt.Errorf("--csi-endpoint %s: the local provisioner is off (--provisioners)", o.csiEndpoint)
	}
	path, err := csi.SocketPath(o.csiEndpoint)
	if err != nil {
		return fmt.Errorf("--csi-endpoint: %w", err)
	}
	d, err := csi.New(csi.Config{Local: provs.local, NodeName: o.nodeName, Version: agentVersion(), ReclaimDelay: o.reclaimDelay, Logger: log})
	if err != nil {
		return err
	}
	a.others["CSI driver"] = csiRunner{d: d, endpoint: path}
	if o.registrationDir == "" {
		return nil
	}
	reg, err := pluginreg.New(pluginreg.Config{Dir: o.registrationDir, Driver: csi.Name, Endpoint: path, Logger: log})
	if err != nil {
		return err
	}
	a.others["kubelet plugin registration"] = reg
	a.csiHealth = func() error {
		if _, err := reg.Status(); err != nil {
			return fmt.Errorf("CSI driver %s: the kubelet refused its registration: %w", csi.Name, err)
		}
		return nil
	}
	return nil
}

type csiRunner struct {
	d        *csi.Driver
	endpoint string
}

func (r csiRunner) Run(ctx context.Context) error {
	err := r.d.Serve(ctx, r.endpoint)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// agentVersion is the module version of this binary (GetPluginInfo).
func agentVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		return cmp.Or(info.Main.Version, "unknown")
	}
	return "unknown"
}
