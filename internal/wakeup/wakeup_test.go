package wakeup

import (
	"testing"
	"time"
)

func TestNotifyCoalesces(t *testing.T) {
	s := New("test")
	s.Notify()
	s.Notify()
	<-s.C()
	select {
	case <-s.C():
		t.Fatal("two notifications gave two wake-ups")
	default:
	}
}

func TestStuckOnlyAfterLimit(t *testing.T) {
	s := New("test")
	if err := s.Stuck(0); err != nil {
		t.Fatalf("fresh signal stuck: %v", err)
	}
	s.Notify()
	if err := s.Stuck(time.Hour); err != nil {
		t.Fatalf("stuck before the limit: %v", err)
	}
	time.Sleep(2 * time.Millisecond)
	if err := s.Stuck(time.Millisecond); err == nil {
		t.Fatal("not stuck after the limit")
	}
	s.Taken()
	if err := s.Stuck(time.Millisecond); err != nil {
		t.Fatalf("stuck after Taken: %v", err)
	}
}
