package errhttp

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/littlebigbrain/lbb/internal/errdefs"
)

// Every class has its own status, and the status maps back to the class.
func TestStatuses(t *testing.T) {
	want := map[errdefs.Class]int{
		errdefs.ClassInternal: 500, errdefs.ClassInvalidArgument: 400, errdefs.ClassUnauthorized: 401,
		errdefs.ClassForbidden: 403, errdefs.ClassNotFound: 404, errdefs.ClassConflict: 409,
		errdefs.ClassPayloadTooLarge: 413, errdefs.ClassUnprocessable: 422, errdefs.ClassLimitExceeded: 429,
		errdefs.ClassUnavailable: 503, errdefs.ClassPaymentRequired: 402,
	}
	for class, status := range want {
		err := fmt.Errorf("wrapped: %w", errdefs.New(class, "", "a failure of class %d", class))
		if got := Status(err); got != status {
			t.Errorf("class %d: status %d, want %d", class, got, status)
		}
		if got := Class(status); got != class {
			t.Errorf("Class(%d) = %d, want %d", status, got, class)
		}
	}
	if len(statuses) != len(want) {
		t.Errorf("%d classes have a status, the test knows %d", len(statuses), len(want))
	}
	if got := Status(errors.New("plain")); got != http.StatusInternalServerError {
		t.Errorf("an unclassified error: %d", got)
	}
	if got := Status(errdefs.New(errdefs.ClassUnprocessable, errdefs.CodeIdempotencyKeyReused, "other body")); got != 422 {
		t.Errorf("a class with its own code: %d", got)
	}
	if Class(http.StatusTeapot) != errdefs.ClassInternal {
		t.Error("a status no class has is not Internal")
	}
}
