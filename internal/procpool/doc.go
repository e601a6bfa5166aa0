// Package procpool keeps a small pool of long-lived child processes that
// answer requests, one at a time each, over a pair of pipes: the work that
// must never run in the agent's own process because it can block in the
// kernel for good (a stat on a FUSE server that read the request and never
// answers cannot be interrupted, and a process exits only when all its
// threads do).
//
// Invariants:
//
//   - Config.Size children (2) serve requests while they answer promptly;
//     they start lazily, when a request finds no idle child. When every
//     working child has worked on its request for Config.BusyAfter (1 s:
//     hung storage, most likely), the requests waiting get extra children,
//     up to Config.MaxChildren (16) at once; so a request waits behind
//     hung ones about BusyAfter, never a hung request's whole deadline.
//     A request waits for a turn until its own context ends.
//
//   - While Config.MaxStuck (32) abandoned children are stuck in the
//     kernel, requests are refused at once (ErrTooManyStuck): each is a
//     process, and each more would be one more.
//
//   - A child answers one request at a time. A request that is not answered
//     before Config.RequestTimeout (5 s) passes or its context ends gets an
//     error (ErrNoAnswer) at once; its child is abandoned
//     (SIGKILLed, its pipes closed) and never used again, and the slot goes
//     to a replacement. Nothing of the agent waits for an abandoned child
//     but one reaper goroutine per child, which ends when the kernel lets
//     the child go; neither Do, Close nor Run waits for it.
//
//   - A child idle for Config.IdleTimeout (a minute by default) is
//     stopped, so an agent with nothing to check holds no child.
//
//   - A child exits when the agent's end of its pipe closes (Serve returns
//     at the end of its input), and is SIGKILLed when the agent dies
//     (Pdeathsig), so a SIGKILLed agent leaves no child behind.
//
//   - Frames are length-prefixed and bounded (MaxFrame): garbage from
//     either side is an error, never a large allocation or a panic; an
//     answer that is not a well-formed frame to the request just sent
//     gets the child abandoned.
//
//   - With Config.PassFiles a child may pass one descriptor with an answer
//     (ServeFiles, DoFile), over a unix socket that is its descriptor 3,
//     sent before the answer's frame and tagged with the request's number.
//
// It never interprets requests or answers; the child's handler does (see
// Serve).
package procpool
