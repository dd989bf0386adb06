// Package errhttp maps errdefs classes to HTTP statuses and back: the API edge's half of
// errdefs, kept apart so that code below the API knows nothing of HTTP.
package errhttp

import (
	"net/http"

	"github.com/littlebigbrain/lbb/internal/errdefs"
)

var statuses = map[errdefs.Class]int{
	errdefs.ClassInternal:        http.StatusInternalServerError,
	errdefs.ClassInvalidArgument: http.StatusBadRequest,
	errdefs.ClassUnauthorized:    http.StatusUnauthorized,
	errdefs.ClassForbidden:       http.StatusForbidden,
	errdefs.ClassNotFound:        http.StatusNotFound,
	errdefs.ClassConflict:        http.StatusConflict,
	errdefs.ClassPayloadTooLarge: http.StatusRequestEntityTooLarge,
	errdefs.ClassUnprocessable:   http.StatusUnprocessableEntity,
	errdefs.ClassLimitExceeded:   http.StatusTooManyRequests,
	errdefs.ClassUnavailable:     http.StatusServiceUnavailable,
	errdefs.ClassPaymentRequired: http.StatusPaymentRequired,
}

// Status returns the HTTP status for err: its class's, 500 for an unclassified error.
func Status(err error) int { return statuses[errdefs.ClassOf(err)] }

// Class maps an HTTP status back to a class, for clients: Internal for a status no class
// has.
func Class(status int) errdefs.Class {
	for c, s := range statuses {
		if s == status {
			return c
		}
	}
	return errdefs.ClassInternal
}
