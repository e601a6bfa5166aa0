package tokens

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// jwt encodes claims as the payload of a JWT with a dummy signature.
func jwt(t *testing.T, claims map[string]any) []byte {
	t.Helper()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return []byte(enc([]byte(`{"alg":"RS256","kid":"k"}`)) + "." + enc(payload) + "." + enc([]byte("signature")))
}

// tokenClaims are the claims the API server puts in a token for pod uid-1
// in namespace ns, service account default, issued at iat and valid for
// lifetime.
func tokenClaims(iat time.Time, lifetime time.Duration) map[string]any {
	return map[string]any{
		"aud": []string{"vault"},
		"iat": iat.Unix(),
		"nbf": iat.Unix(),
		"exp": iat.Add(lifetime).Unix(),
		"iss": "https://issuer",
		"sub": "system:serviceaccount:ns:default",
		"kubernetes.io": map[string]any{
			"namespace":      "ns",
			"pod":            map[string]any{"name": "app", "uid": "uid-1"},
			"serviceaccount": map[string]any{"name": "default", "uid": "sa-uid"},
		},
	}
}

func TestReuse(t *testing.T) {
	vault := &v1.ServiceAccountTokenProjection{Audience: "vault", ExpirationSeconds: ptr.To[int64](600)}
	apiAccess := &v1.ServiceAccountTokenProjection{ExpirationSeconds: ptr.To[int64](3607)}
	for _, tc := range []struct {
		name  string
		src   *v1.ServiceAccountTokenProjection
		age   time.Duration // how long ago the token was issued
		edit  func(c map[string]any)
		raw   string // the token, instead of one made of the claims
		reuse bool
	}{
		{name: "fresh, aud an array", src: vault, age: time.Minute, reuse: true},
		{name: "fresh, aud a string", src: vault, age: time.Minute, edit: func(c map[string]any) { c["aud"] = "vault" }, reuse: true},
		{name: "fractional times", src: vault, age: time.Minute, edit: func(c map[string]any) {
			c["iat"] = float64(c["iat"].(int64)) + 0.5
		}, reuse: true},
		{name: "source without audience takes the API server's", src: apiAccess, age: time.Minute,
			edit: func(c map[string]any) {
				c["aud"] = "https://kubernetes.default.svc"
				c["exp"] = c["iat"].(int64) + 3607
			}, reuse: true},
		{name: "expiry extended to a year, with warnafter", src: apiAccess, age: 40 * time.Minute, edit: func(c map[string]any) {
			c["aud"] = "https://kubernetes.default.svc"
			c["exp"] = c["iat"].(int64) + 365*24*3600
			c["kubernetes.io"].(map[string]any)["warnafter"] = c["iat"].(int64) + 3607
		}, reuse: true},
		{name: "expiry extended, past 80% of the warnafter lifetime", src: apiAccess, age: 50 * time.Minute, edit: func(c map[string]any) {
			c["exp"] = c["iat"].(int64) + 365*24*3600
			c["kubernetes.io"].(map[string]any)["warnafter"] = c["iat"].(int64) + 3607
		}},
		{name: "expiry extended, without warnafter", src: apiAccess, age: time.Minute,
			edit: func(c map[string]any) { c["exp"] = c["iat"].(int64) + 365*24*3600 }},
		{name: "due for refresh by the wall clock", src: vault, age: 480 * time.Second},
		{name: "expired", src: vault, age: time.Hour},
		{name: "another pod UID", src: vault, age: time.Minute,
			edit: func(c map[string]any) {
				c["kubernetes.io"].(map[string]any)["pod"] = map[string]any{"name": "app", "uid": "uid-old"}
			}},
		{name: "not bound to a pod", src: vault, age: time.Minute,
			edit: func(c map[string]any) { delete(c["kubernetes.io"].(map[string]any), "pod") }},
		{name: "another namespace", src: vault, age: time.Minute,
			edit: func(c map[string]any) { c["kubernetes.io"].(map[string]any)["namespace"] = "other" }},
		{name: "another service account", src: vault, age: time.Minute,
			edit: func(c map[string]any) {
				c["kubernetes.io"].(map[string]any)["serviceaccount"] = map[string]any{"name": "builder"}
			}},
		{name: "another audience", src: vault, age: time.Minute, edit: func(c map[string]any) { c["aud"] = "other" }},
		{name: "more audiences", src: vault, age: time.Minute, edit: func(c map[string]any) { c["aud"] = []string{"vault", "other"} }},
		{name: "aud of the wrong type", src: vault, age: time.Minute, edit: func(c map[string]any) { c["aud"] = 7 }},
		{name: "longer than requested", src: vault, age: time.Minute, edit: func(c map[string]any) { c["exp"] = c["iat"].(int64) + 3600 }},
		{name: "no iat", src: vault, age: time.Minute, edit: func(c map[string]any) { delete(c, "iat") }},
		{name: "no exp", src: vault, age: time.Minute, edit: func(c map[string]any) { delete(c, "exp") }},
		{name: "exp before iat", src: vault, age: time.Minute, edit: func(c map[string]any) { c["exp"] = c["iat"].(int64) - 1 }},
		{name: "not a JWT", src: vault, raw: "opaque-token"},
		{name: "two parts", src: vault, raw: "eyJhIjoxfQ.eyJhIjoxfQ"},
		{name: "no signature", src: vault, raw: "eyJhIjoxfQ.eyJhIjoxfQ."},
		{name: "payload not base64url", src: vault, raw: "eyJhIjoxfQ.e+J/Ijox.c2ln"},
		{name: "payload not JSON", src: vault, raw: "eyJhIjoxfQ.bm90IGpzb24.c2ln"},
		{name: "payload a JSON array", src: vault, raw: "eyJhIjoxfQ.WzEsMl0.c2ln"},
		{name: "trailing newline", src: vault, raw: "newline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			pod := testPod("app", "uid-1", "")
			c := tokenClaims(h.clock.Now().Add(-tc.age), time.Duration(*tc.src.ExpirationSeconds)*time.Second)
			if tc.edit != nil {
				tc.edit(c)
			}
			current := jwt(t, c)
			switch tc.raw {
			case "":
			case "newline":
				current = append(current, '\n')
			default:
				current = []byte(tc.raw)
			}
			planned := h.m.Version(pod, tc.src)
			got := h.tokenWith(pod, tc.src, current)
			requests := len(h.calls())
			if tc.reuse {
				if got != string(current) || requests != 0 {
					t.Fatalf("Token = %.20q… after %d token requests, want the token in the volume and no request", got, requests)
				}
				if v := h.m.Version(pod, tc.src); v != planned {
					t.Errorf("Version = %q after reusing the token in the volume, want %q as before: a refresh would follow", v, planned)
				}
				if h.changes.Load() != 0 {
					t.Errorf("OnChange called %d times, want never: the version did not change", h.changes.Load())
				}
				if h.token(pod, tc.src) != string(current) || len(h.calls()) != 0 {
					t.Error("the reused token is not cached")
				}
				return
			}
			if got == string(current) || requests != 1 {
				t.Fatalf("Token = %.20q… after %d token requests, want a new token from one request", got, requests)
			}
		})
	}
}

