package chart

import (
	"path"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/volume-agent/volume-agent/internal/provisioner/storagecapacity"
)

const (
	// csiValues turn both provisioners on with the CSI driver, as
	// deploy/daemonset.yaml's header says to add nfs-subdir.
	csiValues = "provisioners: [local, nfs-subdir]\ncsi: {enabled: true}"
	// driver is the CSI driver's name.
	driver = "local.volume-agent.io"
)

// TestCSIManifests: the chart's default values with csi.snapshotClass.create
// render deploy/daemonset.yaml and deploy/snapshotclass.yaml (but the
// Namespace); and with nfs-subdir among the provisioners they render
// deploy/daemonset.yaml edited as its header says (the flag, and the
// policy's variable nfsSubdir "true").
func TestCSIManifests(t *testing.T) {
	want := deployObjects(t)
	delete(want, "Namespace /volume-agent")
	for k, o := range fileObjects(t, snapshotClassFile) {
		if _, dup := want[k]; dup {
			t.Errorf("%s is in both %s and %s", k, deployFile, snapshotClassFile)
		}
		want[k] = o
	}
	got := render(t, DefaultRelease, readValues(t, "csi: {snapshotClass: {create: true}}"))
	for _, d := range diffObjects(got, want, sides{"the chart renders", deployFile + " and " + snapshotClassFile + " have"}) {
		t.Error(d)
	}

	want = deployObjects(t)
	delete(want, "Namespace /volume-agent")
	args := container(want)["args"].([]any)
	args[slices.Index(args, any("--provisioners=local"))] = "--provisioners=local,nfs-subdir"
	policyVariable(want["ValidatingAdmissionPolicy /volume-agent-node-persistentvolumes"], "nfsSubdir")["expression"] = "true"
	got = render(t, DefaultRelease, readValues(t, csiValues))
	for _, d := range diffObjects(got, want, sides{"the chart renders", deployFile + " edited for nfs-subdir has"}) {
		t.Error(d)
	}
}

// TestCSIValuesRefused: csi.enabled with provisioners that lack local is
// refused at install (helm install and helm template fail; helm lint only
// logs a template's fail at INFO), with a message that says what to set
// (the agent would refuse to start on every node); provisioners unset
// means local with the driver, none without.
func TestCSIValuesRefused(t *testing.T) {
	for _, values := range []string{
		"provisioners: []",
		"provisioners: [nfs-subdir]",
		"provisioners: [nfs-subdir]\ncsi: {enabled: true}",
	} {
		_, err := Render(chartDir, DefaultRelease, readValues(t, values))
		if err == nil || !strings.Contains(err.Error(), `csi.enabled is true but provisioners`) ||
			!strings.Contains(err.Error(), `lacks "local"`) || !strings.Contains(err.Error(), "csi.enabled: false") {
			t.Errorf("values %q: got error %v, want one saying provisioners lack local and what to set", values, err)
		}
	}
	for values, want := range map[string]string{
		"":                                  "--provisioners=local",
		"provisioners: null":                "--provisioners=local",
		"provisioners: [nfs-subdir, local]": "--provisioners=nfs-subdir,local",
		noCSIValues:                         "",
		"provisioners: []\n" + noCSIValues:  "",
		"provisioners: [nfs-subdir]\n" + noCSIValues: "--provisioners=nfs-subdir",
	} {
		objs := render(t, DefaultRelease, readValues(t, values))
		got := agentArg(objs, "--provisioners=")
		if got != "" {
			got = "--provisioners=" + got
		}
		if got != want {
			t.Errorf("values %q: agent's provisioners %q, want %q", values, got, want)
		}
	}
}

// TestServiceAccountModeWithCSI: identity=serviceAccount over the default
// values is deploy/daemonset.yaml edited as its header says (the
// --kubeconfig argument and the kubelet's volumes gone) with
// deploy/serviceaccount-mode.yaml.
func TestServiceAccountModeWithCSI(t *testing.T) {
	want := render(t, DefaultRelease, nil)
	serviceAccountMode(t)(want)
	got := render(t, DefaultRelease, readValues(t, "identity: serviceAccount"))
	for _, d := range diffObjects(got, want, sides{"identity=serviceAccount renders", "the default edited has"}) {
		t.Error(d)
	}
}

