package lbb

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// SandboxesService is /v1/sandboxes.
type SandboxesService struct {
	c         *Client
	Templates *TemplatesService
}

// RunParams is one run(input, config).
type RunParams struct {
	// Code defines run(input, config); or Template names a saved one ("name", "name@3").
	Code string
	// Script is a plain program of Language instead (no run(input, config)): the answer's
	// ExitCode, Stdout and Stderr are its outcome. See RunCode.
	Script   string
	Template string
	// Input and Config are sent as JSON; a json.RawMessage goes as it is.
	Input  any
	Config any
	// Base is lbb/python (the default), lbb/node or lbb/shell; Language ("node") says the same.
	Base      string
	Language  string
	Env       map[string]string
	Limits    *Limits
	TimeoutMs int64
	// Isolation names the isolation to run on ("ns", "gvisor"); empty takes the template's,
	// else the server's default.
	Isolation string
	// Egress is the run's route out (nil: the template's, else none).
	Egress *Egress
	// WaitMs is how long one request waits before the server answers 202; Run then asks
	// again with the same key until the run ends or ctx does. 0 means 30 s.
	WaitMs   int64
	Metadata map[string]string
	Origin   *Origin
	// IdempotencyKey makes retries safe; a fresh one is made when empty.
	IdempotencyKey string
}

func rawJSON(v any) (json.RawMessage, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		return x, nil
	}
	return json.Marshal(v)
}

// prepare fills in p's defaults and returns its code, input and config as the API takes them.
func (p *RunParams) prepare() (runBody, error) {
	input, err := rawJSON(p.Input)
	if err != nil {
		return runBody{}, fmt.Errorf("lbb: input: %w", err)
	}
	config, err := rawJSON(p.Config)
	if err != nil {
		return runBody{}, fmt.Errorf("lbb: config: %w", err)
	}
	if p.WaitMs <= 0 {
		p.WaitMs = 30000
	}
	if p.IdempotencyKey == "" {
		p.IdempotencyKey = NewIdempotencyKey()
	}
	return runBody{Code: p.Code, Script: p.Script, Template: p.Template, Input: input, Config: config, Base: p.Base,
		Language: p.Language, Env: p.Env, Isolation: p.Isolation, Egress: p.Egress}, nil
}

// Run runs code once in a sandbox of its own and returns its result and the ids of its
// records. A run that raises is not an error: Run.OK is false and the traceback is in
// Run.Stderr.
func (s *SandboxesService) Run(ctx context.Context, p RunParams) (*Run, error) {
	run, err := p.prepare()
	if err != nil {
		return nil, err
	}
	return s.run(ctx, "/v1/sandboxes", p.IdempotencyKey, createBody{Run: &run,
		Limits: p.Limits, TimeoutMs: p.TimeoutMs, WaitMs: p.WaitMs, Metadata: p.Metadata, Origin: p.Origin})
}

// run posts a run under its idempotency key until it has ended: on a 202 (still running)
// the same call with the same key waits again, and never runs the code twice.
func (s *SandboxesService) run(ctx context.Context, path, key string, body any) (*Run, error) {
	for {
		var run Run
		resp, err := s.c.do(ctx, request{method: http.MethodPost, path: path, body: body, idemKey: key, retry: true}, &run)
		if err != nil {
			return nil, err
		}
		run.Replayed = run.Replayed || replayed(resp)
		run.IdempotencyKey = key
		if resp.StatusCode != http.StatusAccepted {
			return &run, nil
		}
		if err := ctx.Err(); err != nil {
			return &run, err
		}
	}
}

// Get returns a sandbox record.
func (s *SandboxesService) Get(ctx context.Context, id string) (*Sandbox, error) {
	return get[Sandbox](ctx, s.c, "/v1/sandboxes/"+url.PathEscape(id), nil)
}

// List lists sandbox records, newest first.
func (s *SandboxesService) List(ctx context.Context, p ListParams) (*List[Sandbox], error) {
	return get[List[Sandbox]](ctx, s.c, "/v1/sandboxes", p.query())
}

// Commands lists the command records of a sandbox.
func (s *SandboxesService) Commands(ctx context.Context, id string, p ListParams) (*List[Command], error) {
	return get[List[Command]](ctx, s.c, "/v1/sandboxes/"+url.PathEscape(id)+"/commands", p.query())
}

// CommandsService is /v1/commands.
type CommandsService struct{ c *Client }

