package main

import (
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	base := []string{"--root-dir", "/r", "--node-name", "n"}
	for _, tc := range []struct {
		name      string
		args      []string
		inPod     bool // KUBERNETES_SERVICE_HOST set
		wantErr   string
		clusterOn bool
	}{
		{name: "manifests only", args: []string{"--manifests", "/m"}},
		{name: "kubeconfig", args: []string{"--kubeconfig", "/k"}, clusterOn: true},
		{name: "in a pod", inPod: true, clusterOn: true},
		{name: "in a pod, manifests only", args: []string{"--manifests", "/m", "--in-cluster=false"}, inPod: true},
		{name: "in a pod, cluster turned off, nothing else", args: []string{"--in-cluster=false"}, inPod: true, wantErr: "nothing to serve"},
		{name: "nothing", wantErr: "nothing to serve"},
		{name: "qps 0 would become client-go's 5", args: []string{"--kubeconfig", "/k", "--kube-api-qps", "0"}, wantErr: "--kube-api-qps 0"},
		{name: "negative qps would mean no limit", args: []string{"--kubeconfig", "/k", "--kube-api-qps", "-1"}, wantErr: "--kube-api-qps"},
		{name: "qps overflowing float32", args: []string{"--kubeconfig", "/k", "--kube-api-qps", "1e40"}, wantErr: "--kube-api-qps"},
		{name: "NaN qps", args: []string{"--kubeconfig", "/k", "--kube-api-qps", "NaN"}, wantErr: "--kube-api-qps"},
		{name: "qps below 1", args: []string{"--kubeconfig", "/k", "--kube-api-qps", "0.01"}, wantErr: "--kube-api-qps"},
		{name: "burst 0 would become client-go's 10", args: []string{"--kubeconfig", "/k", "--kube-api-burst", "0"}, wantErr: "--kube-api-burst 0"},
		{name: "negative burst", args: []string{"--kubeconfig", "/k", "--kube-api-burst", "-5"}, wantErr: "--kube-api-burst"},
		{name: "provisioners", args: []string{"--manifests", "/m", "--provisioners", "local,nfs-subdir", "--local-path-root", "/data"}},
		{name: "unknown provisioner", args: []string{"--manifests", "/m", "--provisioners", "local,hostpath"}, wantErr: `unknown provisioner "hostpath"`},
		{name: "provisioner twice", args: []string{"--manifests", "/m", "--provisioners", "local,local"}, wantErr: "given twice"},
		{name: "local path root inside the root dir", args: []string{"--manifests", "/m", "--provisioners", "local", "--local-path-root", "/r/data"}, wantErr: "must not contain each other"},
		{name: "local path root holding the root dir", args: []string{"--manifests", "/m", "--provisioners", "local", "--local-path-root", "/"}, wantErr: "must not be /"},
		{name: "relative local path root", args: []string{"--manifests", "/m", "--provisioners", "local", "--local-path-root", "data"}, wantErr: "absolute"},
		{name: "a sibling with a common prefix is fine", args: []string{"--manifests", "/m", "--provisioners", "local", "--local-path-root", "/r-data"}},
		{name: "metrics on the status address", args: []string{"--manifests", "/m", "--metrics-addr", "127.0.0.1:9810"}, wantErr: "--metrics-addr 127.0.0.1:9810 is --status-addr"},
		{name: "metrics on another address", args: []string{"--manifests", "/m", "--metrics-addr", "0.0.0.0:9811"}},
		{name: "negative reclaim delay", args: []string{"--manifests", "/m", "--reclaim-delay", "-1s"}, wantErr: "--reclaim-delay -1s"},
		{name: "no reclaim delay", args: []string{"--manifests", "/m", "--reclaim-delay", "0s"}},
		{name: "CSI without the local provisioner", args: []string{"--manifests", "/m", "--csi-endpoint", "/run/csi.sock"}, wantErr: "--csi-endpoint /run/csi.sock serves the volumes of the local provisioner: give --provisioners local too"},
		{name: "CSI with the local provisioner", args: []string{"--manifests", "/m", "--provisioners", "local", "--csi-endpoint", "unix:///run/csi.sock"}},
		{name: "status on a unix socket", args: []string{"--manifests", "/m", "--status-addr", "unix:///run/volume-agent/status.sock", "--status-socket-group", "4242"}},
		{name: "status socket group by name", args: []string{"--manifests", "/m", "--status-addr", "unix:///run/va.sock", "--status-socket-group", "root"}},
		{name: "status socket group unknown", args: []string{"--manifests", "/m", "--status-addr", "unix:///run/va.sock", "--status-socket-group", "no-such-group-here"}, wantErr: `--status-socket-group "no-such-group-here": no such group`},
		{name: "status socket group negative", args: []string{"--manifests", "/m", "--status-addr", "unix:///run/va.sock", "--status-socket-group", "-1"}, wantErr: "--status-socket-group -1"},
		{name: "status socket group without a socket", args: []string{"--manifests", "/m", "--status-socket-group", "4242"}, wantErr: "applies to unix sockets only"},
		{name: "relative unix socket", args: []string{"--manifests", "/m", "--status-addr", "unix://run/va.sock"}, wantErr: "--status-addr: address"},
		{name: "status address without a port", args: []string{"--manifests", "/m", "--status-addr", "localhost"}, wantErr: "--status-addr: address"},
		{name: "bad metrics address", args: []string{"--manifests", "/m", "--metrics-addr", "unix://x"}, wantErr: "--metrics-addr: address"},
		{name: "health on loopback beside a socket", args: []string{"--manifests", "/m", "--status-addr", "unix:///run/va.sock", "--healthz-addr", "127.0.0.1:9810"}},
		{name: "health on the status address", args: []string{"--manifests", "/m", "--healthz-addr", "127.0.0.1:9810"}, wantErr: "--healthz-addr 127.0.0.1:9810 is --status-addr"},
		{name: "volume stats off", args: []string{"--manifests", "/m", "--volume-stats-period", "0s"}},
		{name: "volume stats every 5s", args: []string{"--manifests", "/m", "--volume-stats-period", "5s"}},
		{name: "volume stats period negative", args: []string{"--manifests", "/m", "--volume-stats-period", "-1s"}, wantErr: "--volume-stats-period -1s"},
		{name: "volume stats period too short", args: []string{"--manifests", "/m", "--volume-stats-period", "10ms"}, wantErr: "want 0s (walks off) or at least 1s"},
		{name: "provisioner kubeconfig", args: []string{"--kubeconfig", "/k", "--provisioners", "local", "--provisioner-kubeconfig", "/p"}, clusterOn: true},
		{name: "provisioner kubeconfig without provisioners", args: []string{"--kubeconfig", "/k", "--provisioner-kubeconfig", "/p"}, wantErr: "--provisioner-kubeconfig /p is only used by --provisioners"},
		{name: "provisioner kubeconfig without a cluster", args: []string{"--manifests", "/m", "--provisioners", "local", "--provisioner-kubeconfig", "/p"}, wantErr: "only used by --provisioners in a cluster"},
		{name: "rates do not matter without a cluster", args: []string{"--manifests", "/m", "--kube-api-qps", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := ""
			if tc.inPod {
				host = "10.0.0.1"
			}
			t.Setenv("KUBERNETES_SERVICE_HOST", host)
			o, err := parseFlags(append(append([]string{}, base...), tc.args...))
			if (err != nil) != (tc.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("parseFlags = %v, want error %q", err, tc.wantErr)
			}
			if err == nil && o.clusterMode() != tc.clusterOn {
				t.Fatalf("cluster mode = %v, want %v", o.clusterMode(), tc.clusterOn)
			}
		})
	}
}