// TestNothingCSIWhenOff: with csi.enabled false (alone, with
// provisioners, in the service-account mode, with every other value set)
// and in deploy/daemonset-no-csi.yaml and deploy/provisioners.yaml, nothing of
// the CSI driver is rendered: no sidecar, flag, kubelet directory, RBAC,
// snapshot class or controller, and the policies' csi exceptions are off.
// The checks find each of those with csi.enabled, so they are not vacuous.
func TestNothingCSIWhenOff(t *testing.T) {
	every := readValues(t, everyValueSet)
	every["csi"] = map[string]any{"enabled": false}
	every["snapshotController"] = map[string]any{"enabled": false}
	off := map[string]objects{
		noCSIFile: fileObjects(t, noCSIFile),
		noCSIFile + " and " + provisionersFile: func() objects {
			o := fileObjects(t, noCSIFile)
			for k, v := range fileObjects(t, provisionersFile) {
				o[k] = v
			}
			return o
		}(),
		"the chart with " + noCSIValues:           render(t, DefaultRelease, readValues(t, noCSIValues)),
		"the chart with " + provisionerValues:     render(t, DefaultRelease, readValues(t, provisionerValues+"\n"+noCSIValues)),
		"the chart with identity=serviceAccount":  render(t, DefaultRelease, readValues(t, "identity: serviceAccount\n"+noCSIValues)),
		"the chart with every other value set":    render(t, DefaultRelease, every),
		"the chart with csi.snapshotClass values": render(t, DefaultRelease, readValues(t, "csi: {enabled: false, snapshotClass: {create: true, default: true}}")),
	}
	for what, objs := range off {
		if found := csiParts(objs); len(found) > 0 {
			t.Errorf("%s renders, without csi.enabled:\n%s", what, strings.Join(found, "\n"))
		}
	}
	on := render(t, DefaultRelease, readValues(t, csiValues+"\nsnapshotController: {enabled: true}\ncsi: {enabled: true, snapshotClass: {create: true}}"))
	if found := csiParts(on); len(found) < 10 {
		t.Errorf("with csi.enabled the check finds only %v", found)
	}
}

// csiParts lists what of the CSI driver objs hold.
func csiParts(objs objects) []string {
	var found []string
	for k, o := range objs {
		switch {
		case o.GetKind() == "VolumeSnapshotClass", o.GetKind() == "Deployment":
			found = append(found, k)
		case strings.Contains(o.GetName(), "csi-") || strings.Contains(o.GetName(), "snapshot"):
			found = append(found, k)
		case o.GetKind() == "ValidatingAdmissionPolicy" && policyVariable(o, "csi")["expression"] != "false":
			found = append(found, k+": variable csi "+show(policyVariable(o, "csi")["expression"]))
		}
	}
	s := podSpec(objs)
	for _, c := range s["containers"].([]any) {
		if name := c.(map[string]any)["name"]; name != "volume-agent" {
			found = append(found, "container "+show(name))
		}
	}
	for _, a := range container(objs)["args"].([]any) {
		if strings.HasPrefix(a.(string), "--csi-") || strings.HasPrefix(a.(string), "--kubelet-registration") {
			found = append(found, "argument "+a.(string))
		}
	}
	for _, v := range s["volumes"].([]any) {
		if p, _, _ := unstructured.NestedString(v.(map[string]any), "hostPath", "path"); strings.HasPrefix(p, "/var/lib/kubelet/") && p != "/var/lib/kubelet/pki" {
			found = append(found, "hostPath "+p)
		}
	}
	slices.Sort(found)
	return found
}

