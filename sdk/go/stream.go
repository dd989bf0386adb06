package lbb

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// rawRequest is a call whose body, or answer, is raw bytes rather than JSON.
type rawRequest struct {
	method string
	path   string
	query  url.Values
	// body is sent as it is; a body that is an io.Seeker is rewound for a retry, any other
	// body is sent once.
	body        io.Reader
	contentType string
	header      http.Header
	idemKey     string
	retry       bool
}

// raw sends r and returns the response, whose body the caller reads and closes. An answer
// of 400 or more is decoded into an *Error.
func (c *Client) raw(ctx context.Context, r rawRequest) (*http.Response, error) {
	q := url.Values{}
	for k, v := range r.query {
		q[k] = v
	}
	q.Set("graph", c.graph)
	u := c.baseURL + r.path + "?" + q.Encode()
	seeker, rewindable := r.body.(io.Seeker)
	canRetry := r.retry && (r.body == nil || rewindable)
	backoff := 200 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if attempt > 0 && rewindable {
			if _, err := seeker.Seek(0, io.SeekStart); err != nil {
				return nil, fmt.Errorf("lbb: rewinding the body: %w", err)
			}
		}
		body := r.body
		if body != nil {
			// The transport closes a body that is an io.Closer; the caller owns it.
			body = io.NopCloser(body)
		}
		req, err := http.NewRequestWithContext(ctx, r.method, u, body)
		if err != nil {
			return nil, fmt.Errorf("lbb: %w", err)
		}
		if n, ok := knownLength(r.body); ok {
			req.ContentLength = n
		}
		for k, v := range r.header {
			req.Header[k] = v
		}
		if r.contentType != "" {
			req.Header.Set("Content-Type", r.contentType)
		}
		if c.apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+c.apiKey)
		}
		if r.idemKey != "" {
			req.Header.Set("Idempotency-Key", r.idemKey)
		}
		req.Header.Set("User-Agent", c.userAgent)
		resp, err := c.http.Do(req)
		retryable := err != nil && ctx.Err() == nil ||
			err == nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusBadGateway)
		if retryable && err == nil && resp.StatusCode == http.StatusTooManyRequests {
			// A quota stays full until something is deleted: no retry helps.
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if e := decodeError(resp.StatusCode, b); CodeOf(e) == CodeQuotaExceeded {
				return nil, e
			}
			resp.Body = io.NopCloser(bytes.NewReader(b))
		}
		if canRetry && retryable && attempt < c.maxRetries {
			wait := backoff
			if err == nil {
				if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s >= 0 {
					wait = time.Duration(s) * time.Second
				}
				io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
				resp.Body.Close()
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
			return nil, fmt.Errorf("lbb: %s %s: %w", r.method, r.path, err)
		}
		if resp.StatusCode >= 400 {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			return nil, decodeError(resp.StatusCode, b)
		}
		return resp, nil
	}
}

// rawJSON sends r and decodes its JSON answer into out.
func (c *Client) rawJSON(ctx context.Context, r rawRequest, out any) (*http.Response, error) {
	resp, err := c.raw(ctx, r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp, fmt.Errorf("lbb: decoding the answer to %s %s: %w", r.method, r.path, err)
		}
	}
	return resp, nil
}

func knownLength(r io.Reader) (int64, bool) {
	switch b := r.(type) {
	case nil:
		return 0, true
	case interface{ Len() int }: // *bytes.Reader, *bytes.Buffer, *strings.Reader
		return int64(b.Len()), true
	case *os.File:
		fi, err := b.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return 0, false
		}
		off, err := b.Seek(0, io.SeekCurrent)
		if err != nil {
			return 0, false
		}
		return fi.Size() - off, true
	}
	return 0, false
}

// OutputChunk is a piece of a command's output.
type OutputChunk struct {
	// Stream is "stdout" or "stderr".
	Stream string
	// Offset is where Data starts in its stream. When it is past the end of the chunk
	// before, the bytes between were not kept (they were between the head and the tail of a
	// long output).
	Offset int64
	Data   []byte
}

// sseChunk is the data of a stdout or stderr event.
type sseChunk struct {
	Stream string `json:"stream"`
	Offset int64  `json:"offset"`
	Data   string `json:"data"`
	// Base64 carries the exact bytes when they are not valid UTF-8 (Data then has U+FFFD
	// where they were).
	Base64 string `json:"base64,omitempty"`
}

// OutputStream reads a command's output as it comes: the chunks that are kept, then live
// ones, then (when following) the command's record once it has ended.
//
//	s, err := c.Commands.Output(ctx, id, "both", true)
//	defer s.Close()
//	for s.Next() {
//		ch := s.Chunk()
//		os.Stdout.Write(ch.Data)
//	}
//	if err := s.Err(); err != nil { … }
//	exit := s.Exit() // the command record, with its exit code
type OutputStream struct {
	c     *Client
	ctx   context.Context
	path  string
	query url.Values
	// start is the JSON body of a start-and-stream call (POST …/commands), sent again with
	// its Idempotency-Key to resume: the server then streams the same command.
	start   []byte
	idemKey string
	resp    *http.Response
	rd      *bufio.Reader
	lastID  string
	chunk   OutputChunk
	command *Command
	exit    *Command
	err     error
	done    bool
	tries   int
	// next is the offset reached in each stream; lost counts the bytes skipped.
	next map[string]int64
	lost int64
}

