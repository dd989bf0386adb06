package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// filesArgs parses a files verb's flags, checks how many arguments it got and makes the client.
func filesArgs(fs *flag.FlagSet, cf *clientFlags, args []string, min, max int) ([]string, *lbb.Client, error) {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, nil, err
	}
	if len(pos) < min || len(pos) > max {
		return nil, nil, exitError{2, fmt.Sprintf("wrong number of arguments (%s --help says more)", fs.Name())}
	}
	c, err := cf.client()
	return pos, c, err
}

// filesCall serves a files verb without flags of its own that takes min to max arguments.
func filesCall(min, max int, call func(ctx context.Context, c *lbb.Client, cf *clientFlags, pos []string) error) func(context.Context, *flag.FlagSet, *clientFlags, []string) error {
	return func(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
		pos, c, err := filesArgs(fs, cf, args, min, max)
		if err != nil {
			return err
		}
		return call(ctx, c, cf, pos)
	}
}

// argOr is pos[i], or def when there are not that many arguments.
func argOr(pos []string, i int, def string) string {
	if i < len(pos) {
		return pos[i]
	}
	return def
}

func filesPut(ctx context.Context, c *lbb.Client, cf *clientFlags, pos []string) error {
	if len(pos) == 2 && pos[1] == "-" {
		return exitError{2, "files put SANDBOX - needs the PATH to write"}
	}
	dst := argOr(pos, 2, filepath.Base(pos[1]))
	var e *lbb.FileEntry
	err := upload(pos[1], "put "+dst, func(r io.Reader) (err error) {
		e, err = c.Files.Write(ctx, pos[0], dst, r)
		return err
	})
	return answer(cf, e, err, func(e *lbb.FileEntry) { fmt.Printf("%s\t%d bytes\n", e.Path, e.Size) })
}

func filesGet(ctx context.Context, c *lbb.Client, _ *clientFlags, pos []string) error {
	rc, err := c.Files.Read(ctx, pos[0], pos[1])
	return download(rc, err, argOr(pos, 2, "-"), "get "+path.Base(pos[1]))
}

func filesLs(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	recursive := fs.Bool("r", false, "list everything beneath the directory")
	pos, c, err := filesArgs(fs, cf, args, 1, 2)
	if err != nil {
		return err
	}
	es, err := c.Files.List(ctx, pos[0], argOr(pos, 1, "."), *recursive)
	if err != nil {
		return err
	}
	return printTable(cf, es, es, []string{"MODE", "SIZE", "MODIFIED", "TYPE", "PATH"}, func(e lbb.FileEntry) string {
		return fmt.Sprintf("%s\t%d\t%s\t%s\t%s", e.Mode, e.Size, when(&e.MTime), e.Type, e.Path)
	})
}

func filesRm(ctx context.Context, c *lbb.Client, _ *clientFlags, pos []string) error {
	return c.Files.Delete(ctx, pos[0], pos[1])
}

func filesMkdir(ctx context.Context, c *lbb.Client, _ *clientFlags, pos []string) error {
	_, err := c.Files.Mkdir(ctx, pos[0], pos[1])
	return err
}

func filesKeep(ctx context.Context, c *lbb.Client, cf *clientFlags, pos []string) error {
	f, err := c.GraphFiles.Keep(ctx, pos[0], pos[1])
	return answer(cf, f, err, printFile)
}

func filesUpload(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	name := fs.String("name", "", "the File's name (default the local file's)")
	pos, c, err := filesArgs(fs, cf, args, 1, 1)
	if err != nil {
		return err
	}
	n := *name
	if n == "" && pos[0] != "-" {
		n = filepath.Base(pos[0])
	}
	var f *lbb.File
	err = upload(pos[0], "upload "+n, func(r io.Reader) (err error) {
		f, err = c.GraphFiles.Upload(ctx, n, r)
		return err
	})
	return answer(cf, f, err, printFile)
}

func filesList(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	limit := fs.Int("limit", 20, "how many")
	_, c, err := filesArgs(fs, cf, args, 0, 0)
	if err != nil {
		return err
	}
	return printPage(ctx, cf, c.GraphFiles.List, lbb.ListParams{Limit: *limit}, []string{"FILE", "NAME", "SIZE", "SHA256", "ORIGIN", "CREATED"}, func(f lbb.File) string {
		return fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s", f.ID, orDash(f.Name), f.Size, f.SHA256[:12]+"…", origin(f.Origin), when(&f.CreatedAt))
	})
}

func filesDownload(ctx context.Context, c *lbb.Client, _ *clientFlags, pos []string) error {
	rc, err := c.GraphFiles.Content(ctx, pos[0])
	return download(rc, err, argOr(pos, 1, "-"), "download "+pos[0])
}

func filesImport(ctx context.Context, c *lbb.Client, cf *clientFlags, pos []string) error {
	e, err := c.GraphFiles.Import(ctx, pos[0], pos[1], pos[2])
	return answer(cf, e, err, func(e *lbb.FileEntry) { fmt.Printf("%s\t%d bytes\tsha256 %s\n", e.Path, e.Size, e.SHA256) })
}

func filesDelete(ctx context.Context, c *lbb.Client, cf *clientFlags, pos []string) error {
	f, err := c.GraphFiles.Delete(ctx, pos[0])
	return answer(cf, f, err, func(f *lbb.File) { fmt.Printf("deleted %s (%s, %d bytes)\n", f.ID, orDash(f.Name), f.Size) })
}

func origin(o lbb.FileOrigin) string {
	switch o.Kind {
	case "sandbox":
		return o.Sandbox + ":" + o.Path
	case "result":
		return "result of " + o.Command
	}
	return o.Kind
}

func printFile(f *lbb.File) {
	w := table("FIELD", "VALUE")
	fmt.Fprintf(w, "file\t%s\nname\t%s\nsize\t%d\nsha256\t%s\norigin\t%s\ncreated\t%s\n",
		f.ID, orDash(f.Name), f.Size, f.SHA256, origin(f.Origin), when(&f.CreatedAt))
	w.Flush()
}

// upload sends a local file (stdin for "-") through send, with progress on a terminal.
func upload(local, what string, send func(io.Reader) error) error {
	src, size, closeSrc, err := openLocal(local)
	if err != nil {
		return err
	}
	defer closeSrc()
	r := progress(src, size, what)
	err = send(r)
	doneProgress(r)
	return err
}

// download saves what a read answered (rc, err) to local, or to stdout for "-".
func download(rc io.ReadCloser, err error, local, what string) error {
	if err != nil {
		return err
	}
	defer rc.Close()
	return saveLocal(rc, local, what)
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
