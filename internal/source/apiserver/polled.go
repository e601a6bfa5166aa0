package apiserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// Polling bounds of polled: an object is read again after minPoll, and the
// wait doubles each time it has not changed, up to maxPoll. An object no
// lookup asked for during forgetAfter is forgotten.
const (
	minPoll     = time.Second
	maxPoll     = time.Minute
	forgetAfter = 5 * time.Minute
	// pollTimeout bounds one GET, so that a hung server delays only the
	// next read.
	pollTimeout = 30 * time.Second
)

// polled serves the objects of one resource that may only be read one at a
// time, by GET: claims and PVs for a node identity, whose list and watch
// the Node authorizer refuses (it lets a node get just the claims and PVs
// its pods refer to, as the kubelet does on each mount). The first lookup
// of an object starts a reader and waits (ErrNotReady); the reader keeps
// the last answer and reads again, more rarely while nothing changes,
// until no lookup has asked for the object for a while. A change of the
// answer calls onChange, as a watch event would.
type polled struct {
	kind     string
	get      func(ctx context.Context, r ref) (runtime.Object, error)
	runner   *runner
	onChange func()
	now      func() time.Time

	mu      sync.Mutex
	entries map[ref]*polledObject // guarded by mu
}

// polledObject is the last answer about one object.
type polledObject struct {
	read  bool           // an answer came
	obj   runtime.Object // nil: not found, or not read yet
	err   error          // the last read's error other than NotFound
	asked time.Time      // the last lookup
}

// lookup returns what the last read of the object found; the first lookup
// starts its reader.
func (p *polled) lookup(namespace, name string) (runtime.Object, bool, error) {
	r := ref{namespace, name}
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.entries[r]
	if !ok {
		ctx := p.runner.context()
		if ctx == nil {
			return nil, false, fmt.Errorf("%s lookups before the API source runs: %w", p.kind, volume.ErrNotReady)
		}
		if p.entries == nil {
			p.entries = map[ref]*polledObject{}
		}
		o = &polledObject{}
		p.entries[r] = o
		p.runner.run(ctx, func(ctx context.Context) { p.poll(ctx, r) })
	}
	o.asked = p.now()
	switch {
	case o.obj != nil:
		return o.obj, true, nil
	case o.err != nil:
		if denied(o.err) {
			return nil, false, fmt.Errorf("%s %s: %w", p.kind, key(namespace, name), o.err)
		}
		return nil, false, fmt.Errorf("%s %s: %w (%w)", p.kind, key(namespace, name), volume.ErrNotReady, o.err)
	case !o.read:
		return nil, false, fmt.Errorf("%s %s: %w", p.kind, key(namespace, name), errNotSynced)
	}
	return nil, false, nil
}

// poll reads one object until ctx ends or no lookup asks for it.
func (p *polled) poll(ctx context.Context, r ref) {
	wait := minPoll
	for {
		if p.store(r, p.read(ctx, r)) {
			wait = minPoll
			p.onChange()
		} else {
			wait = min(2*wait, maxPoll)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if p.forgotten(r) {
			return
		}
	}
}

// answer is the outcome of one read.
type answer struct {
	obj runtime.Object
	err error
}

func (p *polled) read(ctx context.Context, r ref) answer {
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	obj, err := p.get(ctx, r)
	if apierrors.IsNotFound(err) {
		return answer{}
	}
	return answer{obj: obj, err: err}
}

// store records an answer and reports whether a lookup would now say
// something else. A failed read keeps the object last read: the object
// did not change because the API server could not say.
func (p *polled) store(r ref, a answer) (changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o := p.entries[r]
	if a.err != nil {
		changed = o.err == nil || o.err.Error() != a.err.Error()
		o.err, o.read = a.err, true
		return changed && o.obj == nil
	}
	changed = !o.read || o.err != nil || !equality.Semantic.DeepEqual(o.obj, a.obj)
	o.read, o.obj, o.err = true, a.obj, nil
	return changed
}

// forgotten drops the object if no lookup asked for it lately.
func (p *polled) forgotten(r ref) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.now().Sub(p.entries[r].asked) < forgetAfter {
		return false
	}
	delete(p.entries, r)
	return true
}

// polledGet looks an object up through p, typed.
func polledGet[T runtime.Object](p *polled, namespace, name string) (T, error) {
	obj, exists, err := p.lookup(namespace, name)
	if err != nil {
		var zero T
		return zero, err
	}
	return typed[T](obj, exists, p.kind, namespace, name)
}

// logSwitch says once that a resource is read by GET from now on.
func logSwitch(log *zap.Logger, kind string, err error) {
	log.Info("listing this resource cluster-wide is refused (a node identity); reading each object the pods refer to by GET",
		zap.String("resource", kind), zap.Error(err))
}