func TestParseGroup(t *testing.T) {
	for in, want := range map[string]int{"": -1, "0": 0, "4242": 4242, "root": 0} {
		if got, err := parseGroup(in); err != nil || got != want {
			t.Errorf("parseGroup(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	o, err := parseFlags([]string{"--manifests", "/m", "--node-name", "n", "--status-addr", "unix:///run/va.sock", "--status-socket-group", "4242"})
	if err != nil || o.socketGID != 4242 {
		t.Fatalf("parseFlags: socket group %d, %v; want 4242", o.socketGID, err)
	}
	if o, _ := parseFlags([]string{"--manifests", "/m", "--node-name", "n"}); o.socketGID != -1 {
		t.Errorf("no --status-socket-group: gid %d, want -1 (the agent's own)", o.socketGID)
	}
}

// TestFlagErrorsSayWhatToGive: a value that does not parse says what the
// flag takes (the flag package says "parse error"), and an unknown flag
// suggests the nearest, for the agent's flags and a subcommand's alike.
func TestFlagErrorsSayWhatToGive(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--reclaim-delay", "10"}, `--reclaim-delay "10": want a duration such as 10m or 30s`},
		{[]string{"--volume-check-period=30"}, `--volume-check-period "30": want a duration such as 10m or 30s`},
		{[]string{"--volume-stats-period", "1 minute"}, `--volume-stats-period "1 minute": want a duration such as 10m or 30s`},
		{[]string{"--kube-api-qps", "fast"}, `--kube-api-qps "fast": want a number, such as 50`},
		{[]string{"--kube-api-burst", "1.5"}, `--kube-api-burst "1.5": want a whole number, such as 100`},
		{[]string{"--manifest", "/m"}, "flag provided but not defined: -manifest; did you mean --manifests?"},
		{[]string{"--reclaim-dealy", "1m"}, "flag provided but not defined: -reclaim-dealy; did you mean --reclaim-delay?"},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus (see volume-agent --help)"},
	} {
		_, err := parseFlags(append([]string{"--node-name", "n"}, tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "parse error") {
			t.Errorf("parseFlags(%q) = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"wait", "default/app", "--timeout", "5"}, `volume-agent wait: --timeout "5": want a duration such as 10m or 30s`},
		{[]string{"wait", "default/app", "--timout", "5s"}, "volume-agent wait: flag provided but not defined: -timout; did you mean --timeout? (see volume-agent wait --help)"},
		{[]string{"claims", "--adr", "x"}, "volume-agent claims: flag provided but not defined: -adr; did you mean --addr?"},
	} {
		var out strings.Builder
		code, _ := runSubcommand(tc.args, cmdEnv{stdout: &out, stderr: &out})
		if code != exitUsage || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%q: exit %d, %q; want %d and %q", tc.args, code, out.String(), exitUsage, tc.want)
		}
	}
}

// TestManifestsHelpNamesEveryKind: --manifests' help lists every kind the
// manifest source reads (it left out StorageClass).
func TestManifestsHelpNamesEveryKind(t *testing.T) {
	var out strings.Builder
	writeAgentUsage(&out)
	help := out.String()
	help = help[strings.Index(help, "  -manifests string"):]
	help = help[:strings.Index(help, "\n  -")]
	for _, kind := range []string{"Pod", "ConfigMap", "Secret", "PersistentVolume", "PersistentVolumeClaim", "StorageClass", "Node"} {
		if !strings.Contains(help, kind) {
			t.Errorf("--manifests' help does not name %s: %s", kind, help)
		}
	}
}
