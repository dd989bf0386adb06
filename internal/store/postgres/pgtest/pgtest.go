// Package pgtest starts a throwaway PostgreSQL server for tests: initdb and pg_ctl (Debian's
// postgresql package, scripts/deps.sh) in a temporary directory, listening on a unix socket
// only, run as an unprivileged user (PostgreSQL refuses root; as root the server runs as
// nobody). A test without PostgreSQL on the host skips saying so (fails under
// LBB_REQUIRE_PRIVILEGED=1, as CI runs).
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"

	"github.com/littlebigbrain/lbb/internal/testkit"
)

// Server is a running PostgreSQL cluster of one test.
type Server struct {
	dir  string // socket directory, data directory's parent
	bin  string
	cred *syscall.Credential
	n    atomic.Int64
}

// Bin is the directory of PostgreSQL's server programs, or "" when they are missing.
func Bin() string {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		return filepath.Dir(p)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// The newest version: 9.6 < 15 < 16 by number, not by name.
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) < version(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i]
		}
	}
	return ""
}

func version(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// ErrMissing says PostgreSQL's programs are not on this host.
var ErrMissing = errors.New("PostgreSQL is not installed (no pg_ctl on PATH or in /usr/lib/postgresql/*/bin): run scripts/deps.sh")

// Start starts a server stopped (and removed) when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := New()
	if errors.Is(err, ErrMissing) {
		testkit.SkipPrivileged(t, "%v", err)
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// New starts a server in a new temporary directory; Stop stops it and removes the directory.
func New() (_ *Server, err error) {
	bin := Bin()
	if bin == "" {
		return nil, ErrMissing
	}
	// Not t.TempDir(): its parents are private to root, and the server may run as nobody.
	dir, err := os.MkdirTemp("", "lbb-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if os.Geteuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			return nil, fmt.Errorf("pgtest: PostgreSQL refuses root and there is no user nobody: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := s.run("initdb", "-D", data, "-U", "lbb", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions"); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	// Throwaway data: no fsync. No TCP: the socket in dir only.
	opts := fmt.Sprintf("-k %s -c listen_addresses= -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200", dir)
	if out, err := s.run("pg_ctl", "start", "-w", "-t", "60", "-D", data, "-l", filepath.Join(dir, "log"), "-o", opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		return nil, fmt.Errorf("pgtest: pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	return s, nil
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() error {
	out, err := s.run("pg_ctl", "stop", "-w", "-m", "immediate", "-D", filepath.Join(s.dir, "data"))
	if err != nil {
		err = fmt.Errorf("pgtest: pg_ctl stop: %w\n%s", err, out)
	}
	return errors.Join(err, os.RemoveAll(s.dir))
}

func (s *Server) run(prog string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(s.bin, prog), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd.CombinedOutput()
}

// DSN is the connection string of the server's database postgres, as its superuser.
func (s *Server) DSN() string {
	return fmt.Sprintf("host=%s port=5432 user=lbb dbname=postgres sslmode=disable", s.dir)
}

// NewSchema creates an empty schema and answers a connection string whose tables are in it:
// each store of a test starts empty, without the cost of a database.
func (s *Server) NewSchema(t testing.TB) string {
	t.Helper()
	dsn, err := s.Schema()
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// Schema is NewSchema outside a test.
func (s *Server) Schema() (string, error) {
	name := fmt.Sprintf("t%d", s.n.Add(1))
	db, err := sql.Open("pgx", s.DSN())
	if err != nil {
		return "", err
	}
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), "CREATE SCHEMA "+name); err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	return s.DSN() + " search_path=" + name, nil
}

// URL is the postgres:// form of dsn (lbb serve --store takes URLs).
func URL(dsn string) string {
	f := map[string]string{}
	for _, kv := range strings.Fields(dsn) {
		k, v, _ := strings.Cut(kv, "=")
		f[k] = v
	}
	q := url.Values{"host": {f["host"]}, "sslmode": {"disable"}}
	if sp := f["search_path"]; sp != "" {
		q.Set("search_path", sp)
	}
	return fmt.Sprintf("postgres://%s@/%s?%s", f["user"], f["dbname"], q.Encode())
}
