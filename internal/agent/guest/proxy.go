package guest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// The sandbox's egress proxies: an HTTP proxy (CONNECT, and requests in absolute form) and a
// SOCKS5 proxy. Neither resolves a name or dials anything: each connection goes to the host
// as a ConnRequest with the host name and port the client asked for, and the host's guard
// decides. A refusal reaches the client as its protocol says: the HTTP proxy answers the
// status of the refusal's code with the reason as the status text, in the
// Lbb-Egress-Refused header and as the body; SOCKS answers its reply code.

// handshakeTimeout bounds a client's request line and headers (HTTP) or greeting (SOCKS).
const handshakeTimeout = 30 * time.Second

// refusalError is a refused dial of the plain-HTTP proxy's transport.
type refusalError struct{ r *agent.Refusal }

func (e *refusalError) Error() string { return e.r.Code + ": " + e.r.Message }

// proxyServer is the HTTP proxy.
func (s *Server) proxyServer() *http.Server {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := splitHostPort(addr)
			if err != nil {
				return nil, err
			}
			take, ref := s.conns.open(agent.ConnProxy, host, port)
			if ref != nil {
				return nil, &refusalError{ref}
			}
			mine, theirs, err := connPair()
			if err != nil {
				take <- nil
				return nil, err
			}
			take <- theirs
			return mine, nil
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.Host = pr.In.Host
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var re *refusalError
			if !errors.As(err, &re) {
				re = &refusalError{&agent.Refusal{Code: agent.RefuseUnreachable, Message: err.Error()}}
			}
			status, text := refusalStatus(re.r)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Lbb-Egress-Refused", re.r.Code)
			w.WriteHeader(status)
			fmt.Fprintf(w, "lbb egress: %s\n", text)
		},
	}
	return &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodConnect {
				s.connectTunnel(w, r)
				return
			}
			if !r.URL.IsAbs() || r.URL.Host == "" || (r.URL.Scheme != "http" && r.URL.Scheme != "https") {
				http.Error(w, "lbb egress: this is the sandbox's proxy: send CONNECT, or http:// URLs in absolute form", http.StatusBadRequest)
				return
			}
			rp.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: handshakeTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
}

// connPair is two connected ends of a socketpair: the kernel buffers between them (a
// net.Pipe hands over every write synchronously, which halves the throughput), and each end
// half-closes.
func connPair() (net.Conn, net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "proxy")
		conns[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				unix.Close(fds[1])
			}
			return nil, nil, err
		}
	}
	return conns[0], conns[1], nil
}

func splitHostPort(hostport string) (string, int, error) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 || host == "" {
		return "", 0, fmt.Errorf("%q is no host:port", hostport)
	}
	return host, port, nil
}

// refusalStatus is the HTTP status of a refusal and its reason, fit for a status line.
func refusalStatus(r *agent.Refusal) (int, string) {
	status := http.StatusBadGateway
	switch r.Code {
	case agent.RefuseDenied, agent.RefuseQuota:
		status = http.StatusForbidden
	case agent.RefuseUnavailable:
		status = http.StatusServiceUnavailable
	}
	text := strings.Map(func(c rune) rune {
		if c < ' ' || c > '~' {
			return ' '
		}
		return c
	}, r.Message)
	if len(text) > 300 {
		text = text[:300]
	}
	return status, text
}

// connectTunnel serves CONNECT: once the host accepts, the client's connection is bridged
// to the destination as it is (TLS end to end).
func (s *Server) connectTunnel(w http.ResponseWriter, r *http.Request) {
	host, port, err := splitHostPort(r.Host)
	if err != nil {
		http.Error(w, "lbb egress: CONNECT wants host:port", http.StatusBadRequest)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	conn.SetDeadline(time.Time{})
	take, ref := s.conns.open(agent.ConnProxy, host, port)
	if ref != nil {
		status, text := refusalStatus(ref)
		body := "lbb egress: " + text + "\n"
		fmt.Fprintf(conn, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nLbb-Egress-Refused: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
			status, text, ref.Code, len(body), body)
		conn.Close()
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		conn.Close()
		take <- nil
		return
	}
	take <- &bufConn{Conn: conn, r: brw.Reader}
}

// SOCKS5 (RFC 1928), the part clients use: no authentication, CONNECT to an IPv4 or IPv6
// address or a name.
const (
	socksVersion = 5
	socksOK      = 0
	socksFailure = 1
	socksDenied  = 2
	socksHostUnr = 4
	socksRefused = 5
	socksCmdUnsp = 7
	socksAddrUns = 8
)

func socksReplyOf(r *agent.Refusal) byte {
	switch r.Code {
	case agent.RefuseDenied, agent.RefuseQuota:
		return socksDenied
	case agent.RefuseUnreachable:
		return socksHostUnr
	case agent.RefuseRefused:
		return socksRefused
	}
	return socksFailure
}

func (s *Server) serveSOCKS(c net.Conn) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	br := bufio.NewReader(c)
	reply := func(code byte) error {
		_, err := c.Write([]byte{socksVersion, code, 0, 1, 0, 0, 0, 0, 0, 0})
		return err
	}
	host, port, err := socksRequest(br, c)
	if err != nil {
		var code socksCode
		if errors.As(err, &code) {
			reply(byte(code))
		}
		c.Close()
		return
	}
	take, ref := s.conns.open(agent.ConnProxy, host, port)
	if ref != nil {
		reply(socksReplyOf(ref))
		c.Close()
		return
	}
	if reply(socksOK) != nil {
		c.Close()
		take <- nil
		return
	}
	c.SetDeadline(time.Time{})
	take <- &bufConn{Conn: c, r: br}
}

// socksCode is a handshake failure that has a reply.
type socksCode byte

func (c socksCode) Error() string { return "socks: reply " + strconv.Itoa(int(c)) }

// socksRequest reads the greeting (answering it) and the request, and answers the
// destination.
func socksRequest(br *bufio.Reader, w io.Writer) (string, int, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil || hdr[0] != socksVersion {
		return "", 0, errors.New("socks: not SOCKS5")
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return "", 0, err
	}
	if !strings.ContainsRune(string(methods), 0) {
		w.Write([]byte{socksVersion, 0xff})
		return "", 0, errors.New("socks: the client wants authentication")
	}
	if _, err := w.Write([]byte{socksVersion, 0}); err != nil {
		return "", 0, err
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil || req[0] != socksVersion {
		return "", 0, errors.New("socks: bad request")
	}
	if req[1] != 1 {
		return "", 0, socksCode(socksCmdUnsp)
	}
	var host string
	switch req[3] {
	case 1, 4:
		b := make([]byte, 4)
		if req[3] == 4 {
			b = make([]byte, 16)
		}
		if _, err := io.ReadFull(br, b); err != nil {
			return "", 0, err
		}
		host = net.IP(b).String()
	case 3:
		n, err := br.ReadByte()
		if err != nil {
			return "", 0, err
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return "", 0, err
		}
		host = string(b)
	default:
		return "", 0, socksCode(socksAddrUns)
	}
	var p [2]byte
	if _, err := io.ReadFull(br, p[:]); err != nil {
		return "", 0, err
	}
	port := int(binary.BigEndian.Uint16(p[:]))
	if port == 0 || host == "" {
		return "", 0, socksCode(socksAddrUns)
	}
	return host, port, nil
}
