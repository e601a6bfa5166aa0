package manifest

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestNameUIDIsUUIDv5(t *testing.T) {
	// RFC 4122 DNS namespace; the version 5 UUID of "python.org" is a
	// well-known value (Python's uuid.uuid5 documentation).
	dns := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	if got, want := nameUID(dns, "python.org"), types.UID("886313e1-3b8a-5372-9b90-0c9aee199e5d"); got != want {
		t.Errorf("nameUID = %s, want %s", got, want)
	}
}

func podUID(t *testing.T, p *parser, namespace, name, uid string) types.UID {
	t.Helper()
	meta := "name: " + name + ", namespace: " + namespace
	if uid != "" {
		meta += ", uid: " + uid
	}
	objs, problems := p.parseFile("p.yaml", []byte("apiVersion: v1\nkind: Pod\nmetadata: {"+meta+"}\n"))
	if len(problems) > 0 || len(objs) != 1 {
		t.Fatalf("parse pod: %v", problems)
	}
	return objs[0].obj.(*v1.Pod).UID
}

func TestPodUIDStable(t *testing.T) {
	a, b := newParser("node-1"), newParser("node-2")
	uid := podUID(t, a, "default", "web", "")
	if len(uid) != 36 || uid[14] != '5' {
		t.Errorf("derived uid %q is not a version 5 UUID", uid)
	}
	if again := podUID(t, b, "default", "web", ""); again != uid {
		t.Errorf("uid differs between parsers: %s vs %s", uid, again)
	}
	if other := podUID(t, a, "default", "web2", ""); other == uid {
		t.Errorf("pods with different names share uid %s", uid)
	}
	if other := podUID(t, a, "team-a", "web", ""); other == uid {
		t.Errorf("pods in different namespaces share uid %s", uid)
	}
	if explicit := podUID(t, a, "default", "web", "my-uid-1"); explicit != "my-uid-1" {
		t.Errorf("explicit uid replaced by %s", explicit)
	}
}

func TestPodUIDIgnoresSpecEdits(t *testing.T) {
	p := newParser("node-1")
	parse := func(image string) *v1.Pod {
		objs, _ := p.parseFile("p.yaml", []byte(strings.Replace(goodPod, "image: b", "image: "+image, 1)))
		return objs[0].obj.(*v1.Pod)
	}
	if a, b := parse("one"), parse("two"); a.UID != b.UID {
		t.Errorf("editing the spec changed the uid: %s -> %s", a.UID, b.UID)
	}
}

func TestResourceVersionFollowsContent(t *testing.T) {
	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: v1}\n"
	version := func(content string) string {
		t.Helper()
		objs, problems := newParser("node-1").parseFile("c.yaml", []byte(content))
		if len(problems) > 0 || len(objs) != 1 {
			t.Fatalf("parse: %v", problems)
		}
		if got := objs[0].obj.(*v1.ConfigMap).ResourceVersion; got != objs[0].version || got == "" {
			t.Fatalf("resourceVersion %q, version %q", got, objs[0].version)
		}
		return objs[0].version
	}
	base := version(cm)
	// The version hashes the bytes of the object's document: the same
	// bytes, alone or after a separator, give the same version.
	for _, content := range []string{cm, "---\n" + cm, "# a comment\n---\n" + cm} {
		if got := version(content); got != base {
			t.Errorf("version of %q = %s, want %s (same bytes)", content, got, base)
		}
	}
	// Other content gives another version; so do other bytes for the same
	// content, which costs one refresh that writes nothing.
	for _, content := range []string{
		strings.Replace(cm, "k: v1", "k: v2", 1),
		strings.Replace(cm, "name: c}", "name: c, labels: {a: b}}", 1),
		"# a comment\n" + cm,
	} {
		if got := version(content); got == base {
			t.Errorf("version of %q unchanged at %s", content, got)
		}
	}
}
