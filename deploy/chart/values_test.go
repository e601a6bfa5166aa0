package chart

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestValues renders the chart with a few values set over noCSIValues and
// compares the whole rendering with that of noCSIValues alone
// (deploy/daemonset-no-csi.yaml) edited by hand as the value should change
// it: each value changes what it should and nothing else.
func TestValues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values string // as in a helm install -f file
		edit   func(objects)
	}{{
		// What deploy/daemonset-no-csi.yaml's comments say to do to turn
		// provisioning on: the flags, the token, deploy/provisioners.yaml.
		// The mount of the local path root is in the default rendering.
		name:   "provisioners on: the flags, the token and deploy/provisioners.yaml",
		values: `provisioners: [local, nfs-subdir]`,
		edit: func(o objects) {
			provisionersOn(t)(o)
			addArgs(o, "--provisioners=local,nfs-subdir", "--local-path-root=/var/lib/volume-agent-local", "--reclaim-delay=10m")
		},
	}, {
		// Without nfs-subdir, no agent may write a PV that names no node.
		name:   "provisioners with another local path root and reclaim delay, without nfs-subdir",
		values: "provisioners: [local]\nlocalPathRoot: /srv/volumes\nreclaimDelay: 0s",
		edit: func(o objects) {
			provisionersOn(t)(o)
			addArgs(o, "--provisioners=local", "--local-path-root=/srv/volumes", "--reclaim-delay=0s")
			named(volumeMounts(o), "local-path-root")["mountPath"] = "/srv/volumes"
			hostPath(o, "local-path-root")["path"] = "/srv/volumes"
			policyVariable(o["ValidatingAdmissionPolicy /volume-agent-node-persistentvolumes"], "nfsSubdir")["expression"] = "false"
		},
	}, {
		name:   "provisioners without nodeRestriction: no admission policies",
		values: "provisioners: [local]\nnodeRestriction: false",
		edit: func(o objects) {
			provisionersOn(t)(o)
			addArgs(o, "--provisioners=local", "--local-path-root=/var/lib/volume-agent-local", "--reclaim-delay=10m")
			for k := range o {
				if strings.HasPrefix(k, "ValidatingAdmissionPolicy") {
					delete(o, k)
				}
			}
		},
	}, {
		name:   "nodeRestriction alone renders nothing more",
		values: "nodeRestriction: true",
		edit:   func(objects) {},
	}, {
		name:   "rbac.create=false renders no RBAC",
		values: `rbac: {create: false}`,
		edit: func(o objects) {
			for k := range o {
				if strings.HasPrefix(k, "ClusterRole") || strings.HasPrefix(k, "Role") {
					delete(o, k)
				}
			}
		},
	}, {
		name:   "priorityClassName, and the quota for that class",
		values: `priorityClassName: system-cluster-critical`,
		edit: func(o objects) {
			podSpec(o)["priorityClassName"] = "system-cluster-critical"
			q := o["ResourceQuota volume-agent/volume-agent-node-critical"]
			delete(o, key(q))
			q.SetName("volume-agent-cluster-critical")
			scope := q.Object["spec"].(map[string]any)["scopeSelector"].(map[string]any)["matchExpressions"].([]any)[0]
			scope.(map[string]any)["values"] = []any{"system-cluster-critical"}
			o[key(q)] = q
		},
	}, {
		name:   "no priority class, no quota",
		values: `priorityClassName: ""`,
		edit: func(o objects) {
			delete(podSpec(o), "priorityClassName")
			delete(o, "ResourceQuota volume-agent/volume-agent-node-critical")
		},
	}, {
		name:   "metricsAddr: the flag and its host port",
		values: `metricsAddr: 0.0.0.0:9811`,
		edit: func(o objects) {
			addArgs(o, "--metrics-addr=0.0.0.0:9811")
			c := container(o)
			c["ports"] = append(c["ports"].([]any), map[string]any{"name": "metrics", "containerPort": float64(9811), "hostPort": float64(9811)})
		},
	}, {
		name:   "statusSocketGroup: the flag, after --status-addr",
		values: `statusSocketGroup: 4242`,
		edit: func(o objects) {
			c := container(o)
			args := c["args"].([]any)
			i := slices.Index(args, any("--status-addr=unix:///run/volume-agent/status.sock"))
			c["args"] = slices.Insert(args, i+1, any("--status-socket-group=4242"))
		},
	}, {
		// The node identity has no ClusterRole whose rule would go.
		name:   "mintTokens=false: the flag",
		values: `mintTokens: false`,
		edit:   func(o objects) { addArgs(o, "--mint-tokens=false") },
	}, {
		// What deploy/daemonset-no-csi.yaml's header says to do for this mode.
		name:   "identity=serviceAccount: deploy/serviceaccount-mode.yaml, no node credentials",
		values: `identity: serviceAccount`,
		edit:   serviceAccountMode(t),
	}, {
		name:   "identity=serviceAccount and mintTokens=false: the flag, and no TokenRequest rule",
		values: "identity: serviceAccount\nmintTokens: false",
		edit: func(o objects) {
			serviceAccountMode(t)(o)
			addArgs(o, "--mint-tokens=false")
			role := o["ClusterRole /volume-agent"].Object
			role["rules"] = slices.DeleteFunc(role["rules"].([]any), func(r any) bool {
				return slices.Contains(r.(map[string]any)["resources"].([]any), "serviceaccounts/token")
			})
		},
	}, {
		name:   "nodeIdentity: k3s's paths",
		values: "nodeIdentity: {kubeconfig: /var/lib/rancher/k3s/agent/kubelet.kubeconfig, credentialDir: /var/lib/rancher/k3s/agent}",
		edit: func(o objects) {
			args := container(o)["args"].([]any)
			args[slices.Index(args, any(kubeletKubeconfigArg))] = "--kubeconfig=/var/lib/rancher/k3s/agent/kubelet.kubeconfig"
			named(volumeMounts(o), "kubelet-kubeconfig")["mountPath"] = "/var/lib/rancher/k3s/agent/kubelet.kubeconfig"
			hostPath(o, "kubelet-kubeconfig")["path"] = "/var/lib/rancher/k3s/agent/kubelet.kubeconfig"
			named(volumeMounts(o), "kubelet-credentials")["mountPath"] = "/var/lib/rancher/k3s/agent"
			hostPath(o, "kubelet-credentials")["path"] = "/var/lib/rancher/k3s/agent"
		},
	}, {
		name:   "nodeIdentity without a credential directory: the kubeconfig alone",
		values: "nodeIdentity: {kubeconfig: /etc/kubernetes/kubelet.conf, credentialDir: \"\"}",
		edit:   func(o objects) { dropVolume(o, "kubelet-credentials") },
	}, {
		name: "image, nodeIdentity and extraEnv, as the real-node test sets them",
		values: `
image: {repository: volume-agent.test/volume-agent, tag: e2e}
nodeIdentity: {kubeconfig: /var/lib/kubelet/kubeconfig, credentialDir: /var/lib/kubelet/pki}
extraEnv: [{name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}, {name: KUBERNETES_SERVICE_PORT, value: "6443"}]`,
		edit: func(o objects) {
			c := container(o)
			args := c["args"].([]any)
			args[slices.Index(args, any(kubeletKubeconfigArg))] = "--kubeconfig=/var/lib/kubelet/kubeconfig"
			named(volumeMounts(o), "kubelet-kubeconfig")["mountPath"] = "/var/lib/kubelet/kubeconfig"
			hostPath(o, "kubelet-kubeconfig")["path"] = "/var/lib/kubelet/kubeconfig"
			c["image"] = "volume-agent.test/volume-agent:e2e"
			c["env"] = append(c["env"].([]any),
				map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
				map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": "6443"})
		},
	}, {
		name: "nodeSelector, tolerations and resources",
		values: `
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: storage, operator: Exists, effect: NoSchedule}]
resources: {requests: {cpu: 50m, memory: 128Mi}, limits: {memory: 1Gi}}`,
		edit: func(o objects) {
			s := podSpec(o)
			s["nodeSelector"] = map[string]any{"kubernetes.io/os": "linux"}
			s["tolerations"] = []any{map[string]any{"key": "storage", "operator": "Exists", "effect": "NoSchedule"}}
			container(o)["resources"] = map[string]any{
				"requests": map[string]any{"cpu": "50m", "memory": "128Mi"},
				"limits":   map[string]any{"memory": "1Gi"},
			}
		},
	}, {
		name:   "rootDir: the flag, the mount and the host path",
		values: `rootDir: /srv/volume-agent`,
		edit: func(o objects) {
			container(o)["args"].([]any)[0] = "--root-dir=/srv/volume-agent"
			named(volumeMounts(o), "root-dir")["mountPath"] = "/srv/volume-agent"
			hostPath(o, "root-dir")["path"] = "/srv/volume-agent"
		},
	}, {
		name:   "extraArgs",
		values: `extraArgs: [--log-level=debug, --kube-api-qps=20]`,
		edit:   func(o objects) { addArgs(o, "--log-level=debug", "--kube-api-qps=20") },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			want := render(t, DefaultRelease, readValues(t, noCSIValues))
			tc.edit(want)
			values := readValues(t, noCSIValues)
			for k, v := range readValues(t, tc.values) {
				values[k] = v
			}
			got := render(t, DefaultRelease, values)
			for _, d := range diffObjects(got, want, sides{"the values render", "the default edited has"}) {
				t.Error(d)
			}
		})
	}
}

