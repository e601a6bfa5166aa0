package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// kind says where a message shows.
type kind string

const (
	kindError   kind = "error"   // errors.New, or fmt.Errorf without %w
	kindWrapper kind = "wrapper" // fmt.Errorf with %w: context around another error
	kindLog     kind = "log"     // a Warn or Error log line
	kindStatus  kind = "status"  // a source's Reason or Disconnected, a volume's Problem or Waiting
	kindEvent   kind = "event"   // the reason or message of a Warning event
	kindHTTP    kind = "http"    // a /readyz reason, or the text of an HTTP error answer
	// kindUnreadable is a Warn or Error log line whose message is not
	// text the parser can read (a variable, a call): it could never be
	// checked against the documents, and log messages are constants.
	kindUnreadable kind = "unreadable"
	// kindLogCall is what callMessages finds in a call that is certainly
	// a log line: a kindLog message when it reads, else kindUnreadable.
	kindLogCall kind = "log call"
)

// message is one user-facing text of the code, normalised.
type message struct {
	text string
	kind kind
	pos  string // file:line, relative to the module root
}

// userFacingDirs are the directories, relative to the module root, whose
// messages must each be documented; a directory counts with everything
// below it, except plugintest and subpathtest (test support).
var userFacingDirs = []string{
	"cmd/volume-agent",
	"internal/binder",
	"internal/btrfs",
	"internal/events",
	"internal/mount",
	"internal/plugins",
	"internal/populator",
	"internal/provisioner",
	"internal/reconciler",
	"internal/source",
	"internal/status",
	"internal/subpath",
	"internal/usage",
	"internal/wakeup",
}

// statusFields are the fields whose string values /readyz, /v1/sources
// and /v1/pods show.
var statusFields = map[string]bool{"Reason": true, "Disconnected": true, "Problem": true, "Waiting": true}

// collect returns the messages of every non-test Go file under dirs.
func collect(t *testing.T, dirs ...string) []message {
	t.Helper()
	var out []message
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && (d.Name() == "plugintest" || d.Name() == "subpathtest"):
				return filepath.SkipDir
			case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
				return nil
			}
			out = append(out, fileMessages(t, path)...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// fileMessages returns the messages of one file.
func fileMessages(t *testing.T, path string) []message {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := stringConsts(f)
	locals := sprintfLocals(f)
	var out []message
	add := func(k kind, e ast.Expr) {
		text, ok := render(e, consts, locals)
		switch {
		case !ok && k == kindLogCall:
			k, text, ok = kindUnreadable, types.ExprString(e), true
		case k == kindLogCall:
			k = kindLog
		}
		if ok {
			if k == kindError && strings.Contains(text, "%w") {
				k = kindWrapper
			}
			rel, _ := filepath.Rel(root, fset.Position(e.Pos()).Filename)
			out = append(out, message{text: normalise(text), kind: k, pos: rel + ":" + strconv.Itoa(fset.Position(e.Pos()).Line)})
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			callMessages(n, add)
		case *ast.AssignStmt:
			for i, lhs := range n.Lhs {
				if sel, ok := lhs.(*ast.SelectorExpr); ok && statusFields[sel.Sel.Name] && i < len(n.Rhs) {
					add(kindStatus, n.Rhs[i])
				}
			}
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok && statusFields[id.Name] {
				add(kindStatus, n.Value)
			}
		}
		return true
	})
	return out
}

// callMessages finds the messages a call makes.
func callMessages(call *ast.CallExpr, add func(kind, ast.Expr)) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || len(call.Args) == 0 {
		callMessagesHTTP(call, add)
		return
	}
	switch {
	case isSelector(sel, "errors", "New"):
		add(kindError, call.Args[0])
	case isSelector(sel, "fmt", "Errorf"):
		add(kindError, call.Args[0]) // a wrapper when the format has %w
	case isLogCall(sel, call):
		add(kindLogCall, call.Args[0])
	case sel.Sel.Name == "Error":
		add(kindLog, call.Args[0]) // a logger's, or another Error method's
	}
	callMessagesHTTP(call, add)
	for i, arg := range call.Args[:len(call.Args)-1] {
		if s, ok := arg.(*ast.SelectorExpr); ok && s.Sel.Name == "EventTypeWarning" && i+2 < len(call.Args) {
			add(kindEvent, call.Args[i+1])
			add(kindEvent, call.Args[i+2])
		}
	}
}

