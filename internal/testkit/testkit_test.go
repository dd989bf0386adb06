package testkit

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test ended instead of ending it.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }
func (r *recorder) Fatal(args ...any)                 { r.fatal = fmt.Sprint(args...) }
func (r *recorder) Skip(args ...any)                  { r.skip = fmt.Sprint(args...) }

func TestSkipPrivileged(t *testing.T) {
	for _, tc := range []struct {
		env                 string
		wantSkip, wantFatal bool
	}{{"", true, false}, {"0", true, false}, {"1", false, true}} {
		t.Setenv(RequirePrivilegedEnv, tc.env)
		r := &recorder{TB: t}
		SkipPrivileged(r, "needs %s", "runsc")
		if (r.skip != "") != tc.wantSkip || (r.fatal != "") != tc.wantFatal {
			t.Errorf("%s=%q: skip %q, fatal %q", RequirePrivilegedEnv, tc.env, r.skip, r.fatal)
		}
		if got := r.skip + r.fatal; !strings.HasPrefix(got, "needs runsc") {
			t.Errorf("%s=%q: message %q, want it to start with the reason", RequirePrivilegedEnv, tc.env, got)
		}
	}
}

func TestAgentBinary(t *testing.T) {
	t.Setenv("LBB_AGENT", "/nowhere/lbb-agent")
	if p, err := AgentBinary(); err != nil || p != "/nowhere/lbb-agent" {
		t.Errorf("AgentBinary with LBB_AGENT set: %q, %v", p, err)
	}
}
