package csi

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// GetPluginInfo names the driver and its version.
func (d *Driver) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	v := d.cfg.Version
	if v == "" {
		v = "unknown"
	}
	return &csipb.GetPluginInfoResponse{Name: Name, VendorVersion: v}, nil
}

// GetPluginCapabilities: the controller service, topology, and online
// expansion (done by NodeExpandVolume: see ControllerGetCapabilities).
func (d *Driver) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	svc := func(t csipb.PluginCapability_Service_Type) *csipb.PluginCapability {
		return &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: t}}}
	}
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: []*csipb.PluginCapability{
		svc(csipb.PluginCapability_Service_CONTROLLER_SERVICE),
		svc(csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS),
		{Type: &csipb.PluginCapability_VolumeExpansion_{VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{
			Type: csipb.PluginCapability_VolumeExpansion_ONLINE}}},
	}}, nil
}

// Probe: ready once New succeeded (the root and its records are there).
func (d *Driver) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(d.ready.Load())}, nil
}
