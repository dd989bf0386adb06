package timing

import (
	"context"
	"regexp"
	"testing"
	"time"
)

func TestHeader(t *testing.T) {
	ctx, tm := New(context.Background())
	end := Start(ctx, "reserve")
	time.Sleep(2 * time.Millisecond)
	end()
	Start(With(context.Background(), tm), "claim")()
	if h := tm.Header(); !regexp.MustCompile(`^reserve;dur=([2-9]|\d\d+)\.\d\d, claim;dur=\d+\.\d\d$`).MatchString(h) {
		t.Fatalf("header %q", h)
	}
	Start(context.Background(), "none")() // no timings: nothing happens
	if From(context.Background()).Header() != "" {
		t.Fatal("nil timings render")
	}
}
