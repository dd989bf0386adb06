package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
)

// previewURL signs a URL of a port of a sandbox (POST /v1/sandboxes/{id}/ports/{port}/url).
func (s *Server) previewURL(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("id")
	c.target, c.sandbox = id, id
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		return errdefs.InvalidArgument("port must be a number from 1 to 65535")
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var req control.PreviewRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := decode(body, &req); err != nil {
			return err
		}
	}
	p, err := s.svc.PreviewURL(r.Context(), c.caller, id, port, req)
	return answer(w, http.StatusOK, p, err)
}

type previewTarget struct{}

// hostOnlyCookie drops the Domain attribute of a Set-Cookie value.
func hostOnlyCookie(c string) string {
	parts := strings.Split(c, ";")
	out := parts[:1]
	for _, p := range parts[1:] {
		if k, _, _ := strings.Cut(strings.TrimSpace(p), "="); strings.EqualFold(k, "domain") {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ";")
}

// NewPreview is the handler of the preview listener: a request whose host name is a valid,
// unexpired signed token (<token>.<preview domain>) of a sandbox running here goes to the
// port the token names, through the sandbox's channel, WebSocket upgrades included; any
// other answers 404. The caller's Authorization is not passed on, and nothing is added.
func NewPreview(svc *control.Service, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr := &http.Transport{
		// The address is <sandbox ulid>:<port> (see Rewrite): the connection goes through
		// the channel, never the network.
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, p, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, err := strconv.Atoi(p)
			if err != nil {
				return nil, err
			}
			return svc.DialPreview(ctx, ids.Sandbox+host, port)
		},
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(previewTarget{}).([2]string)
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", t[0]+":"+t[1]
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del("Authorization")
			pr.SetXForwarded()
		},
		// A cookie a preview's server sets stays its own host's: a Domain attribute (the
		// preview domain itself, say) would share it with every other preview.
		ModifyResponse: func(resp *http.Response) error {
			if cs := resp.Header.Values("Set-Cookie"); len(cs) > 0 {
				resp.Header.Del("Set-Cookie")
				for _, c := range cs {
					resp.Header.Add("Set-Cookie", hostOnlyCookie(c))
				}
			}
			return nil
		},
		Transport:     tr,
		FlushInterval: -1, // server-sent events and streamed answers go out as they come
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t := r.Context().Value(previewTarget{}).([2]string)
			status, msg := http.StatusBadGateway, fmt.Sprintf("nothing answers on port %s in the sandbox", t[1])
			if errdefs.IsNotFound(err) || errdefs.IsConflict(err) {
				status, msg = http.StatusNotFound, "404 page not found"
			} else if !errors.Is(err, context.Canceled) {
				log.Debug("preview", "sandbox", ids.Sandbox+t[0], "port", t[1], "err", err)
			}
			http.Error(w, msg, status)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sandboxID, port, ok := svc.ResolvePreview(r.Host, r.Header.Get("Authorization"))
		if !ok {
			http.Error(w, "404 page not found", http.StatusNotFound)
			return
		}
		t := [2]string{strings.TrimPrefix(sandboxID, ids.Sandbox), strconv.Itoa(port)}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), previewTarget{}, t)))
	})
}

// listPreviews lists a sandbox's previews (GET /v1/sandboxes/{id}/previews).
func (s *Server) listPreviews(w http.ResponseWriter, r *http.Request, c *call) error {
	return writeList(w, r, func(p store.Page) ([]control.Preview, string, error) {
		return s.svc.ListPreviews(r.Context(), c.caller.Graph, r.PathValue("id"), p)
	})
}

// deletePreview revokes one (DELETE /v1/sandboxes/{id}/previews/{preview}).
func (s *Server) deletePreview(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("preview")
	c.target, c.sandbox = id, r.PathValue("id")
	if err := s.svc.DeletePreview(r.Context(), c.caller.Graph, r.PathValue("id"), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
