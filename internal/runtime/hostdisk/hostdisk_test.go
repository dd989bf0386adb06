//go:build linux

package hostdisk

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/testkit"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(64 << 20)
	f.WriteAt([]byte("head"), 0)
	f.WriteAt(bytes.Repeat([]byte{7}, 8192), 10<<20)
	f.WriteAt([]byte("tail"), 64<<20-4)
	f.Close()
	dsts := map[string]string{"the same file system": dir}
	// Another file system, where copy_file_range answers EXDEV: /dev/shm when it is one.
	var a, b unix.Stat_t
	if unix.Stat("/dev/shm", &a) == nil && unix.Stat(dir, &b) == nil && a.Dev != b.Dev && unix.Access("/dev/shm", unix.W_OK) == nil {
		other, err := os.MkdirTemp("/dev/shm", "lbb-copysparse-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(other) })
		dsts["another file system"] = other
	} else {
		t.Log("no second file system (/dev/shm) to copy to")
	}
	for name, d := range dsts {
		dst := filepath.Join(d, "dst")
		if err := CopySparse(src, dst); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		a, _ := os.ReadFile(src)
		b, _ := os.ReadFile(dst)
		if !bytes.Equal(a, b) {
			t.Fatalf("%s: copy differs", name)
		}
		var st unix.Stat_t
		unix.Stat(dst, &st)
		if st.Blocks*512 > 1<<20 {
			t.Fatalf("%s: copy is not sparse: %d bytes allocated", name, st.Blocks*512)
		}
		if err := CopySparse(src, dst); err == nil {
			t.Fatalf("%s: copy over an existing file succeeded", name)
		}
	}
}

// WaitDetached watches the one device Mount attached: it waits while that device still
// holds the image and returns once autoclear has detached it after the unmount.
func TestMountWaitDetached(t *testing.T) {
	testkit.RequiresRoot(t) // loop-mounting
	ctx := context.Background()
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	if err := WaitDetached(ctx, img, mnt); err != nil {
		t.Fatalf("an image never mounted: %v", err)
	}
	if err := Format(ctx, img, 16); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(mnt, 0o700)
	major, minor, err := Mount(img, mnt)
	if err != nil {
		t.Fatal(err)
	}
	dev := fmt.Sprintf("%d:%d", major, minor)
	if !backedBy(dev, img) || len(LoopDevicesFor(img)) != 1 {
		t.Fatalf("device %s does not show as backed by %s: %v", dev, img, LoopDevicesFor(img))
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := WaitDetached(short, img, mnt); err == nil {
		t.Fatal("WaitDetached returned while the image is mounted")
	}
	if err := Unmount(ctx, mnt); err != nil {
		t.Fatal(err)
	}
	if err := WaitDetached(ctx, img, mnt); err != nil {
		t.Fatal(err)
	}
	if devs := LoopDevicesFor(img); len(devs) != 0 {
		t.Fatalf("WaitDetached returned while %v hold %s", devs, img)
	}
}

// MountsUnder answers what mountinfo.PrefixFilter keeps, names with spaces and
// backslashes included, and no sibling that merely shares the prefix.
func TestMountsUnder(t *testing.T) {
	testkit.RequiresRoot(t)
	dir := filepath.Join(t.TempDir(), `a b\c`)
	for _, p := range []string{"m", "m/n", "../" + filepath.Base(dir) + "d"} {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(p, unix.MNT_DETACH)
		if err := os.MkdirAll(filepath.Join(p, "n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := MountsUnder(dir + "/")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "m"), filepath.Join(dir, "m/n")}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("MountsUnder(%q) = %q, want %q", dir, got, want)
	}
	for _, d := range []string{"/", "/proc", "/sys", dir, filepath.Join(dir, "m/n")} {
		infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(d))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, mi := range infos {
			want = append(want, mi.Mountpoint)
		}
		got, err := MountsUnder(d)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("MountsUnder(%q) = %q, mountinfo has %q", d, got, want)
		}
	}
}

// IsMounted answers what the mount table says of a path: a mount point, one mounted over
// and then under again, a directory inside a mount, a missing path, a bind mount of a file.
func TestIsMounted(t *testing.T) {
	testkit.RequiresRoot(t)
	dir := filepath.Join(t.TempDir(), `a b\c`)
	m, inner, file := filepath.Join(dir, "m"), filepath.Join(dir, "m", "n"), filepath.Join(dir, "f")
	if err := os.MkdirAll(m, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		table, err := MountsUnder(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{dir, m, inner, file, filepath.Join(dir, "missing"), filepath.Join(file, "x")} {
			got, err := IsMounted(p)
			if err != nil {
				t.Fatalf("%s: IsMounted(%q): %v", when, p, err)
			}
			if want := slices.Contains(table, p); got != want {
				t.Errorf("%s: IsMounted(%q) = %v, the mount table says %v (%q)", when, p, got, want, table)
			}
		}
	}
	check("nothing mounted")
	if err := unix.Mount("tmpfs", m, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(m, unix.MNT_DETACH)
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(file, file, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(file, unix.MNT_DETACH)
	check("mounted")
	if err := unix.Unmount(m, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(file, 0); err != nil {
		t.Fatal(err)
	}
	check("unmounted")
}

// A template of a 1 GiB disk holds little data (no blocks reserved for resizing): every
// sandbox copies it.
func TestTemplateSmall(t *testing.T) {
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("no mkfs.ext4")
	}
	for _, journal := range []bool{false, true} {
		tm := &Templates{Dir: t.TempDir(), Journal: journal}
		p, err := tm.Get(context.Background(), 1024)
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if data := st.Blocks * 512; data > 256<<10 {
			t.Errorf("template %s (journal %v) holds %d KiB of data, want at most 256", p, journal, data>>10)
		}
	}
}