// TestCSIDaemonSet: with csi.enabled the agent's container gets the socket
// and registration flags and the kubelet's directories at the host's paths
// (the pods directory with Bidirectional propagation), the socket the agent
// makes is the one each sidecar dials, the sidecars run with exactly their
// flags and environment, and only the agent is privileged; with another
// kubelet root directory every path follows it. With the default values
// the agent runs the local provisioner, and gets the local path root and
// the reclaim delay once.
func TestCSIDaemonSet(t *testing.T) {
	for _, tc := range []struct {
		values, kubeletDir string
		rel                Release
	}{
		{csiValues, "/var/lib/kubelet", DefaultRelease},
		{"csi: {enabled: true, kubeletDir: /var/lib/k0s/kubelet}", "/var/lib/k0s/kubelet", Release{Name: "agents", Namespace: "storage"}},
	} {
		t.Run(tc.kubeletDir, func(t *testing.T) {
			objs := render(t, tc.rel, readValues(t, tc.values))
			checkAgentCSI(t, objs, tc.kubeletDir)
			checkSidecars(t, objs, tc.rel.Namespace)
			if got := podSpec(objs)["automountServiceAccountToken"]; got != true {
				t.Errorf("automountServiceAccountToken %v, want true: the sidecars use the token", got)
			}
		})
	}
	// The default values: the local provisioner, whose root and reclaim
	// delay the CSI volumes share, each flag once.
	args := stringsOf(container(render(t, DefaultRelease, nil))["args"])
	for _, want := range []string{"--provisioners=local", "--local-path-root=/var/lib/volume-agent-local", "--reclaim-delay=10m"} {
		flag, _, _ := strings.Cut(want, "=")
		if n := len(slices.DeleteFunc(slices.Clone(args), func(a string) bool { return !strings.HasPrefix(a, flag+"=") })); n != 1 || !slices.Contains(args, want) {
			t.Errorf("the default values: the agent's args %v, want %s once", args, want)
		}
	}
}

// checkAgentCSI checks the agent container's CSI flags and mounts.
func checkAgentCSI(t *testing.T, objs objects, kubeletDir string) {
	t.Helper()
	socket := kubeletDir + "/plugins/" + driver + "/csi.sock"
	registration := kubeletDir + "/plugins_registry"
	var csiArgs []string
	for _, a := range container(objs)["args"].([]any) {
		if s := a.(string); strings.HasPrefix(s, "--csi-") || strings.HasPrefix(s, "--kubelet-registration") {
			csiArgs = append(csiArgs, s)
		}
	}
	if want := []string{"--csi-endpoint=" + socket, "--kubelet-registration-dir=" + registration}; !slices.Equal(csiArgs, want) {
		t.Errorf("the agent's CSI args %v, want %v", csiArgs, want)
	}
	for _, m := range []struct {
		path, hostType, propagation string
	}{
		// The socket's directory, at the path the registration names.
		{path.Dir(socket), "DirectoryOrCreate", ""},
		{registration, "Directory", ""},
		// NodePublishVolume's bind mounts must reach the host.
		{kubeletDir + "/pods", "Directory", "Bidirectional"},
	} {
		mount := mountAt(volumeMounts(objs), m.path)
		if mount == nil {
			t.Errorf("the agent mounts nothing at %s", m.path)
			continue
		}
		if got, _ := mount["mountPropagation"].(string); got != m.propagation {
			t.Errorf("the agent's mount at %s has propagation %q, want %q", m.path, got, m.propagation)
		}
		if mount["readOnly"] == true {
			t.Errorf("the agent's mount at %s is read-only", m.path)
		}
		hp := hostPath(objs, mount["name"].(string))
		if hp["path"] != m.path || hp["type"] != m.hostType {
			t.Errorf("the agent's mount at %s is of hostPath %v, want path %s, type %s (the same path on the host)", m.path, hp, m.path, m.hostType)
		}
	}
}

// mountAt returns the mount of mounts at path, or nil.
func mountAt(mounts []any, path string) map[string]any {
	for _, m := range mounts {
		if m.(map[string]any)["mountPath"] == path {
			return m.(map[string]any)
		}
	}
	return nil
}

// The sidecars' expected flags and environment variables (name: the
// downward API field), in order.
var sidecars = []struct {
	name string
	args func(namespace string) []string
	env  []string
}{{
	name: "csi-provisioner",
	args: func(string) []string {
		return []string{"--csi-address=/csi/csi.sock", "--node-deployment=true", "--node-deployment-immediate-binding=false",
			"--enable-capacity", "--capacity-ownerref-level=1", "--extra-create-metadata", "--retry-interval-max=1m", "--leader-election=false"}
	},
	env: []string{"NODE_NAME: spec.nodeName", "NAMESPACE: metadata.namespace", "POD_NAME: metadata.name"},
}, {
	name: "csi-resizer",
	args: func(ns string) []string {
		return []string{"--csi-address=/csi/csi.sock", "--leader-election=true", "--leader-election-namespace=" + ns, "--handle-volume-inuse-error=false"}
	},
}, {
	name: "csi-snapshotter",
	args: func(string) []string {
		return []string{"--csi-address=/csi/csi.sock", "--node-deployment=true", "--leader-election=false", "--feature-gates=CSIVolumeGroupSnapshot=false",
			"--retry-interval-max=1m"}
	},
	env: []string{"NODE_NAME: spec.nodeName"},
}}

