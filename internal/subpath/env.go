package subpath

import (
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/plugins/downwardapi"
)

// Env is the environment a subPathExpr of container c can use: the
// container's env entries with a literal value (their own $(VAR)
// references expanded, as the kubelet does, from the entries before them)
// and those taken from the pod's fields the kubelet resolves without the
// API server (metadata.name, metadata.namespace, metadata.uid,
// metadata.labels['k'], metadata.annotations['k'], spec.nodeName,
// spec.serviceAccountName, status.hostIP, status.podIP, status.hostIPs,
// status.podIPs). Entries from ConfigMaps, Secrets (env and envFrom) and
// container resources are not given: a subPathExpr naming one fails as
// one naming an unknown variable does.
func Env(pod *v1.Pod, c *v1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, func(k string) (string, bool) {
				v, ok := env[k]
				return v, ok
			}, func(string) {})
		case e.ValueFrom.FieldRef != nil:
			if v, ok := fieldValue(pod, e.ValueFrom.FieldRef.FieldPath); ok {
				env[e.Name] = v
			}
		}
	}
	return env
}

// fieldValue is the value of a downward API field of pod, and whether
// the agent knows it.
func fieldValue(pod *v1.Pod, path string) (string, bool) {
	switch path {
	case "spec.nodeName":
		return pod.Spec.NodeName, true
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, true
	case "status.hostIP":
		return pod.Status.HostIP, pod.Status.HostIP != ""
	case "status.podIP":
		return pod.Status.PodIP, pod.Status.PodIP != ""
	case "status.hostIPs":
		return joinIPs(pod.Status.HostIPs, func(ip v1.HostIP) string { return ip.IP })
	case "status.podIPs":
		return joinIPs(pod.Status.PodIPs, func(ip v1.PodIP) string { return ip.IP })
	case "metadata.labels", "metadata.annotations":
		return "", false // whole maps only in volumes: an env var takes one key
	}
	v, err := downwardapi.FieldValue(pod, path)
	return v, err == nil
}

func joinIPs[T any](ips []T, ip func(T) string) (string, bool) {
	s := make([]string, len(ips))
	for i, x := range ips {
		s[i] = ip(x)
	}
	return strings.Join(s, ","), len(s) > 0
}
