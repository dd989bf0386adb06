//go:build linux

package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/api"
	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/codeint"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/layers"
	"github.com/littlebigbrain/lbb/internal/mcp"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/mux"
	"github.com/littlebigbrain/lbb/internal/store/postgres"
	"github.com/littlebigbrain/lbb/internal/store/sqlite"
	"github.com/littlebigbrain/lbb/internal/store/sqlstore"
)

func init() {
	commands["serve"] = command{summary: "Run the service (the API on --addr, default 127.0.0.1:7700)", run: runServe}
}

// runtimeFactory makes one isolation driver.
type runtimeFactory struct {
	// open makes the driver and checks what it needs of this host (runtime.CheckRequirements).
	open func(cfg config.Config, log *slog.Logger) (runtime.Driver, error)
	// image finds the base image, building it when missing; the default driver's is used.
	image func(ctx context.Context, cfg config.Config) (baseImage, error)
	// onlyDefault, when set, says why the driver is offered only as the default.
	onlyDefault string
}

// baseImage is the base image: what records name, and the root filesystem sandboxes run on.
type baseImage struct {
	hostagent.Image
	Rootfs string
}

func imageOf(m images.Manifest) baseImage {
	return baseImage{Image: hostagent.Image{ID: m.ID, Versions: m.Versions, Missing: m.Missing}, Rootfs: m.Rootfs}
}

// runtimes are the drivers lbb serve can run on; each registers itself in init.
var runtimes = map[string]runtimeFactory{}

func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: lbb serve [flags]\n\nEvery flag can also be set by the LBB_* variable of the same name (--data-dir: LBB_DATA_DIR).\n\n")
		fs.PrintDefaults()
	}
	cfg, err := config.Load(fs, args, os.Getenv)
	if err != nil {
		return err // flag.ErrHelp too: lbb exits 0 after the help
	}
	log := newLogger(cfg.LogLevel)
	return serve(ctx, cfg, log)
}

