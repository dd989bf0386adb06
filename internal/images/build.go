package images

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
)

// Build makes the image of the current recipe in o.Dir and answers its manifest. When the
// image is already there it answers at once. Build needs root, debootstrap and npm.
//
// It builds into <dir>/.tmp-<id>-<random> and renames that into place only when every step
// has passed, under a lock on <dir>/.lock, so that two builds never both run debootstrap and
// a failed or interrupted build leaves nothing behind but can simply be run again.
func Build(ctx context.Context, o Options) (Manifest, error) {
	return build(ctx, o, DefaultRecipe())
}

func build(ctx context.Context, o Options, r Recipe) (Manifest, error) {
	dir, w := o.dir(), o.progress()
	id := r.ID()
	if m, err := readManifest(dir, id); err == nil {
		fmt.Fprintf(w, "image %s is cached at %s\n", id, m.Rootfs)
		mountReadOnly(m.Rootfs, w)
		return m, nil
	}

	if os.Geteuid() != 0 {
		return Manifest{}, errors.New("building the base image needs root (debootstrap, chroot and chown)")
	}
	tools := map[string]string{}
	for _, t := range []string{"debootstrap", "chroot", "npm"} {
		p, err := lookTool(t)
		if err != nil {
			return Manifest{}, fmt.Errorf("building the base image needs %s (make deps): %w", t, err)
		}
		tools[t] = p
	}
	mirror, err := o.mirror()
	if err != nil {
		return Manifest{}, err
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Manifest{}, err
	}
	unlock, err := lockDir(ctx, dir, w)
	if err != nil {
		return Manifest{}, err
	}
	defer unlock()
	// Another build may have finished while we waited for the lock.
	if m, err := readManifest(dir, id); err == nil {
		fmt.Fprintf(w, "image %s is cached at %s\n", id, m.Rootfs)
		mountReadOnly(m.Rootfs, w)
		return m, nil
	}
	// Holding the lock, nothing else builds: every .tmp-* is a crashed build's, and a
	// directory named like the image but without a manifest is a half-removed one.
	stale, _ := filepath.Glob(filepath.Join(dir, ".tmp-*"))
	for _, p := range append(stale, filepath.Join(dir, id)) {
		if err := removeTree(p); err != nil {
			return Manifest{}, fmt.Errorf("remove stale %s: %w", p, err)
		}
	}

	tmp := filepath.Join(dir, ".tmp-"+id+"-"+randHex(4))
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return Manifest{}, err
	}
	ok := false
	defer func() {
		if !ok {
			if err := removeTree(tmp); err != nil {
				fmt.Fprintf(w, "warning: could not remove %s: %v\n", tmp, err)
			}
		}
	}()

	b := &builder{ctx: ctx, w: w, r: r, tools: tools, mirror: mirror, tmp: tmp,
		rootfs: filepath.Join(tmp, "rootfs"), start: time.Now()}
	fmt.Fprintf(w, "building image %s (debian %s %s, node %s) into %s\n", id, r.Suite, r.Variant, r.Node.Version, dir)
	steps := []struct {
		name, note string
		fn         func() error
	}{
		{fmt.Sprintf("node %s from npm (%s)", r.Node.Version, r.Node.Package), "", b.fetchNode},
		{fmt.Sprintf("debootstrap %s %s", r.Variant, r.Suite), " (this takes about 1–2 min)", b.debootstrap},
		{"install node at /usr/local/bin/node", "", b.installNode},
		{fmt.Sprintf("npm %s from npm", r.Npm.Version), "", b.fetchNpmCLI},
		{"install npm at /usr/local/bin/npm", "", b.installNpmCLI},
		{"configure and trim", "", b.configure},
		{"read versions inside the image", "", b.readVersions},
		{fmt.Sprintf("shift ownership to %d.. and seal", r.IDBase), "", b.seal},
	}
	for i, s := range steps {
		if err := ctx.Err(); err != nil {
			return Manifest{}, fmt.Errorf("build image %s: interrupted: %w", id, err)
		}
		t0 := time.Now()
		fmt.Fprintf(w, "[%d/%d] %s%s…\n", i+1, len(steps), s.name, s.note)
		if err := s.fn(); err != nil {
			if ctx.Err() != nil {
				return Manifest{}, fmt.Errorf("build image %s: interrupted during %s: %w", id, s.name, ctx.Err())
			}
			return Manifest{}, fmt.Errorf("build image %s: %s: %w", id, s.name, err)
		}
		fmt.Fprintf(w, "      done in %s\n", time.Since(t0).Round(100*time.Millisecond))
	}

	final := filepath.Join(dir, id)
	if err := os.Rename(tmp, final); err != nil {
		return Manifest{}, err
	}
	ok = true
	m, err := readManifest(dir, id)
	if err != nil {
		return Manifest{}, err
	}
	fmt.Fprintf(w, "image %s built in %s: %s at %s\n", id, time.Since(b.start).Round(time.Second), humanBytes(m.SizeBytes), m.Rootfs)
	mountReadOnly(m.Rootfs, w)
	return m, nil
}

