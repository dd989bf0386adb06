package control

import (
	"slices"
	"sort"
	"strings"

	"github.com/littlebigbrain/lbb/internal/errdefs"
)

// Isolation is what isolation a server offers: the driver its sandboxes run on unless a call
// or template names another, the drivers it can run, and the ones it knows but this host
// cannot run, with what is missing.
//
// A call's isolation wins over its template version's, which wins over the server's default.
// Records always name the resolved driver.
type Isolation struct {
	Default string
	// Available lists the drivers sandboxes may run on (Default among them).
	Available []string
	// Unavailable maps a known driver this host cannot run to why ("runsc is not installed").
	Unavailable map[string]string
}

// withDefaults fills in an Isolation that names nothing: the configured runtime alone.
func (iso Isolation) withDefaults(runtime string) Isolation {
	if iso.Default == "" {
		iso.Default = runtime
	}
	if !slices.Contains(iso.Available, iso.Default) {
		iso.Available = append(slices.Clone(iso.Available), iso.Default)
	}
	sort.Strings(iso.Available)
	return iso
}

// Isolation returns what isolation the server offers.
func (s *Service) Isolation() Isolation { return s.iso }

// resolveIsolation picks a run's or sandbox's driver: the call's, else the template
// version's, else the server's default; and checks that this host runs it.
func (s *Service) resolveIsolation(call, template string) (string, error) {
	name := firstNonEmpty(call, template, s.iso.Default)
	if err := s.checkIsolation(name); err != nil {
		if call == "" && template != "" {
			return "", errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodeOf(err), "the template's %s", err.Error())
		}
		return "", err
	}
	return name, nil
}

// checkIsolation answers invalid_request for a name no driver has and isolation_unavailable
// for a driver this host cannot run.
func (s *Service) checkIsolation(name string) error {
	if slices.Contains(s.iso.Available, name) {
		return nil
	}
	if why, ok := s.iso.Unavailable[name]; ok {
		return errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodeIsolationUnavailable,
			"isolation %q is not available on this server: %s (available: %s)", name, why, strings.Join(s.iso.Available, ", "))
	}
	return errdefs.InvalidArgument("isolation %q: unknown; this server runs %s", name, strings.Join(s.iso.Available, ", "))
}

// runIsolation resolves a one-call run's isolation: run.isolation or the body's isolation
// (the same when both are given), else the template version's, else the server's default.
func (s *Service) runIsolation(req CreateRequest, template string) (string, error) {
	call := req.Isolation
	if req.Run != nil && req.Run.Isolation != "" {
		if call != "" && call != req.Run.Isolation {
			return "", errdefs.InvalidArgument("run.isolation %q and isolation %q differ; give one", req.Run.Isolation, call)
		}
		call = req.Run.Isolation
	}
	return s.resolveIsolation(call, template)
}