// newRegistry is the registry of /metrics, with the Go runtime's and the process's collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	if err := prepareDataDir(cfg.DataDir, log); err != nil {
		return err
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer unlock()

	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()

	bs, err := openBlobs(ctx, cfg)
	if err != nil {
		return err
	}
	// Listening comes first: sandboxes' API grants are forwarded to this address.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	if cfg.APIURL == "" {
		cfg.APIURL = "http://" + reachable(ln.Addr())
	}
	// With --hosts remote the listener serves hosts' registrations while the control plane
	// waits for its first host (front answers the API once it is up).
	front := &frontHandler{}
	srv := &http.Server{
		Handler:           front,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	if cfg.Hosts == "remote" {
		go func() { served <- srv.Serve(ln) }()
		defer srv.Close()
	}
	reg := newRegistry()
	hst, warm, image, iso, err := openHostAgent(ctx, cfg, log, reg, bs, st, front)
	if err != nil {
		return err
	}
	if c, ok := hst.(io.Closer); ok {
		defer c.Close() // a fleet stops watching its hosts
	}
	if l, ok := hst.(*hostagent.Local); ok {
		defer closeDriver(l.Driver(), log) // last: after the warm pool's slots and the runs
	}
	// The control plane's id: the holder of the records it makes, known again after a restart.
	planeID, err := control.PlaneID(cfg.DataDir)
	if err != nil {
		return err
	}
	st.SetHolder(planeID)
	svc := control.New(control.Options{
		Store: st, Host: hst, Blobs: bs, Image: control.Image(image.Image), Isolation: iso,
		Config: cfg, Log: log.With("control_plane", planeID), Registerer: reg,
		PlaneID: planeID, SharedStore: postgres.IsURL(cfg.Store),
	})
	rec, err := svc.Recover(ctx)
	if err != nil {
		return err
	}
	if len(rec.Lost)+len(rec.Sandboxes)+len(rec.Reaped)+len(rec.Stopped)+len(rec.Expired)+rec.Released > 0 {
		log.Warn("recovered after an unclean stop", "commands_lost", len(rec.Lost), "sandboxes_ended", len(rec.Sandboxes),
			"sandboxes_reaped", len(rec.Reaped), "sandboxes_stopped", len(rec.Stopped), "sandboxes_expired", len(rec.Expired),
			"keys_released", rec.Released)
	}
	if warm != nil {
		warm.Start()
		defer warm.Close()
	}
	if l, ok := hst.(*hostagent.Local); ok {
		defer l.CloseLayers() // unmounts the layers' rootfs (sandboxes on them are gone)
	}
	secret, err := svc.Bootstrap(ctx, cfg.DataDir)
	if err != nil {
		return err
	}
	if secret != "" {
		fmt.Printf("lbb: admin API key (shown once; saved to %s):\n\n    %s\n\n", filepath.Join(cfg.DataDir, control.AdminKeyFile), secret)
	}
	svc.StartJanitor()

	// /mcp serves the MCP tools over streamable HTTP, as a client of this same API with the
	// key of each request.
	mcpHandler := mcp.NewHTTPHandler("http://"+ln.Addr().String(), mcp.HTTPOptions{Log: log.With("part", "mcp")})
	routes := http.NewServeMux()
	routes.Handle("/mcp", mcpHandler)
	routes.Handle("/", api.New(api.Options{Service: svc, Log: log, Registry: reg}))
	front.set(routes)
	srv.RegisterOnShutdown(mcpHandler.Close)
	if cfg.Hosts != "remote" {
		go func() { served <- srv.Serve(ln) }()
	}
	if cfg.PprofAddr != "" {
		pmux := http.NewServeMux()
		pmux.HandleFunc("/debug/pprof/", pprof.Index)
		pmux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		pmux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		pmux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		pmux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		psrv := &http.Server{Addr: cfg.PprofAddr, Handler: pmux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := psrv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
				log.Warn("pprof is off", "err", err)
			}
		}()
		defer psrv.Close()
	}
	if cfg.PreviewAddr != "" {
		// Previews: their own listener and host names, so that every preview is its own web
		// origin and none shares one with the API. No read timeout: a WebSocket lives long.
		// A port taken (another server on this machine) turns previews off, not the server.
		pln, err := net.Listen("tcp", cfg.PreviewAddr)
		if err != nil {
			log.Warn("previews are off: cannot listen on --preview-addr", "err", err)
			fmt.Fprintf(os.Stderr, "lbb: previews are off: --preview-addr %s: %v\n", cfg.PreviewAddr, err)
			pln = nil
		}
		if pln != nil {
			defer pln.Close()
			_, port, _ := net.SplitHostPort(pln.Addr().String())
			svc.SetPreviewListener("http", port)
			psrv := &http.Server{Handler: api.NewPreview(svc, log.With("part", "preview")), ReadHeaderTimeout: 10 * time.Second,
				ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
			go psrv.Serve(pln)
			defer psrv.Close()
			fmt.Fprintf(os.Stderr, "lbb: previews on http://*.%s:%s\n", cfg.PreviewDomain, port)
		}
	}
	log.Info("serving", "addr", ln.Addr().String(), "runtime", cfg.Runtime, "isolation", iso.Available, "image", image.ID, "data_dir", cfg.DataDir)
	fmt.Fprintf(os.Stderr, "lbb: serving on http://%s (runtime %s, isolation %s, image %s)\n", ln.Addr(), cfg.Runtime,
		strings.Join(iso.Available, ", "), image.ID)

	select {
	case err := <-served:
		svc.Shutdown(context.Background())
		return err
	case <-svc.Fenced():
		// A peer recorded what runs here as lost: it ends now as a crash would, recording
		// nothing more (no drain), and a restart is a new life.
		srv.Close()
		return errors.New("a peer adopted this control plane's records while it ran (its heartbeats stalled past --peer-dead-after)")
	case <-ctx.Done():
	}
	log.Info("shutting down", "grace", cfg.ShutdownGrace.String())
	// The warm pool builds no more slots, and those it holds go, while runs drain: a build
	// left to run on would outlive the grace period, and the server with it.
	poolClosed := make(chan struct{})
	go func() {
		defer close(poolClosed)
		if warm != nil {
			warm.Close()
		}
	}()
	// Stop taking connections and requests at once; the handlers of runs still going wait for
	// them, which the service lets finish for the grace period and then ends.
	shutdownDone := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace+time.Minute)
		defer cancel()
		shutdownDone <- srv.Shutdown(sctx)
	}()
	dctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace+45*time.Second)
	defer cancel()
	if err := svc.Shutdown(dctx); err != nil {
		log.Error("ending runs", "err", err)
	}
	if err := <-shutdownDone; err != nil {
		log.Warn("closing connections", "err", err)
	}
	<-poolClosed
	log.Info("stopped")
	return nil
}