// checkSidecars checks the sidecar containers against sidecars, their
// socket against the agent's, and their privileges.
func checkSidecars(t *testing.T, objs objects, namespace string) {
	t.Helper()
	containers := podSpec(objs)["containers"].([]any)
	var names []string
	for _, c := range containers {
		names = append(names, c.(map[string]any)["name"].(string))
	}
	if want := []string{"volume-agent", "csi-provisioner", "csi-resizer", "csi-snapshotter"}; !slices.Equal(names, want) {
		t.Fatalf("containers %v, want %v", names, want)
	}
	socket := strings.TrimPrefix(agentArg(objs, "--csi-endpoint="), "unix://")
	socketVolume := mountAt(volumeMounts(objs), path.Dir(socket))["name"]
	for i, sc := range sidecars {
		c := containers[i+1].(map[string]any)
		if got := stringsOf(c["args"]); !slices.Equal(got, sc.args(namespace)) {
			t.Errorf("%s: args %v, want %v", sc.name, got, sc.args(namespace))
		}
		if got := envFields(c); !slices.Equal(got, sc.env) {
			t.Errorf("%s: env %v, want %v", sc.name, got, sc.env)
		}
		// The socket the agent makes is the one the sidecar dials.
		want := []any{map[string]any{"name": socketVolume, "mountPath": "/csi"}}
		if show(c["volumeMounts"]) != show(want) {
			t.Errorf("%s: volumeMounts %s, want %s (the agent's socket directory)", sc.name, show(c["volumeMounts"]), show(want))
		}
		if got := "/csi/" + path.Base(socket); !slices.Contains(stringsOf(c["args"]), "--csi-address="+got) {
			t.Errorf("%s does not dial the agent's socket %s, mounted at %s", sc.name, socket, got)
		}
		wantSec := `{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]},"privileged":false,"readOnlyRootFilesystem":true,"seccompProfile":{"type":"RuntimeDefault"}}`
		if got := show(c["securityContext"]); got != wantSec {
			t.Errorf("%s: securityContext %s, want %s", sc.name, got, wantSec)
		}
		if r, _ := c["resources"].(map[string]any); r["requests"] == nil || r["limits"] == nil {
			t.Errorf("%s: resources %v, want requests and limits", sc.name, c["resources"])
		}
		if image, _ := c["image"].(string); !strings.HasPrefix(image, "registry.k8s.io/sig-storage/"+sc.name+":v") {
			t.Errorf("%s: image %q, want registry.k8s.io/sig-storage/%s:<version> by default", sc.name, image, sc.name)
		}
	}
	if sec := container(objs)["securityContext"]; show(sec) != `{"privileged":true}` {
		t.Errorf("the agent's securityContext %s, want privileged (it mounts)", show(sec))
	}
}

// agentArg returns the agent's argument with prefix, or "".
func agentArg(objs objects, prefix string) string {
	for _, a := range container(objs)["args"].([]any) {
		if strings.HasPrefix(a.(string), prefix) {
			return strings.TrimPrefix(a.(string), prefix)
		}
	}
	return ""
}

// envFields lists a container's environment as "NAME: fieldPath".
func envFields(c map[string]any) []string {
	var out []string
	for _, e := range sliceOf(c["env"]) {
		field, _, _ := unstructured.NestedString(e.(map[string]any), "valueFrom", "fieldRef", "fieldPath")
		out = append(out, e.(map[string]any)["name"].(string)+": "+field)
	}
	return out
}

func sliceOf(v any) []any { l, _ := v.([]any); return l }

func stringsOf(v any) []string {
	var out []string
	for _, e := range sliceOf(v) {
		out = append(out, e.(string))
	}
	return out
}

