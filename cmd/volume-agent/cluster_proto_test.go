package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestClientsSpeakProtobuf: the clients made from --kubeconfig send and
// ask for protobuf, the TokenRequest included, and still accept JSON.
func TestClientsSpeakProtobuf(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][2]string{} // path: Content-Type, Accept
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = [2]string{r.Header.Get("Content-Type"), r.Header.Get("Accept")}
		mu.Unlock()
		http.Error(w, "not served", http.StatusNotFound)
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := restConfig(options{kubeconfig: kubeconfig, nodeName: "node-1", apiQPS: 50, apiBurst: 100})
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	_, _ = client.CoreV1().ServiceAccounts("ns").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	_, _ = client.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{})
	const proto = "application/vnd.kubernetes.protobuf"
	for path, wantBody := range map[string]bool{"/api/v1/namespaces/ns/serviceaccounts/default/token": true, "/api/v1/namespaces/ns/configmaps": false} {
		mu.Lock()
		got, ok := seen[path]
		mu.Unlock()
		switch {
		case !ok:
			t.Errorf("no request to %s", path)
		case wantBody && got[0] != proto:
			t.Errorf("%s sent Content-Type %q, want %s", path, got[0], proto)
		case !strings.HasPrefix(got[1], proto) || !strings.Contains(got[1], "application/json"):
			t.Errorf("%s sent Accept %q, want protobuf first and JSON accepted", path, got[1])
		}
	}
}
