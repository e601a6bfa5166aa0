package status

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/binder"
)

type fakeDeleter struct{ got []binder.DeleteNowRequest }

func (f *fakeDeleter) DeleteNow(_ context.Context, req binder.DeleteNowRequest) error {
	f.got = append(f.got, req)
	return nil
}

// TestDeleteNowTakesTheOperatorToken: the one request that changes
// anything is refused (401) without the token a local user cannot read,
// whatever the body; with it, the request reaches the binder with who
// asked.
func TestDeleteNowTakesTheOperatorToken(t *testing.T) {
	d := &fakeDeleter{}
	h := New(Config{Logger: zap.NewNop(), Deleter: d, OperatorToken: "secret"}).Handler()
	body := `{"namespace":"default","name":"data","uid":"u1","pv":"pvc-u1"}`
	for _, auth := range []string{"", "Bearer ", "Bearer wrong", "secret"} {
		r := httptest.NewRequest(http.MethodPost, "/v1/claims/delete-now", strings.NewReader(body))
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", auth, w.Code)
		}
	}
	if len(d.got) != 0 {
		t.Fatalf("requests reached the binder without the token: %v", d.got)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/claims/delete-now", strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer secret")
	r.Header.Set(OperatorHeader, "user=root uid=0")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK || len(d.got) != 1 || d.got[0].UID != "u1" || !strings.Contains(d.got[0].By, "user=root uid=0") {
		t.Errorf("with the token: %d %s, %+v; want 200 and the request, with who asked", w.Code, w.Body, d.got)
	}
	if w := httptest.NewRecorder(); true {
		New(Config{Logger: zap.NewNop()}).Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/claims/delete-now", strings.NewReader(body)))
		if w.Code == http.StatusOK {
			t.Errorf("without a Deleter (cluster mode): %d, want no such route", w.Code)
		}
	}
}
