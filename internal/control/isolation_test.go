package control_test

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/littlebigbrain/lbb/internal/api/errhttp"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
	"github.com/littlebigbrain/lbb/internal/runtime/mux"
	"github.com/littlebigbrain/lbb/internal/store"
)

// recording is a real driver that notes the sandboxes created on it.
type recording struct {
	runtime.Driver
	mu      sync.Mutex
	created []string
}

func (r *recording) Create(ctx context.Context, spec runtime.Spec) error {
	r.mu.Lock()
	r.created = append(r.created, spec.ID)
	r.mu.Unlock()
	return r.Driver.Create(ctx, spec)
}

func (r *recording) made(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.created, id)
}

type isoEnv struct {
	*env
	drivers map[string]*recording
	mux     *mux.Driver
}

// setupIsolation is a service on two real (local) drivers, named "ns" (the default) and
// "gvisor" as a server names its drivers, each on a state directory of its own; iso says
// what the service offers.
func setupIsolation(t *testing.T, iso control.Isolation) *isoEnv {
	t.Helper()
	dir := t.TempDir()
	st := openStore(t, dir)
	drivers := map[string]*recording{}
	rts := map[string]runtime.Driver{}
	for _, name := range []string{"ns", "gvisor"} {
		drivers[name] = &recording{Driver: local.New(local.Options{AgentPath: agentBin, StateDir: filepath.Join(dir, name)})}
		rts[name] = drivers[name]
	}
	m, err := mux.New(mux.Options{Default: "ns", Drivers: rts})
	if err != nil {
		t.Fatal(err)
	}
	hst := hostagent.NewLocal(hostagent.Options{Driver: m, Rootfs: "/", Default: iso.Default, Offered: iso.Available, DataDir: dir})
	e := serve(t, dir, control.Options{Store: st, Host: hst, Config: testConfig(dir, nil), Isolation: iso,
		Image: control.Image{ID: "img1"}})
	return &isoEnv{env: e, drivers: drivers, mux: m}
}

var both = control.Isolation{Default: "ns", Available: []string{"gvisor", "ns"}}

// shellRun is a one-call run of a shell script (the local driver runs it on this host).
func shellRun(isolation, runIsolation, template string) control.CreateRequest {
	r := &control.RunBody{Template: template, Isolation: runIsolation}
	if template == "" {
		r.Base, r.Code = "lbb/shell", `echo '"ran"' > "$LBB_RESULT"`
	}
	return control.CreateRequest{Run: r, Isolation: isolation}
}

