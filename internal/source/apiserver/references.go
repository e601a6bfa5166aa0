package apiserver

import (
	"github.com/volume-agent/volume-agent/internal/source"
	v1 "k8s.io/api/core/v1"
)

// references lists the ConfigMaps and Secrets the pods' volumes refer to
// (including projected sources and the kube-root-ca.crt ConfigMap of
// kube-api-access volumes).
func references(pods []*v1.Pod) (configMaps, secrets map[ref]bool) {
	configMaps, secrets = map[ref]bool{}, map[ref]bool{}
	for _, p := range pods {
		if source.Terminated(p) {
			continue // its volumes are torn down; nothing to keep fresh
		}
		for _, v := range p.Spec.Volumes {
			addVolumeRefs(p.Namespace, v.VolumeSource, configMaps, secrets)
		}
	}
	return configMaps, secrets
}

func addVolumeRefs(ns string, v v1.VolumeSource, configMaps, secrets map[ref]bool) {
	if v.ConfigMap != nil {
		configMaps[ref{ns, v.ConfigMap.Name}] = true
	}
	if v.Secret != nil {
		secrets[ref{ns, v.Secret.SecretName}] = true
	}
	if v.Projected == nil {
		return
	}
	for _, s := range v.Projected.Sources {
		if s.ConfigMap != nil {
			configMaps[ref{ns, s.ConfigMap.Name}] = true
		}
		if s.Secret != nil {
			secrets[ref{ns, s.Secret.Name}] = true
		}
	}
}
