package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	commands["files"] = command{summary: "Workspace files and Files of the graph (files put|get|ls|rm|mkdir|keep|upload|list|download|import)", run: runFiles}
}

const filesUsage = `Usage:
  lbb files put SANDBOX LOCAL [PATH]     write a workspace file (LOCAL - is stdin; PATH defaults to LOCAL's name)
  lbb files get SANDBOX PATH [LOCAL]     read a workspace file (to stdout without LOCAL, or LOCAL -)
  lbb files ls SANDBOX [PATH] [-r]       list a workspace directory (-r: everything beneath it)
  lbb files rm SANDBOX PATH              remove a file or a directory with what it holds
  lbb files mkdir SANDBOX PATH           make a directory and its parents
Files of the graph (content-addressed; they outlive sandboxes):
  lbb files keep SANDBOX PATH            keep a workspace file as a File (its origin recorded)
  lbb files upload LOCAL [--name NAME]   upload a File
  lbb files list [--limit N]             the graph's Files
  lbb files download FILE_ID [LOCAL]     a File's bytes (to stdout without LOCAL)
  lbb files import SANDBOX PATH SHA256   copy a File into a workspace
Paths are relative to /workspace, or absolute inside it. Every subcommand takes --url,
--api-key, --graph and --json; transfers show progress on a terminal.
`

func runFiles(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, filesUsage)
		return nil
	}
	fs := flag.NewFlagSet("files "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, filesUsage) }
	var cf clientFlags
	cf.register(fs)
	recursive := fs.Bool("r", false, "ls: list everything beneath the directory")
	name := fs.String("name", "", "upload: the File's name (default the local file's)")
	limit := fs.Int("limit", 20, "list: how many")
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	nargs := func(min, max int) error {
		if len(pos) < min || len(pos) > max {
			fs.Usage()
			return exitError{2, fmt.Sprintf("files %s: wrong number of arguments", args[0])}
		}
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := cf.client()
	if err != nil {
		return err
	}
	switch args[0] {
	case "put":
		if err := nargs(2, 3); err != nil {
			return err
		}
		src, size, closeSrc, err := openLocal(pos[1])
		if err != nil {
			return err
		}
		defer closeSrc()
		dst := filepath.Base(pos[1])
		if len(pos) == 3 {
			dst = pos[2]
		} else if pos[1] == "-" {
			return exitError{2, "files put SANDBOX - needs the PATH to write"}
		}
		r := progress(src, size, "put "+dst)
		e, err := c.Files.Write(ctx, pos[0], dst, r)
		doneProgress(r)
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(e)
		}
		fmt.Printf("%s\t%d bytes\n", e.Path, e.Size)
		return nil
	case "get":
		if err := nargs(2, 3); err != nil {
			return err
		}
		rc, err := c.Files.Read(ctx, pos[0], pos[1])
		if err != nil {
			return err
		}
		defer rc.Close()
		local := "-"
		if len(pos) == 3 {
			local = pos[2]
		}
		return saveLocal(rc, local, "get "+path.Base(pos[1]))
	case "ls":
		if err := nargs(1, 2); err != nil {
			return err
		}
		p := "."
		if len(pos) == 2 {
			p = pos[1]
		}
		es, err := c.Files.List(ctx, pos[0], p, *recursive)
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(es)
		}
		w := table("MODE", "SIZE", "MODIFIED", "TYPE", "PATH")
		for _, e := range es {
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", e.Mode, e.Size, when(&e.MTime), e.Type, e.Path)
		}
		return w.Flush()
	case "rm":
		if err := nargs(2, 2); err != nil {
			return err
		}
		return c.Files.Delete(ctx, pos[0], pos[1])
	case "mkdir":
		if err := nargs(2, 2); err != nil {
			return err
		}
		_, err := c.Files.Mkdir(ctx, pos[0], pos[1])
		return err
	case "keep":
		if err := nargs(2, 2); err != nil {
			return err
		}
		f, err := c.GraphFiles.Keep(ctx, pos[0], pos[1])
		if err != nil {
			return err
		}
		return printFile(f, cf.json)
	case "upload":
		if err := nargs(1, 1); err != nil {
			return err
		}
		src, size, closeSrc, err := openLocal(pos[0])
		if err != nil {
			return err
		}
		defer closeSrc()
		n := *name
		if n == "" && pos[0] != "-" {
			n = filepath.Base(pos[0])
		}
		r := progress(src, size, "upload "+n)
		f, err := c.GraphFiles.Upload(ctx, n, r)
		doneProgress(r)
		if err != nil {
			return err
		}
		return printFile(f, cf.json)
	case "list":
		if err := nargs(0, 0); err != nil {
			return err
		}
		l, err := c.GraphFiles.List(ctx, lbb.ListParams{Limit: *limit})
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(l)
		}
		w := table("FILE", "NAME", "SIZE", "SHA256", "ORIGIN", "CREATED")
		for _, f := range l.Data {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", f.ID, orDash(f.Name), f.Size, f.SHA256[:12]+"…", origin(f.Origin), when(&f.CreatedAt))
		}
		return w.Flush()
	case "download":
		if err := nargs(1, 2); err != nil {
			return err
		}
		rc, err := c.GraphFiles.Content(ctx, pos[0])
		if err != nil {
			return err
		}
		defer rc.Close()
		local := "-"
		if len(pos) == 2 {
			local = pos[1]
		}
		return saveLocal(rc, local, "download "+pos[0])
	case "import":
		if err := nargs(3, 3); err != nil {
			return err
		}
		e, err := c.GraphFiles.Import(ctx, pos[0], pos[1], pos[2])
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(e)
		}
		fmt.Printf("%s\t%d bytes\tsha256 %s\n", e.Path, e.Size, e.SHA256)
		return nil
	}
	fs.Usage()
	return exitError{2, fmt.Sprintf("unknown subcommand %q", args[0])}
}