// TestIsolationPrecedence: the call's isolation wins over the template version's, which
// wins over the server's default; the record names the resolved one, and the sandbox is
// made on that driver.
func TestIsolationPrecedence(t *testing.T) {
	e := setupIsolation(t, both)
	if _, err := e.svc.CreateTemplate(ctx, e.caller, control.TemplateRequest{Name: "strong", Base: "lbb/shell",
		Code: `echo '"tpl"' > "$LBB_RESULT"`, Isolation: "gvisor"}); err != nil {
		t.Fatal(err)
	}
	plain, err := e.svc.CreateTemplate(ctx, e.caller, control.TemplateRequest{Name: "plain", Base: "lbb/shell",
		Code: `echo '"tpl"' > "$LBB_RESULT"`})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Isolation != "" {
		t.Fatalf("a template that names no isolation stored %q", plain.Isolation)
	}
	if v, _ := e.svc.GetTemplate(ctx, "main", "strong"); v.Isolation != "gvisor" {
		t.Fatalf("template strong: isolation %q", v.Isolation)
	}

	for i, tc := range []struct {
		name                     string
		isolation, run, template string
		want                     string
	}{
		{"server default", "", "", "", "ns"},
		{"run.isolation", "", "gvisor", "", "gvisor"},
		{"top-level isolation", "gvisor", "", "", "gvisor"},
		{"both, the same", "gvisor", "gvisor", "", "gvisor"},
		{"template", "", "", "strong", "gvisor"},
		{"call over template", "", "ns", "strong", "ns"},
		{"top-level call over template", "ns", "", "strong", "ns"},
		{"template without isolation", "", "", "plain", "ns"},
		{"call over a template without", "", "gvisor", "plain", "gvisor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := e.svc.Run(ctx, e.caller, shellRun(tc.isolation, tc.run, tc.template), "iso-"+string(rune('a'+i)), "h")
			if err != nil {
				t.Fatal(err)
			}
			r := decodeResult(t, resp)
			if !r.OK || r.Isolation != tc.want {
				t.Fatalf("answer: ok %v isolation %q, want %q: %s", r.OK, r.Isolation, tc.want, resp.Body)
			}
			sb, err := e.st.GetSandbox(ctx, "main", r.Sandbox)
			if err != nil {
				t.Fatal(err)
			}
			if sb.Isolation != tc.want {
				t.Errorf("record: isolation %q, want %q", sb.Isolation, tc.want)
			}
			for name, d := range e.drivers {
				if d.made(r.Sandbox) != (name == tc.want) {
					t.Errorf("driver %s made the sandbox: %v; want it made on %s", name, d.made(r.Sandbox), tc.want)
				}
			}
		})
	}

	// Level 3: the same precedence; the sandbox lives on its driver.
	for _, tc := range []struct {
		req  control.CreateRequest
		want string
	}{
		{control.CreateRequest{}, "ns"},
		{control.CreateRequest{Isolation: "gvisor"}, "gvisor"},
		{control.CreateRequest{Template: "strong"}, "gvisor"},
		{control.CreateRequest{Template: "strong", Isolation: "ns"}, "ns"},
	} {
		sb := e.create(t, tc.req)
		if sb.Isolation != tc.want {
			t.Errorf("%+v: record isolation %q, want %q", tc.req, sb.Isolation, tc.want)
		}
		if got, err := e.mux.Runtime(sb.ID); err != nil || got != tc.want {
			t.Errorf("%+v: runs on %q (%v), want %q", tc.req, got, err, tc.want)
		}
		if stored, _ := e.st.GetSandbox(ctx, "main", sb.ID); stored.Isolation != tc.want {
			t.Errorf("%+v: stored isolation %q", tc.req, stored.Isolation)
		}
		// A stopped sandbox resumes on the driver that holds it.
		if _, err := e.svc.StopSandbox(ctx, "main", sb.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.ResumeSandbox(ctx, "main", sb.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.DeleteSandbox(ctx, "main", sb.ID); err != nil {
			t.Fatal(err)
		}
		if ids, _ := e.drivers[tc.want].List(ctx); slices.Contains(ids, sb.ID) {
			t.Errorf("%s still holds %s after delete", tc.want, sb.ID)
		}
	}
}

// TestIsolationErrors: an unknown name is invalid_request; a known driver this host cannot
// run is isolation_unavailable, saying what is missing. Nothing is recorded or started.
func TestIsolationErrors(t *testing.T) {
	e := setupIsolation(t, control.Isolation{Default: "ns", Available: []string{"ns"},
		Unavailable: map[string]string{"gvisor": "runsc is not installed (run scripts/install-runsc.sh)"}})
	check := func(what string, err error, code string) {
		t.Helper()
		if errdefs.CodeOf(err) != code || errhttp.Status(err) != http.StatusBadRequest {
			t.Errorf("%s: %v (code %s, status %d), want 400 %s", what, err, errdefs.CodeOf(err), errhttp.Status(err), code)
		}
		if code == errdefs.CodeIsolationUnavailable && (err == nil || !strings.Contains(err.Error(), "runsc is not installed")) {
			t.Errorf("%s: %v does not say what is missing", what, err)
		}
	}
	for name, code := range map[string]string{"microvm": "invalid_request", "gvisor": errdefs.CodeIsolationUnavailable} {
		_, err := e.svc.Run(ctx, e.caller, shellRun("", name, ""), "bad-run-"+name, "h")
		check("run.isolation "+name, err, code)
		_, err = e.svc.Run(ctx, e.caller, shellRun(name, "", ""), "bad-top-"+name, "h")
		check("isolation "+name, err, code)
		_, err = e.svc.CreateSandbox(ctx, e.caller, control.CreateRequest{Isolation: name}, "", "")
		check("create "+name, err, code)
		_, err = e.svc.CreateTemplate(ctx, e.caller, control.TemplateRequest{Name: "t-" + name, Isolation: name})
		check("template "+name, err, code)
	}
	_, err := e.svc.Run(ctx, e.caller, shellRun("ns", "gvisor", ""), "differ", "h")
	check("run.isolation and isolation differ", err, "invalid_request")

	list, _, err := e.st.ListSandboxes(ctx, "main", store.SandboxFilter{}, store.Page{})
	if err != nil || len(list) != 0 {
		t.Fatalf("refused calls left sandboxes: %v %v", list, err)
	}
	for name, d := range e.drivers {
		if len(d.created) != 0 {
			t.Errorf("driver %s made %v", name, d.created)
		}
	}
	// A zero Isolation offers the configured runtime alone.
	if iso := setup(t, nil).svc.Isolation(); iso.Default != "ns" || !slices.Equal(iso.Available, []string{"ns"}) {
		t.Errorf("zero Isolation: %+v", iso)
	}
}
