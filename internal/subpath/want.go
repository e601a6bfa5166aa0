package subpath

import (
	"fmt"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Want is one subPath mount a pod wants of a volume.
type Want struct {
	// Container is the name of the container (init or regular) whose
	// volumeMount asks for it, and Index the mount's index in the
	// container's volumeMounts.
	Container string
	Index     int
	// Path is the subPath, relative to the volume (subPathExpr expanded);
	// empty when Problem is set.
	Path string
	// Problem, when set, says why the subPath is refused (absolute, with a
	// "..", an expansion that lacks a variable): it is not prepared.
	Problem string
}

// Wanted lists the subPath mounts of volume (its name in the pod's spec)
// that pod's init and regular containers want, in the order of the pod's
// containers and of their volumeMounts. Ephemeral containers cannot use a
// subPath, as in Kubernetes.
func Wanted(pod *v1.Pod, volume string) []Want {
	var out []Want
	add := func(cs []v1.Container) {
		for i := range cs {
			out = append(out, wantedOf(pod, &cs[i], volume)...)
		}
	}
	add(pod.Spec.InitContainers)
	add(pod.Spec.Containers)
	return out
}

// wantedOf lists the subPath mounts of volume that container c wants.
func wantedOf(pod *v1.Pod, c *v1.Container, volume string) []Want {
	var out []Want
	var env map[string]string
	for i, m := range c.VolumeMounts {
		if m.Name != volume || (m.SubPath == "" && m.SubPathExpr == "") {
			continue
		}
		w := Want{Container: c.Name, Index: i, Path: m.SubPath}
		var err error
		if m.SubPathExpr != "" {
			if env == nil {
				env = Env(pod, c)
			}
			w.Path, err = Expand(m.SubPathExpr, env)
		}
		if err == nil {
			err = Check(w.Path)
		}
		if err != nil {
			w.Path, w.Problem = "", fmt.Sprintf("container %q, volumeMount %d (volume %q): %v", c.Name, i, volume, err)
		}
		out = append(out, w)
	}
	return out
}

// Check refuses a subPath that could leave its volume, with the kubelet's
// rules: absolute, or with a ".." element. Empty and "." name the volume
// itself, which a runtime mounts without the agent's help and is refused
// here too, as is a NUL byte.
func Check(p string) error {
	switch {
	case filepath.IsAbs(p):
		return fmt.Errorf("subPath %q must not be an absolute path", p)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("subPath %q must not contain a NUL byte", p)
	case len(p) > 4096:
		return fmt.Errorf("subPath of %d bytes is longer than 4096", len(p))
	}
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return fmt.Errorf("subPath %q must not contain '..'", p)
		}
		if len(e) > 255 {
			return fmt.Errorf("subPath %q has an element longer than 255 bytes", p)
		}
	}
	if c := filepath.Clean(p); c == "." {
		return fmt.Errorf("subPath %q names the volume itself", p)
	}
	return nil
}

// elements splits a checked subPath into its path elements, without empty
// and "." ones.
func elements(p string) []string {
	var out []string
	for _, e := range strings.Split(p, "/") {
		if e != "" && e != "." {
			out = append(out, e)
		}
	}
	return out
}