// openHost opens the drivers and the warm pool (unless --pool=false) and makes the host agent
// of this machine on them. The pool starts building only when started (after Recover, which
// destroys every driver sandbox that no record claims).
func openHost(ctx context.Context, cfg config.Config, log *slog.Logger, reg prometheus.Registerer, bs blobs.Store) (*hostagent.Local, *pool.Pool, baseImage, control.Isolation, error) {
	driver, image, iso, err := openRuntimes(ctx, cfg, log)
	if err != nil {
		return nil, nil, image, iso, err
	}
	var warm *pool.Pool
	if cfg.Pool {
		keys := poolKeys(cfg, image, driver)
		warm, err = pool.New(pool.Options{
			Driver: driver,
			Keys:   keys,
			Min:    cfg.PoolMin, Max: cfg.PoolMax, Refill: cfg.PoolRefill,
			NoFreeze:   !canFreeze(driver, keys),
			Zygote:     cfg.Zygote,
			NoFreezeOn: noFreezeOn,
			Registerer: reg, Log: log.With("part", "pool"),
		})
		if err != nil {
			return nil, nil, image, iso, err
		}
	}
	permit, err := egress.ParsePermit(cfg.EgressPermit)
	if err != nil {
		return nil, nil, image, iso, err
	}
	guard := egress.NewGuard(egress.Options{Permit: permit, Resolver: cfg.EgressResolver, Registerer: reg,
		Log: log.With("part", "egress")})
	hst := hostagent.NewLocal(hostagent.Options{
		Driver: driver, Pool: warm, Rootfs: image.Rootfs, Image: image.Image,
		Default: iso.Default, Offered: iso.Available, Unavailable: iso.Unavailable,
		Blobs: bs, DataDir: cfg.DataDir, Guard: guard, Log: log.With("part", "hostagent"),
	})
	// Template builds reach their package sources and nothing else.
	src := layers.Sources{PipIndexURL: cfg.BuildPipIndex, PipFindLinks: cfg.BuildPipFindLinks, NpmRegistry: cfg.BuildNpmRegistry,
		AptSources: cfg.BuildAptSources}
	if !src.Configured() && len(cfg.BuildAllow) == 0 {
		src = hostBuildSources(log)
	}
	allow := append(src.Hosts(), cfg.BuildAllow...)
	hst.WithLayers(hostagent.LayerOptions{Dir: filepath.Join(cfg.DataDir, "layers"), Sources: src, Allow: allow})
	return hst, warm, image, iso, nil
}

