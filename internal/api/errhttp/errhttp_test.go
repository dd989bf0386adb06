package errhttp

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/littlebigbrain/lbb/internal/errdefs"
)

func TestStatuses(t *testing.T) {
	for _, tc := range []struct {
		err    error
		class  errdefs.Class
		status int
	}{
		{errdefs.NotFound("sandbox %s", "sbx_1"), errdefs.ClassNotFound, 404},
		{fmt.Errorf("loading: %w", errdefs.NotFound("x")), errdefs.ClassNotFound, 404},
		{errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodeIdempotencyKeyRequired, "need a key"), errdefs.ClassInvalidArgument, 400},
		{errdefs.New(errdefs.ClassUnprocessable, errdefs.CodeIdempotencyKeyReused, "other body"), errdefs.ClassUnprocessable, 422},
		{errdefs.New(errdefs.ClassLimitExceeded, errdefs.CodeTooManySandboxes, "10 running"), errdefs.ClassLimitExceeded, 429},
		{errdefs.Wrap(errdefs.ClassUnavailable, "", io.EOF), errdefs.ClassUnavailable, 503},
		{errdefs.Unauthorized("no key"), errdefs.ClassUnauthorized, 401},
		{errdefs.Forbidden("no scope"), errdefs.ClassForbidden, 403},
		{errdefs.Conflict("busy"), errdefs.ClassConflict, 409},
		{errdefs.New(errdefs.ClassPayloadTooLarge, "", "big"), errdefs.ClassPayloadTooLarge, 413},
		{errors.New("plain"), errdefs.ClassInternal, 500},
	} {
		if got := Status(tc.err); got != tc.status {
			t.Errorf("%v: status %d, want %d", tc.err, got, tc.status)
		}
		if Class(tc.status) != tc.class {
			t.Errorf("Class(%d) = %v, want %v", tc.status, Class(tc.status), tc.class)
		}
	}
	if Class(418) != errdefs.ClassInternal {
		t.Error("a status no class has is not Internal")
	}
}
