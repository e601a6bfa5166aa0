package chart

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// request is one write of the agent's ServiceAccount, as a
// ValidatingAdmissionPolicy sees it.
type request struct {
	operation   string // CREATE, UPDATE, DELETE
	subResource string
	node        string // the node of the pod the token is bound to; "" for none
	object, old runtime.Object
}

// admit evaluates policy p on r as the API server does (match conditions,
// variables evaluated lazily, validations in order) with CEL itself, and
// returns the first failed validation's message, or "" when r is admitted.
// An expression that fails to compile or evaluate fails the test: the API
// server would deny (failurePolicy Fail) for a reason no one meant.
func admit(t *testing.T, p *unstructured.Unstructured, r request) string {
	t.Helper()
	spec := p.Object["spec"].(map[string]any)
	vars := sliceOf(spec["variables"])
	opts := []cel.EnvOption{cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType), cel.Variable("request", cel.DynType)}
	for _, v := range vars {
		opts = append(opts, cel.Variable("variables_"+v.(map[string]any)["name"].(string), cel.DynType))
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		t.Fatal(err)
	}
	act := map[string]any{"object": toMap(t, r.object), "oldObject": toMap(t, r.old), "request": r.info()}
	eval := func(expr string) ref.Val {
		ast, iss := env.Compile(strings.ReplaceAll(expr, "variables.", "variables_"))
		if iss.Err() != nil {
			t.Fatalf("policy %s: %q: %v", p.GetName(), expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := prg.Eval(act)
		if err != nil {
			t.Fatalf("policy %s: %q on %s: %v", p.GetName(), expr, r, err)
		}
		return out
	}
	for _, v := range vars {
		v := v.(map[string]any)
		expr := v["expression"].(string)
		act["variables_"+v["name"].(string)] = func() ref.Val { return eval(expr) }
	}
	for _, m := range sliceOf(spec["matchConditions"]) {
		if eval(m.(map[string]any)["expression"].(string)) != types.True {
			t.Fatalf("policy %s does not match the agent's ServiceAccount's %s", p.GetName(), r)
		}
	}
	for _, v := range sliceOf(spec["validations"]) {
		v := v.(map[string]any)
		if eval(v["expression"].(string)) == types.True {
			continue
		}
		if m, ok := v["messageExpression"].(string); ok {
			return fmt.Sprint(eval(m).Value())
		}
		return fmt.Sprint(v["message"])
	}
	return ""
}

// info is the request variable of r: the operation, the subresource, and
// the user info of a token of the agent's ServiceAccount.
func (r request) info() map[string]any {
	user := map[string]any{"username": "system:serviceaccount:volume-agent:volume-agent"}
	if r.node != "" {
		user["extra"] = map[string]any{"authentication.kubernetes.io/node-name": []any{r.node}}
	}
	info := map[string]any{"operation": r.operation, "userInfo": user}
	if r.subResource != "" {
		info["subResource"] = r.subResource
	}
	return info
}

func (r request) String() string {
	return fmt.Sprintf("%s %s by node %q", r.operation, r.subResource, r.node)
}

// toMap is obj as the policy sees it; nil for none (null).
func toMap(t *testing.T, obj runtime.Object) any {
	if obj == nil {
		return nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// csiPV is a PV as csi-provisioner makes it for a claim on node.
func csiPV(node string) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "pvc-1",
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": driver},
			Finalizers:  []string{"external-provisioner.volume.kubernetes.io/finalizer", "kubernetes.io/pv-protection"},
		},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete,
			StorageClassName:              "local",
			VolumeMode:                    ptrTo(v1.PersistentVolumeFilesystem),
			ClaimRef:                      &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "app", Name: "data", UID: "u1"},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: "app-data-pvc-1",
				VolumeAttributes: map[string]string{"storage.kubernetes.io/csiProvisionerIdentity": "1-" + node},
			}},
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
		Status: v1.PersistentVolumeStatus{Phase: v1.VolumeBound},
	}
}

