package subpath

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
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
	case "metadata.name":
		return pod.Name, true
	case "metadata.namespace":
		return pod.Namespace, true
	case "metadata.uid":
		return string(pod.UID), true
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
	}
	if k, ok := subscript(path, "metadata.labels"); ok {
		v, ok := pod.Labels[k]
		return v, ok
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		v, ok := pod.Annotations[k]
		return v, ok
	}
	switch path {
	case "metadata.labels":
		return formatMap(pod.Labels), true
	case "metadata.annotations":
		return formatMap(pod.Annotations), true
	}
	return "", false
}

func joinIPs[T any](ips []T, ip func(T) string) (string, bool) {
	s := make([]string, len(ips))
	for i, x := range ips {
		s[i] = ip(x)
	}
	return strings.Join(s, ","), len(s) > 0
}

// subscript parses field['key'] and returns key.
func subscript(path, field string) (string, bool) {
	rest, ok := strings.CutPrefix(path, field+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// formatMap renders labels or annotations as the downward API does:
// key="value" lines, sorted by key.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	lines := make([]string, len(keys))
	for i, k := range keys {
		lines[i] = fmt.Sprintf("%s=%q", k, m[k])
	}
	return strings.Join(lines, "\n")
}
