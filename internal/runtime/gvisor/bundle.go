//go:build linux

package gvisor

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/runtime/driverkit"
	"github.com/littlebigbrain/lbb/internal/runtime/hostids"
)

// Inside the sandbox.
const (
	lbbDir       = "/.lbb"
	agentPath    = lbbDir + "/agent"
	seccompPath  = lbbDir + "/seccomp.bpf"
	agentSocket  = "agent.sock"
	agentConnect = lbbDir + "/chan/" + agentSocket
)

const cpuPeriod = 100_000 // µs

// ociSpec is the sandbox's OCI spec: the image read-only, the disk and the /.lbb directory
// bound in, the agent as the init, no capabilities, limits. The sandbox's ids map onto
// ident.Mapped; it sees its image and disk through views (driverkit.MountViews).
func (d *Driver) ociSpec(st state, dir string, ident driverkit.Identity, views driverkit.Views) *specs.Spec {
	spec := st.Spec
	lim := spec.Limits
	disk := views.Disk
	tmp := fmt.Sprintf("size=%dm", lim.TmpMiB)
	ro := []string{"rbind", "ro", "nosuid", "nodev"}
	rw := []string{"rbind", "rw", "nosuid", "nodev"}
	idmap := []specs.LinuxIDMapping{{ContainerID: 0, HostID: ident.Mapped.Base, Size: ident.Mapped.Count}}
	rlimit := func(typ string, n uint64) specs.POSIXRlimit { return specs.POSIXRlimit{Type: typ, Hard: n, Soft: n} }
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: []string{agentPath},
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"HOME=/root",
				"LANG=C.UTF-8",
				"HOSTNAME=" + spec.Hostname,
				"LBB_SANDBOX_ID=" + spec.ID,
				"LBB_AGENT_CONNECT=" + agentConnect,
				"LBB_AGENT_SECCOMP=" + seccompPath,
				"LBB_AGENT_TOKEN=" + st.Token,
				// Devices the Sentry always makes and a sandbox never needs: FUSE (a file system
				// served from inside) and TUN/TAP (a network device of its own).
				"LBB_AGENT_REMOVE=/dev/fuse,/dev/net",
				// A user of its own, which no process it starts shares: none can signal it
				// (gVisor's PID 1 has no shield against SIGKILL and SIGSTOP from inside).
				fmt.Sprintf("LBB_AGENT_UID=%d", agentUID),
			},
			Cwd: "/",
			// What the agent needs to become agentUID and give its processes uid 0; it drops
			// all but CAP_SETUID at once, and its processes get none (lbb-agent's uid.go).
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  []string{"CAP_SETUID", "CAP_SETPCAP"},
				Effective: []string{"CAP_SETUID", "CAP_SETPCAP"},
				Permitted: []string{"CAP_SETUID", "CAP_SETPCAP"},
			},
			Rlimits: []specs.POSIXRlimit{
				rlimit("RLIMIT_NOFILE", d.cfg.NoFile),
				rlimit("RLIMIT_NPROC", nproc(lim.Pids)),
				rlimit("RLIMIT_CORE", 0),
				// No file outgrows the disk, not even a sparse one.
				rlimit("RLIMIT_FSIZE", uint64(lim.DiskMiB)<<20),
			},
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: views.Rootfs, Readonly: true},
		Hostname: spec.Hostname,
		Mounts: []specs.Mount{
			// Read-only: nothing in it is the sandbox's to write (/proc/sysrq-trigger above all).
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"ro", "nosuid", "nodev", "noexec"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "mode=755"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			// gVisor's sysfs has no class/net: say what is true, lo is the only interface.
			{Destination: "/sys/class", Type: "tmpfs", Source: "tmpfs", Options: []string{"ro", "nosuid", "nodev", "noexec", "mode=755", "size=4k"}},
			{Destination: "/sys/class/net/lo", Type: "tmpfs", Source: "tmpfs", Options: []string{"ro", "nosuid", "nodev", "noexec", "mode=755", "size=4k"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "nodev", "noexec", "mode=1777", tmp}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", tmp}},
			{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755", "size=16m"}},
			{Destination: "/run/lock", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "noexec", "mode=1777", "size=1m"}},
			{Destination: "/workspace", Type: "bind", Source: filepath.Join(disk, "workspace"), Options: rw},
			{Destination: "/root", Type: "bind", Source: filepath.Join(disk, "home"), Options: rw},
			{Destination: "/var/tmp", Type: "bind", Source: filepath.Join(disk, "vartmp"), Options: rw},
			{Destination: lbbDir, Type: "bind", Source: filepath.Join(dir, "lbb"), Options: ro},
			// The sandbox's own machine id, on its disk (the image's is empty and read-only);
			// the agent writes one at boot and a warm pool's claim a fresh one.
			{Destination: "/etc/machine-id", Type: "bind", Source: filepath.Join(disk, machineIDFile),
				Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}},
		},
		Linux: &specs.Linux{
			UIDMappings: idmap,
			GIDMappings: idmap,
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace},
				{Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace}, {Type: specs.UserNamespace}},
			CgroupsPath: "/" + d.cfg.CgroupParent + "/" + spec.ID,
			Resources: &specs.LinuxResources{
				Memory: &specs.LinuxMemory{Limit: ptr(lim.MemoryMiB << 20)},
				CPU:    &specs.LinuxCPU{Quota: ptr(int64(lim.CPUs * cpuPeriod)), Period: ptr(uint64(cpuPeriod))},
			},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// agentUID is the agent's real uid inside a gvisor sandbox (lbb-agent --uid): no account of
