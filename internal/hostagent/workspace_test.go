package hostagent_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
)

// diskDriver is the local driver with a disk file per sandbox (runtime.DiskFiler), as ns,
// gvisor and microvm keep theirs: a sparse file in its state directory.
type diskDriver struct {
	*local.Driver
	state string
}

func (d *diskDriver) disk(id string) string { return filepath.Join(d.state, id, "disk.img") }

func (d *diskDriver) Create(ctx context.Context, spec runtime.Spec) error {
	if err := d.Driver.Create(ctx, spec); err != nil {
		return err
	}
	f, err := os.Create(d.disk(spec.ID))
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Truncate(64 << 20)
}

func (d *diskDriver) DiskFile(ctx context.Context, id string) (string, error) {
	if _, err := os.Stat(d.disk(id)); err != nil {
		return "", fmt.Errorf("%w: %v", runtime.ErrNotFound, err)
	}
	return d.disk(id), nil
}

// TestWorkspaceArchives: a sandbox's disk archived at one host's stop comes back on another
// host that has none; back on the first host, whose copy is older, the newer archive wins; a
// host whose copy is the archive's uses it without reading the archive; a restore that fails
// changes nothing.
func TestWorkspaceArchives(t *testing.T) {
	ctx := t.Context()
	bs, err := blobs.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	host := func() (*hostagent.Local, *diskDriver) {
		state := t.TempDir()
		d := &diskDriver{Driver: local.New(local.Options{AgentPath: agentBin, StateDir: state}), state: state}
		return hostagent.NewLocal(hostagent.Options{Driver: d, Rootfs: "/", DataDir: t.TempDir(), Blobs: bs}), d
	}
	a, da := host()
	b, db := host()
	id := ids.New(ids.Sandbox)
	limits := runtime.Limits{MemoryMiB: 256, CPUs: 1, Pids: 64, DiskMiB: 64}
	if _, err := a.Create(ctx, hostagent.CreateRequest{ID: id, Limits: limits}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Destroy(context.Background(), id); b.Destroy(context.Background(), id) })
	write := func(d *diskDriver, s string) {
		t.Helper()
		f, err := os.OpenFile(d.disk(id), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte(s), 40<<20); err != nil {
			t.Fatal(err)
		}
	}
	read := func(d *diskDriver) string {
		t.Helper()
		b, err := os.ReadFile(d.disk(id))
		if err != nil || len(b) != 64<<20 {
			t.Fatalf("the disk: %d bytes, %v", len(b), err)
		}
		return string(bytes.TrimRight(b[40<<20:40<<20+16], "\x00"))
	}
	stop := func(h *hostagent.Local) hostagent.Workspace {
		t.Helper()
		if _, err := h.Stop(ctx, id); err != nil {
			t.Fatal(err)
		}
		ws, err := h.ArchiveWorkspace(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return ws
	}
	resume := func(h *hostagent.Local, ws hostagent.Workspace) error {
		_, err := h.Resume(ctx, hostagent.ResumeRequest{ID: id, Limits: limits, Workspace: &ws})
		return err
	}

	write(da, "one")
	if _, err := a.ArchiveWorkspace(ctx, id); err == nil {
		t.Fatal("a running sandbox's disk was archived")
	}
	ws1 := stop(a)
	if ws1.DiskBytes != 64<<20 || ws1.Bytes > 64<<10 {
		t.Fatalf("the archive of a 64 MiB disk holding 3 bytes: %+v", ws1)
	}
	// Host b has no copy: it makes the sandbox and restores the disk.
	if err := resume(b, ws1); err != nil {
		t.Fatal(err)
	}
	if got := read(db); got != "one" {
		t.Fatalf("on host b: %q", got)
	}
	write(db, "two")
	ws2 := stop(b)
	// Host a's copy is ws1's: ws2 is restored over it.
	if err := resume(a, ws2); err != nil {
		t.Fatal(err)
	}
	if got := read(da); got != "two" {
		t.Fatalf("back on host a: %q", got)
	}
	write(da, "three")
	ws3 := stop(a)
	// Host a's copy is ws3's: the archive is not read (it is gone, and the resume works).
	if err := bs.Delete(ctx, ws3.SHA256); err != nil {
		t.Fatal(err)
	}
	if err := resume(a, ws3); err != nil {
		t.Fatalf("a resume on the host's own copy: %v", err)
	}
	// Host b's copy is ws2's; ws3 is gone: the resume fails, and b's copy stays as it was.
	if err := resume(b, ws3); err == nil {
		t.Fatal("a missing archive restored")
	}
	if got := read(db); got != "two" {
		t.Fatalf("after a failed restore: %q", got)
	}
}
