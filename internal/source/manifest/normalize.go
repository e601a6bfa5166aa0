package manifest

import (
	"crypto/sha1" //nolint:gosec // G505: SHA-1 names a version 5 UUID (RFC 4122), not a security check
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
)

// uidNamespace is the UUID namespace under which pods without metadata.uid
// get a name-based (version 5) UID. Never change it: the UID names the pod's
// directories on disk.
var uidNamespace = [16]byte{
	0x75, 0xaa, 0xa5, 0x9f, 0x6b, 0x05, 0x44, 0x11,
	0x85, 0x9f, 0x25, 0x25, 0x66, 0xa1, 0xe6, 0xe1,
}

// isSafeUID tells whether s may be an explicit pod UID: it becomes one path
// component (pods/<uid>), so no separator, no "." or "..", no hidden name.
// It is what ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ matches, written out: that
// regular expression, compiled at every start, held 118 KB in 1,700
// allocations for the agent's life (TestIsSafeUIDIsTheRegexp).
func isSafeUID(s string) bool {
	if len(s) == 0 || len(s) > 128 || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// isAlnum tells whether c is an ASCII letter or digit.
func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// normalize validates a decoded object and makes it what the API server would
// have stored: namespace defaulted, Secret stringData merged, a pod UID, a
// StorageClass's defaults, and a resourceVersion that is a hash of src, the
// bytes it was decoded from.
func (p *parser) normalize(obj runtime.Object, at where, src []byte) (object, error) {
	obj.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(apiVersionOf[at.kind], at.kind))
	m := obj.(metav1.Object)
	if err := validateMeta(m, at.kind); err != nil {
		return object{}, err
	}
	if err := p.normalizeKind(obj); err != nil {
		return object{}, err
	}
	version := p.contentVersion(m, src)
	k := key{kind: at.kind, namespace: m.GetNamespace(), name: m.GetName()}
	return object{key: k, obj: obj, version: version, at: at}, nil
}

// validateMeta checks the name and defaults or clears the namespace.
func validateMeta(m metav1.Object, kind string) error {
	if m.GetName() == "" {
		return hint(fmt.Errorf("metadata.name is missing"), "metadata")
	}
	if msgs := validation.IsDNS1123Subdomain(m.GetName()); len(msgs) > 0 {
		return hint(fmt.Errorf("invalid metadata.name %q: %s", m.GetName(), strings.Join(msgs, "; ")), "metadata", "name")
	}
	switch {
	case !namespaced[kind]:
		m.SetNamespace("") // as the API server does for cluster-scoped kinds
	case m.GetNamespace() == "":
		m.SetNamespace(metav1.NamespaceDefault)
	}
	if msgs := validation.IsDNS1123Label(m.GetNamespace()); m.GetNamespace() != "" && len(msgs) > 0 {
		return hint(fmt.Errorf("invalid metadata.namespace %q: %s", m.GetNamespace(), strings.Join(msgs, "; ")), "metadata", "namespace")
	}
	return nil
}

func (p *parser) normalizeKind(obj runtime.Object) error {
	switch o := obj.(type) {
	case *v1.Pod:
		return p.normalizePod(o)
	case *v1.Secret:
		mergeStringData(o)
	case *storagev1.StorageClass:
		return normalizeStorageClass(o)
	case *volumesnapshot.VolumeSnapshot:
		return normalizeVolumeSnapshot(o)
	case *volumesnapshot.VolumeSnapshotClass:
		return normalizeVolumeSnapshotClass(o)
	}
	return nil
}

// normalizePod gives the pod a UID and binds it to this node when it names none.
func (p *parser) normalizePod(pod *v1.Pod) error {
	switch {
	case pod.UID == "":
		pod.UID = nameUID(uidNamespace, pod.Namespace+"/"+pod.Name)
	case !isSafeUID(string(pod.UID)):
		return hint(fmt.Errorf("metadata.uid %q is not a safe directory name "+
			"(letters, digits, '.', '_', '-', starting with a letter or digit, at most 128)", pod.UID), "metadata", "uid")
	}
	if pod.Spec.NodeName == "" {
		pod.Spec.NodeName = p.nodeName
	}
	return nil
}

// mergeStringData moves stringData into data, stringData winning, as the API
// server does on write.
func mergeStringData(s *v1.Secret) {
	if len(s.StringData) > 0 && s.Data == nil {
		s.Data = make(map[string][]byte, len(s.StringData))
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}

// nameUID returns the version 5 (SHA-1, name-based) UUID of name in namespace ns.
func nameUID(ns [16]byte, name string) types.UID {
	h := sha1.New() //nolint:gosec // G401: SHA-1 names a version 5 UUID (RFC 4122), not a security check
	h.Write(ns[:])
	h.Write([]byte(name))
	u := h.Sum(nil)[:16]
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]))
}

// contentVersion sets metadata.resourceVersion to a short hash of src, the
// bytes that define the object (its document, or its item of a List), and
// returns it. The object is a function of those bytes and of the node name,
// which completes a pod bound to no node: equal bytes give an equal
// version, across restarts too, and new content a new version. Other bytes
// for the same content (a comment, another layout) give another version
// too, which costs one refresh that writes nothing (ARCHITECTURE.md,
// "Content versions"; TestCommentEditWritesNothing); encoding every object
// again to hash its content was a seventh of the parse.
func (p *parser) contentVersion(m metav1.Object, src []byte) string {
	h := sha256.New()
	h.Write([]byte(p.nodeName))
	h.Write([]byte{0})
	h.Write(src)
	version := hex.EncodeToString(h.Sum(nil)[:8])
	m.SetResourceVersion(version)
	return version
}