// reachable is a listening address as a client dials it: an unspecified host is loopback.
func reachable(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// openStore opens the record store --store names: SQLite in the data directory by default,
// or a PostgreSQL database.
func openStore(ctx context.Context, cfg config.Config) (*sqlstore.DB, error) {
	if postgres.IsURL(cfg.Store) {
		return postgres.Open(ctx, cfg.Store)
	}
	return sqlite.Open(ctx, filepath.Join(cfg.DataDir, "lbb.db"))
}

// openBlobs opens the blob store --blobs names: <data-dir>/blobs by default, or a bucket (its
// bytes staged in <data-dir>/blobs).
func openBlobs(ctx context.Context, cfg config.Config) (blobs.Store, error) {
	if blobs.IsS3URL(cfg.Blobs) {
		return blobs.NewS3(ctx, cfg.Blobs, blobs.S3Options{StageDir: filepath.Join(cfg.DataDir, "blobs")})
	}
	return blobs.NewLocal(filepath.Join(cfg.DataDir, "blobs"))
}

// prepareDataDir makes the data directory. Others may traverse it but not list it: the
// sandboxes' own user ids must reach their state under it. What is secret in it (the store,
// the admin key) is 0600.
func prepareDataDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if fi.Mode().Perm()&0o011 != 0o011 {
		mode := fi.Mode().Perm() | 0o011
		log.Info("letting sandboxes traverse the data directory", "dir", dir, "mode", fmt.Sprintf("%04o", mode))
		if err := os.Chmod(dir, mode); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
	}
	return nil
}

// lockDataDir makes sure one server at a time uses a data directory: a second one would
// take the first one's running commands for lost.
func lockDataDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lbb.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another lbb serve is using %s", dir)
	}
	return func() { f.Close() }, nil
}

// openRuntimes makes the default driver (--runtime; its failure is the server's) and every
// other registered driver this host can run, and routes between them. The ones it cannot
// run are logged and answered, with why, to calls that name them.
func openRuntimes(ctx context.Context, cfg config.Config, log *slog.Logger) (*mux.Driver, baseImage, control.Isolation, error) {
	names := make([]string, 0, len(runtimes))
	for n := range runtimes {
		names = append(names, n)
	}
	sort.Strings(names)
	iso := control.Isolation{Default: cfg.Runtime, Unavailable: map[string]string{}}
	factory, ok := runtimes[cfg.Runtime]
	if !ok {
		return nil, baseImage{}, iso, fmt.Errorf("--runtime %q: this lbb has %s", cfg.Runtime, strings.Join(names, ", "))
	}
	def, err := factory.open(cfg, log)
	if err != nil {
		return nil, baseImage{}, iso, err
	}
	image, err := factory.image(ctx, cfg)
	if err != nil {
		return nil, baseImage{}, iso, err
	}
	drivers := map[string]runtime.Driver{cfg.Runtime: def}
	for _, name := range names {
		f := runtimes[name]
		switch {
		case name == cfg.Runtime:
			continue
		case f.onlyDefault != "":
			iso.Unavailable[name] = f.onlyDefault
			continue
		case image.ID == "host":
			iso.Unavailable[name] = "no base image is built (run `lbb images build`)"
			continue
		}
		d, err := f.open(cfg, log.With("runtime", name))
		if err != nil {
			iso.Unavailable[name] = err.Error()
			continue
		}
		drivers[name] = d
	}
	m, err := mux.New(mux.Options{Default: cfg.Runtime, Drivers: drivers})
	if err != nil {
		return nil, baseImage{}, iso, err
	}
	iso.Available = m.Names()
	log.Info("isolation", "default", cfg.Runtime, "available", iso.Available)
	for name, why := range iso.Unavailable {
		log.Info("isolation unavailable", "runtime", name, "reason", why)
	}
	return m, image, iso, nil
}

