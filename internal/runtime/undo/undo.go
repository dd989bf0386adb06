// Package undo builds things as named steps that undo themselves: a failure at step N undoes
// steps N-1..1, joining their errors.
package undo

import (
	"errors"
	"fmt"
	"time"
)

// Stack runs a build as named steps and undoes the finished ones, last first, when a
// later step fails. Undo is safe after a partial build and safe to call twice.
type Stack struct {
	undos []namedUndo
	// Times records how long each step took, for the debug log.
	Times []any
}

type namedUndo struct {
	name string
	fn   func() error
}

// Step runs do; when it succeeds, undo (if any) is pushed. When it fails, every pushed undo
// runs and the joined error names the step.
func (s *Stack) Step(name string, do func() error, undo func() error) error {
	t0 := time.Now()
	err := do()
	s.Times = append(s.Times, name, time.Since(t0))
	if err != nil {
		return errors.Join(fmt.Errorf("%s: %w", name, err), s.Undo())
	}
	if undo != nil {
		s.undos = append(s.undos, namedUndo{name, undo})
	}
	return nil
}

// Undo runs the pushed undos in reverse and forgets them.
func (s *Stack) Undo() error {
	var errs []error
	for i := len(s.undos) - 1; i >= 0; i-- {
		if err := s.undos[i].fn(); err != nil {
			errs = append(errs, fmt.Errorf("undo %s: %w", s.undos[i].name, err))
		}
	}
	s.undos = nil
	return errors.Join(errs...)
}

// Release forgets the undos: the build succeeded and its parts now belong to someone else.
func (s *Stack) Release() { s.undos = nil }
