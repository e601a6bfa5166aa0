// Package layout knows the kubelet-compatible on-disk layout under the
// agent's root directory:
//
//	<root>/pods/<podUID>/volumes/<plugin name with / replaced by ~>/<volume name>
//	<root>/pods/<podUID>/volume-subpaths/<volume name>/<container>/<index>
//	<root>/pods/<podUID>/volumeDevices/<plugin name with / replaced by ~>/<volume name>
//
// The second holds the containers' subPath mounts; the third the volumes
// of volumeMode Block: each a file on which the device is published, as
// the kubelet's volumeDevices directory.
//
// It builds those paths and parses them back; it never creates or removes
// anything. Callers validate pod UIDs and volume names (ValidName) before
// building a path from them, so a name can never climb out of the root.
package layout

import (
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Root is the agent's root directory.
type Root string

// PodsDir is <root>/pods.
func (r Root) PodsDir() string { return filepath.Join(string(r), "pods") }

// PodDir is <root>/pods/<uid>.
func (r Root) PodDir(uid types.UID) string { return filepath.Join(r.PodsDir(), string(uid)) }

// VolumesDir is <root>/pods/<uid>/volumes.
func (r Root) VolumesDir(uid types.UID) string { return filepath.Join(r.PodDir(uid), "volumes") }

// PluginDir is <root>/pods/<uid>/volumes/<escaped plugin>.
func (r Root) PluginDir(uid types.UID, plugin string) string {
	return filepath.Join(r.VolumesDir(uid), EscapePluginName(plugin))
}

// VolumeDir is <root>/pods/<uid>/volumes/<escaped plugin>/<volume>.
func (r Root) VolumeDir(uid types.UID, plugin, volume string) string {
	return filepath.Join(r.PluginDir(uid, plugin), volume)
}

// SubPathsDir is <root>/pods/<uid>/volume-subpaths, where the subPath
// mounts of the pod's containers are, as
// <volume>/<container>/<index> below it.
func (r Root) SubPathsDir(uid types.UID) string {
	return filepath.Join(r.PodDir(uid), "volume-subpaths")
}

// PodRecordsDir is <root>/pod-records, which holds a record per pod
// directory: the source its pod came from (package podrecord).
func (r Root) PodRecordsDir() string { return filepath.Join(string(r), "pod-records") }

// DevicesDir is <root>/pods/<uid>/volumeDevices.
func (r Root) DevicesDir(uid types.UID) string {
	return filepath.Join(r.PodDir(uid), "volumeDevices")
}

// DevicePluginDir is <root>/pods/<uid>/volumeDevices/<escaped plugin>.
func (r Root) DevicePluginDir(uid types.UID, plugin string) string {
	return filepath.Join(r.DevicesDir(uid), EscapePluginName(plugin))
}

// DevicePath is <root>/pods/<uid>/volumeDevices/<escaped plugin>/<volume>,
// where a block volume's device is published.
func (r Root) DevicePath(uid types.UID, plugin, volume string) string {
	return filepath.Join(r.DevicePluginDir(uid, plugin), volume)
}

// PluginMountsDir is <root>/plugins/<plugin>/mounts, where a plugin keeps
// the mounts its volumes share (a local PV's device, mounted once per PV).
func (r Root) PluginMountsDir(plugin string) string {
	return filepath.Join(string(r), "plugins", plugin, "mounts")
}

// EscapePluginName turns "kubernetes.io/configmap" into "kubernetes.io~configmap".
func EscapePluginName(name string) string { return strings.ReplaceAll(name, "/", "~") }

// UnescapePluginName reverses EscapePluginName.
func UnescapePluginName(dir string) string { return strings.ReplaceAll(dir, "~", "/") }

// ValidName checks that s can be used as one path element under the root: a
// pod UID or volume name. It does not enforce Kubernetes naming rules.
func ValidName(s string) error {
	switch {
	case s == "" || s == "." || s == "..":
		return fmt.Errorf("%q is not a usable directory name", s)
	case strings.ContainsAny(s, "/\x00"):
		return fmt.Errorf("%q contains '/' or NUL", s)
	case len(s) > 255:
		return fmt.Errorf("%q is longer than 255 bytes", s)
	}
	return nil
}
