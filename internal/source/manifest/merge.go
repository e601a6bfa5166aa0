package manifest

import (
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// origin is where an object in force was defined.
type origin struct {
	file string
	at   where
}

func (o origin) String() string {
	if o.file == "" {
		return o.at.position()
	}
	return o.file + ", " + o.at.position()
}

// claims records which object keys and pod UIDs are taken, and by whom.
type claims struct {
	keys map[key]origin
	uids map[types.UID]origin
}

func newClaims() *claims {
	return &claims{keys: map[key]origin{}, uids: map[types.UID]origin{}}
}

// conflict says why o cannot be added, or returns "" when it can.
func (c *claims) conflict(o object) string {
	if prev, ok := c.keys[o.key]; ok {
		return fmt.Sprintf("duplicate %s: already defined in %s", o.key, prev)
	}
	if pod, ok := o.obj.(*v1.Pod); ok {
		if prev, ok := c.uids[pod.UID]; ok {
			return fmt.Sprintf("pod uid %q is already used by the pod in %s", pod.UID, prev)
		}
	}
	return ""
}

func (c *claims) add(file string, o object) {
	c.keys[o.key] = origin{file: file, at: o.at}
	if pod, ok := o.obj.(*v1.Pod); ok {
		c.uids[pod.UID] = origin{file: file, at: o.at}
	}
}

// check returns a fatal problem for every object of objs that conflicts
// with c, claiming nothing.
func (c *claims) check(objs []object) []problem {
	var ps []problem
	for _, o := range objs {
		if msg := c.conflict(o); msg != "" {
			ps = append(ps, problem{msg: msg, at: o.at})
		}
	}
	return ps
}

// duplicatesWithin finds the objects of one file that repeat an earlier one.
func duplicatesWithin(objs []object) []problem {
	c := newClaims()
	var ps []problem
	for _, o := range objs {
		if msg := c.conflict(o); msg != "" {
			ps = append(ps, problem{msg: msg, at: o.at})
			continue
		}
		c.add("", o)
	}
	return ps
}

// merge decides, in lexical file order, which content of each file is in
// force: the file's current parse when it is clean and duplicates nothing
// defined earlier, else its last good content, less whatever an earlier file
// now defines. It returns the objects in force.
func (sc *scanner) merge() []object {
	c := newClaims()
	var out []object
	for _, name := range slices.Sorted(maps.Keys(sc.files)) {
		f := sc.files[name]
		f.conflicts = nil
		if f.parsedOK() {
			if f.conflicts = c.check(f.parsed); f.conflicts == nil {
				f.good, f.accepted = f.parsed, true
			}
		}
		for _, o := range f.good {
			if c.conflict(o) == "" {
				c.add(name, o)
				out = append(out, o)
			}
		}
	}
	return out
}
