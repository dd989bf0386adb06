package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// The in-sandbox API: code inside calls http://127.0.0.1:7700 (LBB_URL); each connection
// comes here as a stream, and each HTTP/1.1 request on it is sent on to the API with the
// sandbox's grant as its bearer key. Whatever credentials the request carried are dropped:
// the grant is the only one the API sees, so a sandbox's calls are the sandbox's (its
// derived key's scopes, graph and run cap), audited with it as the actor. The grant's secret
// is held here, on the host, and never written into the sandbox.

// hopHeaders are a connection's, not a request's; credentials the sandbox sends are never
// passed on.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Authorization", "Cookie"}

// forwardAPI serves the requests of one connection to the in-sandbox API until it ends.
func (g *Guard) forwardAPI(ctx context.Context, st io.ReadWriter, sb *Sandbox) {
	br := bufio.NewReader(st)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		sb.mu.Lock()
		gr := sb.grant
		sb.mu.Unlock()
		keep := g.forwardOne(ctx, st, req, gr)
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
		if !keep || req.Close {
			return
		}
	}
}

// forwardOne sends one request on and writes its answer; it answers whether the connection
// may serve another.
func (g *Guard) forwardOne(ctx context.Context, w io.Writer, req *http.Request, gr *Grant) bool {
	fail := func(status int, msg string) bool {
		body := msg + "\n"
		fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s",
			status, http.StatusText(status), len(body), body)
		return true
	}
	if gr == nil {
		return fail(http.StatusForbidden, "lbb: this sandbox has no API grant (or it ended)")
	}
	if req.Header.Get("Upgrade") != "" {
		return fail(http.StatusNotImplemented, "lbb: the in-sandbox API does not upgrade connections")
	}
	base, err := url.Parse(gr.URL)
	if err != nil {
		return fail(http.StatusBadGateway, "lbb: the API's URL is not valid")
	}
	if !strings.HasPrefix(req.URL.Path, "/") {
		return fail(http.StatusBadRequest, "lbb: send requests in origin form (GET /v1/…)")
	}
	u := *base
	u.Path = strings.TrimSuffix(base.Path, "/") + req.URL.Path
	u.RawPath, u.RawQuery = "", req.URL.RawQuery
	out, err := http.NewRequestWithContext(ctx, req.Method, u.String(), req.Body)
	if err != nil {
		return fail(http.StatusBadRequest, "lbb: "+err.Error())
	}
	for k, vs := range req.Header {
		out.Header[k] = vs
	}
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.ContentLength = req.ContentLength
	if req.ContentLength == 0 {
		out.Body = http.NoBody
	}
	out.Header.Set("Authorization", "Bearer "+gr.Token)
	g.apiReqs.Inc()
	resp, err := g.api.RoundTrip(out)
	if err != nil {
		return fail(http.StatusBadGateway, "lbb: the API did not answer: "+err.Error())
	}
	defer resp.Body.Close()
	// Without a length or chunks the body ends with the connection (Response.Write says so).
	last := resp.Close || resp.ContentLength < 0 && (len(resp.TransferEncoding) == 0 || resp.TransferEncoding[0] != "chunked")
	for _, h := range []string{"Connection", "Keep-Alive"} {
		resp.Header.Del(h)
	}
	return resp.Write(w) == nil && !last
}
