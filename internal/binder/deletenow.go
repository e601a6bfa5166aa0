package binder

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/reclaim"
)

// DeleteNowRequest names released storage an operator wants deleted before
// its reclaim delay ends: by its PersistentVolume and the claim (namespace,
// name and UID) that released it, as GET /v1/claims shows them, so that a
// new claim of the same name is never what is deleted.
type DeleteNowRequest struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid,omitempty"`
	PV        string    `json:"pv"`
	// By says who asked, for the log.
	By string `json:"-"`
}

func (r DeleteNowRequest) claim() claimKey {
	return claimKey{namespace: r.Namespace, name: r.Name, uid: r.UID}
}

// The errors of DeleteNow, besides a failed write of the records.
var (
	// ErrNoSuchStorage: no record matches the request.
	ErrNoSuchStorage = errors.New("no such released storage")
	// ErrRefused: the storage is not in a state to be deleted early.
	ErrRefused = errors.New("refused")
)

// deleteNowCall is a DeleteNow request handed to the binding loop.
type deleteNowCall struct {
	req   DeleteNowRequest
	reply chan error
}

// DeleteNow asks the binding loop to delete the storage req names now
// rather than at the end of its reclaim delay. It returns once the loop
// has recorded the step Deleting (the deletion then runs, and is finished
// after any restart, as at the end of the delay: an archiveOnDelete class
// archives), or refused: ErrNoSuchStorage, or ErrRefused with the storage's
// state and what to do. ctx bounds the wait for the loop.
func (s *Source) DeleteNow(ctx context.Context, req DeleteNowRequest) error {
	call := deleteNowCall{req: req, reply: make(chan error, 1)}
	select {
	case s.deleteNow <- call:
	case <-ctx.Done():
		return fmt.Errorf("the binding loop did not take the request: %w", ctx.Err())
	}
	select {
	case err := <-call.reply:
		return err
	case <-ctx.Done():
		// The loop answers into the buffer; whether it recorded the
		// deletion shows in /v1/claims.
		return fmt.Errorf("no answer from the binding loop (the deletion may be recorded: see volume-agent claims): %w", ctx.Err())
	}
}

// decideDeleteNow decides on req in the binding loop, which alone writes the
// records: the record is found by PersistentVolume, must be the claim's
// (UID included) and Released with reclaim policy Delete, and its step
// must allow an early deletion (reclaim.DeleteNow) on the live facts of
// this moment. The step Deleting is written before anything is deleted;
// the pass that follows asks the provisioner to delete.
func (s *Source) decideDeleteNow(req DeleteNowRequest) error {
	prev := s.current()
	r, ok := prev.recs[req.PV]
	what := fmt.Sprintf("PersistentVolume %q of claim %s/%s", req.PV, req.Namespace, req.Name)
	switch {
	case !ok || r.claim() != req.claim():
		return fmt.Errorf("%w: no record of %s (UID %q): see volume-agent claims", ErrNoSuchStorage, what, req.UID)
	case r.Phase != PhaseReleased:
		return fmt.Errorf("%w: %s is %s, not released: only storage released and moved aside can be deleted now; "+
			"remove the claim from the manifests (and the pods that use it) first", ErrRefused, what, r.Phase)
	case !r.deletable():
		return fmt.Errorf("%w: %s has reclaim policy Retain: the agent never deletes its data; remove it by hand if it is not wanted", ErrRefused, what)
	case s.ops.provisioners[r.provisionedBy()] == nil:
		return fmt.Errorf("%w: this agent does not run %s's provisioner %q (--provisioners), which alone can delete it", ErrRefused, what, r.provisionedBy())
	case s.ops.st.running[r.PV]:
		return fmt.Errorf("%w: an operation on %s is under way; ask again in a few seconds", ErrRefused, what)
	}
	claims := withMade(s.inner.PersistentVolumeClaims(), prev.made, s.inner.Pods())
	back := false
	for _, c := range claims {
		back = back || keyOf(c) == r.claim()
	}
	next, err := reclaim.DeleteNow(r.Reclaim, reclaim.Facts{Wanted: back, InUse: s.inUse != nil && s.inUse(r.PV), MovedAside: s.ops.st.asided[r.PV]})
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrRefused, what, err)
	}
	was := r.Reclaim
	r.Reclaim = next
	recs := maps.Clone(prev.recs)
	recs[r.PV] = r
	if err := s.store.saveState(recs, prev.made, prev.snaps); err != nil {
		return fmt.Errorf("%s: the deletion could not be recorded, so it is not begun: %w", what, err)
	}
	st := *prev
	st.recs = recs
	s.publish(&st)
	s.log.Warn("released storage to be deleted before its reclaim delay ends, at an operator's request",
		zap.String("claim", r.claim().String()), zap.String("uid", string(r.UID)), zap.String("pv", r.PV),
		zap.Time("deleteAfter", was.DeleteAfter), zap.Bool("archive", r.pendingDeletion().Archive), zap.String("by", req.By))
	return nil
}