// the image, and no process of the sandbox can become it (none holds CAP_SETUID).
const agentUID = 65533

// agentTasks is what of a sandbox's Pids the agent keeps for its threads and the processes it
// starts directly.
const agentTasks = 16

// nproc is the sandbox's RLIMIT_NPROC. gVisor counts tasks per real uid at their creation:
// the agent's threads and the processes it starts (agentUID), then what those start (root),
// each up to the limit; both within the sandbox's Pids, with agentTasks of it the agent's.
func nproc(pids int64) uint64 {
	return uint64(max(pids-agentTasks, pids/2))
}

// prepareLbbDir (re)makes <dir>/lbb, mounted read-only at /.lbb: the agent, the seccomp
// filter (both hard links to the driver's copies, the host root's), and chan/ for the agent's
// socket, owned by the sandbox's root (uid on the host).
func (d *Driver) prepareLbbDir(dir string, uid int) error {
	agentBin, err := d.agentBinary()
	if err != nil {
		return err
	}
	filter, err := d.seccompFile()
	if err != nil {
		return err
	}
	lbb := filepath.Join(dir, "lbb")
	if err := os.RemoveAll(lbb); err != nil {
		return err
	}
	if err := mkdirOwned(lbb, 0o755, uid); err != nil {
		return err
	}
	if err := linkOrCopy(agentBin, filepath.Join(lbb, "agent")); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if err := linkOrCopy(filter, filepath.Join(lbb, "seccomp.bpf")); err != nil {
		return fmt.Errorf("seccomp filter: %w", err)
	}
	return mkdirOwned(filepath.Join(lbb, "chan"), 0o700, uid)
}

// hideAgent removes the sandbox's link to the agent binary once the agent runs: a process
// inside, which runs as the same user as the agent, could read it, or hold it open.
// A restore links it again (prepareLbbDir): gVisor reopens the executable by its path.
func hideAgent(dir string) error {
	return os.Remove(filepath.Join(dir, "lbb", "agent"))
}

// mkdirOwned makes a directory that belongs to uid (and its group): the sandbox's root.
func mkdirOwned(path string, mode os.FileMode, uid int) error {
	if err := os.Mkdir(path, mode); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := os.Chmod(path, mode); err != nil {
		return err
	}
	return os.Lchown(path, uid, uid)
}

// linkOrCopy hard-links src at dst, or copies it (with its owner and mode) across devices.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil || !errors.Is(err, unix.EXDEV) {
		return err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		st := fi.Sys().(*syscall.Stat_t)
		err = os.Lchown(dst, int(st.Uid), int(st.Gid))
	}
	if err == nil {
		err = os.Chmod(dst, fi.Mode().Perm())
	}
	return err
}

// agentBinary answers the driver's copy of the agent: the host root's, readable and executable
// by every sandbox (gVisor reads what it executes: an executable-only file does not start)
// and writable by none, checked byte for byte before it is used again (driverkit.WriteOnce).
// The copy is named by its content, so a rebuilt agent gets a new one and a running sandbox
// keeps its own. Each sandbox gets a hard link in its /.lbb, which Start removes once the
// agent runs (hideAgent).
func (d *Driver) agentBinary() (string, error) {
	return d.agent.Get(d.cfg.AgentPath, filepath.Join(d.cfg.StateDir, ".agent"), 0, 0o555)
}

// seccompFile answers the file of the agent's seccomp filter, written once per content.
func (d *Driver) seccompFile() (string, error) {
	d.filesMu.Lock()
	defer d.filesMu.Unlock()
	if d.seccomp != "" {
		return d.seccomp, nil
	}
	b, err := seccompProgram()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	dst := filepath.Join(d.cfg.StateDir, ".seccomp", "filter-"+hex.EncodeToString(sum[:])[:16]+".bpf")
	if err := driverkit.WriteOnce(dst, b, 0, 0o644); err != nil {
		return "", fmt.Errorf("seccomp filter: %w", err)
	}
	d.seccomp = dst
	return dst, nil
}