// isLogCall reports whether call is certainly a warn or error log line of a
// zap logger: Warn, or Error with fields after the message. zap.Error(err)
// is a field, and other types have Error methods of one argument.
func isLogCall(sel *ast.SelectorExpr, call *ast.CallExpr) bool {
	if id, ok := sel.X.(*ast.Ident); ok && id.Name == "zap" {
		return false
	}
	return sel.Sel.Name == "Warn" || (sel.Sel.Name == "Error" && len(call.Args) > 1)
}

// callMessagesHTTP finds the reasons /readyz gives (appended to reasons)
// and the texts of HTTP error answers (writeText with a code other than
// http.StatusOK).
func callMessagesHTTP(call *ast.CallExpr, add func(kind, ast.Expr)) {
	fn, ok := call.Fun.(*ast.Ident)
	switch {
	case !ok:
	case fn.Name == "append" && len(call.Args) > 1:
		if id, ok := call.Args[0].(*ast.Ident); ok && id.Name == "reasons" {
			for _, a := range call.Args[1:] {
				add(kindHTTP, a)
			}
		}
	case fn.Name == "writeText" && len(call.Args) == 3:
		if code, ok := call.Args[1].(*ast.SelectorExpr); !ok || code.Sel.Name != "StatusOK" {
			add(kindHTTP, call.Args[2])
		}
	}
}

// sprintfLocals returns the formats of the file's variables set by
// fmt.Sprintf (msg := fmt.Sprintf(...)), by name.
func sprintfLocals(f *ast.File) map[string]ast.Expr {
	out := map[string]ast.Expr{}
	ast.Inspect(f, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) != len(as.Rhs) {
			return true
		}
		for i, lhs := range as.Lhs {
			id, ok := lhs.(*ast.Ident)
			call, isCall := as.Rhs[i].(*ast.CallExpr)
			if ok && isCall {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && isSelector(sel, "fmt", "Sprintf") {
					out[id.Name] = call.Args[0]
				}
			}
		}
		return true
	})
	return out
}

// stringConsts returns the file's string constants by name.
func stringConsts(f *ast.File) map[string]string {
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		if d, ok := n.(*ast.GenDecl); ok && d.Tok == token.CONST {
			for _, s := range d.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							out[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
		return true
	})
	return out
}

// render returns the text an expression makes: string literals and
// constants of the file as they are, the format of fmt.Sprintf and
// fmt.Errorf, and "%v" for anything computed. It fails for text that holds
// no literal at all.
func render(e ast.Expr, consts map[string]string, locals map[string]ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.Ident:
		if f, ok := locals[e.Name]; ok {
			return render(f, consts, nil)
		}
		s, ok := consts[e.Name]
		return s, ok
	case *ast.CallExpr:
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok && (isSelector(sel, "fmt", "Sprintf") || isSelector(sel, "fmt", "Errorf")) {
			return render(e.Args[0], consts, locals)
		}
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			x, okx := render(e.X, consts, locals)
			y, oky := render(e.Y, consts, locals)
			if !okx {
				x = "%v"
			}
			if !oky {
				y = "%v"
			}
			return x + y, okx || oky
		}
	}
	return "", false
}

var (
	verb   = regexp.MustCompile(`%[-+# 0]*(\[\d+\])?(\d+|\*)?(\.(\d+|\*)?)?[a-zA-Z]`)
	spaces = regexp.MustCompile(`\s+`)
)

// normalise replaces every formatting verb with "…" and collapses white
// space, so that a message is written in the documents as an operator
// reads it, with "…" where the agent fills in a name, path or cause.
func normalise(s string) string {
	s = verb.ReplaceAllString(s, "…")
	s = strings.ReplaceAll(s, "%%", "%")
	return strings.TrimSpace(spaces.ReplaceAllString(s, " "))
}