// Get returns a command record; with waitMs > 0 the server first waits up to that long
// for the command to end.
func (s *CommandsService) Get(ctx context.Context, id string, waitMs int64) (*Command, error) {
	q := url.Values{}
	if waitMs > 0 {
		q.Set("wait_ms", strconv.FormatInt(waitMs, 10))
	}
	return get[Command](ctx, s.c, "/v1/commands/"+url.PathEscape(id), q)
}

// List lists command records, newest first.
func (s *CommandsService) List(ctx context.Context, p ListParams) (*List[Command], error) {
	return get[List[Command]](ctx, s.c, "/v1/commands", p.query())
}

// TemplatesService is /v1/sandboxes/templates.
type TemplatesService struct{ c *Client }

// TemplateParams is a template version to save.
type TemplateParams struct {
	Name        string         `json:"name"`
	Base        string         `json:"base,omitempty"`
	Code        string         `json:"code,omitempty"`
	Limits      *Limits        `json:"limits,omitempty"`
	TimeoutMs   int64          `json:"timeout_ms,omitempty"`
	Config      any            `json:"config,omitempty"`
	Files       []TemplateFile `json:"files,omitempty"`
	Description string         `json:"description,omitempty"`
	// Isolation is what the version's runs and sandboxes default to ("ns", "gvisor"); empty:
	// the server's default.
	Isolation string `json:"isolation,omitempty"`
	// Egress is the route out the version's runs and sandboxes get unless a call names one.
	Egress *Egress `json:"egress,omitempty"`
	// Image is what the version installs over its base (apt, pip, npm packages, files, run
	// steps). Create answers at once with Build.Status "building"; Build follows it.
	Image *ImageRecipe `json:"image,omitempty"`
}

// Create saves a new version of a template and returns it.
func (s *TemplatesService) Create(ctx context.Context, p TemplateParams) (*Template, error) {
	return call[Template](ctx, s.c, request{method: http.MethodPost, path: "/v1/sandboxes/templates", body: p})
}

// List lists the graph's templates and the base templates.
func (s *TemplatesService) List(ctx context.Context, p ListParams) (*TemplateList, error) {
	return get[TemplateList](ctx, s.c, "/v1/sandboxes/templates", p.query())
}

// Get returns a template ("name" for the newest version, "name@N" for one) with its history.
func (s *TemplatesService) Get(ctx context.Context, ref string) (*Template, error) {
	return get[Template](ctx, s.c, "/v1/sandboxes/templates/"+ref, nil)
}

// Build returns the build of a template version with an image recipe ("name" or "name@N"):
// its status (building, ready, failed), the step that failed, the resolved packages and the
// log.
func (s *TemplatesService) Build(ctx context.Context, ref string) (*TemplateBuildView, error) {
	return get[TemplateBuildView](ctx, s.c, "/v1/sandboxes/templates/"+ref+"/build", nil)
}

// Base returns a base template (lbb/python, lbb/node, lbb/shell) with its image versions.
func (s *TemplatesService) Base(ctx context.Context, name string) (*BaseTemplate, error) {
	return get[BaseTemplate](ctx, s.c, "/v1/sandboxes/templates/"+name, nil)
}

// KeysService is /v1/keys (admin).
type KeysService struct{ c *Client }

// KeyParams is a key to make.
type KeyParams struct {
	Name   string   `json:"name,omitempty"`
	Graphs []string `json:"graphs,omitempty"`
	Scopes []string `json:"scopes,omitempty"`
	// SpendCap caps what the key's runs use in a period (402 spend_cap_reached at it).
	SpendCap *SpendCap `json:"spend_cap,omitempty"`
}

// Create makes a key; its Secret is shown this once.
func (s *KeysService) Create(ctx context.Context, p KeyParams) (*Key, error) {
	return call[Key](ctx, s.c, request{method: http.MethodPost, path: "/v1/keys", body: p})
}

// List lists keys, newest first.
func (s *KeysService) List(ctx context.Context, p ListParams) (*List[Key], error) {
	return get[List[Key]](ctx, s.c, "/v1/keys", p.query())
}

// Revoke revokes a key at once.
func (s *KeysService) Revoke(ctx context.Context, id string) (*Key, error) {
	return call[Key](ctx, s.c, request{method: http.MethodDelete, path: "/v1/keys/" + url.PathEscape(id), retry: true})
}

// AuditService is /v1/audit (admin).
type AuditService struct{ c *Client }

// List lists the audit trail of the client's graph, newest first.
func (s *AuditService) List(ctx context.Context, p ListParams) (*List[AuditEntry], error) {
	return get[List[AuditEntry]](ctx, s.c, "/v1/audit", p.query())
}
