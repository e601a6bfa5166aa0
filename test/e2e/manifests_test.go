package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// figure records a measured figure in the test log, for BENCHMARKS.md.
func figure(t *testing.T, name string, d time.Duration) {
	t.Helper()
	t.Logf("FIGURE %s: %v", name, d.Round(100*time.Microsecond))
}

const appPod = `
apiVersion: v1
kind: Pod
metadata:
  name: app
  labels: {app: demo, tier: web}
  annotations: {owner: team-a}
spec:
  containers:
  - name: main
    image: busybox
    resources:
      limits: {cpu: 500m, memory: 64Mi}
  volumes:
  - name: scratch
    emptyDir: {}
  - name: cache
    emptyDir: {medium: Memory, sizeLimit: 16Mi}
  - name: config
    configMap:
      name: app-config
      items:
      - {key: app.conf, path: conf/app.conf}
      - {key: level, path: level, mode: 0600}
  - name: creds
    secret: {secretName: app-creds, defaultMode: 0400}
  - name: info
    downwardAPI:
      items:
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
      - {path: name, fieldRef: {fieldPath: metadata.name}}
      - {path: cpu, resourceFieldRef: {containerName: main, resource: limits.cpu, divisor: 1m}}
  - name: all
    projected:
      sources:
      - configMap: {name: app-config, items: [{key: level, path: cfg/level}]}
      - secret: {name: app-creds, items: [{key: password, path: secret/password}]}
      - downwardAPI: {items: [{path: ns, fieldRef: {fieldPath: metadata.namespace}}]}
  - name: host
    hostPath: {path: %s, type: DirectoryOrCreate}
`

const appConfig = `
apiVersion: v1
kind: ConfigMap
metadata: {name: app-config}
data:
  app.conf: "%s"
  level: info
binaryData:
  blob: AAECA/8=
`

const appSecret = `
apiVersion: v1
kind: Secret
metadata: {name: app-creds}
stringData:
  password: s3cr3t-value
  user: admin
`

// startApp runs an agent with the app pod, its ConfigMap and Secret, and
// waits until the pod is ready.
func startApp(t *testing.T) (*agent, apiPod, string) {
	a := newAgent(t)
	host := filepath.Join(t.TempDir(), "host", "data")
	a.writeManifest("pod.yaml", fmt.Sprintf(appPod, host))
	a.writeManifest("config.yaml", fmt.Sprintf(appConfig, "color=blue"))
	a.writeManifest("secret.yaml", appSecret)
	a.start()
	p := a.waitPod("default", "app", 10*time.Second, ready)
	return a, p, host
}

func TestLayoutModesAndContent(t *testing.T) {
	a, p, host := startApp(t)
	dir := func(plugin, vol string) string {
		return filepath.Join(a.root, "pods", p.UID, "volumes", plugin, vol)
	}
	for _, v := range []struct{ name, plugin, path string }{
		{"scratch", "kubernetes.io/empty-dir", dir("kubernetes.io~empty-dir", "scratch")},
		{"cache", "kubernetes.io/empty-dir", dir("kubernetes.io~empty-dir", "cache")},
		{"config", "kubernetes.io/configmap", dir("kubernetes.io~configmap", "config")},
		{"creds", "kubernetes.io/secret", dir("kubernetes.io~secret", "creds")},
		{"info", "kubernetes.io/downward-api", dir("kubernetes.io~downward-api", "info")},
		{"all", "kubernetes.io/projected", dir("kubernetes.io~projected", "all")},
		{"host", "kubernetes.io/host-path", host},
	} {
		got := p.volume(v.name)
		if got.State != "Mounted" || got.Plugin != v.plugin || got.Path != v.path {
			t.Errorf("volume %s = %+v, want Mounted %s at %s", v.name, got, v.plugin, v.path)
		}
	}
	checkMode(t, dir("kubernetes.io~empty-dir", "scratch"), 0o777)
	checkMode(t, dir("kubernetes.io~configmap", "config")+"/conf/app.conf", 0o644)
	checkMode(t, dir("kubernetes.io~configmap", "config")+"/level", 0o600)
	checkMode(t, dir("kubernetes.io~secret", "creds")+"/password", 0o400)
	checkMode(t, host, 0o755)
	checkFile(t, dir("kubernetes.io~configmap", "config")+"/conf/app.conf", "color=blue")
	checkFile(t, dir("kubernetes.io~secret", "creds")+"/password", "s3cr3t-value")
	checkFile(t, dir("kubernetes.io~downward-api", "info")+"/labels", "app=\"demo\"\ntier=\"web\"")
	checkFile(t, dir("kubernetes.io~downward-api", "info")+"/cpu", "500")
	checkFile(t, dir("kubernetes.io~projected", "all")+"/cfg/level", "info")
	checkFile(t, dir("kubernetes.io~projected", "all")+"/secret/password", "s3cr3t-value")
	checkFile(t, dir("kubernetes.io~projected", "all")+"/ns", "default")
	checkLayout(t, dir("kubernetes.io~configmap", "config"))
	checkTmpfs(t, dir("kubernetes.io~empty-dir", "cache"), "size=16384k")
	checkTmpfs(t, dir("kubernetes.io~secret", "creds"), "")
	checkTmpfs(t, dir("kubernetes.io~projected", "all"), "")
	if isMountPoint(t, dir("kubernetes.io~configmap", "config")) || isMountPoint(t, dir("kubernetes.io~empty-dir", "scratch")) {
		t.Error("configMap or disk emptyDir volume is a mount point; want plain directories")
	}
	assertNoSecretIn(t, a, "s3cr3t-value")
}

