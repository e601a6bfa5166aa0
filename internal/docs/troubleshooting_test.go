package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// internalMessages are messages of userFacingDirs that no operator can
// cause: they report a programming error of the agent's own wiring (a
// required Config field left empty, a Run started twice, a type the
// agent's own cache cannot hold), which main never triggers. They need no
// entry; each must still occur in the code.
var internalMessages = map[string]string{
	"binder: Inner is required":                                                      "Config validation; main sets it",
	"binder: Logger is required":                                                     "Config validation; main sets it",
	"binder: NodeName is required":                                                   "Config validation; flags refuse an empty node name first",
	"binder: StatePath is required":                                                  "Config validation; main sets it",
	"binder: Provisioners[…] is nil":                                                 "Config validation; main sets it",
	"binder: two Provisioners are named …":                                           "Config validation; --provisioners refuses a name given twice first",
	"binder: Run is already running":                                                 "a second Run; main runs it once",
	"binder: ReclaimDelay … is negative":                                             "Config validation; --reclaim-delay refuses a negative delay first",
	"storagecapacity: Client, Driver, Node, Namespace, Room and Logger are required": "Config validation; main sets them",
	"provisioner: Config.Client is required":                                         "Config validation; main sets it",
	"provisioner: Config.Logger is required":                                         "Config validation; main sets it",
	"provisioner: Config.ReclaimDelay is negative":                                   "Config validation; --reclaim-delay refuses a negative delay first",
	"provisioner: Config.Provisioner is required":                                    "Config validation; main sets it",
	"local provisioner: a mounter and a logger are required":                         "Config validation; main sets them",
	"local provisioner: node name is required":                                       "Config validation; flags refuse an empty node name first",
	"provision: the request has no claim or no class":                                "the controller and the binder always send both",
	"nfs-subdir provisioner: RootDir and Exports are required":                       "Config validation; main sets them",
	"apiserver source: Client, NodeName and Logger are required":                     "Config validation; main sets them",
	"manifest source: Dir is required":                                               "Config validation; main passes --manifests only when set",
	"manifest source: Logger is required":                                            "Config validation; main sets it",
	"manifest source: NodeName is required":                                          "Config validation; flags refuse an empty node name first",
	"manifest source: Resync … is negative":                                          "Config validation; main leaves the default",
	"manifest source is already running":                                             "a second Run; main runs it once",
	"plugin … registered twice":                                                      "plugins.Default registers each plugin once",
	"unsupported projection source":                                                  "validation refuses such a source before set-up",
	"… …: unexpected type …":                                                         "an informer cache holding a type it was not made for",
	"base directory":                                                                 "a sentinel joined to storagedir errors that are documented",
	"remove …: no owner given":                                                       "storagedir.RemoveMarked's argument check; nfssubdir always passes the PV name",
	"no MemTotal in /proc/meminfo":                                                   "never shown: the machine's memory is then left out of the defaults",
	"tree deeper than the mount scan goes":                                           "never shown: mount.MountsUnder then reads the mount table instead",
	"capacity: Root and Logger are required":                                         "Config validation; the provisioner sets them",
	"losetup attached … as …, not a loop device":                                     "losetup --show prints the device it attached; never seen",
	"expand the storage of PersistentVolume …: provisioner … cannot expand volumes":  "plan asks only provisioners that are Expanders to expand",
	"no qgroup limit":                                                                "never shown: usage then walks the subvolume as a plain directory",
	"btrfs quotas are not enabled":                                                   "never shown: a category matched by errors.Is on btrfs(8)'s own error, whose text is shown",
	"btrfs subvolume holds another subvolume":                                        "never shown: a category matched by errors.Is on btrfs(8)'s own error, whose text is shown",
	"btrfs: path … is not absolute":                                                  "a guard: emptydir checks its path first, capacity resolves its root",
}

var (
	messageLine = regexp.MustCompile("^- `(.+)`$")
	headingLine = regexp.MustCompile(`^#+ `)
)

// entry is one group of messages of TROUBLESHOOTING.md with its text.
type entry struct {
	line     int
	messages []string
	body     string
}

// entries parses the groups: consecutive lines "- `message`", then prose
// up to the next group or heading.
func entries(text string) []entry {
	var out []entry
	inMessages := false
	for i, line := range strings.Split(text, "\n") {
		m := messageLine.FindStringSubmatch(line)
		switch {
		case m != nil && inMessages:
			out[len(out)-1].messages = append(out[len(out)-1].messages, m[1])
		case m != nil:
			out = append(out, entry{line: i + 1, messages: []string{m[1]}})
			inMessages = true
		case headingLine.MatchString(line):
			inMessages = false
			out = append(out, entry{}) // ends the body of the last group
		case strings.TrimSpace(line) != "":
			inMessages = false
			if len(out) > 0 {
				out[len(out)-1].body += line + "\n"
			}
		}
	}
	var groups []entry
	for _, e := range out {
		if len(e.messages) > 0 {
			groups = append(groups, e)
		}
	}
	return groups
}

func TestTroubleshootingMatchesCode(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(root, "TROUBLESHOOTING.md"))
	if err != nil {
		t.Fatal(err)
	}
	inCode := map[string]bool{}
	for _, m := range collect(t, "cmd", "internal") {
		inCode[m.text] = true
	}
	documented := map[string]int{}
	for _, e := range entries(string(text)) {
		if !strings.Contains(e.body, "Cause:") || !strings.Contains(e.body, "Fix:") {
			t.Errorf("TROUBLESHOOTING.md:%d: the entry of %q says no \"Cause:\" and \"Fix:\"", e.line, e.messages[0])
		}
		for _, m := range e.messages {
			if line, dup := documented[m]; dup {
				t.Errorf("TROUBLESHOOTING.md:%d: %q is documented again (first at line %d)", e.line, m, line)
			}
			documented[m] = e.line
			// (a) Every documented message still occurs in the code.
			if !inCode[m] {
				t.Errorf("TROUBLESHOOTING.md:%d documents %q, which no longer occurs in the code", e.line, m)
			}
		}
	}
	if len(documented) == 0 {
		t.Fatal("TROUBLESHOOTING.md documents no messages")
	}
	// (b) Every user-facing message of userFacingDirs is documented.
	userFacing := map[string]bool{}
	for _, m := range collect(t, userFacingDirs...) {
		switch m.kind {
		case kindWrapper:
			continue
		case kindUnreadable:
			t.Errorf("%s: the message of a warn or error log line, %s, is not a constant: give it a constant message (and the rest in fields), so that it can be documented and checked", m.pos, m.text)
			continue
		}
		userFacing[m.text] = true
		if _, ok := documented[m.text]; !ok && internalMessages[m.text] == "" {
			t.Errorf("%s: %s message %q is not in TROUBLESHOOTING.md (add \"- `%s`\" with a Cause: and a Fix:)", m.pos, m.kind, m.text, m.text)
		}
	}
	for m := range internalMessages {
		if !userFacing[m] {
			t.Errorf("internalMessages lists %q, which no longer occurs in the code", m)
		}
	}
}
