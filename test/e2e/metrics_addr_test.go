package e2e

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMetricsAddrServesOnlyMetrics: --metrics-addr serves /metrics with
// the agent's metrics, and nothing of the status API (pods, paths, errors).
func TestMetricsAddrServesOnlyMetrics(t *testing.T) {
	a := newAgent(t)
	metrics := freeAddr(t)
	a.writeManifest("pod.yaml", fmt.Sprintf(appPod, filepath.Join(t.TempDir(), "host", "data")))
	a.writeManifest("config.yaml", fmt.Sprintf(appConfig, "color=blue"))
	a.writeManifest("secret.yaml", appSecret)
	a.start("--metrics-addr", metrics)
	a.waitPod("default", "app", 10*time.Second, ready)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + metrics + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, `volume_agent_volumes{state="Mounted"}`) {
		t.Errorf("GET /metrics on --metrics-addr = %d, %.300s", code, body)
	}
	for _, path := range []string{"/v1/pods", "/healthz", "/v1/claims", "/"} {
		if code, _ := get(path); code != http.StatusNotFound {
			t.Errorf("GET %s on --metrics-addr = %d, want 404", path, code)
		}
	}
}