func (s *OutputStream) connect() error {
	h := http.Header{"Accept": {"text/event-stream"}}
	if s.lastID != "" {
		h.Set("Last-Event-ID", s.lastID)
	}
	r := rawRequest{method: http.MethodGet, path: s.path, query: s.query, header: h, retry: true}
	if s.start != nil {
		r.method, r.body, r.contentType, r.idemKey = http.MethodPost, bytes.NewReader(s.start), "application/json", s.idemKey
	}
	resp, err := s.c.raw(s.ctx, r)
	if err != nil {
		return err
	}
	s.resp, s.rd = resp, bufio.NewReaderSize(resp.Body, 64<<10)
	return nil
}

// Next reads the next chunk; it returns false at the end of the stream or on an error
// (see Err). A broken connection is resumed where it broke.
func (s *OutputStream) Next() bool {
	for !s.done {
		ev, data, id, err := s.readEvent()
		if err != nil {
			if s.resp != nil {
				s.resp.Body.Close()
				s.resp = nil
			}
			if err == io.EOF {
				s.done = true
				return false
			}
			// Resume after the last event we saw, unless the caller gave up.
			if s.ctx.Err() == nil && s.tries < s.c.maxRetries {
				s.tries++
				time.Sleep(time.Duration(s.tries) * 200 * time.Millisecond)
				if cerr := s.connect(); cerr == nil {
					continue
				} else {
					err = cerr
				}
			}
			s.err, s.done = err, true
			return false
		}
		if id != "" {
			s.lastID = id
		}
		switch ev {
		case "stdout", "stderr":
			var c sseChunk
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				s.err, s.done = fmt.Errorf("lbb: a bad output event: %w", err), true
				return false
			}
			b := []byte(c.Data)
			if c.Base64 != "" {
				if b, err = base64.StdEncoding.DecodeString(c.Base64); err != nil {
					s.err, s.done = fmt.Errorf("lbb: a bad output event: %w", err), true
					return false
				}
			}
			if c.Stream == "" {
				c.Stream = ev
			}
			s.chunk = OutputChunk{Stream: c.Stream, Offset: c.Offset, Data: b}
			s.skipTo(c.Stream, c.Offset)
			s.next[c.Stream] = c.Offset + int64(len(b))
			s.tries = 0
			return true
		case "command":
			var cmd Command
			if err := json.Unmarshal([]byte(data), &cmd); err != nil {
				s.err, s.done = fmt.Errorf("lbb: a bad command event: %w", err), true
				return false
			}
			s.command = &cmd
		case "exit":
			var cmd Command
			if err := json.Unmarshal([]byte(data), &cmd); err != nil {
				s.err = fmt.Errorf("lbb: a bad exit event: %w", err)
			} else {
				s.exit = &cmd
				// Bytes missing at the end are lost too (unless the record's retention passed).
				for st, o := range map[string]Output{"stdout": cmd.Stdout, "stderr": cmd.Stderr} {
					if _, followed := s.next[st]; followed && !o.Expired {
						s.skipTo(st, o.Bytes)
					}
				}
			}
			s.done = true
			return false
		case "error":
			var b struct {
				Error Error `json:"error"`
			}
			if json.Unmarshal([]byte(data), &b) == nil && b.Error.Code != "" {
				s.err = &b.Error
			} else {
				s.err = errors.New("lbb: " + data)
			}
			s.done = true
			return false
		}
	}
	return false
}

// readEvent reads one event: its type, its data and its id.
func (s *OutputStream) readEvent() (event, data, id string, err error) {
	if s.rd == nil {
		return "", "", "", io.ErrUnexpectedEOF
	}
	var lines []string
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && event == "" && len(lines) == 0 {
				return "", "", "", io.EOF
			}
			return "", "", "", io.ErrUnexpectedEOF
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if event == "" && len(lines) == 0 {
				continue
			}
			return event, strings.Join(lines, "\n"), id, nil
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			event = value
		case "data":
			lines = append(lines, value)
		case "id":
			id = value
		}
	}
}

// skipTo counts the bytes of stream before off that did not come.
func (s *OutputStream) skipTo(stream string, off int64) {
	if n := off - s.next[stream]; n > 0 {
		s.lost += n
	}
}

// Chunk is the chunk Next read.
func (s *OutputStream) Chunk() OutputChunk { return s.chunk }

// Exit is the command's record once the stream ended with its exit; nil before, and when the
// stream did not follow a command that was still running.
func (s *OutputStream) Exit() *Command { return s.exit }

// Command is the record of the command a start-and-stream call started (Sandboxes.ExecStream),
// once the stream has said it (before the first chunk); nil for Commands.Output.
func (s *OutputStream) Command() *Command { return s.command }

// Lost is how many bytes of the streams followed did not come: not kept by the server (a
// reader of Commands.Output that joined late), or let go (a start-and-stream reader that
// stopped reading for minutes). A start-and-stream call that read to the exit and lost
// nothing has every byte the process wrote.
func (s *OutputStream) Lost() int64 { return s.lost }

// Err is what ended the stream, other than its end.
func (s *OutputStream) Err() error { return s.err }

// Close ends the stream.
func (s *OutputStream) Close() error {
	s.done = true
	if s.resp != nil {
		err := s.resp.Body.Close()
		s.resp = nil
		return err
	}
	return nil
}
