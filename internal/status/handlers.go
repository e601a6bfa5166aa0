package status

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/binder"
	"github.com/volume-agent/volume-agent/internal/source"
)

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	if s.cfg.Healthy != nil {
		if err := s.cfg.Healthy(); err != nil {
			writeText(w, http.StatusServiceUnavailable, err.Error())
			return
		}
	}
	text := "ok"
	if s.cfg.Warnings != nil {
		for _, warning := range s.cfg.Warnings() {
			text += "\nwarning: " + warning
		}
	}
	writeText(w, http.StatusOK, text)
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if reason := s.notReady(); reason != "" {
		writeText(w, http.StatusServiceUnavailable, reason)
		return
	}
	writeText(w, http.StatusOK, "ok")
}

// notReady says why the agent is not ready, or returns "".
func (s *Server) notReady() string {
	var reasons []string
	if s.isStopping() {
		reasons = append(reasons, "volume-agent is stopping")
	}
	if s.cfg.Recovered != nil && !s.cfg.Recovered() {
		reasons = append(reasons, "start-up recovery of mounted volumes is not done")
	}
	for _, src := range s.cfg.Sources {
		st := src.Status()
		if !st.Synced {
			reasons = append(reasons, fmt.Sprintf("source %s is not synced: %s", st.Name, st.Reason))
		}
		if st.Disconnected != "" {
			reasons = append(reasons, fmt.Sprintf("source %s: %s", st.Name, st.Disconnected))
		}
	}
	return strings.Join(reasons, "; ")
}

func (s *Server) pods(w http.ResponseWriter, _ *http.Request) {
	if s.cache == nil {
		writeJSON(w, http.StatusOK, map[string][]Pod{"pods": s.cfg.Worlds.Pods()})
		return
	}
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(s.cache.pods())
}

func (s *Server) sources(w http.ResponseWriter, _ *http.Request) {
	out := make([]source.Status, 0, len(s.cfg.Sources))
	for _, src := range s.cfg.Sources {
		out = append(out, src.Status())
	}
	writeJSON(w, http.StatusOK, map[string][]source.Status{"sources": out})
}

// claims lists the claims the agent bound from the manifests, with their
// phase and PersistentVolume, and the VolumeSnapshots when there are any.
func (s *Server) claims(w http.ResponseWriter, _ *http.Request) {
	answer := claimsAnswer{Claims: []binder.ClaimStatus{}}
	if s.cfg.Claims != nil {
		answer.Claims = append(answer.Claims, s.cfg.Claims.Claims()...)
	}
	if snaps, ok := s.cfg.Claims.(Snapshots); ok {
		answer.Snapshots = snaps.Snapshots()
	}
	writeJSON(w, http.StatusOK, answer)
}

// claimsAnswer is the answer of GET /v1/claims.
type claimsAnswer struct {
	Claims    []binder.ClaimStatus    `json:"claims"`
	Snapshots []binder.SnapshotStatus `json:"snapshots,omitempty"`
}

// pod answers for one pod. With ?wait=DURATION it answers as soon as the pod
// is ready (200) or, when the time is up, 504 with the same body (404 if the
// pod never appeared).
func (s *Server) pod(w http.ResponseWriter, r *http.Request) {
	uid := r.PathValue("uid")
	wait, err := parseWait(waitParam(r.URL))
	if err != nil {
		writeText(w, http.StatusBadRequest, err.Error())
		return
	}
	if wait == 0 {
		s.answer(w, uid, http.StatusOK)
		return
	}
	select {
	case s.waiting <- struct{}{}:
		defer func() { <-s.waiting }()
	default:
		w.Header().Set("Retry-After", "1")
		writeText(w, http.StatusTooManyRequests, fmt.Sprintf("too many requests waiting (%d at most): ask again in a moment, or without wait=", s.cfg.MaxWaiting))
		return
	}
	extendWrite(w, r, wait)
	// Registered before the first look: a change in between wakes it.
	p := s.watch(uid, wait)
	defer s.unwatch(p)
	for !s.answerWhenReady(w, r, p) {
	}
}

// answerWhenReady answers when the pod of p is ready, or waits for its
// next change and answers if the wait ends otherwise. It reports whether
// it answered (or the client went away). A change that leaves the pod not
// ready (Worlds.Ready, the same decision as the status's) computes no
// status: only the answer does.
func (s *Server) answerWhenReady(w http.ResponseWriter, r *http.Request, p *poll) bool {
	if s.mayBeReady(p) && s.answerIfReady(w, p.uid) {
		return true
	}
	select {
	case <-p.changed:
		return false
	case <-r.Context().Done():
		return true // the client went away: nobody to answer
	case <-s.stopping:
		// Never 200 without the pod: a runtime that trusts the status
		// code would start containers without their volumes.
		writeText(w, http.StatusServiceUnavailable, "volume-agent is stopping; ask again once it is back")
		return true
	case <-p.deadline.C:
		s.answer(w, p.uid, http.StatusGatewayTimeout)
		return true
	}
}

// mayBeReady is Worlds.Ready for the pod of p, in p's buffers, when the
// server has worlds (true otherwise: the status then decides alone).
func (s *Server) mayBeReady(p *poll) bool {
	return s.cache == nil || p.readiness.ready(s.cfg.Worlds, types.UID(p.uid))
}

// answerIfReady answers 200 with the status of pod uid if that status says
// it is ready, and reports whether it did.
func (s *Server) answerIfReady(w http.ResponseWriter, uid string) bool {
	if s.cache == nil {
		p, found := s.cfg.Worlds.Pod(uid)
		if found && p.Ready {
			writePod(w, p, found, http.StatusOK)
		}
		return found && p.Ready
	}
	entry, found := s.cache.pod(types.UID(uid))
	if found && entry.ready {
		writeEntry(w, http.StatusOK, entry)
	}
	return found && entry.ready
}

// answer answers the status of pod uid with code, 200 once it is ready
// (404 when it is not shown).
func (s *Server) answer(w http.ResponseWriter, uid string, code int) {
	if s.cache == nil {
		p, found := s.cfg.Worlds.Pod(uid)
		if found && p.Ready {
			code = http.StatusOK
		}
		writePod(w, p, found, code)
		return
	}
	entry, found := s.cache.pod(types.UID(uid))
	switch {
	case !found:
		writeText(w, http.StatusNotFound, "pod not found")
	case entry.ready:
		writeEntry(w, http.StatusOK, entry)
	default:
		writeEntry(w, code, entry)
	}
}

func writePod(w http.ResponseWriter, p Pod, found bool, code int) {
	if !found {
		writeText(w, http.StatusNotFound, "pod not found")
		return
	}
	writeJSON(w, code, p)
}

// waitParam is u.Query().Get("wait"), without a map for the query a
// runtime sends, wait=DURATION alone with nothing to unescape.
func waitParam(u *url.URL) string {
	if u.RawQuery == "" {
		return ""
	}
	if v, ok := strings.CutPrefix(u.RawQuery, "wait="); ok && !strings.ContainsAny(v, "&;%+") {
		return v
	}
	return u.Query().Get("wait")
}

func parseWait(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("wait=%q: want a duration such as 5s", v)
	}
	return min(d, MaxWait), nil
}