// TestCSIImages: the sidecars' images are values, as the tests set them for
// images built from the module proxy.
func TestCSIImages(t *testing.T) {
	objs := render(t, DefaultRelease, readValues(t, `
csi:
  enabled: true
  provisioner: {image: volume-agent.test/csi-provisioner:e2e}
  resizer: {image: volume-agent.test/csi-resizer:e2e}
  snapshotter: {image: volume-agent.test/csi-snapshotter:e2e}
image: {pullPolicy: Never}`))
	for _, c := range podSpec(objs)["containers"].([]any)[1:] {
		c := c.(map[string]any)
		if want := "volume-agent.test/" + c["name"].(string) + ":e2e"; c["image"] != want || c["imagePullPolicy"] != "Never" {
			t.Errorf("%s: image %v (%v), want %s (Never)", c["name"], c["image"], c["imagePullPolicy"], want)
		}
	}
}

// TestCSIDriver: one CSIDriver, with exactly the fields the driver needs,
// whether rendered for the CSI driver or for the provisioners' capacity
// alone, in the chart and in deploy/provisioners.yaml: turning CSI on
// changes none of them.
func TestCSIDriver(t *testing.T) {
	want := `{"attachRequired":false,"fsGroupPolicy":"File","podInfoOnMount":true,"requiresRepublish":false,"seLinuxMount":false,"storageCapacity":true,"volumeLifecycleModes":["Persistent"]}`
	for what, objs := range map[string]objects{
		provisionersFile:                      fileObjects(t, provisionersFile),
		"the chart with " + provisionerValues: render(t, DefaultRelease, readValues(t, provisionerValues)),
		"the chart with csi.enabled":          render(t, DefaultRelease, readValues(t, "csi: {enabled: true}")),
		"the chart with " + csiValues:         render(t, DefaultRelease, readValues(t, csiValues)),
	} {
		var drivers []string
		for k, o := range objs {
			if o.GetKind() == "CSIDriver" {
				drivers = append(drivers, k)
			}
		}
		if !slices.Equal(drivers, []string{"CSIDriver /" + driver}) {
			t.Errorf("%s: CSIDrivers %v, want %s alone", what, drivers, driver)
			continue
		}
		if got := show(objs["CSIDriver /"+driver].Object["spec"]); got != want {
			t.Errorf("%s: CSIDriver spec\n%s\nwant\n%s", what, got, want)
		}
	}
	// The agent makes the same object where none exists.
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&storagecapacity.Driver(driver).Spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := show(spec); got != want {
		t.Errorf("the agent's CSIDriver spec\n%s\nwant\n%s", got, want)
	}
}

// TestCSIRBAC: each sidecar's ClusterRole and Role hold exactly the rules
// it needs (read from its code and upstream RBAC), bound to the agent's
// ServiceAccount, the Roles in the release's namespace; and nothing CSI
// grants Secrets.
func TestCSIRBAC(t *testing.T) {
	rel := Release{Name: "agents", Namespace: "storage"}
	objs := render(t, rel, readValues(t, "csi: {enabled: true}"))
	const sa = "storage/agents-volume-agent"
	want := map[string][]string{
		"ClusterRole /agents-volume-agent-csi-provisioner": {
			"/persistentvolumes: get list watch create patch delete",
			"/persistentvolumeclaims: get list watch update",
			"storage.k8s.io/storageclasses: get list watch",
			"/events: create update patch",
			"snapshot.storage.k8s.io/volumesnapshots: get list watch update",
			"snapshot.storage.k8s.io/volumesnapshotcontents: get list",
		},
		"Role storage/agents-volume-agent-csi-provisioner": {
			"storage.k8s.io/csistoragecapacities: get list watch create update delete",
			"/pods: get",
		},
		"ClusterRole /agents-volume-agent-csi-resizer": {
			"/persistentvolumes: get list watch patch",
			"/persistentvolumeclaims: get list watch",
			"/persistentvolumeclaims/status: patch",
			"/events: create update patch",
		},
		"Role storage/agents-volume-agent-csi-resizer": {
			"coordination.k8s.io/leases: create",
			"coordination.k8s.io/leases[external-resizer-local-volume-agent-io]: get update",
		},
		"ClusterRole /agents-volume-agent-csi-snapshotter": {
			"snapshot.storage.k8s.io/volumesnapshotclasses: get list watch",
			"snapshot.storage.k8s.io/volumesnapshotcontents: get list watch update patch",
			"snapshot.storage.k8s.io/volumesnapshotcontents/status: update patch",
			"/events: create update patch",
		},
	}
	for k, rules := range want {
		o := objs[k]
		if o == nil {
			t.Errorf("%s is not rendered", k)
			continue
		}
		if got := ruleStrings(o); !slices.Equal(got, rules) {
			t.Errorf("%s: rules\n%s\nwant\n%s", k, strings.Join(got, "\n"), strings.Join(rules, "\n"))
		}
		if bound := boundTo(objs, o); !slices.Equal(bound, []string{sa}) {
			t.Errorf("%s is bound to %v, want %s", k, bound, sa)
		}
		if len(secretRules(o.Object)) > 0 {
			t.Errorf("%s grants secrets", k)
		}
	}
	// Every CSI RBAC object is one of the above, or binds one.
	for k, o := range objs {
		if strings.Contains(k, "csi-") && strings.HasSuffix(o.GetKind(), "Role") && want[k] == nil {
			t.Errorf("%s: not a role the test knows", k)
		}
	}
	// The resizer's Lease is where its leader election looks.
	if ns := agentSidecarArg(objs, "csi-resizer", "--leader-election-namespace="); ns != rel.Namespace {
		t.Errorf("csi-resizer elects its leader in namespace %q, where its Role is not", ns)
	}
	if off := render(t, rel, readValues(t, "csi: {enabled: true}\nrbac: {create: false}")); len(csiRoles(off)) > 0 {
		t.Errorf("rbac.create=false renders %v", csiRoles(off))
	}
}

