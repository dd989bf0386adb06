package errdefs

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestClasses(t *testing.T) {
	for _, tc := range []struct {
		err    error
		class  Class
		code   string
		status int
	}{
		{NotFound("sandbox %s", "sbx_1"), ClassNotFound, "not_found", 404},
		{fmt.Errorf("loading: %w", NotFound("x")), ClassNotFound, "not_found", 404},
		{New(ClassInvalidArgument, CodeIdempotencyKeyRequired, "need a key"), ClassInvalidArgument, CodeIdempotencyKeyRequired, 400},
		{New(ClassUnprocessable, CodeIdempotencyKeyReused, "other body"), ClassUnprocessable, CodeIdempotencyKeyReused, 422},
		{New(ClassLimitExceeded, CodeTooManySandboxes, "10 running"), ClassLimitExceeded, CodeTooManySandboxes, 429},
		{Wrap(ClassUnavailable, "", io.EOF), ClassUnavailable, "unavailable", 503},
		{errors.New("plain"), ClassInternal, "internal", 500},
	} {
		if got := ClassOf(tc.err); got != tc.class {
			t.Errorf("%v: class %v, want %v", tc.err, got, tc.class)
		}
		if got := CodeOf(tc.err); got != tc.code {
			t.Errorf("%v: code %q, want %q", tc.err, got, tc.code)
		}
		if got := HTTPStatus(tc.err); got != tc.status {
			t.Errorf("%v: status %d, want %d", tc.err, got, tc.status)
		}
		if ClassForStatus(tc.status) != tc.class {
			t.Errorf("ClassForStatus(%d) = %v, want %v", tc.status, ClassForStatus(tc.status), tc.class)
		}
	}
	if !errors.Is(Wrap(ClassUnavailable, "", io.EOF), io.EOF) {
		t.Error("Wrap lost the wrapped error")
	}
}

func TestParseClass(t *testing.T) {
	for c := range classes {
		if got, ok := ParseClass(c.String()); !ok || got != c {
			t.Errorf("ParseClass(%q) = %v, %v; want %v", c.String(), got, ok, c)
		}
	}
	if _, ok := ParseClass("nonsense"); ok {
		t.Error("ParseClass took an unknown name")
	}
}
