//go:build linux

package microvm

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/runtime/driverkit"
	"github.com/littlebigbrain/lbb/internal/runtime/seccomp"
)

// The guest boots from an initramfs the driver makes: the agent as /init (the guest's
// supervisor, see internal/agent/vmguest), the kernel's modules and the sandbox's seccomp
// filter, in the layout agent.VMInitramfsDirs describes. It is an uncompressed cpio archive
// ("newc", the kernel's own format), named by the hash of what it holds under
// <StateDir>/.initrd, so that a rebuilt agent gets a new one and a running machine keeps its
// own.

// initrdVersion names this file's layout of the archive; bump it when that changes.
const initrdVersion = 2

type initrdCache struct {
	mu   sync.Mutex
	key  string // the agent's size and mtime, the kernel's dir
	path string
}

// get answers the initramfs for the agent at agentPath and kernel k, made when needed.
func (c *initrdCache) get(dir, agentPath string, k images.KernelManifest) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fi, err := os.Stat(agentPath)
	if err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	key := fmt.Sprint(fi.Size(), fi.ModTime().UnixNano(), k.Dir)
	if key == c.key {
		return c.path, nil
	}
	var files []cpioFile
	for _, d := range agent.VMInitramfsDirs {
		files = append(files, cpioFile{name: d, mode: 0o40755})
	}
	// The console node is there before devtmpfs is mounted: the kernel opens it for /init's
	// stdio. The console (hvc0) appears only once the supervisor has loaded virtio-mmio, so
	// that open fails, and the Go runtime then opens /dev/null for fds 0-2 (or dies).
	files = append(files, cpioFile{name: "dev/console", mode: 0o20600, major: 5, minor: 1},
		cpioFile{name: "dev/null", mode: 0o20666, major: 1, minor: 3})
	agentBin, err := os.ReadFile(agentPath)
	if err != nil {
		return "", err
	}
	// Executable, not readable: bound into the sandbox at /.lbb/agent, where its root (the
	// file's owner, without capabilities, on a read-only mount) can run it and no more.
	files = append(files, cpioFile{name: "init", mode: 0o100111, data: agentBin})
	var order []string
	for _, m := range k.ModuleFiles() {
		b, err := os.ReadFile(m)
		if err != nil {
			return "", fmt.Errorf("guest kernel module: %w", err)
		}
		name := filepath.Base(m)
		order = append(order, name)
		files = append(files, cpioFile{name: filepath.Join(agent.VMModulesDir, name)[1:], mode: 0o100400, data: b})
	}
	files = append(files, cpioFile{name: filepath.Join(agent.VMModulesDir, "order")[1:], mode: 0o100444, data: []byte(strings.Join(order, "\n") + "\n")})
	raw, err := seccomp.Program()
	if err != nil {
		return "", err
	}
	files = append(files, cpioFile{name: agent.VMSeccompFile[1:], mode: 0o100444, data: seccomp.Encode(raw)})

	h := sha256.New()
	fmt.Fprintf(h, "initrd %d %s\n", initrdVersion, k.Recipe.Release)
	for _, f := range files {
		fmt.Fprintf(h, "%s %o %d %d %d\n", f.name, f.mode, f.major, f.minor, len(f.data))
		h.Write(f.data)
	}
	path := filepath.Join(dir, ".initrd", hex.EncodeToString(h.Sum(nil))[:16]+".cpio")
	if _, err := os.Stat(path); err != nil {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeCpio(pw, files)) }()
		b, err := io.ReadAll(pr)
		if err != nil {
			return "", err
		}
		// Readable by QEMU, which runs as an unprivileged id.
		if err := driverkit.WriteOnce(path, b, 0, 0o444); err != nil {
			return "", fmt.Errorf("initramfs: %w", err)
		}
	}
	c.key, c.path = key, path
	return path, nil
}

type cpioFile struct {
	name         string
	mode         uint32 // with the file type bits (0o100000 file, 0o40000 directory, 0o20000 char device)
	major, minor uint32
	data         []byte
}

// writeCpio writes files as a "newc" cpio archive (the format of the kernel's
// Documentation/driver-api/early-userspace/buffer-format.rst), owned by root.
func writeCpio(w io.Writer, files []cpioFile) error {
	bw := bufio.NewWriter(w)
	n := 0
	pad := func() {
		for ; n%4 != 0; n++ {
			bw.WriteByte(0)
		}
	}
	entry := func(ino int, f cpioFile) {
		nlink := 1
		if f.mode&0o170000 == 0o40000 {
			nlink = 2
		}
		hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, f.mode, 0, 0, nlink, 0, len(f.data), 0, 0, f.major, f.minor, len(f.name)+1, 0)
		bw.WriteString(hdr)
		bw.WriteString(f.name)
		bw.WriteByte(0)
		n += len(hdr) + len(f.name) + 1
		pad()
		bw.Write(f.data)
		n += len(f.data)
		pad()
	}
	for i, f := range files {
		entry(i+1, f)
	}
	entry(0, cpioFile{name: "TRAILER!!!"})
	return bw.Flush()
}