// mountReadOnly bind-mounts rootfs read-only over itself, so that nothing on the host, root
// included, writes the shared image by accident; overlay lower layers and removeTree work
// through it. A mount does not outlive a reboot, so every Build, cached or not, makes sure
// of it. Without the privilege to mount it says so and goes on: the files are still owned
// by the sandbox id range, which no host account uses.
func mountReadOnly(rootfs string, w io.Writer) {
	if os.Geteuid() != 0 {
		return
	}
	if real, err := filepath.EvalSymlinks(rootfs); err == nil {
		rootfs = real // mountinfo names resolved paths
	}
	if isReadOnlyMount(rootfs) {
		return
	}
	err := syscall.Mount(rootfs, rootfs, "", syscall.MS_BIND, "")
	if err == nil {
		err = syscall.Mount("", rootfs, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, "")
		if err != nil {
			_ = syscall.Unmount(rootfs, syscall.MNT_DETACH)
		}
	}
	if err != nil {
		fmt.Fprintf(w, "warning: could not mount %s read-only: %v\n", rootfs, err)
	}
}

// isReadOnlyMount tells whether path is a mount point mounted read-only.
func isReadOnlyMount(path string) bool {
	infos, err := mountinfo.GetMounts(func(mi *mountinfo.Info) (skip, stop bool) {
		return mi.Mountpoint != path, false
	})
	if err != nil || len(infos) == 0 {
		return false
	}
	// The last mount on a path is the one seen there.
	return slices.Contains(strings.Split(infos[len(infos)-1].Options, ","), "ro")
}

// builder carries one build's state from step to step.
type builder struct {
	ctx    context.Context
	w      io.Writer
	r      Recipe
	tools  map[string]string
	mirror string
	tmp    string
	rootfs string
	start  time.Time

	nodeTgz  string
	npmTgz   string
	versions map[string]string
	missing  []string
}

func (b *builder) fetchNode() (err error) {
	b.nodeTgz, err = b.fetchNpm(b.r.Node)
	return err
}

func (b *builder) fetchNpmCLI() (err error) {
	b.npmTgz, err = b.fetchNpm(b.r.Npm)
	return err
}

// fetchNpm packs one pinned npm package into the build's scratch directory and checks its
// tarball against the recipe's integrity string.
func (b *builder) fetchNpm(d NodeDist) (string, error) {
	dl := filepath.Join(b.tmp, "npm", d.Package)
	if err := os.MkdirAll(dl, 0o700); err != nil {
		return "", err
	}
	spec := d.Package + "@" + d.Version
	cmd := exec.CommandContext(b.ctx, b.tools["npm"], "pack", "--json", "--pack-destination", dl, spec)
	cmd.Dir = dl
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("npm pack %s: %w: %s", spec, err, tail(stderr.String(), 10))
	}
	var packed []struct{ Filename, Integrity, Version string }
	if err := json.Unmarshal(out, &packed); err != nil || len(packed) != 1 {
		return "", fmt.Errorf("npm pack %s: unexpected output %q", spec, tail(string(out), 5))
	}
	p := packed[0]
	if p.Version != d.Version {
		return "", fmt.Errorf("npm pack %s gave version %s", spec, p.Version)
	}
	tgz := filepath.Join(dl, filepath.Base(p.Filename))
	// npm checked the tarball against the registry; this checks it against the recipe.
	got, err := fileIntegrity(tgz)
	if err != nil {
		return "", err
	}
	if got != d.Integrity {
		return "", fmt.Errorf("%s: integrity %s, the recipe pins %s", filepath.Base(tgz), got, d.Integrity)
	}
	fmt.Fprintf(b.w, "      %s, %s verified\n", filepath.Base(tgz), got[:20]+"…")
	return tgz, nil
}

func fileIntegrity(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha512.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha512-" + base64.StdEncoding.EncodeToString(h.Sum(nil)), nil
}

