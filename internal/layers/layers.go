//go:build linux

// Package layers builds, stores and mounts the read-only image layers that templates carry
// their own packages in.
//
// A Recipe (Debian packages, Python packages, global npm packages, shell steps, files) is
// run as root in a build sandbox of a base image; what the sandbox wrote over the image (its
// overlay's upper layer: see runtime.LayerExporter) is sealed read-only under
//
//	<Dir>/<key>/layer/   the layer, content-addressed: key = Key(base image id, recipe)
//	<Dir>/<key>/log      the build's log
//	<Dir>/<key>/rootfs/  while used: a read-only overlay of layer over the base's rootfs
//	<Dir>/<key>/layer.ext4  once a microvm used it: the layer as a read-only disk
//
// Sandboxes of a template with a recipe get rootfs/ as their image, so every driver that
// takes an image directory (ns stacks its writable overlay on it; gvisor serves it through
// its gofer) sees base and layer without copying either; the microvm driver gets base and
// layer apart (Layer) and its guest stacks them. Identical recipes on one base share
// one layer and one build; GC removes the layers no template version names.
package layers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/hostdisk"
)

// Recipe is what a template version installs over its base, in this order: Debian
// packages, Python packages, global npm packages, files, then shell steps (as root).
type Recipe struct {
	Apt   []string `json:"apt,omitempty"`
	Pip   []string `json:"pip,omitempty"`
	Npm   []string `json:"npm,omitempty"`
	Run   []string `json:"run,omitempty"`
	Files []File   `json:"files,omitempty"`
}

// File is one file a recipe copies in: Path is absolute in the sandbox; Digest names its
// content (a File of the graph's sha256), so that the key changes when the content does.
type File struct {
	Path   string `json:"path"`
	Digest string `json:"digest"`
	Mode   uint32 `json:"mode,omitempty"`
	// Data is the content, given to Build; never part of the key nor of a record.
	Data []byte `json:"-"`
}

// Empty reports whether r installs nothing.
func (r Recipe) Empty() bool {
	return len(r.Apt) == 0 && len(r.Pip) == 0 && len(r.Npm) == 0 && len(r.Run) == 0 && len(r.Files) == 0
}

// Key is the content address of the layer r builds over base image baseID.
func Key(baseID string, r Recipe) string {
	b, _ := json.Marshal(struct {
		Base   string `json:"base"`
		Recipe Recipe `json:"recipe"`
	}{baseID, r})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])[:32]
}

var (
	packageName = regexp.MustCompile(`^[A-Za-z0-9@][A-Za-z0-9@._+:/=<>!~,\[\]-]{0,200}$`)
	keyPattern  = regexp.MustCompile(`^[0-9a-f]{32}$`)
)

// Check validates r: package names a package manager would take (no shell, no options),
// absolute file paths.
func (r Recipe) Check() error {
	for _, l := range []struct {
		name string
		pkgs []string
	}{{"apt", r.Apt}, {"pip", r.Pip}, {"npm", r.Npm}} {
		for i, p := range l.pkgs {
			if !packageName.MatchString(p) {
				return errdefs.InvalidArgument("image.%s[%d] %q is not a package name", l.name, i, p)
			}
		}
	}
	for i, s := range r.Run {
		if strings.TrimSpace(s) == "" {
			return errdefs.InvalidArgument("image.run[%d] is empty", i)
		}
	}
	for i, f := range r.Files {
		if !filepath.IsAbs(f.Path) || filepath.Clean(f.Path) != f.Path || f.Path == "/" {
			return errdefs.InvalidArgument("image.files[%d].path %q: want a clean absolute path", i, f.Path)
		}
	}
	return nil
}

// Sources are the package sources the operator lets builds use. Empty fields leave the
// base's own configuration (the Debian mirror of its sources.list, PyPI, the npm registry).
type Sources struct {
	// PipIndexURL is pip's --index-url; PipFindLinks its --find-links.
	PipIndexURL  string
	PipFindLinks string
	NpmRegistry  string
	// AptSources, when set, replaces /etc/apt/sources.list in the build sandbox (one
	// "deb …" line a source).
	AptSources []string
	// AptHosts are URLs whose hosts a build may reach for the base's own apt sources (the
	// mirror it was built from); they change nothing in the sandbox.
	AptHosts []string
}

// Step is one shell step of a build.
type Step struct {
	Name string `json:"name"`
	Cmd  string `json:"cmd"`
}

