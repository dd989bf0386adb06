package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// The microvm driver boots each sandbox on a kernel of its own: a Debian cloud kernel
// (linux-image-*-cloud-amd64, made for virtual machines: virtio built in or as a few modules,
// no hardware drivers), pinned by package version and sha256, fetched with apt-get from the
// host's Debian mirror and kept under the images directory:
//
//	<dir>/kernel-<release>/vmlinuz        the kernel QEMU boots (-kernel)
//	<dir>/kernel-<release>/modules/*.ko.xz the modules the guest loads at boot (KernelRecipe.Modules)
//	<dir>/kernel-<release>/config         its build configuration
//	<dir>/kernel-<release>/kernel.json    what it is (KernelManifest)
//
// The image's root file system becomes a read-only ext4 disk (vmdisk.go).

// KernelRecipe pins the guest kernel.
type KernelRecipe struct {
	// Suite is the Debian suite the package is fetched from.
	Suite string `json:"suite"`
	// Package and Version name the .deb; SHA256 is its hash (apt checks the archive's
	// signatures, this checks the pin).
	Package string `json:"package"`
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
	// Release is the kernel's uname -r.
	Release string `json:"release"`
	// Modules are the module files (under lib/modules/<release>/kernel) the guest needs that
	// the cloud kernel does not build in: the virtio-mmio transport of QEMU's microvm machine,
	// virtio block disks, overlayfs and the virtio entropy source. None depends on another.
	Modules []string `json:"modules"`
}

// DefaultKernel is the kernel microvm sandboxes boot. To move it on, look the package up
// (apt-cache show, with trixie in a sources list) and paste its version and SHA256 here;
// the build then fetches it by that version and checks that hash.
func DefaultKernel() KernelRecipe {
	return KernelRecipe{
		Suite:   "trixie",
		Package: "linux-image-6.12.117+deb13-cloud-amd64-unsigned",
		Version: "6.12.117-1",
		SHA256:  "4113a615a1f1535ed4356ca03d428c74536b00f6ccb58e049a2ffd6a1cb3f1ad",
		Release: "6.12.117+deb13-cloud-amd64",
		Modules: []string{
			"drivers/virtio/virtio_mmio.ko.xz",
			"drivers/block/virtio_blk.ko.xz",
			"fs/overlayfs/overlay.ko.xz",
			"drivers/char/hw_random/virtio-rng.ko.xz",
		},
	}
}

// KernelManifest describes a fetched kernel; Dir and the paths are set when read.
type KernelManifest struct {
	Recipe  KernelRecipe `json:"recipe"`
	Created time.Time    `json:"created"`
	Dir     string       `json:"-"`
}

// Vmlinuz is the kernel image QEMU boots.
func (k KernelManifest) Vmlinuz() string { return filepath.Join(k.Dir, "vmlinuz") }

// ModuleFiles are the guest's modules, in the order the guest loads them.
func (k KernelManifest) ModuleFiles() []string {
	out := make([]string, len(k.Recipe.Modules))
	for i, m := range k.Recipe.Modules {
		out[i] = filepath.Join(k.Dir, "modules", filepath.Base(m))
	}
	return out
}

func kernelDir(dir string, r KernelRecipe) string {
	return filepath.Join(dir, "kernel-"+r.Release)
}

