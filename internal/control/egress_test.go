package control_test

import (
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
)

// TestEgressResolution: a run's egress is the call's, else its template version's, else none;
// a mode that lets anything out gets the server's default quota, and no more than its cap.
func TestEgressResolution(t *testing.T) {
	e := setup(t, func(c *config.Config) { c.EgressQuota, c.EgressMaxQuota = 1000, 5000 })
	if _, err := e.svc.CreateTemplate(ctx, e.caller, control.TemplateRequest{Name: "net", Code: "def run(i, c): return 1",
		Egress: &store.Egress{Mode: store.EgressAllowlist, Allow: []string{"pkgs.example.org"}}}); err != nil {
		t.Fatal(err)
	}
	egressOf := func(key string, req control.CreateRequest) *store.Egress {
		t.Helper()
		resp, err := e.svc.Run(ctx, e.caller, req, key, "h-"+key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		sb, err := e.st.GetSandbox(ctx, "main", decodeResult(t, resp).Sandbox)
		if err != nil {
			t.Fatal(err)
		}
		return sb.Egress
	}
	tpl := control.CreateRequest{Run: &control.RunBody{Template: "net"}}
	if got := egressOf("tpl", tpl); got == nil || got.Mode != "allowlist" || got.QuotaBytes != 1000 || got.Allow[0] != "pkgs.example.org" {
		t.Errorf("the template's: %+v", got)
	}
	call := tpl
	call.Egress = &store.Egress{Mode: store.EgressPublic, QuotaBytes: 2000}
	if got := egressOf("call", call); got == nil || got.Mode != "public" || got.QuotaBytes != 2000 || len(got.Allow) != 0 {
		t.Errorf("the call's: %+v", got)
	}
	if got := egressOf("none", run("def run(i, c): return 1", "")); got == nil || got.Mode != "none" || got.QuotaBytes != 0 {
		t.Errorf("none: %+v", got)
	}
	for key, tc := range map[string]struct {
		req  control.CreateRequest
		code string
	}{
		"above cap": {control.CreateRequest{Egress: &store.Egress{Mode: "public", QuotaBytes: 6000}, Run: &control.RunBody{Code: "x"}}, errdefs.CodeLimitExceeded},
		"bad allow": {control.CreateRequest{Egress: &store.Egress{Mode: "allowlist", Allow: []string{"a b"}}, Run: &control.RunBody{Code: "x"}}, "invalid_request"},
		"no allow":  {control.CreateRequest{Egress: &store.Egress{Mode: "allowlist"}, Run: &control.RunBody{Code: "x"}}, "invalid_request"},
		"differ": {control.CreateRequest{Egress: &store.Egress{Mode: "public"},
			Run: &control.RunBody{Code: "x", Egress: &store.Egress{Mode: "none"}}}, "invalid_request"},
		"api on a run": {control.CreateRequest{API: &control.APIGrantBody{Scopes: []string{"sandboxes:read"}}, Run: &control.RunBody{Code: "x"}}, "invalid_request"},
	} {
		_, err := e.svc.Run(ctx, e.caller, tc.req, key, "h-"+key)
		if err == nil || errdefs.CodeOf(err) != tc.code && !(tc.code == "invalid_request" && errdefs.ClassOf(err) == errdefs.ClassInvalidArgument) {
			t.Errorf("%s: %v (code %s), want %s", key, err, errdefs.CodeOf(err), tc.code)
		}
	}
}

// TestGrantChecks: a grant's scopes are within its creator's and never admin; a git clone's
// URL and branch are checked before anything starts.
func TestGrantChecks(t *testing.T) {
	e := setup(t, nil)
	narrow, err := e.svc.CreateKey(ctx, "", control.KeyRequest{Graphs: []string{"main"}, Scopes: []string{store.ScopeSandboxesRead, store.ScopeSandboxesWrite}})
	if err != nil {
		t.Fatal(err)
	}
	c := control.Caller{Graph: "main", Key: narrow.Key}
	for name, tc := range map[string]struct {
		req   control.CreateRequest
		class errdefs.Class
	}{
		"admin":        {control.CreateRequest{API: &control.APIGrantBody{Scopes: []string{"admin"}}}, errdefs.ClassInvalidArgument},
		"beyond":       {control.CreateRequest{API: &control.APIGrantBody{Scopes: []string{"sandboxes:delete"}}}, errdefs.ClassForbidden},
		"none":         {control.CreateRequest{API: &control.APIGrantBody{}}, errdefs.ClassInvalidArgument},
		"git url":      {control.CreateRequest{Git: &store.GitClone{URL: "https://u:p@example.org/r.git"}}, errdefs.ClassInvalidArgument},
		"git option":   {control.CreateRequest{Git: &store.GitClone{URL: "https://example.org/r.git", Branch: "-x"}}, errdefs.ClassInvalidArgument},
		"git dotdot":   {control.CreateRequest{Git: &store.GitClone{URL: "https://example.org/r.git", Branch: "a/../b"}}, errdefs.ClassInvalidArgument},
		"git file url": {control.CreateRequest{Git: &store.GitClone{URL: "file:///etc"}}, errdefs.ClassInvalidArgument},
	} {
		if _, err := e.svc.CreateSandbox(ctx, c, tc.req, "", ""); errdefs.ClassOf(err) != tc.class {
			t.Errorf("%s: %v, want class %v", name, err, tc.class)
		}
	}
}

// TestDerivedKeys: a derived key lives no longer than its parent nor past its expiry, and
// starts at most its cap of runs.
func TestDerivedKeys(t *testing.T) {
	e := setup(t, nil)
	parent, err := e.svc.CreateKey(ctx, "", control.KeyRequest{Graphs: []string{"main"}})
	if err != nil {
		t.Fatal(err)
	}
	derive := func(name string, exp time.Time, maxRuns int64) string {
		secret, hash := control.NewSecret()
		k := store.Key{ID: ids.New(ids.Key), Name: name, Hash: hash, Prefix: secret[:13], Graphs: []string{"main"},
			Scopes: []string{store.ScopeSandboxesWrite}, CreatedAt: time.Now(), Parent: parent.ID, Sandbox: "sbx_x", ExpiresAt: &exp, MaxRuns: maxRuns}
		if err := e.st.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		return secret
	}
	live := derive("live", time.Now().Add(time.Hour), 1)
	expired := derive("expired", time.Now().Add(-time.Second), 0)
	k, err := e.svc.Authenticate(ctx, live)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Authenticate(ctx, expired); errdefs.ClassOf(err) != errdefs.ClassUnauthorized {
		t.Errorf("an expired key: %v", err)
	}
	c := control.Caller{Graph: "main", Key: k}
	if _, err := e.svc.Run(ctx, c, run("def run(i, c): return 1", ""), "r1", "h1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Run(ctx, c, run("def run(i, c): return 2", ""), "r2", "h2"); errdefs.ClassOf(err) != errdefs.ClassLimitExceeded {
		t.Errorf("a run past the cap: %v", err)
	}
	if _, err := e.svc.RevokeKey(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Authenticate(ctx, live); errdefs.ClassOf(err) != errdefs.ClassUnauthorized {
		t.Errorf("a key whose parent was revoked: %v", err)
	}
}