// TestReleaseName: another release name and namespace name every object
// and reference after them.
func TestReleaseName(t *testing.T) {
	got := render(t, Release{Name: "agents", Namespace: "storage"}, readValues(t, "provisioners: [local, nfs-subdir]\n"+noCSIValues))
	var keys []string
	for k, o := range got {
		keys = append(keys, k)
		for _, s := range subjects(o) {
			if s["name"] != "agents-volume-agent" || s["namespace"] != "storage" {
				t.Errorf("%s: subject %v, want the ServiceAccount storage/agents-volume-agent", k, s)
			}
		}
		if o.GetKind() == "ValidatingAdmissionPolicy" && !strings.Contains(show(o.Object["spec"]), "system:serviceaccount:storage:agents-volume-agent'") {
			t.Errorf("%s: does not match the ServiceAccount storage/agents-volume-agent: %s", k, show(o.Object["spec"]))
		}
		if policy, _, _ := unstructured.NestedString(o.Object, "spec", "policyName"); policy != "" && got["ValidatingAdmissionPolicy /"+policy] == nil {
			t.Errorf("%s: binds the policy %s, which the chart does not render", k, policy)
		}
	}
	slices.Sort(keys)
	want := []string{
		"CSIDriver /local.volume-agent.io", // named after the provisioner, whatever the release
		"ClusterRole /agents-volume-agent-provisioner",
		"ClusterRoleBinding /agents-volume-agent-provisioner",
		"DaemonSet storage/agents-volume-agent",
		"ResourceQuota storage/agents-volume-agent-node-critical",
		"Role storage/agents-volume-agent-leader-election",
		"Role storage/agents-volume-agent-storage-capacity",
		"RoleBinding storage/agents-volume-agent-leader-election",
		"RoleBinding storage/agents-volume-agent-storage-capacity",
		"ServiceAccount storage/agents-volume-agent",
		"ValidatingAdmissionPolicy /agents-volume-agent-node-claims",
		"ValidatingAdmissionPolicy /agents-volume-agent-node-persistentvolumes",
		"ValidatingAdmissionPolicyBinding /agents-volume-agent-node-claims",
		"ValidatingAdmissionPolicyBinding /agents-volume-agent-node-persistentvolumes",
	}
	if !slices.Equal(keys, want) {
		t.Errorf("objects:\n%s\nwant\n%s", strings.Join(keys, "\n"), strings.Join(want, "\n"))
	}
	if sa := podSpec(got)["serviceAccountName"]; sa != "agents-volume-agent" {
		t.Errorf("DaemonSet serviceAccountName %v, want agents-volume-agent", sa)
	}
}