func (b *builder) debootstrap() error {
	args := []string{
		"--variant=" + b.r.Variant,
		"--arch=" + b.r.Arch,
		"--components=main",
		"--include=" + strings.Join(b.r.Packages, ","),
		b.r.Suite, b.rootfs, b.mirror,
	}
	fmt.Fprintf(b.w, "      mirror %s\n", b.mirror)
	cmd := exec.CommandContext(b.ctx, b.tools["debootstrap"], args...)
	cmd.Env = toolEnv()
	// debootstrap runs dpkg and maintainer scripts in the chroot: end them all on cancel.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return err
	}
	lines := make(chan []string, 1)
	go func() { lines <- relayDebootstrap(pr, b.w) }()
	err := cmd.Wait()
	pw.Close()
	last := <-lines
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(b.rootfs, "debootstrap", "debootstrap.log"))
		return fmt.Errorf("%w\n%s\n%s", err, strings.Join(last, "\n"), tail(string(log), 20))
	}
	return nil
}

// perPackage matches debootstrap's one-line-per-package messages ("I: Retrieving libc6 2.41-12").
var perPackage = regexp.MustCompile(`^I: (Retrieving|Validating|Extracting|Unpacking|Configuring) (\S+)( \S+)?$`)

// relayDebootstrap passes debootstrap's stage lines through and folds its hundreds of
// per-package lines into one count per stage. It answers the last lines, for errors.
func relayDebootstrap(r io.Reader, w io.Writer) []string {
	var last []string
	stage, n := "", 0
	t0, said := time.Now(), time.Now()
	flush := func() {
		if n > 0 {
			fmt.Fprintf(w, "      %s: %d packages (%s)\n", strings.ToLower(stage), n, time.Since(t0).Round(100*time.Millisecond))
		}
		stage, n = "", 0
		t0 = time.Now()
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		last = append(last, line)
		if len(last) > 30 {
			last = last[1:]
		}
		if m := perPackage.FindStringSubmatch(line); m != nil && !slices.Contains([]string{"InRelease", "Release", "Packages"}, m[2]) {
			if m[1] == "Validating" && stage == "Retrieving" {
				continue // each download is validated at once: one stage, counted once
			}
			if m[1] != stage {
				flush()
				stage = m[1]
				said = time.Now()
			}
			n++
			if time.Since(said) >= 10*time.Second {
				fmt.Fprintf(w, "      %s: %d packages so far\n", strings.ToLower(stage), n)
				said = time.Now()
			}
			continue
		}
		flush()
		if strings.TrimSpace(line) != "" {
			fmt.Fprintf(w, "      %s\n", line)
		}
	}
	flush()
	_, _ = io.Copy(io.Discard, r)
	return last
}

func (b *builder) installNode() error {
	f, err := os.Open(b.nodeTgz)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	want := map[string]struct {
		dest string
		mode fs.FileMode
	}{
		"package/bin/node": {"usr/local/bin/node", 0o755},
		"package/LICENSE":  {"usr/local/share/doc/node/LICENSE", 0o644},
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		t, ok := want[h.Name]
		if !ok || h.Typeflag != tar.TypeReg {
			continue
		}
		dest := filepath.Join(b.rootfs, t.dest)
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return err
		}
		if err := writeFile(dest, tr, t.mode); err != nil {
			return err
		}
		delete(want, h.Name)
	}
	if _, ok := want["package/bin/node"]; ok {
		return fmt.Errorf("%s has no package/bin/node", filepath.Base(b.nodeTgz))
	}
	return os.RemoveAll(filepath.Dir(b.nodeTgz))
}

