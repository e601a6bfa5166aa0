// Package apiserver is the pod source for running as a node agent of a
// Kubernetes cluster. It watches the pods bound to this node (a
// field-selected informer), this node's Node object, PersistentVolumes and
// PersistentVolumeClaims, and — one watch per object — exactly the
// ConfigMaps and Secrets those pods' volumes refer to.
//
// Why per-object watches rather than namespace informers: a node runs ~100
// pods that refer to a few dozen objects, while a namespace may hold
// thousands of ConfigMaps and Secrets. Per-object watches keep memory and
// the secrets the agent holds to what its pods use (the kubelet's watch
// strategy does the same); the API server serves them from its watch cache,
// so the cost is one cheap watch per referenced object. Immutable objects
// are read once and not watched after that.
//
// A newly referenced object is also read once with a GET before its watch
// starts (firstread.go): the watch's first list waits until the API
// server's watch cache has caught up with etcd, up to ~100 ms, while the
// GET is one quorum read. The watch's answer replaces the read's once it
// has listed. A read that fails or is not allowed (no "get" in the RBAC)
// only leaves the lookup waiting for the watch, as before.
//
// With a node identity (the kubelet's credentials, under the Node
// authorizer) listing claims and PVs cluster-wide is refused: the node may
// only get those its pods refer to. Once such a list is refused, the claim
// or PV informer stops and each object is read by GET instead, again while
// lookups ask for it, at most every minute once it stops changing
// (polled.go). ConfigMaps and Secrets need no such change: the Node
// authorizer allows a node's single-object watches of those its pods use.
//
// Whether the API server is reachable is judged from the list and watch
// calls of the pod and Node informers only, whose watches are always open:
// one rejected event or failed TokenRequest says nothing about them, while
// a hung server shows in them once client-go's HTTP/2 health check ends
// their watches and the next list times out.
//
// The source never tears anything down itself and never reports a pod gone
// because a list or watch failed: informers keep their last state while the
// API server is unreachable, and the populator removes pods only when the
// pod informer has synced.
package apiserver
