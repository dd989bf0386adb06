//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/fleet"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/hostagent/remote"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

func init() {
	commands["host"] = command{summary: "Run this machine's host agent for an lbb serve --host-agent (on --listen, default 127.0.0.1:7702)", run: runHost}
}

// runHost runs the host agent on its own: the drivers, warm pool and image of lbb serve,
// served over HTTP/2 to a control plane elsewhere (docs/architecture.md).
func runHost(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("host", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:7702", "address to serve the host agent on (HTTP/2 in clear text on loopback only; any other address needs --tls-cert)")
	token := fs.String("token", "", "token a control plane must present (LBB_HOST_TOKEN); required")
	var tlsFiles [2]string
	fs.StringVar(&tlsFiles[0], "tls-cert", "", "certificate file: serve HTTP/2 over TLS (https://) instead of in clear text (LBB_HOST_TLS_CERT)")
	fs.StringVar(&tlsFiles[1], "tls-key", "", "the key file of --tls-cert (LBB_HOST_TLS_KEY)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: lbb host --token TOKEN [flags]\n\nThe flags of lbb serve that set up sandboxes (--data-dir, --runtime, --pool, …) apply here too, with their LBB_* variables; --listen, --token, --tls-cert and --tls-key are LBB_HOST_LISTEN, LBB_HOST_TOKEN, ….\n\n")
		fs.PrintDefaults()
	}
	getenv := func(k string) string {
		for _, name := range []string{"listen", "token", "tls-cert", "tls-key"} {
			if k == config.EnvName(name) {
				k = config.EnvName("host-" + name)
			}
		}
		return os.Getenv(k)
	}
	cfg, err := config.Load(fs, args, getenv)
	if err != nil {
		return err // flag.ErrHelp too: lbb exits 0 after the help
	}
	if *token == "" {
		return errors.New("--token (or LBB_HOST_TOKEN) is required: whoever presents it runs code here")
	}
	if cfg.HostAgent != "" {
		return errors.New("--host-agent is for lbb serve; lbb host is the host agent")
	}
	if (tlsFiles[0] == "") != (tlsFiles[1] == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	// Whoever reads the token runs code here, and sandboxes' bytes cross the link.
	if tlsFiles[0] == "" && !loopbackListen(*listen) {
		return fmt.Errorf("--listen %s is not loopback: serve the host agent over TLS there (--tls-cert and --tls-key), or listen on 127.0.0.1 behind a tunnel of your own", *listen)
	}
	log := newLogger(cfg.LogLevel).With("part", "host")
	return serveHost(ctx, cfg, *listen, *token, tlsFiles, log)
}

// serveHost serves the host agent until ctx ends; over TLS when tlsFiles (certificate, key)
// are set.
func serveHost(ctx context.Context, cfg config.Config, listen, token string, tlsFiles [2]string, log *slog.Logger) error {
	if err := prepareDataDir(cfg.DataDir, log); err != nil {
		return err
	}
	// One host agent at a time on a data directory; an lbb serve may share it (its store and
	// blobs).
	lockDir := filepath.Join(cfg.DataDir, "hostagent")
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		return err
	}
	unlock, err := lockDataDir(lockDir)
	if err != nil {
		return err
	}
	defer unlock()

	// /metrics is the warm pool's and the process's, as lbb serve's is.
	reg := newRegistry()
	h, driver, cleanup, err := newHostAgent(ctx, cfg, log, reg)
	if err != nil {
		return err
	}
	defer cleanup()
	// A SIGKILLed or crashed earlier life left its sandboxes' mounts, cgroups and loop devices
	// (their processes died with it): they go now; their disks stay for the control plane's
	// Reap, or a resume. Not while an lbb serve holds the data directory: one without
	// --host-agent runs sandboxes of its own there (its Reap is then the one to clean up).
	if unlockServe, err := lockDataDir(cfg.DataDir); err == nil {
		unlockServe()
		stopSandboxes(driver, log)
	} else {
		log.Info("an lbb serve holds the data directory: what an earlier life left waits for the control plane's Reap", "data_dir", cfg.DataDir)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	routes := http.NewServeMux()
	// /metrics needs the token too, unless --metrics-public, as lbb serve's needs a key.
	var metrics http.Handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if !cfg.MetricsPublic {
		metrics = remote.Authorize(token, metrics)
	}
	routes.Handle("GET /metrics", metrics)
	// The event stream a control plane holds open would hold a stopping host for the whole
	// grace: it ends once the other calls have (busy).
	eventsCtx, endEvents := context.WithCancel(context.Background())
	defer endEvents()
	routes.Handle("/", remote.NewServer(eventsUntil{h, eventsCtx}, token, log))
	var busy atomic.Int64
	srv := remote.NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/Events" {
			busy.Add(1)
			defer busy.Add(-1)
		}
		routes.ServeHTTP(w, r)
	}), log)
	served := make(chan error, 1)
	scheme := "http"
	if tlsFiles[0] != "" {
		scheme = "https"
		go func() { served <- srv.ServeTLS(ln, tlsFiles[0], tlsFiles[1]) }()
	} else {
		go func() { served <- srv.Serve(ln) }()
	}
	log.Info("serving the host agent", "addr", ln.Addr().String(), "tls", scheme == "https", "runtime", cfg.Runtime, "data_dir", cfg.DataDir)
	fmt.Fprintf(os.Stderr, "lbb: host agent on %s://%s (runtime %s)\n", scheme, ln.Addr(), cfg.Runtime)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// The warm pool builds no more slots, and those it holds go, meanwhile (cleanup closes
	// it; the deferred call then does nothing).
	poolClosed := make(chan struct{})
	go func() {
		defer close(poolClosed)
		cleanup()
	}()
	defer func() { <-poolClosed }()
	// The control plane ends its runs before it goes; calls still open here (followers,
	// runs) get the grace, then end; the event stream ends once they have.
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(sctx) }()
	for busy.Load() > 0 && sctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	endEvents()
	if err := <-shut; err != nil {
		srv.Close()
	}
	<-poolClosed
	stopSandboxes(driver, log)
	log.Info("stopped")
	return nil
}

