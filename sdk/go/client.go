// Package lbb is the Go SDK of lbb sandboxes: run code nobody here wrote in an isolated
// sandbox, in one call, and read the records of every run.
//
//	c, err := lbb.New(lbb.Options{}) // LBB_URL, LBB_API_KEY, or the local server's saved key
//	run, err := c.Sandboxes.Run(ctx, lbb.RunParams{
//		Code:  "def run(input, config):\n    return sum(input)",
//		Input: []int{1, 2, 3},
//	})
//	// run.OK, run.Result (6), run.Command (the record's id)
//
// Calls that run code carry an Idempotency-Key (made for you when you give none), and the
// SDK retries them with the same key, so a retry never runs the code twice.
package lbb

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultURL is where a local server listens.
const DefaultURL = "http://127.0.0.1:7700"

// Options configure a Client. Empty fields come from the environment.
type Options struct {
	// BaseURL is the server; $LBB_URL, else DefaultURL.
	BaseURL string
	// APIKey is the bearer key; $LBB_API_KEY, else the local server's saved admin key
	// (<$LBB_DATA_DIR or /var/lib/lbb>/admin.key).
	APIKey string
	// Graph is the graph every call names; $LBB_GRAPH, else "main".
	Graph string
	// HTTPClient makes the requests; http.DefaultClient when nil.
	HTTPClient *http.Client
	// MaxRetries bounds the retries of a call that failed on the network, or with 429 (but
	// not quota_exceeded: a quota stays full until something is deleted) or 503; 0 means 8,
	// negative means none.
	MaxRetries int
	// UserAgent is sent with every request.
	UserAgent string
}

// Client talks to an lbb server.
type Client struct {
	baseURL    string
	apiKey     string
	graph      string
	http       *http.Client
	maxRetries int
	userAgent  string

	Sandboxes *SandboxesService
	Commands  *CommandsService
	// Code is the code interpreter: contexts and cells in a long-lived sandbox.
	Code *CodeService
	// Files are the files of sandboxes' workspaces; GraphFiles are Files of the graph.
	Files      *FilesService
	GraphFiles *GraphFilesService
	Keys       *KeysService
	Audit      *AuditService
	// Grants are short-lived keys for workflow steps; Budgets those of workflow runs.
	Grants  *GrantsService
	Budgets *BudgetsService
}

// New returns a client.
func New(o Options) (*Client, error) {
	if o.BaseURL == "" {
		o.BaseURL = os.Getenv("LBB_URL")
	}
	if o.BaseURL == "" {
		o.BaseURL = DefaultURL
	}
	if _, err := url.Parse(o.BaseURL); err != nil {
		return nil, fmt.Errorf("lbb: base URL %q: %w", o.BaseURL, err)
	}
	if o.APIKey == "" {
		o.APIKey = os.Getenv("LBB_API_KEY")
	}
	if o.APIKey == "" {
		dir := os.Getenv("LBB_DATA_DIR")
		if dir == "" {
			dir = "/var/lib/lbb"
		}
		if b, err := os.ReadFile(filepath.Join(dir, "admin.key")); err == nil {
			o.APIKey = strings.TrimSpace(string(b))
		}
	}
	if o.Graph == "" {
		o.Graph = os.Getenv("LBB_GRAPH")
	}
	if o.Graph == "" {
		o.Graph = "main"
	}
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	switch {
	case o.MaxRetries == 0:
		o.MaxRetries = 8
	case o.MaxRetries < 0:
		o.MaxRetries = 0
	}
	if o.UserAgent == "" {
		o.UserAgent = "lbb-go"
	}
	c := &Client{baseURL: strings.TrimRight(o.BaseURL, "/"), apiKey: o.APIKey, graph: o.Graph, http: o.HTTPClient,
		maxRetries: o.MaxRetries, userAgent: o.UserAgent}
	c.init()
	return c, nil
}

func (c *Client) init() {
	c.Sandboxes = &SandboxesService{c: c, Templates: &TemplatesService{c: c}}
	c.Commands = &CommandsService{c: c}
	c.Code = &CodeService{c: c}
	c.Files = &FilesService{c: c}
	c.GraphFiles = &GraphFilesService{c: c}
	c.Keys = &KeysService{c: c}
	c.Audit = &AuditService{c: c}
	c.Grants = &GrantsService{c: c}
	c.Budgets = &BudgetsService{c: c}
}

// Graph is the graph the client's calls name.
func (c *Client) Graph() string { return c.graph }

// WithGraph returns a client like c that names another graph.
func (c *Client) WithGraph(graph string) *Client {
	c2 := *c
	c2.graph = graph
	c2.init()
	return &c2
}