func TestBinaryDataIsByteExact(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("config.yaml", fmt.Sprintf(appConfig, "x"))
	a.writeManifest("pod.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: bin}
spec:
  containers: [{name: c, image: busybox}]
  volumes: [{name: all, configMap: {name: app-config}}]
`)
	a.start()
	p := a.waitPod("default", "bin", 10*time.Second, ready)
	got, err := os.ReadFile(filepath.Join(p.volume("all").Path, "blob"))
	if err != nil || string(got) != "\x00\x01\x02\x03\xff" {
		t.Fatalf("blob = %q, %v; want bytes 00 01 02 03 ff", got, err)
	}
}

// checkLayout checks the atomic writer's layout: ..data points at a
// timestamped directory and top-level names link through ..data.
func checkLayout(t *testing.T, dir string) {
	t.Helper()
	target, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil || !strings.HasPrefix(target, "..20") {
		t.Errorf("..data -> %q, %v; want a timestamped directory", target, err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "level")); err != nil || l != "..data/level" {
		t.Errorf("level -> %q, %v; want ..data/level", l, err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "conf")); err != nil || l != "..data/conf" {
		t.Errorf("conf -> %q, %v; want ..data/conf", l, err)
	}
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Errorf("stat %s: %v", path, err)
		return
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("mode of %s = %#o, want %#o", path, got, want)
	}
}

func checkFile(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Errorf("%s = %q, %v; want %q", path, got, err, want)
	}
}

func checkTmpfs(t *testing.T, dir, wantOpt string) {
	t.Helper()
	for _, m := range readMountinfo(t) {
		if m.point == dir {
			if m.fstype != "tmpfs" || !strings.Contains(m.superOpts, wantOpt) {
				t.Errorf("%s is %s (%s), want tmpfs with %q", dir, m.fstype, m.superOpts, wantOpt)
			}
			return
		}
	}
	t.Errorf("%s is not a mount point, want a tmpfs", dir)
}

func isMountPoint(t *testing.T, dir string) bool {
	for _, m := range readMountinfo(t) {
		if m.point == dir {
			return true
		}
	}
	return false
}

// assertNoSecretIn checks that a secret value appears in no API answer and
// no log line.
func assertNoSecretIn(t *testing.T, a *agent, secret string) {
	t.Helper()
	for _, path := range []string{"/v1/pods", "/v1/sources", "/metrics", "/readyz"} {
		if _, body := a.get(path); strings.Contains(body, secret) {
			t.Errorf("%s shows a secret value", path)
		}
	}
	if strings.Contains(a.logs.String(), secret) {
		t.Error("the logs show a secret value")
	}
}