// installNpmCLI unpacks npm's package (its dependencies are bundled in it) as the global
// module /usr/local/lib/node_modules/npm, with npm and npx on the PATH, as Node's own
// distribution lays it out.
func (b *builder) installNpmCLI() error {
	f, err := os.Open(b.npmTgz)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	const dest = "usr/local/lib/node_modules/npm"
	root := filepath.Join(b.rootfs, dest)
	tr := tar.NewReader(gz)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		rel, ok := strings.CutPrefix(h.Name, "package/")
		if !ok || !filepath.IsLocal(rel) {
			return fmt.Errorf("%s: entry %q is outside package/", filepath.Base(b.npmTgz), h.Name)
		}
		p := filepath.Join(root, rel)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			mode := fs.FileMode(0o644)
			if h.Mode&0o111 != 0 {
				mode = 0o755
			}
			if err := writeFile(p, tr, mode); err != nil {
				return err
			}
			n++
		default:
			return fmt.Errorf("%s: entry %q is neither a file nor a directory", filepath.Base(b.npmTgz), h.Name)
		}
	}
	for name, target := range map[string]string{"npm": "npm-cli.js", "npx": "npx-cli.js"} {
		cli := filepath.Join(root, "bin", target)
		if err := os.Chmod(cli, 0o755); err != nil {
			return fmt.Errorf("%s has no bin/%s: %w", filepath.Base(b.npmTgz), target, err)
		}
		link := filepath.Join(b.rootfs, "usr/local/bin", name)
		_ = os.Remove(link)
		if err := os.Symlink("../lib/node_modules/npm/bin/"+target, link); err != nil {
			return err
		}
	}
	fmt.Fprintf(b.w, "      %d files\n", n)
	return os.RemoveAll(filepath.Dir(b.npmTgz))
}

func writeFile(path string, r io.Reader, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chmod(path, mode) // past the umask
}

// configure trims what a sandbox never reads and writes the files the runtime relies on.
func (b *builder) configure() error {
	if out, err := b.chroot("apt-get", "clean"); err != nil {
		return fmt.Errorf("apt-get clean: %w: %s", err, out)
	}
	// Trimming: package lists and caches, documentation (but each package's copyright), man
	// and info pages, translations, logs of the build. The globs are relative to the rootfs.
	for _, g := range []string{
		"var/lib/apt/lists/*", "var/cache/apt/*", "var/cache/debconf/*-old", "var/lib/dpkg/*-old",
		"usr/share/man/*", "usr/share/info/*", "usr/share/lintian/*", "var/log/*",
	} {
		if err := b.removeGlob(g); err != nil {
			return err
		}
	}
	if err := b.trimKeeping("usr/share/doc", func(rel string) bool { return filepath.Base(rel) == "copyright" }); err != nil {
		return err
	}
	if err := b.trimKeeping("usr/share/locale", func(rel string) bool { return rel == "locale.alias" }); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(b.rootfs, "var/lib/apt/lists/partial"), 0o755); err != nil {
		return err
	}
	// debootstrap makes device nodes (console, tty, null…) in /dev. They name host devices;
	// the runtime gives each sandbox a /dev of its own, so the image keeps only the directories.
	if err := b.trimKeeping("dev", func(string) bool { return false }); err != nil {
		return err
	}
	for _, d := range []string{"dev/pts", "dev/shm"} {
		if err := os.MkdirAll(filepath.Join(b.rootfs, d), 0o755); err != nil {
			return err
		}
	}

	files := []struct {
		path, content string
		mode          fs.FileMode
	}{
		{"etc/hostname", "sandbox\n", 0o644},
		// debootstrap copies the host's resolv.conf and hosts; nothing of the host may stay.
		{"etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsandbox\n", 0o644},
		{"etc/resolv.conf", "", 0o644},
		{"etc/machine-id", "", 0o444},
		// Sandboxes have no network; the build's mirror is the host's business.
		{"etc/apt/sources.list", "", 0o644},
		// The runtime bind-mounts the static guest agent over this file.
		{".lbb/agent", "", 0o755},
	}
	for _, d := range []string{"workspace", ".lbb"} {
		if err := os.MkdirAll(filepath.Join(b.rootfs, d), 0o755); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Join(b.rootfs, d), 0o755); err != nil {
			return err
		}
	}
	for _, f := range files {
		p := filepath.Join(b.rootfs, f.path)
		_ = os.Remove(p) // it may be a symlink; never write through one
		if err := writeFile(p, strings.NewReader(f.content), f.mode); err != nil {
			return err
		}
	}
	if err := b.headlessMatplotlib(); err != nil {
		return err
	}
	if err := b.matplotlibFontCache(); err != nil {
		return err
	}
	return b.addUser()
}

