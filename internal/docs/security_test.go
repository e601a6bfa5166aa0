package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSecurityNamesRealTests keeps SECURITY.md true: every test it names
// exists, and each kubelet CVE it lists has a regression test named after
// it.
func TestSecurityNamesRealTests(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "SECURITY.md"))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test\w+|Fuzz\w+)\(`)
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		for _, m := range decl.FindAllSubmatch(src, -1) {
			tests[string(m[1])] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`((?:Test|Fuzz)\\w+)`").FindAllStringSubmatch(string(doc), -1)
	if len(named) < 20 {
		t.Fatalf("SECURITY.md names %d tests; the threat tables should name many more", len(named))
	}
	for _, m := range named {
		if !tests[m[1]] {
			t.Errorf("SECURITY.md names %s, which is no test of this repository", m[1])
		}
	}
	for _, cve := range []string{"CVE-2017-1002101", "CVE-2017-1002102", "CVE-2021-25741", "CVE-2023-3676"} {
		test := "TestCVE" + strings.ReplaceAll(strings.TrimPrefix(cve, "CVE-"), "-", "_")
		if !strings.Contains(string(doc), cve) || !strings.Contains(string(doc), "`"+test) || !hasPrefixIn(tests, test) {
			t.Errorf("%s: SECURITY.md must list it with its regression test %s…", cve, test)
		}
	}
}

func hasPrefixIn(set map[string]bool, prefix string) bool {
	for name := range set {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// TestMakeFuzzRunsEveryTarget: `make fuzz` runs the targets its Makefile
// lists; a fuzz target left off the list would get its seeds run and never
// be fuzzed.
func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	decl := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	found := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		for _, m := range decl.FindAllSubmatch(src, -1) {
			found++
			entry := "./" + filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, root+"/"))) + ":" + string(m[1])
			if !strings.Contains(string(mk), entry) {
				t.Errorf("%s: %s is not in the Makefile's FUZZ_TARGETS (want %s)", path, m[1], entry)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no fuzz targets found")
	}
}
