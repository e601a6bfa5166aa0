package inflight

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOneCallPerKey(t *testing.T) {
	var s Set
	end, err := s.Begin(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Begin(context.Background(), "b")
	if err != nil {
		t.Fatal("another key waited")
	}
	other()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Begin(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Begin while a runs = %v, want DeadlineExceeded", err)
	}
	got := make(chan error, 1)
	go func() {
		end, err := s.Begin(context.Background(), "a")
		if err == nil {
			end()
		}
		got <- err
	}()
	time.Sleep(10 * time.Millisecond)
	end()
	if err := <-got; err != nil {
		t.Fatalf("Begin after the call ended = %v", err)
	}
}