// stopSandboxes stops every sandbox the driver holds, as lbb serve stops its own when it
// stops: their processes end (frozen ones thawed first), their mounts, cgroups and loop
// devices go; their disks and checkpoints stay for a control plane to resume or reap. A
// stopped one costs a look.
func stopSandboxes(d runtime.Driver, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids, err := d.List(ctx)
	if err != nil {
		log.Warn("listing sandboxes to stop", "err", err)
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if f, ok := d.(runtime.Freezer); ok {
				f.Thaw(ctx, id)
			}
			if err := d.Stop(ctx, id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				log.Warn("stopping a sandbox", "sandbox", id, "err", err)
			}
		})
	}
	wg.Wait()
	if len(ids) > 0 {
		log.Info("sandboxes stopped", "sandboxes", len(ids))
	}
}

// openHostAgent is lbb serve's host agent: the one of --host-agent when set (the warm pool
// is then that one's), a fleet of them when it names several, else its own (openHost).
func openHostAgent(ctx context.Context, cfg config.Config, log *slog.Logger, reg prometheus.Registerer, bs blobs.Store, st store.Store) (hostagent.Host, *pool.Pool, baseImage, control.Isolation, error) {
	if cfg.HostAgent == "" {
		return openHost(ctx, cfg, log, reg, bs)
	}
	specs, err := cfg.HostAgents()
	if err != nil {
		return nil, nil, baseImage{}, control.Isolation{}, err
	}
	// remote.NewClient refuses a URL in clear text off loopback.
	var h hostagent.Host
	if len(specs) == 1 {
		c, err := remote.NewClient(specs[0].URL, specs[0].Token)
		if err != nil {
			return nil, nil, baseImage{}, control.Isolation{}, err
		}
		h = c
	} else {
		var members []fleet.Member
		for _, s := range specs {
			c, err := remote.NewClient(s.URL, s.Token)
			if err != nil {
				return nil, nil, baseImage{}, control.Isolation{}, err
			}
			members = append(members, fleet.Member{ID: s.Name, URL: s.URL, Host: c})
		}
		f, err := fleet.New(ctx, fleet.Options{Members: members, Store: st, Log: log.With("part", "fleet"),
			LostAfter: cfg.HostLostAfter, Registerer: reg})
		if err != nil {
			return nil, nil, baseImage{}, control.Isolation{}, err
		}
		h = f
	}
	// The control plane starts once a host answers (a fleet's first heartbeat has asked
	// every host already; one that answers later joins then).
	var info hostagent.Info
	deadline := time.Now().Add(30 * time.Second)
	for {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		info, err = h.Info(ictx)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		if c, ok := h.(io.Closer); ok {
			c.Close()
		}
		return nil, nil, baseImage{}, control.Isolation{}, fmt.Errorf("host agent %s: %w", cfg.HostAgent, err)
	}
	log.Info("host agent", "url", cfg.HostAgent, "hosts", len(specs), "default", info.Default, "offered", info.Offered, "image", info.Image.ID)
	iso := control.Isolation{Default: info.Default, Available: info.Offered, Unavailable: info.Unavailable}
	return h, nil, baseImage{Image: info.Image}, iso, nil
}

// newHostAgent opens this machine's drivers, warm pool and image as lbb serve does and makes
// its host agent; cleanup closes the warm pool.
func newHostAgent(ctx context.Context, cfg config.Config, log *slog.Logger, reg prometheus.Registerer) (hostagent.Host, runtime.Driver, func(), error) {
	bs, err := openBlobs(ctx, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	h, warm, _, _, err := openHost(ctx, cfg, log, reg, bs)
	if err != nil {
		return nil, nil, nil, err
	}
	if warm == nil {
		return h, h.Driver(), func() {}, nil
	}
	return &poolAfterReap{Host: h, start: warm.Start}, h.Driver(), func() { warm.Close() }, nil
}

// eventsUntil ends every event stream when end does, as well as when its caller's does.
type eventsUntil struct {
	hostagent.Host
	end context.Context
}

func (h eventsUntil) Events(ctx context.Context) (<-chan hostagent.Event, error) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(h.end, cancel)
	context.AfterFunc(ctx, func() { stop() })
	ch, err := h.Host.Events(ctx)
	if err != nil {
		cancel()
	}
	return ch, err
}

// poolAfterReap starts the warm pool once the control plane has reaped what an earlier life
// left (lbb serve starts its own after Recover): a slot made before would be reaped with it.
type poolAfterReap struct {
	hostagent.Host
	once  sync.Once
	start func()
}

func (h *poolAfterReap) Reap(ctx context.Context, keep []string) ([]string, error) {
	ids, err := h.Host.Reap(ctx, keep)
	if err == nil {
		h.once.Do(h.start)
	}
	return ids, err
}

// loopbackListen reports whether a listen address (host:port) serves loopback only: not an
// empty host or a wildcard, which serve every interface.
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && remote.Loopback(host)
}
