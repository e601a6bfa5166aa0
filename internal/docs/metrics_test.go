package docs

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/metrics"
	"github.com/volume-agent/volume-agent/internal/procpool"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/status"
	"github.com/volume-agent/volume-agent/internal/usage"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// root is the module root, where the documents are.
const root = "../.."

// family is one metric family as documented and as registered.
type family struct {
	typ    string
	labels string // sorted, joined with ","
}

// agentOptions are the options of metrics.New that agent.go passes, built
// from minimal real inputs; TestAgentBuildsMetricsAsTested keeps the two
// lists the same.
func agentOptions() map[string]metrics.Option {
	return map[string]metrics.Option{
		"Sources":          metrics.Sources([]source.Source{&syncedSource{}}),
		"Uncertain":        metrics.Uncertain(asw.New(nil)),
		"Terminating":      metrics.Terminating(status.Worlds{Desired: dsw.New(nil), Actual: asw.New(nil)}),
		"VolumeStats":      metrics.VolumeStats(oneVolumeStat{}),
		"HostPathCheckers": metrics.HostPathCheckers(func() procpool.Stats { return procpool.Stats{} }),
	}
}

// registered builds the registry as cmd/volume-agent/agent.go does and
// returns its volume_agent_* families and the prefixes of the others.
func registered(t *testing.T) (map[string]family, map[string]bool) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var opts []metrics.Option
	for _, o := range agentOptions() {
		opts = append(opts, o)
	}
	m := metrics.New(reg, func() map[string]int { return map[string]int{"Mounted": 1} }, opts...)
	// A vector shows only once it has a child.
	m.ObserveOperation("kubernetes.io/configmap", "setup", "success", time.Millisecond)
	gathered, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	ours, others := map[string]family{}, map[string]bool{}
	for _, f := range gathered {
		name := f.GetName()
		if !strings.HasPrefix(name, "volume_agent_") {
			others[strings.SplitN(name, "_", 2)[0]] = true
			continue
		}
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		ours[name] = family{typ: strings.ToLower(dto.MetricType_name[int32(f.GetType())]), labels: strings.Join(labels, ",")}
	}
	return ours, others
}

var (
	metricRow = regexp.MustCompile("^\\| `(volume_agent_[a-z_]+)` \\| ([a-z]+) \\| ([^|]*) \\|")
	codeSpan  = regexp.MustCompile("`([^`]+)`")
)

// documented returns the families of the table rows of METRICS.md.
func documented(t *testing.T, text string) map[string]family {
	t.Helper()
	out := map[string]family{}
	for _, line := range strings.Split(text, "\n") {
		m := metricRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range codeSpan.FindAllStringSubmatch(m[3], -1) {
			labels = append(labels, l[1])
		}
		slices.Sort(labels)
		if _, dup := out[m[1]]; dup {
			t.Errorf("METRICS.md documents %s twice", m[1])
		}
		out[m[1]] = family{typ: m[2], labels: strings.Join(labels, ",")}
	}
	return out
}

func TestMetricsDocumented(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(root, "METRICS.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs := documented(t, string(text))
	if len(docs) == 0 {
		t.Fatal("METRICS.md has no metric table rows")
	}
	ours, others := registered(t)
	for name, f := range ours {
		d, ok := docs[name]
		switch {
		case !ok:
			t.Errorf("%s (%s, labels %q) is registered but not in METRICS.md", name, f.typ, f.labels)
		case d != f:
			t.Errorf("METRICS.md documents %s as %s with labels %q; the registry has %s with %q", name, d.typ, d.labels, f.typ, f.labels)
		}
	}
	for name := range docs {
		if _, ok := ours[name]; !ok {
			t.Errorf("METRICS.md documents %s, which the agent does not register", name)
		}
	}
	// The standard collectors are documented as groups.
	for prefix := range others {
		if prefix != "go" && prefix != "process" {
			t.Errorf("the registry has %s_* families, which METRICS.md does not cover", prefix)
		}
		if !strings.Contains(string(text), "`"+prefix+"_*`") {
			t.Errorf("METRICS.md does not mention the %s_* group", prefix)
		}
	}
}

// TestAgentBuildsMetricsAsTested fails when agent.go registers other
// collectors or passes metrics.New other options than registered does, or
// when package metrics offers an option neither uses.
func TestAgentBuildsMetricsAsTested(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, "cmd/volume-agent/agent.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var calls int
	var used, registeredCollectors []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		switch {
		case isSelector(call.Fun, "metrics", "New"):
			calls++
			for _, arg := range call.Args[2:] {
				if c, ok := arg.(*ast.CallExpr); ok {
					if sel, ok := c.Fun.(*ast.SelectorExpr); ok && isSelector(sel, "metrics", sel.Sel.Name) {
						used = append(used, sel.Sel.Name)
						continue
					}
				}
				t.Errorf("agent.go passes metrics.New an option that is not a call of a metrics function: %s", fset.Position(arg.Pos()))
			}
		case isSelector(call.Fun, "reg", "MustRegister"):
			for _, arg := range call.Args {
				if c, ok := arg.(*ast.CallExpr); ok {
					if sel, ok := c.Fun.(*ast.SelectorExpr); ok {
						registeredCollectors = append(registeredCollectors, sel.Sel.Name)
					}
				}
			}
		}
		return true
	})
	if calls != 1 {
		t.Fatalf("agent.go calls metrics.New %d times, want 1", calls)
	}
	slices.Sort(used)
	tested := slices.Sorted(maps.Keys(agentOptions()))
	if !slices.Equal(used, tested) {
		t.Errorf("agent.go passes metrics.New options %v; the registry checked against METRICS.md has %v", used, tested)
	}
	if offered := optionFuncs(t); !slices.Equal(offered, tested) {
		t.Errorf("package metrics offers options %v; the registry checked against METRICS.md has %v", offered, tested)
	}
	slices.Sort(registeredCollectors)
	if want := []string{"NewGoCollector", "NewProcessCollector"}; !slices.Equal(registeredCollectors, want) {
		t.Errorf("agent.go registers collectors %v beside metrics.New; METRICS.md documents %v", registeredCollectors, want)
	}
}

// optionFuncs returns the exported functions of package metrics that
// return an Option.
func optionFuncs(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join(root, "internal/metrics")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fn.Type.Results.List[0].Type.(*ast.Ident); ok && id.Name == "Option" {
				out = append(out, fn.Name.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

func isSelector(e ast.Expr, x, sel string) bool {
	s, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := s.X.(*ast.Ident)
	return ok && id.Name == x && s.Sel.Name == sel
}

// oneVolumeStat lists one measured emptyDir with a sizeLimit: a family
// shows only once it has a series.
type oneVolumeStat struct{}

func (oneVolumeStat) Stats() []usage.Stat {
	return []usage.Stat{{Target: usage.Target{Namespace: "ns", Pod: "web", Volume: "cache", SizeLimit: 1 << 20}, Measurement: usage.Measurement{Method: usage.MethodWalk}}}
}

// syncedSource is a synced source with nothing in it.
type syncedSource struct{}

func (*syncedSource) Name() string              { return "manifests" }
func (*syncedSource) Run(context.Context) error { return nil }
func (*syncedSource) Pods() []*v1.Pod           { return nil }
func (*syncedSource) Objects() volume.Objects   { return nil }
func (*syncedSource) Node() *v1.Node            { return nil }
func (*syncedSource) Status() source.Status     { return source.Status{Name: "manifests", Synced: true} }