func csiRoles(objs objects) []string {
	var out []string
	for k := range objs {
		if strings.Contains(k, "Role") && (strings.Contains(k, "csi-") || strings.Contains(k, "snapshot")) {
			out = append(out, k)
		}
	}
	return out
}

// agentSidecarArg returns the value of the argument with prefix of the
// pod's container name.
func agentSidecarArg(objs objects, name, prefix string) string {
	c := named(podSpec(objs)["containers"].([]any), name)
	for _, a := range stringsOf(c["args"]) {
		if strings.HasPrefix(a, prefix) {
			return strings.TrimPrefix(a, prefix)
		}
	}
	return ""
}

// ruleStrings prints a role's rules as "group/resource[names]: verbs".
func ruleStrings(o *unstructured.Unstructured) []string {
	var out []string
	for _, r := range sliceOf(o.Object["rules"]) {
		rule := r.(map[string]any)
		groups, resources, verbs := stringsOf(rule["apiGroups"]), stringsOf(rule["resources"]), stringsOf(rule["verbs"])
		names := ""
		if n := stringsOf(rule["resourceNames"]); len(n) > 0 {
			names = "[" + strings.Join(n, " ") + "]"
		}
		for _, g := range groups {
			for _, res := range resources {
				out = append(out, g+"/"+res+names+": "+strings.Join(verbs, " "))
			}
		}
	}
	return out
}

// boundTo lists the subjects (namespace/name) of the bindings of objs that
// name role.
func boundTo(objs objects, role *unstructured.Unstructured) []string {
	var out []string
	for _, b := range objs {
		if b.GetKind() != role.GetKind()+"Binding" || b.GetNamespace() != role.GetNamespace() {
			continue
		}
		if name, _, _ := unstructured.NestedString(b.Object, "roleRef", "name"); name != role.GetName() {
			continue
		}
		for _, s := range subjects(b) {
			ns, _ := s["namespace"].(string)
			out = append(out, ns+"/"+s["name"].(string))
		}
	}
	slices.Sort(out)
	return out
}

// TestSnapshotClass: with csi.enabled and snapshotClass.create a
// VolumeSnapshotClass of the driver, deletionPolicy Delete, the default
// class unless told otherwise; none by default (it needs the snapshot
// CRDs, without which the install would fail) nor without csi.enabled.
func TestSnapshotClass(t *testing.T) {
	for _, tc := range []struct {
		values string
		want   string // the class's JSON, "" for none
	}{
		{"", ""}, // off by default: it needs the snapshot CRDs
		{"csi: {snapshotClass: {create: true}}", `{"apiVersion":"snapshot.storage.k8s.io/v1","deletionPolicy":"Delete","driver":"local.volume-agent.io","kind":"VolumeSnapshotClass","metadata":{"annotations":{"snapshot.storage.kubernetes.io/is-default-class":"true"},"name":"volume-agent-local"}}`},
		{"csi: {snapshotClass: {create: true, default: false}}", `{"apiVersion":"snapshot.storage.k8s.io/v1","deletionPolicy":"Delete","driver":"local.volume-agent.io","kind":"VolumeSnapshotClass","metadata":{"name":"volume-agent-local"}}`},
		{"csi: {enabled: false, snapshotClass: {create: true}}", ""},
	} {
		var got []string
		for _, o := range render(t, DefaultRelease, readValues(t, tc.values)) {
			if o.GetKind() == "VolumeSnapshotClass" {
				got = append(got, show(o.Object))
			}
		}
		want := []string{tc.want}
		if tc.want == "" {
			want = nil
		}
		if !slices.Equal(got, want) {
			t.Errorf("values %q: snapshot classes %v, want %v", tc.values, got, want)
		}
	}
}

