package chart

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// provisionerValues turn both provisioners on.
const provisionerValues = "provisioners: [local, nfs-subdir]"

// TestNoProvisionerRightsWithoutProvisioners: without provisioners nor the
// CSI driver (deploy/daemonset-no-csi.yaml alone, the chart with
// csi.enabled false, and its service-account mode) no rule lets the agent's ServiceAccount write a
// PersistentVolume or a claim, no admission policy is needed, and with the
// node identity nothing mounts the ServiceAccount's token. With
// provisioners the chart renders those rules and mounts the token, so the
// checks are not vacuous.
func TestNoProvisionerRightsWithoutProvisioners(t *testing.T) {
	for what, objs := range map[string]objects{
		noCSIFile:                                fileObjects(t, noCSIFile),
		"the chart with " + noCSIValues:          render(t, DefaultRelease, readValues(t, noCSIValues)),
		"the chart with identity=serviceAccount": render(t, DefaultRelease, readValues(t, "identity: serviceAccount\n"+noCSIValues)),
	} {
		for k, o := range objs {
			for _, r := range volumeWrites(o) {
				t.Errorf("%s: %s lets the agent write %v", what, k, r)
			}
			if o.GetKind() == "ValidatingAdmissionPolicy" || o.GetKind() == "CSIDriver" {
				t.Errorf("%s: %s is rendered without provisioners", what, k)
			}
		}
		// The service-account mode mounts with the token.
		wantToken := what == "the chart with identity=serviceAccount"
		if got := podSpec(objs)["automountServiceAccountToken"]; got != wantToken {
			t.Errorf("%s: automountServiceAccountToken %v, want %v", what, got, wantToken)
		}
	}
	on := render(t, DefaultRelease, readValues(t, provisionerValues+"\n"+noCSIValues))
	if got := podSpec(on)["automountServiceAccountToken"]; got != true {
		t.Errorf("with provisioners: automountServiceAccountToken %v, want true: the provisioners use the token", got)
	}
	if len(volumeWrites(on["ClusterRole /volume-agent-provisioner"])) == 0 {
		t.Error("with provisioners: the ClusterRole volume-agent-provisioner writes no PersistentVolume")
	}
}

// TestNodeRestrictionCoversEveryWrite: in deploy/provisioners.yaml, in
// deploy/daemonset.yaml and in the chart's rendering with provisioners
// or the CSI driver, every write the RBAC grants
// the agent's ServiceAccount on PersistentVolumes and claims is matched by
// a ValidatingAdmissionPolicy for that ServiceAccount, bound with Deny,
// that fails closed and refuses with 403 (Forbidden).
func TestNodeRestrictionCoversEveryWrite(t *testing.T) {
	for what, objs := range map[string]objects{
		provisionersFile: fileObjects(t, provisionersFile),
		"the chart with " + provisionerValues + " without the CSI driver": render(t, DefaultRelease, readValues(t, provisionerValues+"\n"+noCSIValues)),
		// The CSI sidecars share the ServiceAccount: their writes too.
		deployFile:                    deployObjects(t),
		"the chart with " + csiValues: render(t, DefaultRelease, readValues(t, csiValues)),
		"the chart's default values":  render(t, DefaultRelease, nil),
	} {
		policies := boundPolicies(t, what, objs)
		if len(policies) != 2 {
			t.Errorf("%s: policies %v, want two", what, slices.Collect(maps.Keys(policies)))
		}
		for k, o := range objs {
			for _, w := range volumeWrites(o) {
				if !slices.ContainsFunc(slices.Collect(maps.Values(policies)), func(p *unstructured.Unstructured) bool { return matches(p, w) }) {
					t.Errorf("%s: %s grants %s on %s, which no policy matches", what, k, w.verb, w.resource)
				}
			}
		}
		for name, p := range policies {
			spec := p.Object["spec"].(map[string]any)
			if spec["failurePolicy"] != "Fail" {
				t.Errorf("%s: policy %s: failurePolicy %v, want Fail", what, name, spec["failurePolicy"])
			}
			if !strings.Contains(show(spec["matchConditions"]), "'system:serviceaccount:volume-agent:volume-agent'") {
				t.Errorf("%s: policy %s does not match the agent's ServiceAccount: %s", what, name, show(spec["matchConditions"]))
			}
			for _, v := range spec["validations"].([]any) {
				if r := v.(map[string]any)["reason"]; r != "Forbidden" {
					t.Errorf("%s: policy %s: validation %v has reason %v, want Forbidden (403)", what, name, v, r)
				}
			}
		}
	}
}

// write is a verb the RBAC grants on a resource.
type write struct{ verb, resource string }

// volumeWrites lists the writes a Role or ClusterRole grants on
// PersistentVolumes and claims (and their subresources).
func volumeWrites(o *unstructured.Unstructured) []write {
	if o == nil || !strings.HasSuffix(o.GetKind(), "Role") {
		return nil
	}
	rules, _ := o.Object["rules"].([]any)
	var out []write
	for _, r := range rules {
		rule := r.(map[string]any)
		resources, _ := rule["resources"].([]any)
		verbs, _ := rule["verbs"].([]any)
		for _, res := range resources {
			name, _ := res.(string)
			if name != "*" && !strings.HasPrefix(name, "persistentvolume") {
				continue
			}
			for _, v := range verbs {
				if verb, _ := v.(string); verb != "get" && verb != "list" && verb != "watch" {
					out = append(out, write{verb, name})
				}
			}
		}
	}
	return out
}

// boundPolicies returns the ValidatingAdmissionPolicies of objs that a
// binding of objs binds with validationActions [Deny], by name.
func boundPolicies(t *testing.T, what string, objs objects) map[string]*unstructured.Unstructured {
	t.Helper()
	out := map[string]*unstructured.Unstructured{}
	for k, o := range objs {
		if o.GetKind() != "ValidatingAdmissionPolicyBinding" {
			continue
		}
		spec := o.Object["spec"].(map[string]any)
		name, _ := spec["policyName"].(string)
		p := objs["ValidatingAdmissionPolicy /"+name]
		if p == nil || show(spec["validationActions"]) != `["Deny"]` {
			t.Errorf("%s: %s binds %q with %v; want a policy of the file, denied", what, k, name, spec["validationActions"])
			continue
		}
		out[name] = p
	}
	return out
}

// matches reports whether policy p's resource rules match the request w
// grants (patch is an UPDATE).
func matches(p *unstructured.Unstructured, w write) bool {
	op := map[string]string{"create": "CREATE", "update": "UPDATE", "patch": "UPDATE", "delete": "DELETE"}[w.verb]
	rules, _, _ := unstructured.NestedSlice(p.Object, "spec", "matchConstraints", "resourceRules")
	for _, r := range rules {
		rule := r.(map[string]any)
		if slices.Contains(rule["resources"].([]any), any(w.resource)) && slices.Contains(rule["operations"].([]any), any(op)) {
			return true
		}
	}
	return false
}
