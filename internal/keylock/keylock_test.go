package keylock

import (
	"sync"
	"testing"
	"time"
)

func TestOneKeyAtATimeOthersAtOnce(t *testing.T) {
	var l Locks
	unlockA := l.Lock("a")
	done := make(chan struct{})
	go func() { l.Lock("b")(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("key b waited for key a")
	}
	var mu sync.Mutex
	got := false
	go func() { unlock := l.Lock("a"); mu.Lock(); got = true; mu.Unlock(); unlock() }()
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	if got {
		t.Fatal("key a taken twice")
	}
	mu.Unlock()
	unlockA()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		ok := got
		mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("key a never taken again after its unlock")
		}
		time.Sleep(time.Millisecond)
	}
}
