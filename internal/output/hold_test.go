package output

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// readAll reads a hold to its end as a reader would, calling slow between reads, and answers
// each stream's bytes and how the reading ended.
func readAll(t *testing.T, h *Hold, max int, slow func()) (map[string][]byte, Held) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[string][]byte{}
	from := map[string]int64{}
	for {
		r, err := h.Read(ctx, from, max)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if len(r.Pieces) == 0 {
			return got, r
		}
		for _, p := range r.Pieces {
			if p.Offset != from[p.Stream] {
				t.Fatalf("%s: a piece at %d, want %d", p.Stream, p.Offset, from[p.Stream])
			}
			if max > 0 && len(p.Data) > max {
				t.Fatalf("a piece of %d bytes, more than max %d", len(p.Data), max)
			}
			got[p.Stream] = append(got[p.Stream], p.Data...)
			from[p.Stream] += int64(len(p.Data))
		}
		slow()
	}
}

// A slow reader gets every byte in order; the writer waits for it, and the hold never holds
// much more than its bound.
func TestHoldSlowReaderGetsEverything(t *testing.T) {
	h := NewHold(100, time.Minute)
	want := map[string][]byte{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 300 {
			st := Stdout
			if i%3 == 0 {
				st = Stderr
			}
			b := []byte(fmt.Sprintf("%s line %d\n", st, i))
			h.Writer(st).Write(b)
			want[st] = append(want[st], b...)
		}
		h.Close()
	}()
	most := 0
	got, end := readAll(t, h, 64, func() {
		h.mu.Lock()
		most = max(most, h.size)
		h.mu.Unlock()
		time.Sleep(time.Millisecond)
	})
	<-done
	if !end.Ended || end.Released {
		t.Errorf("the end: %+v, want Ended", end)
	}
	for _, st := range []string{Stdout, Stderr} {
		if !bytes.Equal(got[st], want[st]) {
			t.Errorf("%s: got %d bytes, want %d", st, len(got[st]), len(want[st]))
		}
	}
	if most > 100+32 {
		t.Errorf("the hold held %d bytes; its bound is 100 (and one write)", most)
	}
}

func TestHoldWriterWaitsForTheReader(t *testing.T) {
	h := NewHold(10, time.Minute)
	wrote := make(chan struct{})
	go func() {
		h.Writer(Stdout).Write([]byte("0123456789abc")) // over the bound: waits
		close(wrote)
	}()
	select {
	case <-wrote:
		t.Fatal("a write past the bound did not wait")
	case <-time.After(100 * time.Millisecond):
	}
	ctx := context.Background()
	r, err := h.Read(ctx, nil, 0)
	if err != nil || len(r.Pieces) != 1 || string(r.Pieces[0].Data) != "0123456789abc" {
		t.Fatalf("Read: %+v %v", r, err)
	}
	// The same offsets answer the same bytes: an answer lost on the way is asked for again.
	if r2, _ := h.Read(ctx, nil, 4); len(r2.Pieces) != 1 || string(r2.Pieces[0].Data) != "0123" {
		t.Fatalf("Read again: %+v", r2)
	}
	select {
	case <-wrote:
		t.Fatal("the writer went on before the reader took anything")
	case <-time.After(50 * time.Millisecond):
	}
	// Taking everything frees the writer; the read then waits for more, until its ctx ends.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if r, err := h.Read(short, map[string]int64{Stdout: 13}, 0); !errors.Is(err, context.DeadlineExceeded) || len(r.Pieces) != 0 {
		t.Errorf("Read past everything: %+v %v", r, err)
	}
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer still waits after the reader took everything")
	}
}

// Nobody reads: the writer waits idle, then the hold lets go and says why; the reader who
// comes back gets what was held, then Released.
func TestHoldNobodyReadsIsLetGo(t *testing.T) {
	h := NewHold(4, 50*time.Millisecond)
	start := time.Now()
	h.Writer(Stdout).Write([]byte("held!"))
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("the write waited %s, less than the idle time", d)
	}
	h.Writer(Stdout).Write([]byte("not held")) // passes at once, not held
	h.Close()
	if !h.Idled() {
		t.Error("Idled is false")
	}
	got, end := readAll(t, h, 0, func() {})
	if string(got[Stdout]) != "held!" || !end.Released || end.Ended {
		t.Errorf("got %q, end %+v; want what was held, then Released", got[Stdout], end)
	}
}

func TestHoldRelease(t *testing.T) {
	h := NewHold(1, time.Hour)
	wrote := make(chan struct{})
	go func() {
		h.Writer(Stderr).Write([]byte("xyz"))
		close(wrote)
	}()
	time.Sleep(20 * time.Millisecond)
	h.Release()
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("Release did not free the waiting writer")
	}
	r, err := h.Read(context.Background(), nil, 0)
	if err != nil || !r.Released || len(r.Pieces) != 0 || h.Idled() {
		t.Errorf("after Release: %+v %v idled %v", r, err, h.Idled())
	}
}

// LetGo frees a waiting writer as Release does, but what is held stays for the reader.
func TestHoldLetGo(t *testing.T) {
	h := NewHold(1, time.Hour)
	wrote := make(chan struct{})
	go func() {
		h.Writer(Stderr).Write([]byte("xyz"))
		close(wrote)
	}()
	time.Sleep(20 * time.Millisecond)
	h.LetGo()
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("LetGo did not free the waiting writer")
	}
	h.Writer(Stdout).Write([]byte("not held"))
	r, err := h.Read(context.Background(), nil, 0)
	if err != nil || len(r.Pieces) != 1 || string(r.Pieces[0].Data) != "xyz" || r.Pieces[0].Stream != Stderr {
		t.Fatalf("after LetGo: %+v %v, want the held xyz", r, err)
	}
	r, err = h.Read(context.Background(), map[string]int64{Stderr: 3}, 0)
	if err != nil || !r.Released || len(r.Pieces) != 0 || h.Idled() {
		t.Errorf("after the held bytes: %+v %v idled %v", r, err, h.Idled())
	}
}

func TestHoldReadWaitsUntilCtxEnds(t *testing.T) {
	h := NewHold(10, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	r, err := h.Read(ctx, nil, 0)
	if !errors.Is(err, context.DeadlineExceeded) || len(r.Pieces) != 0 {
		t.Errorf("%+v %v", r, err)
	}
}