// listenAgent listens on chan/agent.sock for the agent, the socket owned by the sandbox's root
// (uid on the host).
func listenAgent(chanDir string, uid int) (*net.UnixListener, error) {
	path := filepath.Join(chanDir, agentSocket)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	addr := path
	if len(addr) >= 100 {
		// A socket's path has room for 107 bytes: name the directory by a descriptor.
		f, err := os.Open(chanDir)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		addr = "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) + "/" + agentSocket
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Lchown(path, uid, uid); err != nil {
		ln.Close()
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// acceptAgent accepts connections on ln until one opens with token (the agent), or ctx ends,
// or the sandbox exits. Any other caller (a process in the sandbox can reach the socket too)
// is dropped; callers are checked side by side, so that one that says nothing holds up none.
func acceptAgent(ctx context.Context, ln *net.UnixListener, token string, exited <-chan struct{}) (conn net.Conn, err error) {
	found := make(chan net.Conn, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		// The agent's connection, when it came too late.
		if err != nil {
			select {
			case c := <-found:
				c.Close()
			default:
			}
		}
	}()
	defer wg.Wait()
	defer close(stop)
	slots := make(chan struct{}, 64)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case slots <- struct{}{}:
			default:
				c.Close() // a crowd at the door, not the agent: it connects again
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				// A caller that says nothing is cut short when the wait ends.
				checked, unwatched := make(chan struct{}), make(chan struct{})
				go func() {
					defer close(unwatched)
					select {
					case <-stop:
						c.SetReadDeadline(time.Now())
					case <-checked:
					}
				}()
				ok := checkToken(c, token)
				close(checked)
				<-unwatched
				c.SetReadDeadline(time.Time{})
				if !ok {
					c.Close()
					return
				}
				select {
				case found <- c:
				default:
					c.Close()
				}
			}()
		}
	}()
	select {
	case c := <-found:
		ln.SetDeadline(time.Now()) // no more callers
		return c, nil
	case <-ctx.Done():
		err = fmt.Errorf("waiting for the agent to connect: %w", ctx.Err())
	case <-exited:
		err = errExited
	}
	ln.SetDeadline(time.Now())
	return nil, err
}

// checkToken reads the first line of c and compares it with token.
func checkToken(c net.Conn, token string) bool {
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, len(token)+1)
	if _, err := io.ReadFull(c, buf); err != nil {
		return false
	}
	return buf[len(token)] == '\n' && subtle.ConstantTimeCompare(buf[:len(token)], []byte(token)) == 1
}

// machineIDFile is the file on a sandbox's disk bound over its /etc/machine-id.
const machineIDFile = "machine-id"

// prepareDisk makes the directories of a mounted disk, owned by the sandbox's root as disks
// store it (the shared range: see driverkit.MountViews): the workspace, /root (first filled
// from the image's) and /var/tmp; and its machine id's file (empty until the agent writes
// one). The disk's root is the host's, traversable by the sandbox's ids.
func prepareDisk(diskDir, image string) error {
	root := int(hostids.Shared.Base)
	if err := os.Chmod(diskDir, 0o711); err != nil {
		return err
	}
	if err := mkdirOwned(filepath.Join(diskDir, "workspace"), 0o755, root); err != nil {
		return err
	}
	mid := filepath.Join(diskDir, machineIDFile)
	if fi, err := os.Lstat(mid); err != nil || !fi.Mode().IsRegular() {
		// Only the host writes the disk's top level; anything else there is replaced.
		if err := os.RemoveAll(mid); err != nil {
			return err
		}
		if err := os.WriteFile(mid, nil, 0o644); err != nil {
			return err
		}
	}
	if err := os.Lchown(mid, root, root); err != nil {
		return err
	}
	if err := os.Chmod(mid, 0o644); err != nil {
		return err
	}
	if err := mkdirOwned(filepath.Join(diskDir, "vartmp"), 0o777|os.ModeSticky, root); err != nil {
		return err
	}
	home := filepath.Join(diskDir, "home")
	if _, err := os.Lstat(home); err == nil {
		return nil
	}
	tmp := filepath.Join(diskDir, ".home.tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := copyTree(filepath.Join(image, "root"), tmp); err != nil {
		return fmt.Errorf("copy the image's /root: %w", err)
	}
	return os.Rename(tmp, home)
}

// copyTree copies a directory tree with owners, modes and symlinks (no hard links, devices
// or special files: a home directory of an image has none).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		fi, err := e.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		switch {
		case fi.IsDir():
			if err := os.Mkdir(to, 0o700); err != nil {
				return err
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
			return os.Lchown(to, int(st.Uid), int(st.Gid))
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.WriteFile(to, b, 0o600); err != nil {
				return err
			}
		default:
			return nil
		}
		if err := os.Lchown(to, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		return os.Chmod(to, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
	})
}
