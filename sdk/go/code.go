package lbb

import (
	"context"
	"net/http"
	"net/url"
)

// CodeService is the code interpreter: stateful contexts in a long-lived sandbox
// (/v1/sandboxes/{id}/contexts, /v1/sandboxes/{id}/code).
type CodeService struct{ c *Client }

// RunCodeParams is a plain program run once in a sandbox of its own (seed 003's runCode).
type RunCodeParams struct {
	// Language is python (the default), node or shell.
	Language  string
	Code      string
	TimeoutMs int64
	Limits    *Limits
	Isolation string
	Env       map[string]string
	// IdempotencyKey makes retries safe; a fresh one is made when empty.
	IdempotencyKey string
}

// RunCode runs code as a plain program once, in a fresh sandbox that ends with it. A non-zero
// exit is no error: Run.ExitCode, Run.Stdout and Run.Stderr say how it went, Run.DurationMs
// how long it took.
func (s *SandboxesService) RunCode(ctx context.Context, p RunCodeParams) (*Run, error) {
	lang := p.Language
	if lang == "" {
		lang = "python"
	}
	return s.Run(ctx, RunParams{Script: p.Code, Language: lang, TimeoutMs: p.TimeoutMs, Limits: p.Limits,
		Isolation: p.Isolation, Env: p.Env, IdempotencyKey: p.IdempotencyKey})
}

// CellParams is one cell of code for a context.
type CellParams struct {
	Code string
	// Context names the context (CreateContext); empty runs in the sandbox's default context
	// of Language (python when empty), started on first use.
	Context   string
	Language  string
	TimeoutMs int64
	// IdempotencyKey makes retries safe; a fresh one is made when empty.
	IdempotencyKey string
}

// Run runs a cell in a context of sandbox id: state (variables, imports, functions) stays
// from cell to cell, and the value of the last expression is a result. A cell that raises is
// no error: CodeResult.Error says what it raised.
func (s *CodeService) Run(ctx context.Context, id string, p CellParams) (*CodeResult, error) {
	if p.IdempotencyKey == "" {
		p.IdempotencyKey = NewIdempotencyKey()
	}
	body := CodeRequest{Code: p.Code, Context: p.Context, Language: p.Language, TimeoutMs: p.TimeoutMs}
	return call[CodeResult](ctx, s.c, request{method: http.MethodPost, path: codePath(id, "/code"), body: body,
		idemKey: p.IdempotencyKey, retry: true})
}

// CreateContext starts a context and returns once its interpreter is ready.
func (s *CodeService) CreateContext(ctx context.Context, id string, p ContextRequest) (*CodeContext, error) {
	return call[CodeContext](ctx, s.c, request{method: http.MethodPost, path: codePath(id, "/contexts"), body: p})
}

// Contexts lists the contexts of sandbox id.
func (s *CodeService) Contexts(ctx context.Context, id string) (*List[CodeContext], error) {
	return get[List[CodeContext]](ctx, s.c, codePath(id, "/contexts"), nil)
}

// RestartContext starts a context's interpreter afresh: its state is gone.
func (s *CodeService) RestartContext(ctx context.Context, id, contextID string) (*CodeContext, error) {
	return call[CodeContext](ctx, s.c, request{method: http.MethodPost, path: codePath(id, "/contexts/"+url.PathEscape(contextID)+"/restart"), retry: true})
}

// DeleteContext ends a context.
func (s *CodeService) DeleteContext(ctx context.Context, id, contextID string) (*CodeContext, error) {
	return call[CodeContext](ctx, s.c, request{method: http.MethodDelete, path: codePath(id, "/contexts/"+url.PathEscape(contextID))})
}

func codePath(id, rest string) string { return "/v1/sandboxes/" + url.PathEscape(id) + rest }

// Text is the text/plain of the cell's last result or display, "" when there is none.
func (r *CodeResult) Text() string {
	for i := len(r.Results) - 1; i >= 0; i-- {
		if t, ok := r.Results[i].Data["text/plain"].(string); ok {
			return t
		}
	}
	return ""
}
