package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestStatusTableSaysWhatToDo: a claim of a class that enforces capacity,
// on a btrfs local path root with quotas off, waits with a reason whose
// fix comes hundreds of characters in. volume-agent status cuts the
// ERROR cell and shows the reason under the row, wrapped (past 8 lines,
// its first line and its end): the cause (quotas off) and what to do
// (btrfs quota enable ROOT) are in the table.
func TestStatusTableSaysWhatToDo(t *testing.T) {
	root := btrfsLocalRoot(t, false)
	a := newAgent(t)
	a.start("--provisioners", "local", "--local-path-root", root)
	a.writeManifest("class.yaml", enforcedClass)
	a.writeManifest("claim.yaml", enforcedClaim)
	a.writeManifest("pod.yaml", writerPod)
	p := a.waitPod("default", "writer", 20*time.Second, func(p apiPod) bool {
		return strings.Contains(p.volume("store").Error, "btrfs quota enable")
	})
	reason := strings.Join(strings.Fields(p.volume("store").Error), " ")
	out := runCLI(t, "status", "--addr", a.addr)
	under := reasonsUnder(out.stdout)["default/writer store"]
	// A reason of more than 8 lines keeps its first line and its end.
	head, end, cut := strings.Cut(under, " ... ")
	if !cut {
		end = under // 8 lines or fewer: shown whole
	}
	if out.code != 0 || !strings.HasPrefix(reason, head) || !strings.HasSuffix(reason, end) || (!cut && under != reason) {
		t.Fatalf("volume-agent status:\n%s\nwant under the row of store the reason %q, whole or its first line and its end", out.stdout, reason)
	}
	if !strings.Contains(end, "quotas are off") || !strings.Contains(end, "btrfs quota enable "+root) {
		t.Errorf("the table's reason %q does not say the cause and what to do", under)
	}
}

// reasonsUnder returns the lines under each row of a volume-agent status
// table (indented by four spaces), joined, by "POD VOLUME".
func reasonsUnder(table string) map[string]string {
	out := map[string]string{}
	var row string
	for _, line := range strings.Split(table, "\n") {
		if rest, ok := strings.CutPrefix(line, "    "); ok {
			out[row] = strings.TrimSpace(out[row] + " " + rest)
			continue
		}
		if f := strings.Fields(line); len(f) > 1 {
			row = f[0] + " " + f[1]
		}
	}
	return out
}