// Steps is what Build runs for r, in order (files are written before the first run step).
func (r Recipe) Steps(src Sources) []Step {
	var steps []Step
	q := func(ss []string) string {
		var b strings.Builder
		for i, s := range ss {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString("'" + strings.ReplaceAll(s, "'", `'\''`) + "'")
		}
		return b.String()
	}
	if len(r.Apt) > 0 {
		cmd := ""
		if len(src.AptSources) > 0 {
			cmd = "printf '%s\\n' " + q(src.AptSources) + " > /etc/apt/sources.list && rm -f /etc/apt/sources.list.d/* && "
		}
		// Root without capabilities cannot drop to _apt: fetch as root.
		cmd += "apt-get -o APT::Sandbox::User=root update && DEBIAN_FRONTEND=noninteractive apt-get -o APT::Sandbox::User=root install -y --no-install-recommends " +
			q(r.Apt) + " && apt-get clean && rm -rf /var/lib/apt/lists/*"
		steps = append(steps, Step{Name: "apt", Cmd: cmd})
	}
	if len(r.Pip) > 0 {
		cmd := "pip install --no-cache-dir --break-system-packages --disable-pip-version-check --root-user-action=ignore"
		if src.PipIndexURL != "" {
			cmd += " --index-url " + q([]string{src.PipIndexURL})
		}
		if src.PipFindLinks != "" {
			cmd += " --find-links " + q([]string{src.PipFindLinks})
		}
		// The operator named these sources: plain HTTP (a mirror on the local network) is
		// what they chose.
		for _, raw := range []string{src.PipIndexURL, src.PipFindLinks} {
			if u, err := url.Parse(raw); err == nil && u.Scheme == "http" && u.Hostname() != "" {
				cmd += " --trusted-host " + q([]string{u.Hostname()})
			}
		}
		steps = append(steps, Step{Name: "pip", Cmd: cmd + " " + q(r.Pip)})
	}
	if len(r.Npm) > 0 {
		cmd := "npm install -g --no-audit --no-fund"
		if src.NpmRegistry != "" {
			cmd += " --registry " + q([]string{src.NpmRegistry})
		}
		steps = append(steps, Step{Name: "npm", Cmd: cmd + " " + q(r.Npm)})
	}
	for i, s := range r.Run {
		steps = append(steps, Step{Name: fmt.Sprintf("run[%d]", i), Cmd: s})
	}
	return steps
}

// Freeze is the step that records what the layer resolved to.
const freezeCmd = `{ command -v dpkg-query >/dev/null && dpkg-query -W -f='apt ${Package}=${Version}\n'; ` +
	`command -v pip >/dev/null && pip freeze --disable-pip-version-check 2>/dev/null | sed 's/^/pip /'; ` +
	`command -v npm >/dev/null && npm ls -g --depth=0 --parseable --long 2>/dev/null | sed -n 's/.*:\(.*\)@\([^@]*\)$/npm \1=\2/p'; } || true`

// Store is a directory of layers.
type Store struct {
	Dir string

	mu     sync.Mutex
	builds map[string]*build // by key, while one runs
}

type build struct {
	done chan struct{}
	err  error
}

// Path is layer key's directory.
func (s *Store) Path(key string) string { return filepath.Join(s.Dir, key) }

// Info is what a built layer records.
type Info struct {
	Key      string            `json:"key"`
	Base     string            `json:"base"`
	Recipe   Recipe            `json:"recipe"`
	Resolved map[string]string `json:"resolved,omitempty"` // "apt ffmpeg" → version…
	Bytes    int64             `json:"bytes"`
	BuiltAt  time.Time         `json:"built_at"`
	BuildMs  int64             `json:"build_ms"`
}

// Get answers the record of built layer key; NotFound when it is not built.
func (s *Store) Get(key string) (Info, error) {
	var in Info
	if !keyPattern.MatchString(key) {
		return in, errdefs.InvalidArgument("layer key %q", key)
	}
	b, err := os.ReadFile(filepath.Join(s.Path(key), "info.json"))
	if errors.Is(err, os.ErrNotExist) {
		return in, errdefs.Wrap(errdefs.ClassNotFound, "", fmt.Errorf("layer %s is not built", key))
	}
	if err != nil {
		return in, err
	}
	return in, json.Unmarshal(b, &in)
}

// Log answers the log of layer key's last build.
func (s *Store) Log(key string) ([]byte, error) {
	if !keyPattern.MatchString(key) {
		return nil, errdefs.InvalidArgument("layer key %q", key)
	}
	return os.ReadFile(filepath.Join(s.Path(key), "log"))
}

