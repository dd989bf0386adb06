package output

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// reference computes head and tail the slow way: the last tailMax bytes of the whole stream,
// and of the bytes before them the first headMax.
func reference(all []byte, headMax, tailMax int) (head, tail []byte) {
	t := min(tailMax, len(all))
	h := min(headMax, len(all)-t)
	return all[:h], all[len(all)-t:]
}

func TestCaptureMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		headMax, tailMax := 1+rng.IntN(50), 1+rng.IntN(50)
		c := NewCapture(headMax, tailMax)
		var all []byte
		for range rng.IntN(20) {
			p := make([]byte, rng.IntN(120))
			for i := range p {
				p[i] = byte('a' + rng.IntN(26))
			}
			c.Write(p)
			all = append(all, p...)
		}
		head, tail := reference(all, headMax, tailMax)
		if c.Head() != string(head) || c.Tail() != string(tail) || c.Bytes() != int64(len(all)) {
			t.Fatalf("trial %d (%d,%d): got %q %q %d, want %q %q %d", trial, headMax, tailMax,
				c.Head(), c.Tail(), c.Bytes(), head, tail, len(all))
		}
		if want := int64(len(all) - len(head) - len(tail)); c.Dropped() != want {
			t.Fatalf("dropped %d, want %d", c.Dropped(), want)
		}
	}
}

// A short stream is all in the tail, once: seed 000's sample reads stdout.tail of a print.
func TestCaptureSmall(t *testing.T) {
	c := NewCapture(0, 0)
	io.WriteString(c, "hello")
	if c.Head() != "" || c.Tail() != "hello" || c.Bytes() != 5 || c.Dropped() != 0 {
		t.Errorf("%q %q %d %d", c.Head(), c.Tail(), c.Bytes(), c.Dropped())
	}
	// Past the tail the head takes the start, adjacent to the tail: nothing twice, nothing lost.
	d := NewCapture(4, 4)
	io.WriteString(d, "abcdefg")
	if d.Head() != "abc" || d.Tail() != "defg" || d.Dropped() != 0 {
		t.Errorf("%q %q %d", d.Head(), d.Tail(), d.Dropped())
	}
}

func TestCaptureBoundedMemory(t *testing.T) {
	c := NewCapture(1024, 1024)
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for range 64 {
		c.Write(chunk)
	}
	if c.Bytes() != 64<<20 || len(c.Head()) != 1024 || len(c.Tail()) != 1024 {
		t.Errorf("%d %d %d", c.Bytes(), len(c.Head()), len(c.Tail()))
	}
	if cap(c.ring) > 1024 || cap(c.head) > 1024 {
		t.Errorf("kept %d + %d bytes", cap(c.head), cap(c.ring))
	}
}

func TestCaptureUTF8Cut(t *testing.T) {
	c := NewCapture(4, 4)
	// "aaé" is 4 bytes: a a 0xC3 0xA9; "aaaé" cuts é after its first byte.
	io.WriteString(c, "aaaé"+strings.Repeat("-", 10)+"€bc")
	if !utf8.ValidString(c.Head()) || c.Head() != "aaa" {
		t.Errorf("head %q", c.Head())
	}
	// The tail is the last 4 bytes: the last byte of € (3 bytes) and "bc" plus one more.
	if !utf8.ValidString(c.Tail()) {
		t.Errorf("tail %q is not UTF-8", c.Tail())
	}
	if c.Tail() != "bc" {
		t.Errorf("tail %q, want %q", c.Tail(), "bc")
	}
	if c.Dropped() != int64(len("aaaé"+strings.Repeat("-", 10)+"€bc")-len("aaa")-len("bc")) {
		t.Errorf("dropped %d", c.Dropped())
	}
	// The whole stream fits the tail: nothing is trimmed from it.
	d := NewCapture(2, 10)
	io.WriteString(d, "héllo")
	if d.Tail() != "héllo" || d.Head() != "" {
		t.Errorf("%q %q", d.Head(), d.Tail())
	}
	// Head and tail meet inside é: it moves whole into the tail, and nothing is lost.
	e := NewCapture(4, 4)
	io.WriteString(e, "aaéxyz") // a a 0xC3 | 0xA9 x y z
	if e.Head() != "aa" || e.Tail() != "éxyz" || e.Dropped() != 0 {
		t.Errorf("%q %q %d", e.Head(), e.Tail(), e.Dropped())
	}
}

func TestCaptureConcurrent(t *testing.T) {
	c := NewCapture(100, 100)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Write([]byte("0123456789"))
				c.Head()
				c.Tail()
			}
		}()
	}
	wg.Wait()
	if c.Bytes() != 8*1000*10 {
		t.Errorf("%d", c.Bytes())
	}
}

func TestFollow(t *testing.T) {
	c := NewCapture(8, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan string, 1)
	go func() {
		var b strings.Builder
		for off := int64(0); ; {
			start, data, err := c.Next(ctx, off, 3)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Error(err)
				break
			}
			if start != off {
				t.Errorf("a live follower skipped from %d to %d", off, start)
			}
			b.Write(data)
			off = start + int64(len(data))
		}
		got <- b.String()
	}()
	for _, s := range []string{"ab", "cd", "e", "fgh"} {
		io.WriteString(c, s)
		time.Sleep(5 * time.Millisecond)
	}
	c.Close()
	if s := <-got; s != "abcdefgh" {
		t.Errorf("followed %q", s)
	}
}

func TestFollowLateJoinerSkipsTheMiddle(t *testing.T) {
	c := NewCapture(4, 4)
	io.WriteString(c, "HEAD-middle-TAIL")
	c.Close()
	ctx := context.Background()
	var parts []string
	var skipped int64
	for off := int64(0); ; {
		start, data, err := c.Next(ctx, off, 0)
		if err == io.EOF {
			break
		}
		skipped += start - off
		parts = append(parts, string(data))
		off = start + int64(len(data))
	}
	if strings.Join(parts, "|") != "HEAD|TAIL" || skipped != 8 {
		t.Errorf("parts %q skipped %d", parts, skipped)
	}
	ctx2, cancel := context.WithCancel(ctx)
	cancel()
	d := NewCapture(4, 4)
	if _, _, err := d.Next(ctx2, 0, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Next on a cancelled ctx: %v", err)
	}
}
