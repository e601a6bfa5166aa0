package populator

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// checkVolumeMode checks that the containers of pod use the claim volume
// name as its PersistentVolume's mode allows, as the kubelet does: a
// volume of volumeMode Block only through volumeDevices, one of volumeMode
// Filesystem only through volumeMounts. The error names the pod, the
// volume and the first container that misuses it.
func checkVolumeMode(pod *v1.Pod, name string, mode v1.PersistentVolumeMode) error {
	mounts, devices := volumeUsers(pod, name)
	switch {
	case mode == v1.PersistentVolumeBlock && mounts != "":
		return fmt.Errorf("pod %s/%s: volume %q has volumeMode Block, but container %q uses it in volumeMounts: a Block volume is a device, used through volumeDevices",
			pod.Namespace, pod.Name, name, mounts)
	case mode != v1.PersistentVolumeBlock && devices != "":
		return fmt.Errorf("pod %s/%s: volume %q has volumeMode %s, but container %q uses it in volumeDevices: only a claim of volumeMode Block can be",
			pod.Namespace, pod.Name, name, mode, devices)
	}
	return nil
}

// checkNotDevice refuses a volume that is not a claim's (nor a generic
// ephemeral one's) when a container of pod uses it in volumeDevices: only
// those can be of volumeMode Block, as the API server's validation says.
func checkNotDevice(pod *v1.Pod, v *v1.Volume) error {
	if v.PersistentVolumeClaim != nil || v.Ephemeral != nil {
		return nil
	}
	if _, devices := volumeUsers(pod, v.Name); devices != "" {
		return fmt.Errorf("pod %s/%s: container %q uses volume %q in volumeDevices, which only a persistentVolumeClaim volume of volumeMode Block can be",
			pod.Namespace, pod.Name, devices, v.Name)
	}
	return nil
}

// volumeUsers returns the first container of pod (init, regular, then
// ephemeral containers) that uses volume name in volumeMounts, and the
// first that uses it in volumeDevices; "" for none.
func volumeUsers(pod *v1.Pod, name string) (mounts, devices string) {
	visit := func(c string, vm []v1.VolumeMount, vd []v1.VolumeDevice) {
		for _, m := range vm {
			if m.Name == name && mounts == "" {
				mounts = c
			}
		}
		for _, d := range vd {
			if d.Name == name && devices == "" {
				devices = c
			}
		}
	}
	for _, c := range pod.Spec.InitContainers {
		visit(c.Name, c.VolumeMounts, c.VolumeDevices)
	}
	for _, c := range pod.Spec.Containers {
		visit(c.Name, c.VolumeMounts, c.VolumeDevices)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		visit(c.Name, c.VolumeMounts, c.VolumeDevices)
	}
	return mounts, devices
}