// BuildOptions says how to build a layer.
type BuildOptions struct {
	// Driver runs the build sandbox; it must be a runtime.LayerExporter (ns).
	Driver runtime.Driver
	// Image is the base image's rootfs, BaseID its id.
	Image, BaseID string
	Recipe        Recipe
	Sources       Sources
	// SandboxID names the build sandbox ("sbx_…").
	SandboxID string
	Limits    runtime.Limits
	// Env is the build steps' extra environment (a proxy, for egress).
	Env map[string]string
	// Connect, when set, is called with the started build sandbox (to give it egress) and
	// answers what undoes that.
	Connect func(ctx context.Context, c *agent.Client) (func(), error)
	// StepTimeout bounds each step; 0 is 15 minutes.
	StepTimeout time.Duration
	// Log receives the build's output as it comes (besides the stored log).
	Log io.Writer
}

// StepError is a build that failed at one step.
type StepError struct {
	Step     string
	ExitCode int
	Err      error
}

func (e *StepError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("build step %s: %v", e.Step, e.Err)
	}
	return fmt.Sprintf("build step %s exited %d", e.Step, e.ExitCode)
}

// Build builds the layer of o.Recipe over o.Image unless it is built, and answers its record.
// Concurrent builds of one key share the first. A failed build leaves its log (Log) and no
// layer.
func (s *Store) Build(ctx context.Context, o BuildOptions) (Info, error) {
	if err := o.Recipe.Check(); err != nil {
		return Info{}, err
	}
	key := Key(o.BaseID, o.Recipe)
	for {
		if in, err := s.Get(key); err == nil {
			return in, nil
		} else if !errdefs.IsNotFound(err) {
			return Info{}, err
		}
		s.mu.Lock()
		if s.builds == nil {
			s.builds = map[string]*build{}
		}
		b, running := s.builds[key]
		if !running {
			b = &build{done: make(chan struct{})}
			s.builds[key] = b
		}
		s.mu.Unlock()
		if running {
			select {
			case <-b.done:
				if b.err != nil {
					return Info{}, b.err
				}
				continue
			case <-ctx.Done():
				return Info{}, ctx.Err()
			}
		}
		in, err := s.build(ctx, key, o)
		b.err = err
		s.mu.Lock()
		delete(s.builds, key)
		s.mu.Unlock()
		close(b.done)
		return in, err
	}
}

func (s *Store) build(ctx context.Context, key string, o BuildOptions) (info Info, err error) {
	exp, ok := o.Driver.(runtime.LayerExporter)
	if !ok {
		return info, errdefs.New(errdefs.ClassUnavailable, errdefs.CodeNotSupported, "driver %s cannot export a layer", o.Driver.Name())
	}
	dir := s.Path(key)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return info, err
	}
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return info, err
	}
	defer logf.Close()
	var w io.Writer = logf
	if o.Log != nil {
		w = io.MultiWriter(logf, o.Log)
	}
	t0 := time.Now()
	defer func() {
		if err != nil {
			fmt.Fprintf(w, "build failed: %v\n", err)
		}
	}()
	id := o.SandboxID
	if err := o.Driver.Create(ctx, runtime.Spec{ID: id, Image: o.Image, Limits: o.Limits, Hostname: "build", WritableRoot: true}); err != nil {
		return info, fmt.Errorf("create the build sandbox: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err = errors.Join(err, o.Driver.Destroy(uctx, id))
	}()
	sb, err := o.Driver.Start(ctx, id)
	if err != nil {
		return info, fmt.Errorf("start the build sandbox: %w", err)
	}
	resolved, err := s.runSteps(ctx, sb, o, w)
	if stopErr := o.Driver.Stop(context.WithoutCancel(ctx), id); err == nil && stopErr != nil {
		err = fmt.Errorf("stop the build sandbox: %w", stopErr)
	}
	if err != nil {
		return info, err
	}
	tmp := filepath.Join(dir, "layer.tmp")
	os.RemoveAll(tmp)
	if err := exp.ExportLayer(ctx, id, tmp); err != nil {
		return info, err
	}
	// The layer is the system the recipe made: not the workspace, nor caches and scratch.
	for _, p := range []string{"workspace", "tmp", "root/.cache", "root/.npm", ".lbb"} {
		if err := os.RemoveAll(filepath.Join(tmp, p)); err != nil {
			return info, err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return info, err
	}
	info = Info{Key: key, Base: o.BaseID, Recipe: o.Recipe, Resolved: resolved, BuiltAt: time.Now().UTC(),
		BuildMs: time.Since(t0).Milliseconds(), Bytes: duBytes(tmp)}
	if err := os.Rename(tmp, filepath.Join(dir, "layer")); err != nil {
		return info, err
	}
	b, _ := json.MarshalIndent(info, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "info.json.tmp"), b, 0o644); err != nil {
		return info, err
	}
	fmt.Fprintf(w, "layer %s sealed: %d bytes in %d ms\n", key, info.Bytes, info.BuildMs)
	return info, os.Rename(filepath.Join(dir, "info.json.tmp"), filepath.Join(dir, "info.json"))
}

