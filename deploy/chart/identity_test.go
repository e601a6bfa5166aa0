package chart

import (
	"slices"
	"strings"
	"testing"
)

// TestNodeIdentityGrantsNoSecrets: the default deployment — deploy/daemonset.yaml
// and the chart's default rendering — mounts with the node's credentials
// and grants no Role or ClusterRole on Secrets or ConfigMaps (nor on every
// resource): what the agent may read of them is what the Node authorizer
// gives its node. The service-account mode's file does grant them, so the
// check is not vacuous.
func TestNodeIdentityGrantsNoSecrets(t *testing.T) {
	for what, objs := range map[string]objects{
		deployFile:                      deployObjects(t),
		noCSIFile:                       fileObjects(t, noCSIFile),
		"the chart's default values":    render(t, DefaultRelease, nil),
		"the chart with " + noCSIValues: render(t, DefaultRelease, readValues(t, noCSIValues)),
	} {
		for k, o := range objs {
			for _, r := range secretRules(o.Object) {
				t.Errorf("%s: %s grants %v", what, k, r)
			}
		}
		if args := container(objs)["args"].([]any); !slices.Contains(args, any(kubeletKubeconfigArg)) {
			t.Errorf("%s: the agent's args %v lack %s", what, args, kubeletKubeconfigArg)
		}
		for _, name := range []string{"kubelet-kubeconfig", "kubelet-credentials"} {
			if m := named(volumeMounts(objs), name); m["readOnly"] != true {
				t.Errorf("%s: mount %s is not read-only: %v", what, name, m)
			}
		}
	}
	granted := false
	for _, o := range fileObjects(t, serviceAccountFile) {
		granted = granted || len(secretRules(o.Object)) > 0
	}
	if !granted {
		t.Errorf("%s grants no rule on secrets or configmaps: the check above would see none anywhere", serviceAccountFile)
	}
}

// secretRules returns the rules of a Role or ClusterRole that name secrets,
// configmaps or every resource.
func secretRules(obj map[string]any) []map[string]any {
	kind, _ := obj["kind"].(string)
	if !strings.HasSuffix(kind, "Role") {
		return nil
	}
	rules, _ := obj["rules"].([]any)
	var out []map[string]any
	for _, r := range rules {
		rule := r.(map[string]any)
		resources, _ := rule["resources"].([]any)
		if slices.ContainsFunc(resources, func(res any) bool { return res == "secrets" || res == "configmaps" || res == "*" }) {
			out = append(out, rule)
		}
	}
	return out
}
