package nfssubdir_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
)

// archiveParams is a class whose pathPattern the claim's annotation dir
// chooses, archiving on delete.
var archiveParams = map[string]string{"server": "s", "path": "/e", "pathPattern": "${.PVC.annotations.dir}", "archiveOnDelete": "true"}

// tenantClaim is the claim namespace/name, UID uid, whose annotation dir
// is dir.
func tenantClaim(namespace, name, uid, dir string) *v1.PersistentVolumeClaim {
	c := claim(nil, map[string]string{"dir": dir})
	c.Namespace, c.Name, c.UID = namespace, name, types.UID(uid)
	return c
}

// cluster is what the cluster controller does around the provisioner:
// the PVs it created, passed to each Provision, and Commit once a PV is
// created.
type cluster struct {
	t *testing.T
	p interface {
		provisioner.Provisioner
		provisioner.Settler
	}
	params map[string]string
	pvs    []*v1.PersistentVolume
}

// provision provisions c as the cluster controller does, and returns the
// PV, or the error.
func (cl *cluster) provision(c *v1.PersistentVolumeClaim) (*v1.PersistentVolume, error) {
	req := request(class(cl.params), c)
	req.Tentative = true
	req.PVs = func() []*v1.PersistentVolume { return cl.pvs }
	vol, err := cl.p.Provision(context.Background(), req)
	if err != nil {
		return nil, err
	}
	pv := provisioner.NewPV(req, provisioner.NFSSubdirName, vol)
	cl.pvs = append(cl.pvs, pv)
	if err := cl.p.Commit(context.Background(), pv); err != nil {
		cl.t.Fatal(err)
	}
	return pv, nil
}

// delete deletes pv's storage, and then pv.
func (cl *cluster) delete(pv *v1.PersistentVolume) {
	if err := cl.p.Delete(context.Background(), pv); err != nil {
		cl.t.Fatal(err)
	}
	cl.pvs = slices.DeleteFunc(cl.pvs, func(o *v1.PersistentVolume) bool { return o.Name == pv.Name })
}

