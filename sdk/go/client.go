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
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
	// MaxRetries bounds the retries of a call that failed on the network, or with 429 or
	// 503; 0 means 8, negative means none.
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
	// Files are the files of sandboxes' workspaces; GraphFiles are Files of the graph.
	Files      *FilesService
	GraphFiles *GraphFilesService
	Keys       *KeysService
	Audit      *AuditService
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
	c.Files = &FilesService{c: c}
	c.GraphFiles = &GraphFilesService{c: c}
	c.Keys = &KeysService{c: c}
	c.Audit = &AuditService{c: c}
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

// response is what came back.
type response struct {
	status   int
	header   http.Header
	body     []byte
	replayed bool
}

func (c *Client) do(ctx context.Context, r request, out any) (*response, error) {
	var payload []byte
	if r.body != nil {
		var err error
		if payload, err = json.Marshal(r.body); err != nil {
			return nil, fmt.Errorf("lbb: encoding the request: %w", err)
		}
	}
	q := url.Values{}
	for k, v := range r.query {
		q[k] = v
	}
	q.Set("graph", c.graph)
	u := c.baseURL + r.path + "?" + q.Encode()
	backoff := 200 * time.Millisecond
	for attempt := 0; ; attempt++ {
		resp, err := c.once(ctx, r, u, payload)
		retryable := err != nil && ctx.Err() == nil ||
			err == nil && (resp.status == http.StatusTooManyRequests || resp.status == http.StatusServiceUnavailable || resp.status == http.StatusBadGateway)
		if r.retry && retryable && attempt < c.maxRetries {
			wait := backoff
			if err == nil {
				if s, perr := strconv.Atoi(resp.header.Get("Retry-After")); perr == nil && s >= 0 {
					wait = time.Duration(s) * time.Second
				}
			}
			// Spread concurrent retries out a little.
			wait += time.Duration(time.Now().UnixNano() % int64(100*time.Millisecond))
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		if err != nil {
			return nil, err
		}
		if resp.status >= 400 {
			return resp, decodeError(resp)
		}
		if out != nil {
			if err := json.Unmarshal(resp.body, out); err != nil {
				return resp, fmt.Errorf("lbb: decoding the answer to %s %s: %w", r.method, r.path, err)
			}
		}
		return resp, nil
	}
}

func (c *Client) once(ctx context.Context, r request, u string, payload []byte) (*response, error) {
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("lbb: %w", err)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if r.idemKey != "" {
		req.Header.Set("Idempotency-Key", r.idemKey)
	}
	req.Header.Set("User-Agent", c.userAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("lbb: %s %s: %w", r.method, r.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("lbb: reading the answer to %s %s: %w", r.method, r.path, err)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b,
		replayed: resp.Header.Get("Idempotent-Replayed") == "true"}, nil
}

func decodeError(resp *response) error {
	var b struct {
		Error Error `json:"error"`
	}
	if err := json.Unmarshal(resp.body, &b); err != nil || b.Error.Code == "" {
		msg := strings.TrimSpace(string(resp.body))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return &Error{StatusCode: resp.status, Code: http.StatusText(resp.status), Message: msg}
	}
	b.Error.StatusCode = resp.status
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
	return q
}

// List is one page of a list.
type List[T any] struct {
	Data       []T    `json:"data"`
	NextCursor string `json:"next_cursor,omitempty"`
}