// TestReusedTokenRefreshesOnTime: a reused token is replaced at 80% of its
// lifetime counted from its iat claim, not from when it was found.
func TestReusedTokenRefreshesOnTime(t *testing.T) {
	h := newHarness(t)
	pod, src := testPod("app", "uid-1", ""), &v1.ServiceAccountTokenProjection{Audience: "vault", ExpirationSeconds: ptr.To[int64](600)}
	current := jwt(t, tokenClaims(h.clock.Now().Add(-100*time.Second), 600*time.Second))
	h.tokenWith(pod, src, current)
	version := h.m.Version(pod, src)
	changes := h.changes.Load()

	h.clock.Step(380*time.Second - time.Second)
	if h.changes.Load() != changes || h.m.Version(pod, src) != version {
		t.Fatal("reused token refreshed before 80% of its lifetime")
	}
	h.clock.Step(time.Second)
	if h.changes.Load() != changes+1 {
		t.Fatalf("OnChange called %d times at 80%% of the reused token's lifetime, want once", h.changes.Load()-changes)
	}
	if got := h.tokenWith(pod, src, current); got == string(current) || len(h.calls()) != 1 {
		t.Errorf("Token after the refresh point = the old token, or %d requests; want one new token", len(h.calls()))
	}
}

// TestCachedTokenBeforeVolume: a token the manager holds wins over another
// fresh one found in the volume.
func TestCachedTokenBeforeVolume(t *testing.T) {
	h := newHarness(t)
	pod, src := testPod("app", "uid-1", ""), &v1.ServiceAccountTokenProjection{Audience: "vault", ExpirationSeconds: ptr.To[int64](600)}
	minted := h.token(pod, src)
	other := jwt(t, tokenClaims(h.clock.Now(), 600*time.Second))
	if got := h.tokenWith(pod, src, other); got != minted {
		t.Errorf("Token = %.20q…, want the cached %q", got, minted)
	}
}

func TestReuseNeverLogsTheToken(t *testing.T) {
	h := newHarness(t)
	pod, src := testPod("app", "uid-1", ""), &v1.ServiceAccountTokenProjection{Audience: "vault", ExpirationSeconds: ptr.To[int64](600)}
	fresh := jwt(t, tokenClaims(h.clock.Now(), 600*time.Second))
	stale := jwt(t, tokenClaims(h.clock.Now().Add(-time.Hour), 600*time.Second))
	h.tokenWith(testPod("app", "uid-2", ""), src, stale)
	h.tokenWith(pod, src, fresh)
	if h.logs.FilterMessage("token in volume reused").Len() != 1 || h.logs.FilterMessage("token in volume not reused").Len() != 1 {
		t.Fatal("missing the reuse logs the test checks")
	}
	for _, e := range h.logs.All() {
		line := e.Message + " " + strings.Join(fieldStrings(e.ContextMap()), " ")
		for _, tok := range [][]byte{fresh, stale} {
			if strings.Contains(line, string(tok)) || strings.Contains(line, strings.Split(string(tok), ".")[1]) {
				t.Errorf("token in log: %s", line)
			}
		}
	}
}

func fieldStrings(m map[string]any) []string {
	var out []string
	for k, v := range m {
		b, _ := json.Marshal(v)
		out = append(out, k+"="+string(b))
	}
	return out
}