// TestArchiveParentGetsNothingOfTheArchive: team-a/db, at team-a/db, writes
// a file and is deleted and archived; team-b/grab then chooses team-a, the
// directory its archive was put in by earlier versions. The archive is in
// .archived, where no pattern reaches: grab gets team-a empty, and the
// archive keeps team-a's file.
func TestArchiveParentGetsNothingOfTheArchive(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, _ := newProvisioner(t, f)
	files := f.exportDir("s", "/e")
	cl := &cluster{t: t, p: p, params: archiveParams}
	db, err := cl.provision(tenantClaim("team-a", "db", "u-db", "team-a/db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(files, "team-a", "db", "secret"), []byte("team-a's"), 0o600); err != nil {
		t.Fatal(err)
	}
	cl.delete(db)

	grab, err := cl.provision(tenantClaim("team-b", "grab", "u-grab", "team-a"))
	if err == nil {
		// Given a directory: it must hold nothing of team-a's.
		if got := tree(t, filepath.Join(files, grab.Annotations["volume-agent.io/nfs-subdir-path"])); len(got) != 0 {
			t.Fatalf("team-b/grab's volume at team-a holds %q, want nothing of team-a's archive", got)
		}
	} else if !strings.Contains(err.Error(), "team-a") {
		t.Fatalf("Provision of team-b/grab = %v, want success or a refusal naming the path", err)
	}
	archive := filepath.Join(files, storagedir.ArchiveDir, "archived-team-a-db-"+db.Name, "secret")
	if b, err := os.ReadFile(archive); err != nil || string(b) != "team-a's" {
		t.Errorf("the archive %s: %q, %v; want team-a's file kept", archive, b, err)
	}
	for _, dir := range []string{".archived", ".archived/archived-team-a-db-" + db.Name} {
		if _, err := cl.provision(tenantClaim("team-b", "grab2", "u-grab2", dir)); err == nil || !strings.Contains(err.Error(), "starts with '.'") {
			t.Errorf("Provision of %s = %v, want a refusal of the dot-name", dir, err)
		}
	}
}

// TestExistingTreeIsRefused: a pattern's directory that is there already
// and holds anything not made for the claim (an older version's archive
// next to the volume it came from, another volume moved aside, the data of
// a PV deleted by hand) is refused with an error naming the path, where
// the claim chose it and what to do; nothing changes. It holds for a
// pattern of namespace and name too: a claim named like another volume's
// parent, or like another namespace, gets nothing of it.
func TestExistingTreeIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pattern  string
		claim    *v1.PersistentVolumeClaim
		existing []string // files below the export
		dir      string   // the directory the claim asks for
		source   string   // what the error says the path came from
	}{
		{"an older version's archive", "${.PVC.annotations.dir}", tenantClaim("team-b", "grab", "u-1", "team-a"),
			[]string{"team-a/archived-db/secret"}, "team-a", `the claim's annotation "dir"`},
		{"an older version's archive in capitals", "${.PVC.labels.dir}", dirClaim("u-1", "team-a"),
			[]string{"team-a/ARCHIVED-db/secret"}, "team-a", `the claim's label "dir"`},
		{"a volume moved aside", "${.PVC.annotations.dir}", tenantClaim("team-b", "grab", "u-1", "team-a"),
			[]string{"team-a/.pending-delete-pvc-x/secret"}, "team-a", `the claim's annotation "dir"`},
		{"a PV deleted by hand", "${.PVC.annotations.dir}", tenantClaim("team-b", "grab", "u-1", "team-a/db"),
			[]string{"team-a/db/secret"}, "team-a/db", `the claim's annotation "dir"`},
		{"a claim named like another volume's parent", "${.PVC.name}", tenantClaim("team-b", "team-a", "u-1", ""),
			[]string{"team-a/archived-db/secret"}, "team-a", "the claim's name"},
		{"a namespace and name meeting another's", "${.PVC.namespace}-${.PVC.name}", tenantClaim("x", "a-b", "u-1", ""),
			[]string{"x-a-b/secret"}, "x-a-b", "the claim's namespace and the claim's name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeExports{files: t.TempDir()}
			p, _ := newProvisioner(t, f)
			files := f.exportDir("s", "/e")
			for _, file := range tc.existing {
				mkdir(t, filepath.Dir(filepath.Join(files, file)))
				write(t, filepath.Join(files, file))
			}
			before := tree(t, files)
			cl := &cluster{t: t, p: p, params: map[string]string{"server": "s", "path": "/e", "pathPattern": tc.pattern}}
			want := tc.dir
			_, err := cl.provision(tc.claim)
			if err == nil {
				t.Fatalf("Provision of %s = success, want a refusal", want)
			}
			for _, part := range []string{"StorageClass shared", tc.claim.Namespace + "/" + tc.claim.Name, `"` + want + `"`, tc.source,
				"not made for this volume", "does not exist yet"} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("Provision = %v; want it to say %q", err, part)
				}
			}
			if after := tree(t, files); !slices.Equal(after, before) {
				t.Errorf("a refusal changed the export: %q, was %q", after, before)
			}
		})
	}
}

// TestExistingDirectoryThatIsTaken: what a pattern's directory may hold
// when it is there already and is taken.
func TestExistingDirectoryThatIsTaken(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, _ := newProvisioner(t, f)
	files := f.exportDir("s", "/e")
	cl := &cluster{t: t, p: p, params: archiveParams}

	// Empty, made by hand: nothing in it to hand out.
	mkdir(t, filepath.Join(files, "prepared"))
	if _, err := cl.provision(tenantClaim("team", "a", "u-a", "prepared")); err != nil {
		t.Fatalf("Provision of an empty directory = %v", err)
	}

	// Its own, written to, provisioned again (the informer lagging): found.
	req := request(class(archiveParams), tenantClaim("team", "b", "u-b", "own"))
	req.Tentative = true
	req.PVs = func() []*v1.PersistentVolume { return cl.pvs }
	vol, err := p.Provision(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(files, "own", "data")) // before Commit: its marker says whose it is
	if again, err := p.Provision(context.Background(), req); err != nil || again.Source.NFS.Path != vol.Source.NFS.Path {
		t.Fatalf("Provision again before Commit = %+v, %v", again, err)
	}
	pv := provisioner.NewPV(req, provisioner.NFSSubdirName, vol)
	cl.pvs = append(cl.pvs, pv)
	if err := p.Commit(context.Background(), pv); err != nil {
		t.Fatal(err)
	}
	if again, err := p.Provision(context.Background(), req); err != nil || again.Source.NFS.Path != vol.Source.NFS.Path {
		t.Fatalf("Provision again once its PV exists = %+v, %v", again, err)
	}
	// Without the PV listed (manifest mode), a directory with data is
	// refused even for the same claim: nothing says it made it.
	req.PVs = nil
	if _, err := p.Provision(context.Background(), req); err == nil || !strings.Contains(err.Error(), "not made for this volume") {
		t.Fatalf("Provision again without its PV = %v, want a refusal", err)
	}
}

