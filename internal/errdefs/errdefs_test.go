package errdefs

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestClasses(t *testing.T) {
	for _, tc := range []struct {
		err   error
		class Class
		code  string
	}{
		{NotFound("sandbox %s", "sbx_1"), ClassNotFound, "not_found"},
		{fmt.Errorf("loading: %w", NotFound("x")), ClassNotFound, "not_found"},
		{New(ClassInvalidArgument, CodeIdempotencyKeyRequired, "need a key"), ClassInvalidArgument, CodeIdempotencyKeyRequired},
		{New(ClassUnprocessable, CodeIdempotencyKeyReused, "other body"), ClassUnprocessable, CodeIdempotencyKeyReused},
		{New(ClassLimitExceeded, CodeTooManySandboxes, "10 running"), ClassLimitExceeded, CodeTooManySandboxes},
		{Wrap(ClassUnavailable, "", io.EOF), ClassUnavailable, "unavailable"},
		{errors.New("plain"), ClassInternal, "internal"},
	} {
		if got := ClassOf(tc.err); got != tc.class {
			t.Errorf("%v: class %v, want %v", tc.err, got, tc.class)
		}
		if got := CodeOf(tc.err); got != tc.code {
			t.Errorf("%v: code %q, want %q", tc.err, got, tc.code)
		}
	}
	if !errors.Is(Wrap(ClassUnavailable, "", io.EOF), io.EOF) {
		t.Error("Wrap lost the wrapped error")
	}
}

func TestParseClass(t *testing.T) {
	for c := range codes {
		if got, ok := ParseClass(c.String()); !ok || got != c {
			t.Errorf("ParseClass(%q) = %v, %v; want %v", c.String(), got, ok, c)
		}
	}
	if _, ok := ParseClass("nonsense"); ok {
		t.Error("ParseClass took an unknown name")
	}
}