// Error is an error the server answered.
type Error struct {
	StatusCode int    `json:"-"`
	Code       string `json:"code"`
	Message    string `json:"message"`
	RequestID  string `json:"request_id"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("lbb: %s (%d %s, request %s)", e.Message, e.StatusCode, e.Code, e.RequestID)
}

// StatusOf returns the HTTP status of an Error, or 0.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

// CodeOf returns the stable code of an Error ("not_found", "idempotency_key_reused", …), or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsNotFound reports whether the server answered 404.
func IsNotFound(err error) bool { return StatusOf(err) == http.StatusNotFound }

// IsUnauthorized reports whether the server refused the key (401).
func IsUnauthorized(err error) bool { return StatusOf(err) == http.StatusUnauthorized }

// IsConflict reports whether the server answered 409.
func IsConflict(err error) bool { return StatusOf(err) == http.StatusConflict }

// IsInvalid reports whether the server found the request malformed (400).
func IsInvalid(err error) bool { return StatusOf(err) == http.StatusBadRequest }

// Codes of the graph's quotas: a call that would go past a count quota answers 429
// quota_exceeded, past a byte quota 413 quota_bytes_exceeded; the message names the quota,
// its usage and limit (Client.Quotas reads them all). Deleting something makes room; the
// SDK does not retry them.
const (
	CodeQuotaExceeded      = "quota_exceeded"
	CodeQuotaBytesExceeded = "quota_bytes_exceeded"
)

// IsQuotaExceeded reports whether the call would have taken the graph past one of its
// quotas (a count or bytes).
func IsQuotaExceeded(err error) bool {
	c := CodeOf(err)
	return c == CodeQuotaExceeded || c == CodeQuotaBytesExceeded
}

// Quotas returns the graph's quotas: usage and limits (GET /v1/quotas).
func (c *Client) Quotas(ctx context.Context) (*Quotas, error) {
	return get[Quotas](ctx, c, "/v1/quotas", nil)
}

// NewIdempotencyKey returns a fresh random key.
func NewIdempotencyKey() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// request is one API call.
type request struct {
	method  string
	path    string
	query   url.Values
	body    any
	idemKey string
	// retry says the call may be sent again: reads, and calls with an idempotency key.
	retry bool
}

// do sends r, its body as JSON, and decodes the JSON answer into out; see raw.
func (c *Client) do(ctx context.Context, r request, out any) (*http.Response, error) {
	raw := rawRequest{method: r.method, path: r.path, query: r.query, idemKey: r.idemKey, retry: r.retry}
	if r.body != nil {
		payload, err := json.Marshal(r.body)
		if err != nil {
			return nil, fmt.Errorf("lbb: encoding the request: %w", err)
		}
		raw.body, raw.contentType = bytes.NewReader(payload), "application/json"
	}
	return c.rawJSON(ctx, raw, out)
}

// call sends r and returns its answer, decoded.
func call[T any](ctx context.Context, c *Client, r request) (*T, error) {
	var v T
	_, err := c.do(ctx, r, &v)
	return &v, err
}

// get reads a resource; a read is always retried.
func get[T any](ctx context.Context, c *Client, path string, query url.Values) (*T, error) {
	return call[T](ctx, c, request{method: http.MethodGet, path: path, query: query, retry: true})
}

// replayed says the server answered from an earlier call with the same idempotency key.
func replayed(resp *http.Response) bool {
	return resp != nil && resp.Header.Get("Idempotent-Replayed") == "true"
}

func decodeError(status int, body []byte) error {
	var b struct {
		Error Error `json:"error"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.Error.Code == "" {
		msg := strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return &Error{StatusCode: status, Code: http.StatusText(status), Message: msg}
	}
	b.Error.StatusCode = status
	return &b.Error
}

// ListParams page through a list.
type ListParams struct {
	Limit  int
	Cursor string
	// Status keeps the records of one status (sandboxes and commands).
	Status string
	// Labels keeps the sandboxes whose metadata has every one of these key-value pairs.
	Labels map[string]string
	// Session keeps the sandboxes of one session (CreateParams.Session).
	Session string
}

func (p ListParams) query() url.Values {
	q := url.Values{}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	if p.Status != "" {
		q.Set("status", p.Status)
	}
	for k, v := range p.Labels {
		q.Add("label", k+"="+v)
	}
	if p.Session != "" {
		q.Set("session", p.Session)
	}
	return q
}

// List is one page of a list.
type List[T any] struct {
	Data       []T    `json:"data"`
	NextCursor string `json:"next_cursor,omitempty"`
}
