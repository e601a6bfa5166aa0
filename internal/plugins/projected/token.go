package projected

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/atomicwriter"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/contentdir"
)

// errNoTokens fails serviceAccountToken sources when the agent has no
// Tokens. It is permanent: the volume is Failed and never attempted.
var errNoTokens = errors.New("this agent does not mint service account tokens " +
	"(it runs with --mint-tokens=false, or from manifests without an API server); " +
	"a pod that does not use the Kubernetes API can set automountServiceAccountToken: false " +
	"and then has no kube-api-access volume")

// maxTokenSize caps how much of a token file is read back; a service
// account token is a few KiB.
const maxTokenSize = 64 << 10

// tokenPayload returns the token file of src. The token already at
// src.Path in dir, if any, goes to Tokens, which keeps it while it is
// fresh, so that a restart neither mints nor rewrites.
//
// Mode and owner are the kubelet's: the volume's defaultMode when the pod
// sets neither fsGroup nor one runAsUser for all its containers (fsUser);
// otherwise 0600, owned by fsUser when there is one. fsGroup ownership then
// adds group read (contentdir.ApplyFsGroup). Only the token gets the uid,
// and an unprivileged agent changes no owner but keeps 0600.
func (p *Plugin) tokenPayload(ctx context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection, mode os.FileMode, dir string) (contentdir.Payload, error) {
	if p.Tokens == nil {
		return nil, fmt.Errorf("serviceAccountToken: %w", errNoTokens)
	}
	token, err := p.Tokens.Token(ctx, pod, src, currentToken(dir, src.Path))
	if err != nil {
		return nil, fmt.Errorf("serviceAccountToken: %w", err)
	}
	f := atomicwriter.File{Data: token, Mode: mode}
	user := fsUser(pod)
	if user != nil || hasFsGroup(pod) {
		f.Mode = 0o600
	}
	if user != nil && mount.Privileged(p.Mounter) {
		f.UID = user
	}
	return contentdir.Payload{src.Path: f}, nil
}

// currentToken returns the content of the regular file at path in the
// volume directory dir, or nil when there is none, it is larger than
// maxTokenSize or it cannot be read (a new token is then requested). The
// read goes through an os.Root, so no link leads it outside dir, and its
// open does not block on a FIFO.
func currentToken(dir, path string) []byte {
	if dir == "" {
		return nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil
	}
	defer root.Close()
	f, err := root.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() || info.Size() > maxTokenSize {
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenSize+1))
	if err != nil || len(data) > maxTokenSize {
		return nil
	}
	return data
}

// fsUser is the kubelet's FsUser of a pod: the effective runAsUser (the
// container's, else the pod's) when every init, regular and ephemeral
// container has one and all are the same; nil otherwise.
func fsUser(pod *v1.Pod) *int64 {
	var users []*int64
	for _, c := range pod.Spec.InitContainers {
		users = append(users, runAsUser(pod, c.SecurityContext))
	}
	for _, c := range pod.Spec.Containers {
		users = append(users, runAsUser(pod, c.SecurityContext))
	}
	for _, c := range pod.Spec.EphemeralContainers {
		users = append(users, runAsUser(pod, c.SecurityContext))
	}
	if len(users) == 0 {
		return nil
	}
	for _, u := range users {
		if u == nil || *u != *users[0] {
			return nil
		}
	}
	uid := *users[0]
	return &uid
}

// runAsUser is a container's effective runAsUser, or nil.
func runAsUser(pod *v1.Pod, sc *v1.SecurityContext) *int64 {
	if sc != nil && sc.RunAsUser != nil {
		return sc.RunAsUser
	}
	if pod.Spec.SecurityContext != nil {
		return pod.Spec.SecurityContext.RunAsUser
	}
	return nil
}

func hasFsGroup(pod *v1.Pod) bool {
	return pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.FSGroup != nil
}