// CurrentKernel answers the pinned kernel when it is fetched in dir; the error wraps
// fs.ErrNotExist when it is not.
func CurrentKernel(dir string) (KernelManifest, error) {
	r := DefaultKernel()
	kd := kernelDir(dir, r)
	b, err := os.ReadFile(filepath.Join(kd, "kernel.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return KernelManifest{}, fmt.Errorf("guest kernel %s is not fetched in %s (run `lbb images build`): %w", r.Release, dir, fs.ErrNotExist)
	}
	if err != nil {
		return KernelManifest{}, err
	}
	var k KernelManifest
	if err := json.Unmarshal(b, &k); err != nil {
		return KernelManifest{}, fmt.Errorf("%s: %w", kd, err)
	}
	if k.Recipe.SHA256 != r.SHA256 {
		return KernelManifest{}, fmt.Errorf("%s holds package %s, the pin is %s: remove it and run `lbb images build`: %w",
			kd, k.Recipe.SHA256, r.SHA256, fs.ErrNotExist)
	}
	k.Dir = kd
	return k, nil
}

// BuildKernel fetches the pinned kernel into o.Dir, or answers the one there. It needs root
// (apt-get) and dpkg-deb.
func BuildKernel(ctx context.Context, o Options) (KernelManifest, error) {
	dir, w := o.dir(), o.progress()
	if k, err := CurrentKernel(dir); err == nil {
		fmt.Fprintf(w, "guest kernel %s is cached at %s\n", k.Recipe.Release, k.Dir)
		return k, nil
	}
	r := DefaultKernel()
	if os.Geteuid() != 0 {
		return KernelManifest{}, errors.New("fetching the guest kernel needs root (apt-get)")
	}
	tools := map[string]string{}
	for _, t := range []string{"apt-get", "dpkg-deb"} {
		p, err := lookTool(t)
		if err != nil {
			return KernelManifest{}, fmt.Errorf("fetching the guest kernel needs %s: %w", t, err)
		}
		tools[t] = p
	}
	mirror, err := o.mirror()
	if err != nil {
		return KernelManifest{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return KernelManifest{}, err
	}
	unlock, err := lockDir(ctx, dir, w)
	if err != nil {
		return KernelManifest{}, err
	}
	defer unlock()
	if k, err := CurrentKernel(dir); err == nil {
		return k, nil
	}
	t0 := time.Now()
	tmp, err := os.MkdirTemp(dir, ".tmp-kernel-")
	if err != nil {
		return KernelManifest{}, err
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(w, "guest kernel: %s %s from %s %s…\n", r.Package, r.Version, mirror, r.Suite)
	deb, err := aptDownload(ctx, tools["apt-get"], tmp, mirror, r)
	if err != nil {
		return KernelManifest{}, fmt.Errorf("guest kernel: %w", err)
	}
	sum, err := fileSHA256(deb)
	if err != nil {
		return KernelManifest{}, err
	}
	if sum != r.SHA256 {
		return KernelManifest{}, fmt.Errorf("guest kernel: %s has sha256 %s, the pin is %s", filepath.Base(deb), sum, r.SHA256)
	}
	fmt.Fprintf(w, "      %s, sha256 %s… verified\n", filepath.Base(deb), sum[:16])
	x := filepath.Join(tmp, "x")
	if out, err := exec.CommandContext(ctx, tools["dpkg-deb"], "-x", deb, x).CombinedOutput(); err != nil {
		return KernelManifest{}, fmt.Errorf("dpkg-deb -x: %w: %s", err, out)
	}
	stage := filepath.Join(tmp, "kernel")
	if err := os.MkdirAll(filepath.Join(stage, "modules"), 0o755); err != nil {
		return KernelManifest{}, err
	}
	copies := map[string]string{
		filepath.Join(x, "boot", "vmlinuz-"+r.Release): filepath.Join(stage, "vmlinuz"),
		filepath.Join(x, "boot", "config-"+r.Release):  filepath.Join(stage, "config"),
	}
	for _, m := range r.Modules {
		copies[filepath.Join(x, "usr/lib/modules", r.Release, "kernel", m)] = filepath.Join(stage, "modules", filepath.Base(m))
	}
	for src, dst := range copies {
		if err := copyFile(src, dst, 0o644); err != nil {
			return KernelManifest{}, fmt.Errorf("guest kernel: %w", err)
		}
	}
	k := KernelManifest{Recipe: r, Created: time.Now().UTC().Truncate(time.Second)}
	b, _ := json.MarshalIndent(k, "", "  ")
	if err := os.WriteFile(filepath.Join(stage, "kernel.json"), append(b, '\n'), 0o444); err != nil {
		return KernelManifest{}, err
	}
	final := kernelDir(dir, r)
	if err := removeTree(final); err != nil {
		return KernelManifest{}, err
	}
	if err := os.Rename(stage, final); err != nil {
		return KernelManifest{}, err
	}
	fmt.Fprintf(w, "guest kernel %s in %s (%s)\n", r.Release, final, time.Since(t0).Round(100*time.Millisecond))
	return CurrentKernel(dir)
}

// aptDownload fetches package r into dir with apt-get, on an apt configuration of its own
// (the suite r names, from mirror), so that the host's apt state is neither read nor changed.
func aptDownload(ctx context.Context, aptGet, dir, mirror string, r KernelRecipe) (string, error) {
	for _, d := range []string{"lists/partial", "cache/archives/partial", "parts"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return "", err
		}
	}
	src := filepath.Join(dir, "sources.list")
	line := fmt.Sprintf("deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n", mirror, r.Suite)
	if err := os.WriteFile(src, []byte(line), 0o644); err != nil {
		return "", err
	}
	opts := []string{
		"-o", "Dir::Etc::SourceList=" + src,
		"-o", "Dir::Etc::SourceParts=" + filepath.Join(dir, "parts"),
		"-o", "Dir::State::Lists=" + filepath.Join(dir, "lists"),
		"-o", "Dir::Cache=" + filepath.Join(dir, "cache"),
		"-o", "Dir::State::status=/dev/null",
		"-o", "Debug::NoLocking=1",
		"-o", "APT::Architecture=amd64",
		"-o", "APT::Sandbox::User=root",
		"-o", "Acquire::Languages=none",
		"-o", "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false",
		"-q",
	}
	run := func(args ...string) error {
		cmd := exec.CommandContext(ctx, aptGet, append(opts, args...)...)
		cmd.Dir = dir
		cmd.Env = toolEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %w: %s", args[0], err, tail(string(out), 10))
		}
		return nil
	}
	if err := run("update"); err != nil {
		return "", err
	}
	if err := run("download", r.Package+"="+r.Version); err != nil {
		return "", fmt.Errorf("%w (is %s %s still on the mirror? move DefaultKernel on)", err, r.Package, r.Version)
	}
	debs, _ := filepath.Glob(filepath.Join(dir, r.Package+"_*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download left %v", debs)
	}
	return debs[0], nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func copyFile(src, dst string, mode fs.FileMode) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	return writeFile(dst, f, mode)
}