// poolKeys are the warm pool's keys: the default keys on the default driver, and, when
// gvisor is offered beside another default, the same kinds on gvisor, --pool-gvisor-min deep,
// so that one-call gvisor runs can start warm too.
func poolKeys(cfg config.Config, image baseImage, m *mux.Driver) []pool.Key {
	var keys []pool.Key
	for _, k := range pool.DefaultKeys(image.Rootfs, defaultLimits(cfg)) {
		k.Runtime = cfg.Runtime
		keys = append(keys, k)
	}
	// Sandboxes of lbb/code-interpreter with their Python context's kernel running: at most
	// one kept without demand (a parked kernel holds ~100 MB), more as demand asks.
	argv, _ := codeint.Argv(agent.LangPython)
	keys = append(keys, pool.Key{Name: "code-interpreter", Image: image.Rootfs, Limits: defaultLimits(cfg), Runtime: cfg.Runtime,
		Min: min(cfg.PoolMin, 1), Kernel: &pool.Kernel{Name: agent.LangPython, Argv: argv, Ready: codeint.PythonReady}})
	if _, ok := m.Driver("gvisor"); ok && cfg.Runtime != "gvisor" && cfg.PoolGvisorMin > 0 {
		for _, k := range pool.DefaultKeys(image.Rootfs, defaultLimits(cfg)) {
			k.Name, k.Runtime = "gvisor/"+k.Name, "gvisor"
			k.Min, k.Max = cfg.PoolGvisorMin, max(cfg.PoolGvisorMin, min(cfg.PoolMax, 2))
			keys = append(keys, k)
		}
	}
	return keys
}

// noFreezeOn are the runtimes whose warm slots park running (those with a kernel aside: see
// pool.Options.NoFreezeOn): a gvisor thaw is a runsc process on the claim's path (15–100 ms
// under load, a fifth or more of a warm one-call run), while an idle Sentry with its agent
// and a waiting interpreter uses no measurable CPU.
var noFreezeOn = []string{"gvisor"}

// canFreeze says whether every driver the pool builds slots on can park them: the pool then
// freezes its slots, else it keeps them running.
func canFreeze(m *mux.Driver, keys []pool.Key) bool {
	for _, k := range keys {
		if slices.Contains(noFreezeOn, k.Runtime) {
			continue
		}
		d, ok := m.Driver(k.Runtime)
		if !ok {
			return false
		}
		if _, ok := d.(runtime.Freezer); !ok {
			return false
		}
	}
	return true
}

// buildImage finds the base image, building it (with progress on stderr) when missing.
func buildImage(ctx context.Context, cfg config.Config) (baseImage, error) {
	m, err := images.Build(ctx, images.Options{Dir: cfg.ImagesDir, Mirror: cfg.Mirror, Progress: os.Stderr})
	if err != nil {
		return baseImage{}, fmt.Errorf("base image: %w", err)
	}
	return imageOf(m), nil
}

// hostBuildSources are the package sources this machine is itself configured with, for template
// builds when the operator names none: the Debian mirror of its apt sources (the base image was
// built from it, and the base's apt still names it; LBB_DEBIAN_MIRROR wins), pip's index from
// PIP_INDEX_URL or /etc/pip.conf, npm's registry from npm_config_registry or /etc/npmrc. lbb
// names no registry of its own: a pip or npm step with no source here is refused by the
// egress guard, whose refusal names the host it wanted, and --build-pip-index or
// --build-npm-registry says where to go.
func hostBuildSources(log *slog.Logger) layers.Sources {
	var src layers.Sources
	mirror := os.Getenv(images.MirrorEnv)
	if mirror == "" {
		mirror, _ = images.HostMirror()
	}
	if mirror != "" {
		// The base keeps its own sources list; this line only lets its mirror's host through.
		src.AptHosts = []string{mirror}
	}
	src.PipIndexURL = cmp.Or(os.Getenv("PIP_INDEX_URL"), iniValue("/etc/pip.conf", "index-url"))
	src.NpmRegistry = cmp.Or(os.Getenv("npm_config_registry"), iniValue("/etc/npmrc", "registry"))
	log.Debug("template builds use the host's package sources", "apt", mirror, "pip", src.PipIndexURL, "npm", src.NpmRegistry)
	return src
}

// iniValue answers the value of key in an ini-style file ("key = value" or "key=value"), or "".
func iniValue(path, key string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// closeDriver closes a driver that holds something of its own (mux.Driver.Close: ns's spawn
// helper, zygotes and its emptied run directory) as lbb serve or lbb host ends.
func closeDriver(d runtime.Driver, log *slog.Logger) {
	if c, ok := d.(io.Closer); ok {
		if err := c.Close(); err != nil {
			log.Warn("closing the sandbox driver", "err", err)
		}
	}
}