// TestValuesRefused: values.schema.json refuses values the templates would
// render into a broken DaemonSet, or ignore, and names the value.
func TestValuesRefused(t *testing.T) {
	for _, tc := range []struct{ values, names string }{
		{`provisioners: local`, "/provisioners"},                                 // a string, not a list
		{`provisioners: [lokal]`, "/provisioners"},                               // no such provisioner
		{`provisoners: [local]`, "'provisoners'"},                                // misspelt: would be ignored
		{`rbac: {enabled: false}`, "'enabled'"},                                  // the same
		{`metricsAddr: 0.0.0.0`, "/metricsAddr"},                                 // no port to declare
		{`statusSocketGroup: wheel`, "/statusSocketGroup"},                       // the image has not the node's groups
		{`reclaimDelay: 10 minutes`, "/reclaimDelay"},                            // not a Go duration
		{`rootDir: var/lib/volume-agent`, "/rootDir"},                            // relative
		{`image: {repository: ""}`, "/image/repository"},                         // no image
		{`provisioners: local`, "/provisioners"},                                 // a string, not a list
		{`provisioners: [lokal]`, "/provisioners"},                               // no such provisioner
		{`provisoners: [local]`, "'provisoners'"},                                // misspelt: would be ignored
		{`rbac: {enabled: false}`, "'enabled'"},                                  // the same
		{`metricsAddr: 0.0.0.0`, "/metricsAddr"},                                 // no port to declare
		{`reclaimDelay: 10 minutes`, "/reclaimDelay"},                            // not a Go duration
		{`rootDir: var/lib/volume-agent`, "/rootDir"},                            // relative
		{`image: {repository: ""}`, "/image/repository"},                         // no image
		{`identity: nodes`, "/identity"},                                         // no such identity
		{`nodeIdentity: {kubeconfig: kubelet.conf}`, "/nodeIdentity/kubeconfig"}, // relative
		{`nodeIdentity: {kubeconfg: /k}`, "'kubeconfg'"},                         // misspelt
		{`csi: {enabeld: true}`, "'enabeld'"},                                    // misspelt: CSI would stay off
		{`csi: {kubeletDir: var/lib/kubelet}`, "/csi/kubeletDir"},                // relative
		{`csi: {kubeletDir: /var/lib/kubelet/}`, "/csi/kubeletDir"},              // the socket path would hold "//"
		{`csi: {provisioner: {image: ""}}`, "/csi/provisioner/image"},            // no image
		{`csi: {snapshotter: {imag: x}}`, "'imag'"},                              // misspelt
		{`csi: {snapshotClass: {create: "yes"}}`, "/csi/snapshotClass/create"},   // not a boolean
		{`snapshotController: {image: ""}`, "/snapshotController/image"},         // no image
	} {
		_, err := Render(chartDir, DefaultRelease, readValues(t, tc.values))
		if err == nil || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("values %q: got error %v, want one naming %s", tc.values, err, tc.names)
		}
	}
}