func (s *Store) runSteps(ctx context.Context, sb runtime.Sandbox, o BuildOptions, w io.Writer) (map[string]string, error) {
	cl, err := agent.NewClient(sb.Conn())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if o.Connect != nil {
		undo, err := o.Connect(ctx, cl)
		if err != nil {
			return nil, fmt.Errorf("connect the build sandbox: %w", err)
		}
		defer undo()
	}
	timeout := o.StepTimeout
	if timeout == 0 {
		timeout = 15 * time.Minute
	}
	steps := o.Recipe.Steps(o.Sources)
	run := func(name, cmd string, out io.Writer) error {
		fmt.Fprintf(w, "==> %s: %s\n", name, cmd)
		p, err := cl.Exec(ctx, agent.ExecRequest{ID: "build-" + strings.NewReplacer("[", "", "]", "").Replace(name),
			Argv: []string{"/bin/sh", "-c", cmd}, Cwd: "/", Env: o.Env, TimeoutMs: timeout.Milliseconds()}, nil)
		if err != nil {
			return &StepError{Step: name, Err: err}
		}
		ex, err := p.Wait(out, w)
		if err != nil {
			return &StepError{Step: name, Err: err}
		}
		if ex.StartError != "" {
			return &StepError{Step: name, ExitCode: ex.ExitCode, Err: errors.New(ex.StartError)}
		}
		if ex.TimedOut {
			return &StepError{Step: name, ExitCode: ex.ExitCode, Err: fmt.Errorf("timed out after %s", timeout)}
		}
		if ex.ExitCode != 0 {
			return &StepError{Step: name, ExitCode: ex.ExitCode}
		}
		return nil
	}
	// Package steps first; then the files, so that run steps may use both.
	nPkg := 0
	for _, st := range steps {
		if st.Name == "apt" || st.Name == "pip" || st.Name == "npm" {
			nPkg++
		}
	}
	for _, st := range steps[:nPkg] {
		if err := run(st.Name, st.Cmd, w); err != nil {
			return nil, err
		}
	}
	// The agent writes files in the workspace only: stage them there, install them as root.
	for i, f := range o.Recipe.Files {
		name := fmt.Sprintf("files[%d]", i)
		fmt.Fprintf(w, "==> %s: %s (%d bytes)\n", name, f.Path, len(f.Data))
		stage := fmt.Sprintf(".lbb-build/file%d", i)
		if err := cl.Mkdir(ctx, ".lbb-build"); err != nil {
			return nil, &StepError{Step: name, Err: err}
		}
		if err := cl.WriteFile(ctx, stage, 0o600, bytes.NewReader(f.Data)); err != nil {
			return nil, &StepError{Step: name, Err: err}
		}
		mode := f.Mode & 0o7777
		if mode == 0 {
			mode = 0o644
		}
		cmd := fmt.Sprintf("install -D -m %o /workspace/%s '%s'", mode, stage, strings.ReplaceAll(f.Path, "'", `'\''`))
		if err := run(name, cmd, w); err != nil {
			return nil, err
		}
	}
	for _, st := range steps[nPkg:] {
		if err := run(st.Name, st.Cmd, w); err != nil {
			return nil, err
		}
	}
	var frozen bytes.Buffer
	if err := run("freeze", freezeCmd, &frozen); err != nil {
		return nil, err
	}
	return resolvedOf(frozen.String(), o.Recipe), nil
}

// resolvedOf keeps, of what the freeze step listed, the packages the recipe named.
func resolvedOf(frozen string, r Recipe) map[string]string {
	want := map[string]bool{}
	norm := func(s string) string {
		s = strings.ToLower(s)
		if i := strings.IndexAny(s, "=<>!~[ "); i > 0 {
			s = s[:i]
		}
		if i := strings.LastIndex(s, "@"); i > 0 {
			s = s[:i]
		}
		return strings.ReplaceAll(s, "_", "-")
	}
	for _, p := range r.Apt {
		want["apt "+norm(p)] = true
	}
	for _, p := range r.Pip {
		want["pip "+norm(p)] = true
	}
	for _, p := range r.Npm {
		want["npm "+norm(p)] = true
	}
	out := map[string]string{}
	for _, line := range strings.Split(frozen, "\n") {
		name, version, ok := strings.Cut(strings.TrimSpace(line), "=")
		version = strings.TrimPrefix(version, "=")
		manager, pkg, _ := strings.Cut(name, " ")
		if ok && want[manager+" "+norm(pkg)] {
			out[manager+" "+norm(pkg)] = version
		}
	}
	return out
}

func duBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// Rootfs answers the image directory of a sandbox of layer key over base rootfs image (whose
// id is baseID: a layer built on another base is refused): the read-only overlay of the layer
// on the image, mounted on first use.
func (s *Store) Rootfs(key, baseID, image string) (string, error) {
	in, err := s.Get(key)
	if err != nil {
		return "", err
	}
	if in.Base != baseID {
		return "", errdefs.Conflict("layer %s was built on image %s, not %s: save the template again to build it on this one", key, in.Base, baseID)
	}
	if strings.ContainsAny(image+s.Dir, ",:\n") {
		return "", errdefs.InvalidArgument("overlayfs cannot take ',' or ':' in a path")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	root := filepath.Join(s.Path(key), "rootfs")
	if mounted, _ := hostdisk.IsMounted(root); mounted {
		return root, nil
	}
	if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	// userxattr: the layer's opaque directories are marked as a sandbox's overlay marks them.
	opts := fmt.Sprintf("lowerdir=%s:%s,userxattr", filepath.Join(s.Path(key), "layer"), image)
	if err := unix.Mount("overlay", root, "overlay", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
		return "", fmt.Errorf("mount layer %s over %s: %w", key, image, err)
	}
	return root, nil
}

// Layer answers the directory of built layer key over base image baseID, for a driver that
// stacks it over the image itself (runtime.LayerStacker: the microvm driver makes a disk of
// it, <key>/layer.ext4, which goes with the layer).
func (s *Store) Layer(key, baseID string) (string, error) {
	in, err := s.Get(key)
	if err != nil {
		return "", err
	}
	if in.Base != baseID {
		return "", errdefs.Conflict("layer %s was built on image %s, not %s: save the template again to build it on this one", key, in.Base, baseID)
	}
	return filepath.Join(s.Path(key), "layer"), nil
}

// Unmount unmounts layer key's rootfs, if mounted. Sandboxes started on it must be gone.
func (s *Store) Unmount(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unmount(key)
}

func (s *Store) unmount(key string) error {
	root := filepath.Join(s.Path(key), "rootfs")
	if err := unix.Unmount(root, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", root, err)
	}
	return nil
}

// List answers the keys of the layers in the store, built or not.
func (s *Store) List() ([]string, error) {
	ents, err := os.ReadDir(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var keys []string
	for _, e := range ents {
		if e.IsDir() && keyPattern.MatchString(e.Name()) {
			keys = append(keys, e.Name())
		}
	}
	return keys, err
}

// GC removes every layer (and failed build) whose key inUse does not hold and that no
// build is making, and answers the keys removed.
func (s *Store) GC(inUse map[string]bool) ([]string, error) {
	keys, err := s.List()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var removed []string
	var errs []error
	for _, k := range keys {
		if inUse[k] || s.builds[k] != nil {
			continue
		}
		if err := s.unmount(k); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.RemoveAll(s.Path(k)); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, k)
	}
	return removed, errors.Join(errs...)
}

// Close unmounts every layer's rootfs.
func (s *Store) Close() error {
	keys, err := s.List()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		err = errors.Join(err, s.unmount(k))
	}
	return err
}

// Configured reports whether the operator named any source.
func (s Sources) Configured() bool {
	return s.PipIndexURL != "" || s.PipFindLinks != "" || s.NpmRegistry != "" || len(s.AptSources) > 0
}

// Hosts are the egress allowlist entries (host:port) of s's URLs.
func (s Sources) Hosts() []string {
	var urls []string
	urls = append(urls, s.PipIndexURL, s.PipFindLinks, s.NpmRegistry)
	urls = append(urls, s.AptHosts...)
	for _, line := range s.AptSources {
		for _, f := range strings.Fields(line) {
			if strings.Contains(f, "://") {
				urls = append(urls, f)
				break
			}
		}
	}
	var out []string
	for _, raw := range urls {
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			continue
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		if port == "" {
			continue
		}
		h := net.JoinHostPort(u.Hostname(), port)
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}
