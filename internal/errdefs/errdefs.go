// Package errdefs is lbb's small set of error classes. Code anywhere says what kind of failure
// it has (NotFound, Conflict, …) and a stable code; the API edge maps the class to an HTTP
// status once (internal/api/errhttp), and the SDKs map it back. This package knows nothing
// of HTTP.
package errdefs

import (
	"errors"
	"fmt"
)

// Class is the kind of a failure.
type Class int

// The classes.
const (
	ClassInternal Class = iota
	ClassInvalidArgument
	ClassUnauthorized
	ClassForbidden
	ClassNotFound
	ClassConflict
	ClassPayloadTooLarge
	ClassUnprocessable
	ClassLimitExceeded
	ClassUnavailable
	// ClassPaymentRequired: a budget or spend cap is spent (HTTP 402).
	ClassPaymentRequired
)

// codes are each class's own code.
var codes = map[Class]string{
	ClassInternal:        "internal",
	ClassInvalidArgument: "invalid_request",
	ClassUnauthorized:    "unauthorized",
	ClassForbidden:       "forbidden",
	ClassNotFound:        "not_found",
	ClassConflict:        "conflict",
	ClassPayloadTooLarge: "payload_too_large",
	ClassUnprocessable:   "unprocessable",
	ClassLimitExceeded:   "limit_exceeded",
	ClassUnavailable:     "unavailable",
	ClassPaymentRequired: "payment_required",
}

// Stable codes beyond each class's default one.
const (
	CodeIdempotencyKeyRequired = "idempotency_key_required"
	CodeIdempotencyKeyReused   = "idempotency_key_reused"
	CodeTooManySandboxes       = "too_many_sandboxes"
	// CodeTooManyRuns: the host's queue of one-call runs waiting for capacity is full (a
	// LimitExceeded, transient: Retry-After says when to retry with the same key).
	CodeTooManyRuns          = "too_many_runs"
	CodeLimitExceeded        = "limit_exceeded"
	CodePathOutsideWorkspace = "path_outside_workspace"
	// CodeIsolationUnavailable: the isolation asked for is known but this host cannot run it
	// (an InvalidArgument).
	CodeIsolationUnavailable = "isolation_unavailable"
	// CodeNotSupported: the sandbox's isolation lacks the ability asked for (a Conflict).
	CodeNotSupported = "not_supported"
	// CodeCommandsRunning: the call would break a command still running (a Conflict).
	CodeCommandsRunning = "commands_running"
	// CodeQuotaExceeded: the call would take the graph past one of its count quotas (a
	// LimitExceeded); deleting something frees room, a retry alone does not.
	CodeQuotaExceeded = "quota_exceeded"
	// CodeQuotaBytesExceeded: the call would take the graph past one of its byte quotas (a
	// PayloadTooLarge).
	CodeQuotaBytesExceeded = "quota_bytes_exceeded"
	// CodeFileInUse: a File a template version names cannot be deleted (a Conflict).
	CodeFileInUse = "file_in_use"
	// CodeGrantExpired, CodeGrantRevoked: a grant's token past its expiry, or revoked (an
	// Unauthorized).
	CodeGrantExpired = "grant_expired"
	CodeGrantRevoked = "grant_revoked"
	// CodeBudgetExceeded: the grant's or workflow run's budget is spent; nothing ran (a
	// PaymentRequired).
	CodeBudgetExceeded = "budget_exceeded"
	// CodeSpendCapReached: the key (or a key it came from) reached its spend cap for the
	// period; nothing ran (a PaymentRequired).
	CodeSpendCapReached = "spend_cap_reached"
	// CodeTemplateBuilding: the template version's layer is still building (a Conflict);
	// a retry once it is ready succeeds.
	CodeTemplateBuilding = "template_building"
	// CodeTemplateBuildFailed: the template version's build failed; it is never used (a
	// Conflict). Its build record says which step and why.
	CodeTemplateBuildFailed = "template_build_failed"
	// CodeUnknownSize: the named size is not one this server offers (an InvalidArgument).
	CodeUnknownSize = "unknown_size"
	// CodeSessionBusy: the session's sandbox is being changed (started, stopped, paused,
	// snapshotted) by another call; retrying later finds it (a Conflict).
	CodeSessionBusy = "session_busy"
	// CodeSessionMismatch: the call asks for a size, isolation or base other than its
	// session's sandbox has (a Conflict).
	CodeSessionMismatch = "session_mismatch"
)

// Error is a classified error with a stable code.
type Error struct {
	Class Class
	Code  string
	Msg   string
	Err   error
}

func (e *Error) Error() string {
	switch {
	case e.Msg == "" && e.Err != nil:
		return e.Err.Error()
	case e.Err != nil:
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an error of class with code (the class's own code when empty).
func New(class Class, code, format string, args ...any) error {
	if code == "" {
		code = codes[class]
	}
	return &Error{Class: class, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Wrap classifies err, keeping it for errors.Is and errors.As.
func Wrap(class Class, code string, err error) error {
	if err == nil {
		return nil
	}
	if code == "" {
		code = codes[class]
	}
	return &Error{Class: class, Code: code, Err: err}
}

// NotFound says the thing asked for does not exist (or is in another graph).
func NotFound(format string, args ...any) error { return New(ClassNotFound, "", format, args...) }

// InvalidArgument says the request is malformed.
func InvalidArgument(format string, args ...any) error {
	return New(ClassInvalidArgument, "", format, args...)
}

// Conflict says the request clashes with the state of a record.
func Conflict(format string, args ...any) error { return New(ClassConflict, "", format, args...) }

// Unavailable says the service cannot do this now; a retry later may work.
func Unavailable(format string, args ...any) error { return New(ClassUnavailable, "", format, args...) }

// Unauthorized says the caller is not authenticated.
func Unauthorized(format string, args ...any) error {
	return New(ClassUnauthorized, "", format, args...)
}

// Forbidden says the caller may not do this.
func Forbidden(format string, args ...any) error { return New(ClassForbidden, "", format, args...) }

// String is the class's name (its default code, "not_found"): how a class travels between
// processes, read back by ParseClass.
func (c Class) String() string { return codes[c] }

// ParseClass returns the class named name (Class.String); false for no class.
func ParseClass(name string) (Class, bool) {
	for c, v := range codes {
		if v == name {
			return c, true
		}
	}
	return ClassInternal, false
}

// ClassOf returns the class of err: Internal for an unclassified error.
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return ClassInternal
}

// CodeOf returns the stable code of err.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return codes[ClassInternal]
}

// Is reports whether err is of class.
func Is(err error, class Class) bool { return err != nil && ClassOf(err) == class }

// IsNotFound reports whether err is of class NotFound.
func IsNotFound(err error) bool { return Is(err, ClassNotFound) }

// IsConflict reports whether err is of class Conflict.
func IsConflict(err error) bool { return Is(err, ClassConflict) }

// IsInvalidArgument reports whether err is of class InvalidArgument.
func IsInvalidArgument(err error) bool { return Is(err, ClassInvalidArgument) }