// TestDeleteOfArchivedByAnOlderVersion: an older version archived the
// volume next to it, and stopped before the PV was gone; the deletion is
// done, nothing moves.
func TestDeleteOfArchivedByAnOlderVersion(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, _ := newProvisioner(t, f)
	files := f.exportDir("s", "/e")
	cl := &cluster{t: t, p: p, params: archiveParams}
	pv, err := cl.provision(tenantClaim("team-a", "db", "u-db", "team-a/db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(files, "team-a", "db"), filepath.Join(files, "team-a", "archived-db")); err != nil {
		t.Fatal(err)
	}
	before := tree(t, files)
	cl.delete(pv)
	if after := tree(t, files); !slices.Equal(after, before) {
		t.Errorf("Delete of a volume archived by an older version changed %q to %q", before, after)
	}
	// Nothing anywhere: gone already, not an error.
	if err := os.RemoveAll(filepath.Join(files, "team-a", "archived-db")); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(context.Background(), pv); err != nil {
		t.Errorf("Delete of a volume gone with its archive = %v, want success", err)
	}
}

// TestNestedPatternsBeforeTheirPVsAreKnown: two claims whose patterns nest
// (tenant-a, then tenant-a/db) are provisioned one after the other before
// the caller lists the first one's PV (manifest mode's binder starts the
// provisionings of one pass together, and lists none of them): the second
// is refused, so that the first claim's pods never see the second's data.
// The other order is refused too (the directory is not empty), and once
// the first volume's storage is deleted the second may be made.
func TestNestedPatternsBeforeTheirPVsAreKnown(t *testing.T) {
	for _, tc := range []struct{ first, second string }{{"tenant-a", "tenant-a/db"}, {"tenant-a/db", "tenant-a"}} {
		t.Run(strings.ReplaceAll(tc.first, "/", "_")+"_then_"+strings.ReplaceAll(tc.second, "/", "_"), func(t *testing.T) {
			f := &fakeExports{files: t.TempDir()}
			p, _ := newProvisioner(t, f)
			params := map[string]string{"server": "s", "path": "/e", "pathPattern": "${.PVC.annotations.dir}"}
			provision := func(c *v1.PersistentVolumeClaim) (*v1.PersistentVolume, error) {
				req := request(class(params), c) // no PVs: the caller lists none
				vol, err := p.Provision(context.Background(), req)
				if err != nil {
					return nil, err
				}
				return provisioner.NewPV(req, provisioner.NFSSubdirName, vol), nil
			}
			first, err := provision(tenantClaim("ns", "first", "u-first", tc.first))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := provision(tenantClaim("ns", "second", "u-second", tc.second)); err == nil {
				t.Fatalf("%s was provisioned while %s's volume, made a moment before, nests with it", tc.second, tc.first)
			} else if !strings.Contains(err.Error(), first.Name) && !strings.Contains(err.Error(), "holds") {
				t.Errorf("the refusal names neither %s nor what the directory holds: %v", first.Name, err)
			}
			if err := p.Delete(context.Background(), first); err != nil {
				t.Fatal(err)
			}
			if _, err := provision(tenantClaim("ns", "second", "u-second", tc.second)); err != nil {
				t.Errorf("after %s's storage was deleted, %s is still refused: %v", tc.first, tc.second, err)
			}
		})
	}
}

// TestCommittedVolumeIsNotRemembered: once its PV is committed, a volume
// is known by the caller's list alone. A PV deleted by hand (its data
// left in place) is then gone from it, and the next claim choosing its
// directory is refused for what the directory holds, not for a
// provisioning that ended long ago.
func TestCommittedVolumeIsNotRemembered(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, _ := newProvisioner(t, f)
	files := f.exportDir("s", "/e")
	cl := &cluster{t: t, p: p, params: archiveParams}
	pv, err := cl.provision(tenantClaim("team-a", "old", "u-old", "legacy"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(files, "legacy", "data"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cl.pvs = slices.DeleteFunc(cl.pvs, func(o *v1.PersistentVolume) bool { return o.Name == pv.Name }) // deleted by hand
	_, err = cl.provision(tenantClaim("team-b", "taker", "u-taker", "legacy"))
	if err == nil || !strings.Contains(err.Error(), `holds "data"`) || strings.Contains(err.Error(), "being provisioned") {
		t.Errorf("Provision of a directory a deleted PV left data in = %v; want a refusal for what it holds", err)
	}
}
