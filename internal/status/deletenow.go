package status

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/volume-agent/volume-agent/internal/binder"
)

// ClaimDeleter deletes released storage before its reclaim delay ends, at
// an operator's request (binder.Source.DeleteNow).
type ClaimDeleter interface {
	DeleteNow(ctx context.Context, req binder.DeleteNowRequest) error
}

// OperatorHeader carries what the CLI says of who runs it (user, uid,
// pid), for the log; the bearer token is what is trusted.
const OperatorHeader = "X-Volume-Agent-Operator"

// maxDeleteNowBody bounds the body of POST /v1/claims/delete-now: a
// namespace, a name, a UID and a PV name.
const maxDeleteNowBody = 4 << 10

// deleteNowTimeout bounds the wait for the binding loop to take and decide
// a request; the deletion itself runs after the answer.
const deleteNowTimeout = 30 * time.Second

// deleteNow serves POST /v1/claims/delete-now: the only request that
// changes anything. The status endpoint may be readable by every local
// user (on TCP), so it takes the operator token (Config.OperatorToken,
// a file only root can read) as a bearer token, and answers 401
// without it. 200: the deletion is recorded and under way; 404: no such
// released storage; 409: refused, saying the storage's state and what to
// do.
func (s *Server) deleteNow(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || s.cfg.OperatorToken == "" || subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.OperatorToken)) != 1 {
		writeText(w, http.StatusUnauthorized, "the operator token is missing or wrong: it is the file operator-token in the agent's --root-dir, which only root can read")
		return
	}
	var req binder.DeleteNowRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, maxDeleteNowBody+1))
	if err == nil && len(body) > maxDeleteNowBody {
		err = fmt.Errorf("body over %d bytes", maxDeleteNowBody)
	}
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err == nil && (req.Namespace == "" || req.Name == "" || req.PV == "") {
		err = errors.New("namespace, name and pv are required")
	}
	if err != nil {
		writeText(w, http.StatusBadRequest, "want {\"namespace\", \"name\", \"uid\", \"pv\"} as GET /v1/claims shows them: "+err.Error())
		return
	}
	req.By = fmt.Sprintf("%s from %q", r.Header.Get(OperatorHeader), r.RemoteAddr)
	ctx, cancel := context.WithTimeout(r.Context(), deleteNowTimeout)
	defer cancel()
	switch err := s.cfg.Deleter.DeleteNow(ctx, req); {
	case errors.Is(err, binder.ErrNoSuchStorage):
		writeText(w, http.StatusNotFound, err.Error())
	case errors.Is(err, binder.ErrRefused):
		writeText(w, http.StatusConflict, err.Error())
	case err != nil:
		writeText(w, http.StatusInternalServerError, err.Error())
	default:
		writeJSON(w, http.StatusOK, map[string]bool{"recorded": true})
	}
}
