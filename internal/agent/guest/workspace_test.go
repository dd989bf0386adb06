package guest

import (
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// fixture is a workspace beside a directory outside it, with symlinks of every kind:
//
//	outside/secret
//	ws/file, ws/dir/inner, ws/dir/up -> .., ws/link-in -> dir/inner, ws/link-dir -> dir
//	ws/etc -> /etc, ws/secret -> outside/secret (absolute), ws/rel-out -> ../outside/secret
//	ws/loop -> loop, ws/loop-a -> loop-b, ws/loop-b -> loop-a, ws/abs-in -> <ws>/file
//	ws/dir/escape -> ../../outside, ws/proc -> /proc/self/root
type fixture struct {
	ws      *Workspace
	root    string
	outside string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(ws, "dir"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(ws, "file"):         "in",
		filepath.Join(ws, "dir", "inner"): "inner",
		filepath.Join(outside, "secret"):  "secret",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"dir/up":     "..",
		"link-in":    "dir/inner",
		"link-dir":   "dir",
		"etc":        "/etc",
		"secret":     filepath.Join(outside, "secret"),
		"rel-out":    "../outside/secret",
		"loop":       "loop",
		"loop-a":     "loop-b",
		"loop-b":     "loop-a",
		"abs-in":     filepath.Join(ws, "file"),
		"dir/escape": "../../outside",
		"proc":       "/proc/self/root",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := OpenWorkspace(ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return &fixture{ws: w, root: root, outside: outside}
}

func TestRel(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		in, want, code string
	}{
		{"", ".", ""},
		{".", ".", ""},
		{"a/b", "a/b", ""},
		{"a//b/./c/", "a/b/c", ""},
		{"a/../b", "b", ""},
		{"/workspace", ".", ""},
		{"/workspace/a/b", "a/b", ""},
		{"/workspace/../workspace/a", "a", ""},
		{f.ws.Path + "/a", "a", ""},
		{f.ws.Path, ".", ""},
		{"..", "", agent.CodePathOutside},
		{"../x", "", agent.CodePathOutside},
		{"a/../../x", "", agent.CodePathOutside},
		{"/etc/passwd", "", agent.CodePathOutside},
		{"/workspace/../etc", "", agent.CodePathOutside},
		{"/workspacex/a", "", agent.CodePathOutside},
		{"/", "", agent.CodePathOutside},
		{"a\x00b", "", agent.CodeInvalid},
	}
	for _, tt := range tests {
		got, err := f.ws.Rel(tt.in)
		if tt.code != "" {
			if !agent.IsCode(err, tt.code) {
				t.Errorf("Rel(%q) = %q, %v; want %s", tt.in, got, err, tt.code)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Rel(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestResolve(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		path    string
		content string // "" for an error
		code    string
	}{
		{"file", "in", ""},
		{"/workspace/file", "in", ""},
		{"dir/inner", "inner", ""},
		{"link-in", "inner", ""},        // a symlink inside pointing inside
		{"link-dir/inner", "inner", ""}, // through a symlinked directory
		{"dir/up/file", "in", ""},       // .. through a symlink, still inside
		{"dir/../file", "in", ""},
		{"../outside/secret", "", agent.CodePathOutside},
		{"/etc/passwd", "", agent.CodePathOutside},
		{"/workspace/../etc/passwd", "", agent.CodePathOutside},
		{"etc/passwd", "", agent.CodePathOutside}, // symlink to /etc
		{"secret", "", agent.CodePathOutside},     // symlink (last component) to a file outside
		{"rel-out", "", agent.CodePathOutside},    // relative symlink climbing out
		{"dir/escape/secret", "", agent.CodePathOutside},
		{"dir/up/../outside/secret", "", agent.CodeNotFound}, // lexically dir/outside/secret
		{"abs-in", "", agent.CodePathOutside},                // absolute, even though it names a file inside
		{"proc", "", agent.CodePathOutside},
		{"loop", "", agent.CodeInvalid},
		{"loop-a/x", "", agent.CodeInvalid},
		{"missing", "", agent.CodeNotFound},
		{"file/x", "", agent.CodeNotDir},
	}
	for _, tt := range tests {
		fd, _, err := f.ws.Resolve(tt.path, unix.O_RDONLY)
		if tt.code != "" {
			if err == nil {
				unix.Close(fd)
			}
			if !agent.IsCode(err, tt.code) {
				t.Errorf("Resolve(%q): %v, want %s", tt.path, err, tt.code)
			}
			continue
		}
		if err != nil {
			t.Errorf("Resolve(%q): %v", tt.path, err)
			continue
		}
		b := make([]byte, 64)
		n, _ := unix.Read(fd, b)
		unix.Close(fd)
		if string(b[:n]) != tt.content {
			t.Errorf("Resolve(%q) read %q, want %q", tt.path, b[:n], tt.content)
		}
	}
}

func TestMkdirAllNeverCreatesOutside(t *testing.T) {
	f := newFixture(t)
	for _, p := range []string{"etc/lbb-test", "dir/escape/new", "rel-out/x", "link-dir/escape/new", "secret/x"} {
		rel, err := f.ws.Rel(p)
		if err != nil {
			continue
		}
		if fd, err := f.ws.mkdirAll(rel); err == nil {
			unix.Close(fd)
			t.Errorf("mkdirAll(%q) succeeded", p)
		}
	}
	if _, err := os.Stat("/etc/lbb-test"); err == nil {
		t.Fatal("/etc/lbb-test was created")
	}
	entries, _ := os.ReadDir(f.outside)
	if len(entries) != 1 {
		t.Errorf("outside holds %v", entries)
	}
	// A dangling symlink is not created through.
	os.Symlink("nowhere", filepath.Join(f.ws.Path, "dangling"))
	if fd, err := f.ws.mkdirAll("dangling/x"); err == nil {
		unix.Close(fd)
		t.Error("mkdirAll through a dangling symlink succeeded")
	}
	if _, err := os.Lstat(filepath.Join(f.ws.Path, "nowhere")); err == nil {
		t.Error("the dangling symlink's target was created")
	}
	fd, err := f.ws.mkdirAll("a/b/c")
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if st, err := os.Stat(filepath.Join(f.ws.Path, "a/b/c")); err != nil || !st.IsDir() {
		t.Errorf("a/b/c: %v", err)
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]unix.Signal{"": unix.SIGKILL, "TERM": unix.SIGTERM, "sigint": unix.SIGINT, "SIGHUP": unix.SIGHUP, "9": unix.SIGKILL, "usr1": unix.SIGUSR1} {
		if got, err := ParseSignal(in); err != nil || got != want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"NOPE", "0", "99", "-1"} {
		if _, err := ParseSignal(in); err == nil {
			t.Errorf("ParseSignal(%q) accepted", in)
		}
	}
}

// FuzzResolve: whatever the path, Rel's answer is clean and cannot climb out, and a
// descriptor the workspace hands out is inside it as the kernel sees it (symlinks, absolute
// or relative, loops and magic links included: see the fixture).
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"file", "..", "../outside/secret", "/etc/passwd", "/workspace/../etc", "etc/passwd",
		"secret", "rel-out", "loop", "loop-a", "link-in", "link-dir/inner", "dir/up/file", "dir/escape/secret",
		"dir/up/../outside", "abs-in", "proc/etc", "/workspace/dir/../../outside", ".", "", "/workspace"} {
		f.Add(s)
	}
	fx := newFixture(f)
	realWS, err := filepath.EvalSymlinks(fx.ws.Path)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if rel, err := fx.ws.Rel(p); err == nil {
			// Lexically: clean, relative, no ".." left to climb out with.
			if rel != path.Clean(rel) || path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") || strings.IndexByte(rel, 0) >= 0 {
				t.Fatalf("Rel(%q) = %q", p, rel)
			}
		}
		fd, rel, err := fx.ws.Resolve(p, unix.O_PATH)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		if want, _ := fx.ws.Rel(p); rel != want {
			t.Fatalf("Resolve(%q) says %q, Rel %q", p, rel, want)
		}
		target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil {
			t.Fatal(err)
		}
		if target != realWS && !strings.HasPrefix(target, realWS+"/") {
			t.Fatalf("Resolve(%q) opened %q, outside %q", p, target, realWS)
		}
	})
}