// TestNotes renders what helm install prints.
func TestNotes(t *testing.T) {
	for _, values := range []string{"", everyValueSet} {
		text, err := Notes(chartDir, DefaultRelease, readValues(t, values))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text, "kubectl label namespace volume-agent pod-security.kubernetes.io/enforce=privileged") {
			t.Errorf("NOTES.txt (values %q) does not say how to label the namespace:\n%s", values, text)
		}
	}
}

// kubeletKubeconfigArg is the default node identity's flag.
const kubeletKubeconfigArg = "--kubeconfig=/etc/kubernetes/kubelet.conf"

// serviceAccountMode edits the rendering of noCSIValues as
// deploy/daemonset-no-csi.yaml's header says to switch to the service-account
// mode: the --kubeconfig argument and the kubelet's volumes go, the
// ServiceAccount's token is mounted, and the objects of
// deploy/serviceaccount-mode.yaml come.
func serviceAccountMode(t *testing.T) func(objects) {
	return func(o objects) {
		c := container(o)
		c["args"] = slices.DeleteFunc(c["args"].([]any), func(a any) bool { return a == kubeletKubeconfigArg })
		dropVolume(o, "kubelet-kubeconfig")
		dropVolume(o, "kubelet-credentials")
		podSpec(o)["automountServiceAccountToken"] = true
		for k, obj := range fileObjects(t, serviceAccountFile) {
			o[k] = obj
		}
	}
}

// provisionersOn edits the rendering of noCSIValues as deploy/daemonset-no-csi.yaml's
// comments say to turn provisioning on, but for the flags: the
// ServiceAccount's token is mounted, and the objects of
// deploy/provisioners.yaml come.
func provisionersOn(t *testing.T) func(objects) {
	return func(o objects) {
		podSpec(o)["automountServiceAccountToken"] = true
		for k, obj := range fileObjects(t, provisionersFile) {
			o[k] = obj
		}
	}
}

// policyVariable returns the variable of a ValidatingAdmissionPolicy
// named name.
func policyVariable(policy interface{ UnstructuredContent() map[string]any }, name string) map[string]any {
	spec := policy.UnstructuredContent()["spec"].(map[string]any)
	return named(spec["variables"].([]any), name)
}

// dropVolume removes a volume of the DaemonSet and its mount.
func dropVolume(o objects, name string) {
	byName := func(e any) bool { return e.(map[string]any)["name"] == name }
	c, s := container(o), podSpec(o)
	c["volumeMounts"] = slices.DeleteFunc(c["volumeMounts"].([]any), byName)
	s["volumes"] = slices.DeleteFunc(s["volumes"].([]any), byName)
}

func readValues(t *testing.T, text string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		t.Fatalf("values %q: %v", text, err)
	}
	return v
}

// The DaemonSet's parts, as maps inside the objects (edits change them).

func podSpec(o objects) map[string]any {
	ds := o["DaemonSet volume-agent/volume-agent"]
	if ds == nil {
		for k, v := range o {
			if strings.HasPrefix(k, "DaemonSet ") {
				ds = v
			}
		}
	}
	return ds.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
}

func container(o objects) map[string]any {
	return podSpec(o)["containers"].([]any)[0].(map[string]any)
}

func addArgs(o objects, args ...string) {
	c := container(o)
	for _, a := range args {
		c["args"] = append(c["args"].([]any), a)
	}
}

func volumeMounts(o objects) []any { return container(o)["volumeMounts"].([]any) }

func hostPath(o objects, volume string) map[string]any {
	return named(podSpec(o)["volumes"].([]any), volume)["hostPath"].(map[string]any)
}

// named returns the element of list whose name is name.
func named(list []any, name string) map[string]any {
	for _, e := range list {
		if m := e.(map[string]any); m["name"] == name {
			return m
		}
	}
	panic("no " + name)
}

func subjects(o interface{ UnstructuredContent() map[string]any }) []map[string]any {
	list, _ := o.UnstructuredContent()["subjects"].([]any)
	var out []map[string]any
	for _, s := range list {
		out = append(out, s.(map[string]any))
	}
	return out
}