// headlessMatplotlib makes Agg the backend in Debian's system-wide /etc/matplotlibrc (the
// file its matplotlib reads after the user's), so that plotting never looks for a display.
// Debian ships the file with every setting commented out; a later line would win anyway.
func (b *builder) headlessMatplotlib() error {
	f, err := os.OpenFile(filepath.Join(b.rootfs, "etc/matplotlibrc"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString("\n# lbb: sandboxes are headless.\nbackend: Agg\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// matplotlibFontCache builds matplotlib's font list into /root/.cache/matplotlib (root's
// HOME in a sandbox), so that the first plot of every sandbox does not scan the fonts.
func (b *builder) matplotlibFontCache() error {
	cmd := exec.CommandContext(b.ctx, b.tools["chroot"], b.rootfs, "python3", "-c", "import matplotlib.font_manager")
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("matplotlib font cache: %w: %s", err, tail(string(out), 10))
	}
	caches, _ := filepath.Glob(filepath.Join(b.rootfs, "root/.cache/matplotlib/fontlist-*.json"))
	if len(caches) == 0 {
		return errors.New("matplotlib wrote no font cache under /root/.cache/matplotlib")
	}
	return nil
}

// addUser adds "sandbox" (uid and gid 1000, home /workspace), for a runtime that prefers not
// to run user code as the sandbox's root.
func (b *builder) addUser() error {
	lines := map[string]string{
		"etc/passwd":  "sandbox:x:1000:1000:sandbox:/workspace:/bin/bash\n",
		"etc/group":   "sandbox:x:1000:\n",
		"etc/shadow":  "sandbox:!:19000::::::\n",
		"etc/gshadow": "sandbox:!::\n",
	}
	for _, rel := range []string{"etc/passwd", "etc/group", "etc/shadow", "etc/gshadow"} {
		p := filepath.Join(b.rootfs, rel)
		old, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(old, []byte("\nsandbox:")) || bytes.HasPrefix(old, []byte("sandbox:")) {
			continue
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString(lines[rel])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) removeGlob(g string) error {
	ms, err := filepath.Glob(filepath.Join(b.rootfs, g))
	if err != nil {
		return err
	}
	for _, m := range ms {
		if err := os.RemoveAll(m); err != nil {
			return err
		}
	}
	return nil
}

// trimKeeping removes every file under rel that keep does not want, and the directories
// that end up empty. keep gets paths relative to rel.
func (b *builder) trimKeeping(rel string, keep func(string) bool) error {
	root := filepath.Join(b.rootfs, rel)
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		if d.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		r, _ := filepath.Rel(root, p)
		if keep(r) {
			return nil
		}
		return os.Remove(p)
	})
	if err != nil {
		return err
	}
	for _, d := range slices.Backward(dirs) {
		_ = os.Remove(d) // only empty ones go
	}
	return nil
}

// versionScript prints, as JSON, the versions of Python and the modules the product promises.
const versionScript = `
import importlib, json, platform
out = {"python": platform.python_version()}
for m in ("numpy", "pandas", "scipy", "matplotlib", "pyarrow", "ipykernel", "pip"):
    try:
        out[m] = importlib.import_module(m).__version__
    except ImportError:
        out[m] = None
import matplotlib
out["matplotlib_backend"] = matplotlib.get_backend()
print(json.dumps(out))
`

// optional are the modules the product pages name that Debian may not package; each one
// that does not import is listed in Manifest.Missing. Every other module must import.
var optional = []string{"pyarrow"}

func (b *builder) readVersions() error {
	out, err := b.chroot("python3", "-c", versionScript)
	if err != nil {
		return fmt.Errorf("python3 in the image: %w: %s", err, out)
	}
	var py map[string]*string
	if err := json.Unmarshal([]byte(lastLine(out)), &py); err != nil {
		return fmt.Errorf("python3 in the image printed %q: %w", out, err)
	}
	v := map[string]string{}
	for k, val := range py {
		switch {
		case val != nil:
			v[k] = *val
		case slices.Contains(optional, k):
			b.missing = append(b.missing, k)
		default:
			return fmt.Errorf("python module %s does not import in the image", k)
		}
	}
	if v["matplotlib_backend"] != "agg" && v["matplotlib_backend"] != "Agg" {
		return fmt.Errorf("matplotlib backend is %q, want Agg", v["matplotlib_backend"])
	}
	delete(v, "matplotlib_backend")

	for _, c := range []struct {
		name string
		argv []string
		re   string
	}{
		{"node", []string{"/usr/local/bin/node", "-e", "console.log(process.versions.node)"}, `^(\d+\.\d+\.\d+)$`},
		{"jq", []string{"jq", "--version"}, `^jq-(\S+)$`},
		{"bash", []string{"bash", "-c", "echo $BASH_VERSION"}, `^(\S+)$`},
		{"npm", []string{"/usr/local/bin/npm", "--version"}, `^(\d+\.\d+\.\d+)$`},
		{"git", []string{"dpkg-query", "-W", "-f", "${Version}\\n", "git"}, `^(\S+)$`}, // git --version wants a /dev/null
		{"curl", []string{"sh", "-c", "curl --version | head -n 1"}, `^curl (\S+) `},
	} {
		out, err := b.chroot(c.argv...)
		if err != nil {
			return fmt.Errorf("%s in the image: %w: %s", c.name, err, out)
		}
		m := regexp.MustCompile(c.re).FindStringSubmatch(lastLine(out))
		if m == nil {
			return fmt.Errorf("%s in the image printed %q", c.name, out)
		}
		v[c.name] = m[1]
	}
	if v["node"] != b.r.Node.Version {
		return fmt.Errorf("node in the image is %s, the recipe pins %s", v["node"], b.r.Node.Version)
	}
	if v["npm"] != b.r.Npm.Version {
		return fmt.Errorf("npm in the image is %s, the recipe pins %s", v["npm"], b.r.Npm.Version)
	}
	deb, err := os.ReadFile(filepath.Join(b.rootfs, "etc/debian_version"))
	if err != nil {
		return err
	}
	v["debian"] = strings.TrimSpace(string(deb))
	b.versions = v
	sort.Strings(b.missing)

	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range v {
			if !yield(k) {
				return
			}
		}
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+" "+v[k])
	}
	fmt.Fprintf(b.w, "      %s\n", strings.Join(parts, ", "))
	if len(b.missing) > 0 {
		fmt.Fprintf(b.w, "      missing: %s\n", strings.Join(b.missing, ", "))
	}
	// Anything the checks left in /tmp (matplotlib's scratch) is not part of the image.
	return b.removeGlob("tmp/*")
}

// seal shifts ownership to the sandbox id range, writes the manifest and takes the write
// bits off the image directory. The rootfs keeps its modes: sandboxes see them.
func (b *builder) seal() error {
	if err := ShiftIDs(b.rootfs, b.r.IDBase, b.r.IDCount); err != nil {
		return err
	}
	size, err := diskUsage(b.rootfs)
	if err != nil {
		return err
	}
	m := Manifest{
		ID:           b.r.ID(),
		Hash:         b.r.Hash(),
		Created:      time.Now().UTC().Truncate(time.Second),
		SizeBytes:    size,
		BuildSeconds: time.Since(b.start).Round(100 * time.Millisecond).Seconds(),
		Recipe:       b.r,
		Versions:     b.versions,
		Missing:      b.missing,
	}
	if m.Missing == nil {
		m.Missing = []string{}
	}
	if err := writeManifest(filepath.Join(b.tmp, manifestName), m); err != nil {
		return err
	}
	fmt.Fprintf(b.w, "      %s\n", humanBytes(size))
	return os.Chmod(b.tmp, 0o555)
}

// chroot runs argv inside the rootfs with a clean environment and answers its output.
func (b *builder) chroot(argv ...string) (string, error) {
	cmd := exec.CommandContext(b.ctx, b.tools["chroot"], append([]string{b.rootfs}, argv...)...)
	cmd.Env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", "MPLCONFIGDIR=/tmp/mpl",
	}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// toolEnv is the environment of the build's tools: nothing of the caller's but the proxy.
func toolEnv() []string {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive",
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(strings.ToLower(k), "_proxy") {
			env = append(env, kv)
		}
	}
	return env
}

func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// lockDir takes an exclusive flock on <dir>/.lock, waiting (and saying so) while another
// build holds it. The lock goes with the process, so a crashed build never leaves it held.
func lockDir(ctx context.Context, dir string, w io.Writer) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if !said {
			fmt.Fprintf(w, "waiting for another image build in %s…\n", dir)
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// removeTree removes a build's directory, first detaching anything mounted below it
// (debootstrap mounts /proc and /sys in its target and a killed one leaves them there), so
// that the removal never reaches through a mount into the host.
func removeTree(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	mounts, err := mountsUnder(path)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("unmount %s: %w", m, err)
		}
	}
	if mounts, _ := mountsUnder(path); len(mounts) > 0 {
		return fmt.Errorf("still mounted under %s: %s", path, strings.Join(mounts, ", "))
	}
	return os.RemoveAll(path)
}

// mountsUnder answers the mount points at or below path, deepest first.
func mountsUnder(path string) ([]string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(abs))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(infos))
	for _, mi := range infos {
		out = append(out, mi.Mountpoint)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// diskUsage is the bytes of disk the tree holds (blocks, each hard-linked file once), as du.
func diskUsage(root string) (int64, error) {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			k := inode{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d KiB", n>>10)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[i+1:])
	}
	return s
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
