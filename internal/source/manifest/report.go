package manifest

import (
	"encoding/hex"
	"errors"
	"strings"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/source"
)

// status reports the problems of every file and whether the source is
// synced; names are the files' names, sorted.
func (sc *scanner) status(names []string, dirErr error) source.Status {
	st := source.Status{Name: sourceName}
	if dirErr != nil {
		st.Errors = append(st.Errors, dirErr.Error())
	}
	if sc.emptied {
		st.Errors = append(st.Errors, errEmptied.Error())
	}
	var pending []string
	for _, name := range names {
		f := sc.files[name]
		for _, p := range f.allProblems() {
			st.Errors = append(st.Errors, p.format(name))
		}
		if !f.accepted {
			pending = append(pending, name)
		}
	}
	switch {
	case !sc.listed:
		st.Reason = "manifest directory cannot be read"
	case len(pending) > 0:
		st.Reason = "waiting for files that have not parsed since start: " + strings.Join(pending, ", ")
	default:
		st.Synced = true
	}
	return st
}

// logChanges logs each file's problems once per distinct content and problem
// list, and the directory error once per distinct message; names are the
// files' names, sorted.
func (sc *scanner) logChanges(names []string, dirErr error) {
	if msg := errString(dirErr); msg != sc.loggedDirErr {
		sc.loggedDirErr = msg
		if dirErr != nil {
			sc.logger.Warn("manifest directory cannot be read", zap.Error(dirErr))
		}
	}
	if sc.emptied != sc.loggedEmptied {
		sc.loggedEmptied = sc.emptied
		if sc.emptied {
			sc.logger.Info("manifest directory replaced by one without objects yet, keeping what the old one defined")
		}
	}
	for _, name := range names {
		sc.logFile(name, sc.files[name])
	}
}

// errEmptied is the status error of a replaced directory no file of which
// has objects yet (see refresh).
var errEmptied = errors.New("manifest directory was replaced by one with no objects yet: keeping what the old one defined until a file of the new one has some")

func (sc *scanner) logFile(name string, f *fileState) {
	var msgs []string
	for _, p := range f.allProblems() {
		msgs = append(msgs, p.format(name))
	}
	report := ""
	if len(msgs) > 0 {
		report = hex.EncodeToString(f.sum[:]) + "\n" + strings.Join(msgs, "\n")
	}
	if report == f.logged {
		return
	}
	switch report {
	case "":
		sc.logger.Info("manifest file problems resolved", zap.String("file", name))
	default:
		sc.logger.Warn("manifest file rejected, last good content stays in force",
			zap.String("file", name), zap.Strings("errors", msgs), zap.Bool("hasGoodContent", f.accepted))
	}
	f.logged = report
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
