package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
)

// Listener is a Listen call in progress: the guest's listeners serve until Close (or the
// call's context ends).
type Listener struct {
	// Bound is what the guest serves.
	Bound Listening
	body  io.ReadCloser
	dec   *json.Decoder
}

// Listen opens the listeners of req in the sandbox and answers once they serve; Next then
// reads the connections they accept. Cancelling ctx, or Close, ends the call, which closes
// the listeners.
func (c *Client) Listen(ctx context.Context, req ListenRequest) (*Listener, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	r, err := c.newRequest(ctx, http.MethodPost, PathListen, nil, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	r.Header.Set("Content-Type", "application/json")
	resp, err := c.do(r)
	if err != nil {
		return nil, err
	}
	l := &Listener{body: resp.Body, dec: json.NewDecoder(bufio.NewReader(resp.Body))}
	if err := json.Unmarshal([]byte(resp.Header.Get(HeaderListening)), &l.Bound); err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("agent: listen: bad %s header: %w", HeaderListening, err)
	}
	return l, nil
}

// Next waits for the next connection a listener accepted. It fails once the call ended.
func (l *Listener) Next() (ConnRequest, error) {
	var cr ConnRequest
	if err := l.dec.Decode(&cr); err != nil {
		return cr, fmt.Errorf("agent: listen: %w", err)
	}
	return cr, nil
}

// Close ends the call: the guest closes the listeners and refuses what is pending.
func (l *Listener) Close() error { return l.body.Close() }

// Stream is a full-duplex byte stream to something inside the sandbox (an accepted
// connection): Write sends, Read receives, CloseWrite ends what is sent (the other end reads
// EOF) and Close ends both ways.
type Stream struct {
	pw   *io.PipeWriter
	body io.ReadCloser
	once sync.Once
	// left is what of the current FrameData is unread; ended says FrameEnd came.
	left  int
	ended bool
	hdr   [FrameHeaderLen]byte
}

// Read reads the connection's bytes out of their frames.
func (s *Stream) Read(p []byte) (int, error) {
	for s.left == 0 {
		if s.ended {
			return 0, io.EOF
		}
		if _, err := io.ReadFull(s.body, s.hdr[:]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		n := int(binary.BigEndian.Uint32(s.hdr[1:]))
		switch {
		case s.hdr[0] == FrameEnd && n == 0:
			s.ended = true
		case s.hdr[0] == FrameData && n <= MaxFrame:
			s.left = n
		default:
			return 0, fmt.Errorf("agent: stream: unexpected frame %q of %d bytes", s.hdr[0], n)
		}
	}
	n, err := s.body.Read(p[:min(len(p), s.left)])
	s.left -= n
	if err == io.EOF && s.left > 0 {
		err = io.ErrUnexpectedEOF
	} else if err == io.EOF {
		err = nil
	}
	return n, err
}

func (s *Stream) Write(p []byte) (int, error) { return s.pw.Write(p) }

// CloseWrite ends the stream's sending half.
func (s *Stream) CloseWrite() error { return s.pw.Close() }

// Close ends both halves; what is in flight is dropped.
func (s *Stream) Close() error {
	s.once.Do(func() {
		s.pw.CloseWithError(errors.New("agent: stream closed"))
		s.body.Close()
	})
	return nil
}

// AcceptConn answers a ConnRequest by opening its stream. The stream lasts while ctx does.
func (c *Client) AcceptConn(ctx context.Context, id string) (*Stream, error) {
	return c.openStream(ctx, PathConns+url.PathEscape(id)+"/accept")
}

// DialPort opens a connection to port on the sandbox's loopback (127.0.0.1, else ::1), as a
// stream: what a preview of the port carries. Nothing listening is CodePortRefused. The
// stream lasts while ctx does.
func (c *Client) DialPort(ctx context.Context, port int) (*Stream, error) {
	return c.openStream(ctx, PathPorts+strconv.Itoa(port)+"/connect")
}

// openStream opens a full-duplex stream: the request body carries what is sent, the answer
// what comes back, as frames.
func (c *Client) openStream(ctx context.Context, path string) (*Stream, error) {
	pr, pw := io.Pipe()
	r, err := c.newRequest(ctx, http.MethodPost, path, nil, pr)
	if err != nil {
		return nil, err
	}
	r.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.do(r)
	if err != nil {
		pw.CloseWithError(err)
		return nil, err
	}
	return &Stream{pw: pw, body: resp.Body}, nil
}

// RefuseConn answers a ConnRequest with a refusal, which its client is told.
func (c *Client) RefuseConn(ctx context.Context, id string, r Refusal) error {
	return c.call(ctx, http.MethodPost, PathConns+url.PathEscape(id)+"/refuse", nil, r, nil)
}