// TestSnapshotController: snapshotController.enabled renders the upstream
// snapshot-controller with distributed snapshotting (which the
// node-deployed csi-snapshotters need) and leader election in the release's
// namespace, under its own ServiceAccount and RBAC, unprivileged.
func TestSnapshotController(t *testing.T) {
	rel := Release{Name: "agents", Namespace: "storage"}
	objs := render(t, rel, readValues(t, "snapshotController: {enabled: true}"))
	d := objs["Deployment storage/agents-volume-agent-snapshot-controller"]
	if d == nil {
		t.Fatalf("no snapshot-controller Deployment: %v", keys(objs))
	}
	spec, _, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec")
	if spec["serviceAccountName"] != "agents-volume-agent-snapshot-controller" {
		t.Errorf("serviceAccountName %v", spec["serviceAccountName"])
	}
	c := spec["containers"].([]any)[0].(map[string]any)
	wantArgs := []string{"--leader-election=true", "--leader-election-namespace=storage", "--enable-distributed-snapshotting=true"}
	if got := stringsOf(c["args"]); !slices.Equal(got, wantArgs) {
		t.Errorf("args %v, want %v", got, wantArgs)
	}
	if c["image"] != "registry.k8s.io/sig-storage/snapshot-controller:v8.7.0" {
		t.Errorf("image %v", c["image"])
	}
	if sec, _ := c["securityContext"].(map[string]any); sec["privileged"] != false || sec["readOnlyRootFilesystem"] != true {
		t.Errorf("securityContext %v", show(sec))
	}
	role := objs["ClusterRole /agents-volume-agent-snapshot-controller"]
	if role == nil || !slices.Contains(ruleStrings(role), "/nodes: get list watch") {
		t.Errorf("the snapshot-controller's ClusterRole does not read Nodes (distributed snapshotting)")
	}
	for _, k := range []string{"ClusterRole /agents-volume-agent-snapshot-controller", "Role storage/agents-volume-agent-snapshot-controller"} {
		if bound := boundTo(objs, objs[k]); !slices.Equal(bound, []string{"storage/agents-volume-agent-snapshot-controller"}) {
			t.Errorf("%s is bound to %v, want its own ServiceAccount", k, bound)
		}
	}
	if got := ruleStrings(objs["Role storage/agents-volume-agent-snapshot-controller"]); !slices.Equal(got, []string{
		"coordination.k8s.io/leases: create", "coordination.k8s.io/leases[snapshot-controller-leader]: get update"}) {
		t.Errorf("its leader election Role: %v", got)
	}
	if _, ok := render(t, rel, nil)["Deployment storage/agents-volume-agent-snapshot-controller"]; ok {
		t.Error("the default values render a snapshot-controller")
	}
}

func keys(objs objects) []string {
	var out []string
	for k := range objs {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestNotesCSI: with csi.enabled, what helm install prints names the
// socket, how to see the registration, and what snapshots need.
func TestNotesCSI(t *testing.T) {
	text, err := Notes(chartDir, DefaultRelease, readValues(t, "csi: {enabled: true, kubeletDir: /var/lib/k0s/kubelet}"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/var/lib/k0s/kubelet/plugins/local.volume-agent.io/csi.sock", "kubectl get csinodes", "client/config/crd", "--enable-distributed-snapshotting"} {
		if !strings.Contains(text, want) {
			t.Errorf("NOTES.txt with csi.enabled lacks %q:\n%s", want, text)
		}
	}
	if text, _ := Notes(chartDir, DefaultRelease, readValues(t, noCSIValues)); strings.Contains(text, "CSI") {
		t.Errorf("NOTES.txt without csi.enabled speaks of CSI:\n%s", text)
	}
}