func origin(o lbb.FileOrigin) string {
	if o.Kind == "sandbox" {
		return o.Sandbox + ":" + o.Path
	}
	return o.Kind
}

func printFile(f *lbb.File, asJSON bool) error {
	if asJSON {
		return printJSON(f)
	}
	w := table("FIELD", "VALUE")
	fmt.Fprintf(w, "file\t%s\nname\t%s\nsize\t%d\nsha256\t%s\norigin\t%s\ncreated\t%s\n",
		f.ID, orDash(f.Name), f.Size, f.SHA256, origin(f.Origin), when(&f.CreatedAt))
	return w.Flush()
}

// openLocal opens a local file, or stdin for "-"; size is -1 when unknown. The file is an
// io.Seeker, so the SDK may send it again on a retry.
func openLocal(name string) (io.Reader, int64, func(), error) {
	if name == "-" {
		return os.Stdin, -1, func() {}, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, nil, err
	}
	return f, fi.Size(), func() { f.Close() }, nil
}

// saveLocal copies r to a local file (written beside it, then renamed) or to stdout.
func saveLocal(r io.Reader, local, what string) error {
	if local == "-" {
		_, err := io.Copy(os.Stdout, r)
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".lbb-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	pr := progress(r, -1, what)
	_, err = io.Copy(tmp, pr)
	doneProgress(pr)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), local)
}

// progressReader shows how far a transfer is on a terminal's stderr.
type progressReader struct {
	r     io.Reader
	what  string
	size  int64
	n     atomic.Int64
	stop  chan struct{}
	done  chan struct{}
	start time.Time
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progress wraps r; off a terminal it returns r itself.
func progress(r io.Reader, size int64, what string) io.Reader {
	if !isTerminal(os.Stderr) {
		return r
	}
	p := &progressReader{r: r, what: what, size: size, stop: make(chan struct{}), done: make(chan struct{}), start: time.Now()}
	go func() {
		defer close(p.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.show(false)
			case <-p.stop:
				p.show(true)
				return
			}
		}
	}()
	return p
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n.Add(int64(n))
	return n, err
}

// Seek lets the SDK resend a file on a retry.
func (p *progressReader) Seek(off int64, whence int) (int64, error) {
	s, ok := p.r.(io.Seeker)
	if !ok {
		return 0, fmt.Errorf("not seekable")
	}
	n, err := s.Seek(off, whence)
	if err == nil {
		p.n.Store(n)
	}
	return n, err
}

func (p *progressReader) show(final bool) {
	n := p.n.Load()
	mib := float64(n) / (1 << 20)
	rate := mib / max(time.Since(p.start).Seconds(), 1e-3)
	if p.size >= 0 {
		fmt.Fprintf(os.Stderr, "\r%s: %.1f / %.1f MiB (%.0f MiB/s)  ", p.what, mib, float64(p.size)/(1<<20), rate)
	} else {
		fmt.Fprintf(os.Stderr, "\r%s: %.1f MiB (%.0f MiB/s)  ", p.what, mib, rate)
	}
	if final {
		fmt.Fprintln(os.Stderr)
	}
}

func doneProgress(r io.Reader) {
	if p, ok := r.(*progressReader); ok {
		close(p.stop)
		<-p.done
	}
}
