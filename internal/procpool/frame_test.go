package procpool

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

// echo answers a request with itself.
func echo(req []byte) []byte { return req }

func TestServe(t *testing.T) {
	var two []byte
	two = appendFrame(two, 1, []byte("a"))
	two = appendFrame(two, 9, nil)
	tooLong := appendFrame(nil, 3, nil)
	tooLong[0] = 0xff
	for _, tc := range []struct {
		name    string
		in      []byte
		answers int
		wantErr bool
	}{
		{"nothing", nil, 0, false},
		{"two requests", two, 2, false},
		{"header cut short", two[:3], 0, true},
		{"body cut short", append(appendFrame(nil, 1, []byte("a")), appendFrame(nil, 2, []byte("long body"))[:12]...), 1, true},
		{"length over MaxFrame", append(appendFrame(nil, 1, nil), tooLong...), 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Serve(bytes.NewReader(tc.in), &out, echo)
			if (err != nil) != tc.wantErr || err != nil && !errors.Is(err, ErrFrame) {
				t.Fatalf("Serve = %v, want an error %v (ErrFrame)", err, tc.wantErr)
			}
			if n := len(frames(t, out.Bytes())); n != tc.answers {
				t.Fatalf("%d answers, want %d", n, tc.answers)
			}
		})
	}
}

// TestServeNumbersAnswers: each answer carries its request's number.
func TestServeNumbersAnswers(t *testing.T) {
	var in, out bytes.Buffer
	in.Write(appendFrame(nil, 41, []byte("x")))
	in.Write(appendFrame(nil, 7, []byte("y")))
	if err := Serve(&in, &out, echo); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(&out)
	for _, want := range []struct {
		id   uint32
		body string
	}{{41, "x"}, {7, "y"}} {
		id, body, err := readFrame(r)
		if err != nil || id != want.id || string(body) != want.body {
			t.Fatalf("answer %d %q (%v), want %d %q", id, body, err, want.id, want.body)
		}
	}
}

// TestServeCutsLongAnswers: a handler's answer longer than MaxFrame is
// cut, so that the agent can read it.
func TestServeCutsLongAnswers(t *testing.T) {
	var out bytes.Buffer
	err := Serve(bytes.NewReader(appendFrame(nil, 1, nil)), &out, func([]byte) []byte { return make([]byte, MaxFrame+10) })
	if err != nil {
		t.Fatal(err)
	}
	if got := frames(t, out.Bytes()); len(got) != 1 || len(got[0]) != MaxFrame {
		t.Fatalf("answer of %d bytes, want %d", len(got[0]), MaxFrame)
	}
}

// frames returns the bodies of the well-formed frames b is made of.
func frames(t *testing.T, b []byte) [][]byte {
	t.Helper()
	r := bufio.NewReader(bytes.NewReader(b))
	var out [][]byte
	for {
		_, body, err := readFrame(r)
		switch {
		case errors.Is(err, io.EOF):
			return out
		case err != nil:
			t.Fatalf("Serve wrote a malformed frame: %v", err)
		}
		out = append(out, body)
	}
}

// FuzzServe: whatever the input, Serve returns (nil only at the end of
// the input between frames), never panics, and writes only well-formed
// frames.
func FuzzServe(f *testing.F) {
	f.Add(appendFrame(nil, 1, []byte("/\x00Directory\x00/x")))
	f.Add([]byte("\xff\xff\xff\xff\x00\x00\x00\x01"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		err := Serve(bytes.NewReader(in), &out, echo)
		if err != nil && !errors.Is(err, ErrFrame) {
			t.Fatalf("Serve = %v, want nil or ErrFrame", err)
		}
		frames(t, out.Bytes())
	})
}
