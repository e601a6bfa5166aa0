// Package source defines what a pod source (the manifest directory, the API
// server) offers the populator and the status endpoint. A source owns its
// own cache; it never touches volumes or the desired state itself.
package source

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// Source is one origin of the pods that run on this node.
//
// A source tells its owner about changes through the callback it was
// constructed with; the owner then reads the whole current state back
// (level-triggered), so a source may coalesce or repeat notifications freely.
type Source interface {
	// Name identifies the source in logs and the status API ("manifests", "api").
	Name() string
	// Run watches the source until ctx ends and returns nil then; it returns
	// an error only when the source cannot work at all.
	Run(ctx context.Context) error
	// Pods returns the pods currently bound to this node. The pods are shared,
	// read-only snapshots.
	Pods() []*v1.Pod
	// Objects resolves the objects the source's pods refer to.
	Objects() volume.Objects
	// Node returns this node's object when the source has it, else nil.
	Node() *v1.Node
	// Status says whether the source has delivered its complete state at
	// least once since start, and what is wrong with it now.
	Status() Status
}

// Status is a source's health as shown by /readyz and /v1/sources.
type Status struct {
	Name string `json:"name"`
	// Synced is true once the source has delivered its complete state since
	// start. Until every source is synced, the agent tears down nothing it
	// found on disk at start.
	Synced bool `json:"synced"`
	// Reason says why the source is not synced; empty when it is.
	Reason string `json:"reason,omitempty"`
	// Errors lists current problems (a file that does not parse, a watch
	// that fails) that do not stop the source from serving its last good state.
	Errors []string `json:"errors,omitempty"`
	// Disconnected, when set, says why the source cannot see changes right
	// now (the API server does not answer); it serves its last state and
	// /readyz reports it.
	Disconnected string `json:"disconnected,omitempty"`
	// Authoritative: once synced, an object the source does not list is
	// gone (the API server). A source that is not (the manifest directory)
	// proves a removal only by what it listed since start (see package
	// evidence).
	Authoritative bool `json:"authoritative,omitempty"`
	// ListingSince is when the synced source last began to list at least
	// one object, without a pause since; zero while it lists none. A pod
	// or claim found absent at start counts as removed only once this has
	// held for the settle time.
	ListingSince time.Time `json:"listingSince,omitzero"`
}

// Terminated reports whether a pod has finished (phase Succeeded or
// Failed): it needs no volumes any more, and nothing it refers to needs
// watching.
func Terminated(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}
