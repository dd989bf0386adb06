//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/datafile"
	"github.com/littlebigbrain/lbb/internal/fleet"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/hostagent/remote"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

func init() {
	commands["host"] = command{summary: "Run this machine's host agent for an lbb serve --host-agent, or one that joins lbb serve --hosts remote (--control URL)", run: runHost}
}

// runHost runs the host agent on its own: the drivers, warm pool and image of lbb serve,
// served over HTTP/2 to a control plane elsewhere (docs/architecture.md).
func runHost(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("host", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:7702", "address to serve the host agent on (HTTP/2 in clear text on loopback only; any other address needs --tls-cert)")
	token := fs.String("token", "", "token a control plane must present (LBB_HOST_TOKEN); required. With --control: the host's token (lbb hosts add NAME), which also names it")
	control := fs.String("control", "", "URL of the control plane (lbb serve --hosts remote) to join: the host registers there, and again every few seconds (LBB_HOST_CONTROL)")
	advertise := fs.String("advertise", "", "with --control: the URL control planes call this host agent at (default: http(s)://<--listen>, an unspecified address as 127.0.0.1) (LBB_HOST_ADVERTISE)")
	var tlsFiles [2]string
	fs.StringVar(&tlsFiles[0], "tls-cert", "", "certificate file: serve HTTP/2 over TLS (https://) instead of in clear text (LBB_HOST_TLS_CERT)")
	fs.StringVar(&tlsFiles[1], "tls-key", "", "the key file of --tls-cert (LBB_HOST_TLS_KEY)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: lbb host --token TOKEN [flags]\n\nThe flags of lbb serve that set up sandboxes (--data-dir, --runtime, --pool, …) apply here too, with their LBB_* variables; --listen, --token, --tls-cert and --tls-key are LBB_HOST_LISTEN, LBB_HOST_TOKEN, ….\n\n")
		fs.PrintDefaults()
	}
	getenv := func(k string) string {
		for _, name := range []string{"listen", "token", "tls-cert", "tls-key", "control", "advertise"} {
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
	var join *joinOptions
	if *control != "" {
		id := fleet.HostOfToken(*token)
		if id == "" {
			return errors.New("--token: with --control, the host's token from lbb hosts add NAME (lbbh_NAME.…)")
		}
		u, err := url.Parse(*control)
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("--control %q: want http://host:port or https://host:port", *control)
		}
		join = &joinOptions{id: id, control: strings.TrimSuffix(*control, "/"), advertise: *advertise}
	} else if *advertise != "" {
		return errors.New("--advertise goes with --control")
	}
	return serveHost(ctx, cfg, *listen, *token, tlsFiles, join, log)
}

// joinOptions are lbb host --control's: the host's id (from its token), the control plane's
// URL and the URL to give it.
type joinOptions struct{ id, control, advertise string }

// serveHost serves the host agent until ctx ends; over TLS when tlsFiles (certificate, key)
// are set.
func serveHost(ctx context.Context, cfg config.Config, listen, token string, tlsFiles [2]string, join *joinOptions, log *slog.Logger) error {
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
	defer closeDriver(driver, log) // last: after the warm pool's slots and the calls
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
	if join != nil {
		if join.advertise == "" {
			join.advertise = scheme + "://" + reachable(ln.Addr())
		}
		go registerLoop(ctx, h, *join, token, log)
	}

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
func openHostAgent(ctx context.Context, cfg config.Config, log *slog.Logger, reg prometheus.Registerer, bs blobs.Store, st store.Store, front *frontHandler) (hostagent.Host, *pool.Pool, baseImage, control.Isolation, error) {
	if cfg.Hosts == "remote" {
		return openJoinedHosts(ctx, cfg, log, reg, st, front)
	}
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
		return poolOff{h}, h.Driver(), func() {}, nil
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

// poolOff is a host agent without a warm pool, which its Info says.
type poolOff struct{ hostagent.Host }

func (h poolOff) Info(ctx context.Context) (hostagent.Info, error) {
	info, err := h.Host.Info(ctx)
	info.Capacity.Pool = "off"
	return info, err
}

// poolAfterReap starts the warm pool once the control plane has reaped what an earlier life
// left (lbb serve starts its own after Recover): a slot made before would be reaped with it.
type poolAfterReap struct {
	hostagent.Host
	once    sync.Once
	start   func()
	started atomic.Bool
}

// Info says whether the warm pool is on yet.
func (h *poolAfterReap) Info(ctx context.Context) (hostagent.Info, error) {
	info, err := h.Host.Info(ctx)
	info.Capacity.Pool = "waiting"
	if h.started.Load() {
		info.Capacity.Pool = "on"
	}
	return info, err
}

func (h *poolAfterReap) Reap(ctx context.Context, keep []string) ([]string, error) {
	ids, err := h.Host.Reap(ctx, keep)
	if err == nil {
		h.once.Do(func() { h.start(); h.started.Store(true) })
	}
	return ids, err
}

// loopbackListen reports whether a listen address (host:port) serves loopback only: not an
// empty host or a wildcard, which serve every interface.
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && remote.Loopback(host)
}

// registerLoop registers the host with its control plane (POST /v1/hosts/register, the
// host's token as bearer) until ctx ends: at once, then as often as the control plane's
// answer asks, so that a control plane that restarted or forgot the host has it back within
// a heartbeat. A refusal is logged when it first happens and when it changes.
func registerLoop(ctx context.Context, h hostagent.Host, j joinOptions, token string, log *slog.Logger) {
	if u, _ := url.Parse(j.control); u.Scheme == "http" && !remote.Loopback(u.Hostname()) {
		log.Warn("joining a control plane in clear text off loopback: the host's token crosses the network readable; use https://", "control", j.control)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	every, last, joined := 2*time.Second, "", false
	for {
		next, err := register(ctx, client, h, j, token)
		switch {
		case err != nil && err.Error() != last:
			log.Error("registering with the control plane", "control", j.control, "host", j.id, "err", err)
			last, joined = err.Error(), false
		case err == nil && !joined:
			log.Info("registered with the control plane", "control", j.control, "host", j.id, "url", j.advertise)
			fmt.Fprintf(os.Stderr, "lbb: host %s joined %s as %s\n", j.id, j.control, j.advertise)
			last, joined = "", true
		}
		if err == nil && next > 0 {
			every = next
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// register makes one registration; it answers how soon to register again.
func register(ctx context.Context, client *http.Client, h hostagent.Host, j joinOptions, token string) (time.Duration, error) {
	info, err := h.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("this host agent's info: %w", err)
	}
	body, _ := json.Marshal(hostagent.Registration{ID: j.id, URL: j.advertise, Boot: info.Boot, Capacity: info.Capacity, Offered: info.Offered})
	req, err := http.NewRequestWithContext(ctx, "POST", j.control+"/v1/hosts/register", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string }
		}
		json.Unmarshal(b, &e)
		return 0, fmt.Errorf("%s: %s (%s)", resp.Status, e.Error.Message, e.Error.Code)
	}
	var a hostagent.Registered
	if err := json.Unmarshal(b, &a); err != nil {
		return 0, fmt.Errorf("the control plane's answer: %w", err)
	}
	return time.Duration(a.HeartbeatSeconds * float64(time.Second)), nil
}

// openJoinedHosts is lbb serve --hosts remote's host agent: a fleet that hosts join (lbb host
// --control), starting with those that joined before (the store's hosts). The API answers
// 503 until one is up, and takes registrations meanwhile (front).
func openJoinedHosts(ctx context.Context, cfg config.Config, log *slog.Logger, reg prometheus.Registerer, st store.Store, front *frontHandler) (hostagent.Host, *pool.Pool, baseImage, control.Isolation, error) {
	secret, err := hostSecret(cfg)
	if err != nil {
		return nil, nil, baseImage{}, control.Isolation{}, err
	}
	dial := func(id, raw string) (hostagent.Host, error) {
		if u, _ := url.Parse(raw); u.Scheme == "http" && !remote.Loopback(u.Hostname()) {
			log.Warn("host agent in clear text off loopback: its token and sandboxes' bytes cross the network readable; serve it with --tls-cert and advertise https://", "host", id, "url", raw)
		}
		return remote.NewClient(raw, fleet.HostToken(secret, id))
	}
	f, err := fleet.New(ctx, fleet.Options{Store: st, Dial: dial, Log: log.With("part", "fleet"),
		LostAfter: cfg.HostLostAfter, Registerer: reg})
	if err != nil {
		return nil, nil, baseImage{}, control.Isolation{}, err
	}
	front.setRegister(f.RegisterHandler())
	var info hostagent.Info
	for waited := false; ; waited = true {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		info, err = f.Info(ictx)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			f.Close()
			return nil, nil, baseImage{}, control.Isolation{}, ctx.Err()
		}
		if !waited {
			log.Info("waiting for a host to join (lbb hosts add NAME, then lbb host --control URL --token TOKEN on it)")
			fmt.Fprintf(os.Stderr, "lbb: waiting for a host to join (lbb hosts add NAME; lbb host --control URL --token TOKEN)\n")
		}
		time.Sleep(200 * time.Millisecond)
	}
	log.Info("hosts join", "hosts", len(f.Hosts()), "default", info.Default, "offered", info.Offered, "image", info.Image.ID)
	iso := control.Isolation{Default: info.Default, Available: info.Offered, Unavailable: info.Unavailable}
	return f, nil, baseImage{Image: info.Image}, iso, nil
}

// hostSecret is --host-secret, else the one in <data-dir>/host-secret, made when missing.
func hostSecret(cfg config.Config) (string, error) {
	if cfg.HostSecret != "" {
		return cfg.HostSecret, nil
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return "", err
	}
	return datafile.ReadOrCreate(filepath.Join(cfg.DataDir, "host-secret"), func() (string, error) {
		return rand.Text() + rand.Text(), nil
	})
}

// frontHandler serves the API once it is set (set), and before that (lbb serve --hosts
// remote waiting for its first host) only hosts' registrations, answering 503 to the rest.
type frontHandler struct {
	api, register atomic.Pointer[http.Handler]
}

func (f *frontHandler) set(h http.Handler)         { f.api.Store(&h) }
func (f *frontHandler) setRegister(h http.Handler) { f.register.Store(&h) }

func (f *frontHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := f.api.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	if h := f.register.Load(); h != nil && r.Method == "POST" && r.URL.Path == "/v1/hosts/register" {
		(*h).ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write([]byte(`{"error":{"code":"no_host","message":"the control plane is waiting for a host to join"}}` + "\n"))
}