// csiClaim is a claim of the driver's class, bound, placed on node.
func csiClaim(node, provisioner string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: "data", Namespace: "app",
			Annotations: map[string]string{
				"volume.kubernetes.io/selected-node":       node,
				"volume.kubernetes.io/storage-provisioner": provisioner,
				"pv.kubernetes.io/bind-completed":          "yes",
			},
			Finalizers: []string{"kubernetes.io/pvc-protection"},
		},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}},
			VolumeName:  "pvc-1",
		},
		Status: v1.PersistentVolumeClaimStatus{
			Phase:       v1.ClaimBound,
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Capacity:    v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestPoliciesAdmitTheSidecars evaluates the chart's admission policies, with
// and without csi.enabled, on the writes the CSI sidecars make and on
// writes a compromised node could attempt: csi-provisioner is held to its
// own node's PVs and claims (and may put the cloning-protection finalizer on
// its node's claims); the one active csi-resizer may grow a CSI PV of any
// node and mark its claim's resize status, and change nothing else; without
// csi.enabled none of those exceptions holds.
func TestPoliciesAdmitTheSidecars(t *testing.T) {
	on := render(t, DefaultRelease, readValues(t, csiValues))
	off := render(t, DefaultRelease, readValues(t, provisionerValues+"\n"+noCSIValues))
	pvPolicy, claimPolicy := "ValidatingAdmissionPolicy /volume-agent-node-persistentvolumes", "ValidatingAdmissionPolicy /volume-agent-node-claims"

	grown := func(pv *v1.PersistentVolume) *v1.PersistentVolume {
		pv = pv.DeepCopy()
		pv.Spec.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi")
		pv.Annotations["volume.alpha.kubernetes.io/pre-resize-capacity"] = "1Gi"
		return pv
	}
	edit := func(pv *v1.PersistentVolume, f func(*v1.PersistentVolume)) *v1.PersistentVolume {
		pv = pv.DeepCopy()
		f(pv)
		return pv
	}
	inTree := edit(csiPV("b"), func(pv *v1.PersistentVolume) {
		pv.Spec.CSI = nil
		pv.Spec.Local = &v1.LocalVolumeSource{Path: "/var/lib/volume-agent-local/x"}
	})
	resizePending := func(c *v1.PersistentVolumeClaim) *v1.PersistentVolumeClaim {
		c = c.DeepCopy()
		c.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}
		c.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizePending}
		c.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimFileSystemResizePending, Status: v1.ConditionTrue}}
		return c
	}
	claimEdit := func(c *v1.PersistentVolumeClaim, f func(*v1.PersistentVolumeClaim)) *v1.PersistentVolumeClaim {
		c = c.DeepCopy()
		f(c)
		return c
	}
	const cloning = "provisioner.storage.kubernetes.io/cloning-protection"
	for _, tc := range []struct {
		what   string
		objs   objects
		policy string
		r      request
		admit  bool
	}{
		// csi-provisioner, on its node.
		{"csi-provisioner creates its node's PV", on, pvPolicy, request{operation: "CREATE", node: "a", object: csiPV("a")}, true},
		{"csi-provisioner creates another node's PV", on, pvPolicy, request{operation: "CREATE", node: "a", object: csiPV("b")}, false},
		{"csi-provisioner removes its finalizer from its node's PV", on, pvPolicy, request{operation: "UPDATE", node: "a", old: csiPV("a"),
			object: edit(csiPV("a"), func(pv *v1.PersistentVolume) { pv.Finalizers = pv.Finalizers[1:] })}, true},
		{"csi-provisioner deletes its node's PV", on, pvPolicy, request{operation: "DELETE", node: "a", old: csiPV("a")}, true},
		{"csi-provisioner deletes another node's PV", on, pvPolicy, request{operation: "DELETE", node: "a", old: csiPV("b")}, false},
		// csi-resizer, the one active in the cluster, on node a.
		{"csi-resizer grows another node's CSI PV", on, pvPolicy, request{operation: "UPDATE", node: "a", old: csiPV("b"), object: grown(csiPV("b"))}, true},
		{"csi-resizer removes pre-resize-capacity", on, pvPolicy, request{operation: "UPDATE", node: "a", old: grown(csiPV("b")),
			object: edit(grown(csiPV("b")), func(pv *v1.PersistentVolume) {
				delete(pv.Annotations, "volume.alpha.kubernetes.io/pre-resize-capacity")
			})}, true},
		{"growing another node's PV without csi.enabled", off, pvPolicy, request{operation: "UPDATE", node: "a", old: csiPV("b"), object: grown(csiPV("b"))}, false},
		{"growing another node's in-tree local PV", on, pvPolicy, request{operation: "UPDATE", node: "a", old: inTree,
			object: edit(inTree, func(pv *v1.PersistentVolume) { pv.Spec.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi") })}, false},
		{"growing another driver's PV", on, pvPolicy, request{operation: "UPDATE", node: "a", old: edit(csiPV("b"), func(pv *v1.PersistentVolume) { pv.Spec.CSI.Driver = "other.example.com" }),
			object: edit(grown(csiPV("b")), func(pv *v1.PersistentVolume) { pv.Spec.CSI.Driver = "other.example.com" })}, false},
		{"another node's CSI PV: reclaim policy", on, pvPolicy, request{operation: "UPDATE", node: "a", old: csiPV("b"),
			object: edit(grown(csiPV("b")), func(pv *v1.PersistentVolume) {
				pv.Spec.PersistentVolumeReclaimPolicy = v1.PersistentVolumeReclaimRetain
			})}, false},
		{"another node's CSI PV: claimRef", on, pvPolicy, request{operation: "UPDATE", node: "a", old: csiPV("b"),
			object: edit(grown(csiPV("b")), func(pv *v1.PersistentVolume) { pv.Spec.ClaimRef.Name = "stolen" })}, false},
		{"another node's CSI PV: claimRef removed", on, pvPolicy, request{operation: "UPDATE", node: "a", old: csiPV("b"),
			object: edit(grown(csiPV("b")), func(pv *v1.PersistentVolume) { pv.Spec.ClaimRef = nil })}, false},
		{"another node's CSI PV: a finalizer removed", on, pvPolicy, request{operation: "UPDATE", node: "a", old: csiPV("b"),
			object: edit(grown(csiPV("b")), func(pv *v1.PersistentVolume) { pv.Finalizers = pv.Finalizers[1:] })}, false},
		{"another node's CSI PV: an annotation changed", on, pvPolicy, request{operation: "UPDATE", node: "a", old: csiPV("b"),
			object: edit(grown(csiPV("b")), func(pv *v1.PersistentVolume) { pv.Annotations["volume-agent.io/reclaim-step"] = "Deleting" })}, false},
		{"another node's CSI PV: a label added", on, pvPolicy, request{operation: "UPDATE", node: "a", old: csiPV("b"),
			object: edit(grown(csiPV("b")), func(pv *v1.PersistentVolume) { pv.Labels = map[string]string{"x": "y"} })}, false},
		{"another node's CSI PV: mount options", on, pvPolicy, request{operation: "UPDATE", node: "a", old: csiPV("b"),
			object: edit(grown(csiPV("b")), func(pv *v1.PersistentVolume) { pv.Spec.MountOptions = []string{"ro"} })}, false},
		{"another node's CSI PV: class", on, pvPolicy, request{operation: "UPDATE", node: "a", old: csiPV("b"),
			object: edit(grown(csiPV("b")), func(pv *v1.PersistentVolume) { pv.Spec.StorageClassName = "other" })}, false},
		{"growing with a token bound to no pod", on, pvPolicy, request{operation: "UPDATE", old: csiPV("b"), object: grown(csiPV("b"))}, false},
		{"deleting another node's CSI PV", on, pvPolicy, request{operation: "DELETE", node: "a", old: grown(csiPV("b"))}, false},
		// Claims.
		{"csi-resizer marks another node's claim NodeResizePending", on, claimPolicy, request{operation: "UPDATE", subResource: "status", node: "a",
			old: csiClaim("b", driver), object: resizePending(csiClaim("b", driver))}, true},
		{"the resize status without csi.enabled", off, claimPolicy, request{operation: "UPDATE", subResource: "status", node: "a",
			old: csiClaim("b", driver), object: resizePending(csiClaim("b", driver))}, false},
		{"the resize status of another provisioner's claim", on, claimPolicy, request{operation: "UPDATE", subResource: "status", node: "a",
			old: csiClaim("b", "other.example.com"), object: resizePending(csiClaim("b", "other.example.com"))}, false},
		{"another node's claim: status capacity", on, claimPolicy, request{operation: "UPDATE", subResource: "status", node: "a", old: csiClaim("b", driver),
			object: claimEdit(resizePending(csiClaim("b", driver)), func(c *v1.PersistentVolumeClaim) { c.Status.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi") })}, false},
		{"another node's claim: status phase", on, claimPolicy, request{operation: "UPDATE", subResource: "status", node: "a", old: csiClaim("b", driver),
			object: claimEdit(resizePending(csiClaim("b", driver)), func(c *v1.PersistentVolumeClaim) { c.Status.Phase = v1.ClaimLost })}, false},
		{"another node's claim itself", on, claimPolicy, request{operation: "UPDATE", node: "a", old: csiClaim("b", driver),
			object: claimEdit(csiClaim("b", driver), func(c *v1.PersistentVolumeClaim) { delete(c.Annotations, "volume.kubernetes.io/selected-node") })}, false},
		{"csi-provisioner protects its node's claim being cloned", on, claimPolicy, request{operation: "UPDATE", node: "a", old: csiClaim("a", driver),
			object: claimEdit(csiClaim("a", driver), func(c *v1.PersistentVolumeClaim) { c.Finalizers = append(c.Finalizers, cloning) })}, true},
		{"csi-provisioner releases it", on, claimPolicy, request{operation: "UPDATE", node: "a",
			old:    claimEdit(csiClaim("a", driver), func(c *v1.PersistentVolumeClaim) { c.Finalizers = append(c.Finalizers, cloning) }),
			object: csiClaim("a", driver)}, true},
		{"the cloning finalizer without csi.enabled", off, claimPolicy, request{operation: "UPDATE", node: "a", old: csiClaim("a", driver),
			object: claimEdit(csiClaim("a", driver), func(c *v1.PersistentVolumeClaim) { c.Finalizers = append(c.Finalizers, cloning) })}, false},
		{"the cloning finalizer on another node's claim", on, claimPolicy, request{operation: "UPDATE", node: "a", old: csiClaim("b", driver),
			object: claimEdit(csiClaim("b", driver), func(c *v1.PersistentVolumeClaim) { c.Finalizers = append(c.Finalizers, cloning) })}, false},
		{"removing pvc-protection from its node's claim", on, claimPolicy, request{operation: "UPDATE", node: "a", old: csiClaim("a", driver),
			object: claimEdit(csiClaim("a", driver), func(c *v1.PersistentVolumeClaim) { c.Finalizers = nil })}, false},
		{"the cloning finalizer and a request change", on, claimPolicy, request{operation: "UPDATE", node: "a", old: csiClaim("a", driver),
			object: claimEdit(csiClaim("a", driver), func(c *v1.PersistentVolumeClaim) {
				c.Finalizers = append(c.Finalizers, cloning)
				c.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("9Gi")
			})}, false},
		{"the cloning finalizer and an annotation", on, claimPolicy, request{operation: "UPDATE", node: "a", old: csiClaim("a", driver),
			object: claimEdit(csiClaim("a", driver), func(c *v1.PersistentVolumeClaim) {
				c.Finalizers = append(c.Finalizers, cloning)
				c.Annotations["volume.kubernetes.io/selected-node"] = "b"
			})}, false},
		{"rescheduling its node's claim (selected-node removed)", on, claimPolicy, request{operation: "UPDATE", node: "a", old: csiClaim("a", driver),
			object: claimEdit(csiClaim("a", driver), func(c *v1.PersistentVolumeClaim) { delete(c.Annotations, "volume.kubernetes.io/selected-node") })}, true},
		{"rescheduling without csi.enabled", off, claimPolicy, request{operation: "UPDATE", node: "a", old: csiClaim("a", driver),
			object: claimEdit(csiClaim("a", driver), func(c *v1.PersistentVolumeClaim) { delete(c.Annotations, "volume.kubernetes.io/selected-node") })}, true},
	} {
		msg := admit(t, tc.objs[tc.policy], tc.r)
		if (msg == "") != tc.admit {
			t.Errorf("%s: admitted %v (%q), want %v", tc.what, msg == "", msg, tc.admit)
		}
	}
}
