package tokens

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
)

// reuse reports whether current, the token found in the volume, can be
// reused (see reusable), and when it was issued and is due. current is then
// the payload already in the volume, and the atomic writer rewrites nothing.
func (m *Manager) reuse(k key, pod *v1.Pod, current []byte) (issued, due time.Time, ok bool) {
	if len(current) == 0 {
		return time.Time{}, time.Time{}, false
	}
	log := m.log.With(podField(pod), zap.String("serviceAccount", k.account))
	issued, due, err := m.reusable(k, pod.Namespace, current)
	if err != nil {
		log.Debug("token in volume not reused", zap.Error(err))
		return time.Time{}, time.Time{}, false
	}
	log.Debug("token in volume reused", zap.Time("refresh", due))
	return issued, due, true
}

// reusable checks that token's claims show it was issued for k to a pod in
// namespace and that it is not yet due for refresh by the wall clock. It
// returns when the token was issued and when it is due.
//
// The due time is counted from the iat claim, the API server's clock,
// against ours. A node clock behind the API server's keeps such a token for
// that much longer, as the kubelet does with every token; tokens the agent
// mints itself are timed on its own clock only.
func (m *Manager) reusable(k key, namespace string, token []byte) (issued, due time.Time, err error) {
	c, err := parseClaims(token)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	issued, lifetime, err := c.issuedFor(k, namespace)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	due = m.dueTime(issued, lifetime)
	if !m.now().Before(due) {
		return time.Time{}, time.Time{}, errors.New("due for refresh")
	}
	return issued, due, nil
}

// claims are the parts of a service account token's JWT payload that tell
// whether the token can be reused. The signature is not checked: the claims
// only decide whether to keep a file the agent wrote itself in a directory
// only it can write, and the API server checks the token whenever the pod
// presents it.
type claims struct {
	Audience   audience     `json:"aud"`
	IssuedAt   *numericDate `json:"iat"`
	Expiry     *numericDate `json:"exp"`
	Kubernetes struct {
		Namespace      string       `json:"namespace"`
		Pod            *objectRef   `json:"pod"`
		ServiceAccount objectRef    `json:"serviceaccount"`
		WarnAfter      *numericDate `json:"warnafter"`
	} `json:"kubernetes.io"`
}

type objectRef struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// audience is the aud claim: one string, or an array of them.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("aud is neither a string nor an array of strings")
	}
	*a = many
	return nil
}

// numericDate is a JWT time: seconds since the epoch, possibly fractional.
type numericDate float64

func (d numericDate) time() time.Time {
	sec := math.Floor(float64(d))
	return time.Unix(int64(sec), int64((float64(d)-sec)*float64(time.Second))).UTC()
}

// parseClaims decodes the payload of a JWT (header.payload.signature, each
// base64url without padding). Any other byte, a newline included (which the
// base64 decoder would skip), makes it no JWT. Errors say what is wrong,
// never the token.
func parseClaims(token []byte) (claims, error) {
	if bytes.IndexFunc(token, notJWTRune) >= 0 {
		return claims{}, errors.New("not a JWT: a byte outside base64url and '.'")
	}
	parts := bytes.Split(token, []byte("."))
	if len(parts) != 3 || len(parts[2]) == 0 {
		return claims{}, errors.New("not a signed JWT")
	}
	var payload []byte
	for i, p := range parts {
		b, err := base64.RawURLEncoding.DecodeString(string(p))
		if err != nil {
			return claims{}, errors.New("not a JWT: a part is not base64url")
		}
		if i == 1 {
			payload = b
		}
	}
	var c claims
	if err := json.Unmarshal(payload, &c); err != nil {
		return claims{}, errors.New("not a JWT: its payload is not a JSON object of the expected claims")
	}
	return c, nil
}

func notJWTRune(r rune) bool {
	return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '.')
}

// issuedFor checks that the claims are those of a token requested for k by
// a pod in namespace, and returns when it was issued and the lifetime the
// API server granted. When the API server extended the token's expiry
// (kube-api-access tokens of 3607 s live a year), the lifetime ends at its
// warnafter claim, as the TokenRequest answer's own spec said.
func (c claims) issuedFor(k key, namespace string) (time.Time, time.Duration, error) {
	kc := c.Kubernetes
	switch {
	case kc.Pod == nil || kc.Pod.UID != string(k.pod):
		return time.Time{}, 0, errors.New("bound to another pod")
	case kc.Namespace != namespace:
		return time.Time{}, 0, errors.New("issued in another namespace")
	case kc.ServiceAccount.Name != k.account:
		return time.Time{}, 0, errors.New("issued for another service account")
	case k.audience != "" && (len(c.Audience) != 1 || c.Audience[0] != k.audience):
		return time.Time{}, 0, errors.New("issued for another audience")
	case c.IssuedAt == nil || c.Expiry == nil:
		return time.Time{}, 0, errors.New("no iat or exp claim")
	}
	issued, end := c.IssuedAt.time(), c.Expiry.time()
	if kc.WarnAfter != nil && kc.WarnAfter.time().Before(end) {
		end = kc.WarnAfter.time()
	}
	lifetime := end.Sub(issued)
	if requested := time.Duration(k.expiration) * time.Second; lifetime <= 0 || lifetime > requested {
		return time.Time{}, 0, fmt.Errorf("lifetime %v is not within the requested %v", lifetime, requested)
	}
	return issued, lifetime, nil
}
