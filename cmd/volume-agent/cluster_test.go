package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestProvisionerConfig: the provisioners get an identity of their own
// when the agent's is given by --kubeconfig (the node's): the file
// --provisioner-kubeconfig names, else in a pod the pod's service account;
// otherwise they share the agent's.
func TestProvisionerConfig(t *testing.T) {
	dir := t.TempDir()
	prov := filepath.Join(dir, "provisioner.kubeconfig")
	if err := os.WriteFile(prov, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://provisioner.example:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		o        options
		inPod    bool
		wantHost string // "": the agent's own config (nil)
		wantErr  string
	}{
		{name: "--provisioner-kubeconfig", o: options{kubeconfig: "/node.kubeconfig", provisionerKubeconfig: prov}, wantHost: "https://provisioner.example:6443"},
		{name: "--provisioner-kubeconfig in a pod", o: options{kubeconfig: "/node.kubeconfig", provisionerKubeconfig: prov, inCluster: true}, inPod: true, wantHost: "https://provisioner.example:6443"},
		{name: "--kubeconfig outside a pod: the same identity", o: options{kubeconfig: "/k", inCluster: true}},
		// The in-cluster config needs the pod's token file, which this
		// test has not: the error shows it was chosen.
		{name: "--kubeconfig in a pod: the pod's service account", o: options{kubeconfig: "/k", inCluster: true}, inPod: true, wantErr: "load the provisioners' API server config"},
		{name: "--kubeconfig in a pod, --in-cluster=false", o: options{kubeconfig: "/k"}, inPod: true},
		{name: "in-cluster config for all", o: options{inCluster: true}, inPod: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := ""
			if tc.inPod {
				host = "10.0.0.1"
			}
			t.Setenv("KUBERNETES_SERVICE_HOST", host)
			t.Setenv("KUBERNETES_SERVICE_PORT", "443")
			tc.o.apiQPS, tc.o.apiBurst, tc.o.nodeName = 5, 10, "n"
			cfg, err := provisionerConfig(tc.o, zap.NewNop())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.wantHost == "" && cfg != nil:
				t.Errorf("config for %s, want the agent's own", cfg.Host)
			case tc.wantHost != "" && (cfg == nil || cfg.Host != tc.wantHost):
				t.Errorf("config %+v, want one for %s", cfg, tc.wantHost)
			case cfg != nil && cfg.UserAgent != "volume-agent/n/provisioner":
				t.Errorf("user agent %q", cfg.UserAgent)
			}
		})
	}
}
