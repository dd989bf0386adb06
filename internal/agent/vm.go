package agent

import (
	"fmt"
	"strconv"
	"strings"
)

// The microvm driver's guest: a virtual machine with a kernel of its own, whose first process
// (/init of an initramfs, this same agent binary) is the guest's supervisor. The supervisor
// mounts the base image and the workspace disk, assembles the sandbox's root, and starts the
// agent as PID 1 of a pid namespace of its own, without privileges, on the channel port. It
// stays privileged and invisible to the sandbox's processes, and answers the driver on a
// second port, the control port, with the few things only the guest's kernel knows or can
// do (VMRequest).
//
// The ports are virtio-serial ports the driver names; the disks are virtio block devices it
// gives serial numbers. The supervisor finds them by those names.
const (
	// PortChannel carries the agent protocol, as any driver's channel does.
	PortChannel = "lbb.channel"
	// PortControl carries VMRequest and VMResponse lines between the driver and the
	// supervisor; the sandbox's processes never reach it.
	PortControl = "lbb.control"
	// DiskBase is the serial of the read-only base image disk, DiskWorkspace the sandbox's
	// own disk (its workspace and every other write that outlives a stop).
	DiskBase      = "lbb-base"
	DiskWorkspace = "lbb-disk"
	// DiskLayer is the serial of a template layer's read-only disk (VMConfig.Layer), which
	// the supervisor stacks over the base.
	DiskLayer = "lbb-layer"
)

// The initramfs the driver makes: the agent as /init (the supervisor), these directories, the
// kernel modules the guest loads (VMModulesDir/*.ko.xz, loaded in the order the file
// VMModulesDir/order names them) and the sandbox's seccomp filter as raw BPF (the ns driver's).
const (
	VMModulesDir  = "/lib/modules"
	VMSeccompFile = "/lib/lbb/seccomp.bpf"
)

// VMInitramfsDirs are the directories of the initramfs: mount points and the files' homes.
var VMInitramfsDirs = []string{"dev", "proc", "sys", "mnt", "mnt/base", "mnt/disk", "mnt/root", "lib", "lib/modules", "lib/lbb"}

// VMConfig is what the supervisor needs to know of its sandbox. The driver passes it on the
// kernel command line (VMConfig.Cmdline), which the kernel hands to /init as its environment;
// it holds no secret: /proc/cmdline shows it inside.
type VMConfig struct {
	SandboxID string
	Hostname  string
	// MemoryMiB bounds the sandbox's processes (the agent included) inside the guest, whose
	// RAM is larger by what its kernel needs; Pids, TmpMiB, DiskMiB and NoFile as for ns.
	MemoryMiB, Pids, TmpMiB, DiskMiB int64
	NoFile                           uint64
	// Layer: the machine has a template layer's disk (DiskLayer) to stack over the base.
	Layer bool
}

// vmEnv prefixes the variables of a VMConfig.
const vmEnv = "LBB_VM_"

// Cmdline is c as kernel command line words (NAME=value, which the kernel passes to init as
// its environment).
func (c VMConfig) Cmdline() []string {
	w := []string{
		vmEnv + "SANDBOX=" + c.SandboxID,
		vmEnv + "HOSTNAME=" + c.Hostname,
		vmEnv + "MEMORY_MIB=" + strconv.FormatInt(c.MemoryMiB, 10),
		vmEnv + "PIDS=" + strconv.FormatInt(c.Pids, 10),
		vmEnv + "TMP_MIB=" + strconv.FormatInt(c.TmpMiB, 10),
		vmEnv + "DISK_MIB=" + strconv.FormatInt(c.DiskMiB, 10),
		vmEnv + "NOFILE=" + strconv.FormatUint(c.NoFile, 10),
	}
	if c.Layer { // only then: a machine without one keeps the command line it always had
		w = append(w, vmEnv+"LAYER=true")
	}
	return w
}

// ParseVMConfig reads a VMConfig from an environment (os.Environ()); ok is false when it holds
// none (not a microvm guest).
func ParseVMConfig(env []string) (c VMConfig, ok bool, err error) {
	vals := map[string]string{}
	for _, kv := range env {
		if k, v, found := strings.Cut(kv, "="); found && strings.HasPrefix(k, vmEnv) {
			vals[strings.TrimPrefix(k, vmEnv)] = v
		}
	}
	if len(vals) == 0 {
		return c, false, nil
	}
	c.SandboxID, c.Hostname = vals["SANDBOX"], vals["HOSTNAME"]
	for name, p := range map[string]*int64{"MEMORY_MIB": &c.MemoryMiB, "PIDS": &c.Pids, "TMP_MIB": &c.TmpMiB, "DISK_MIB": &c.DiskMiB} {
		if *p, err = strconv.ParseInt(vals[name], 10, 64); err != nil || *p <= 0 {
			return c, true, fmt.Errorf("%s%s=%q: want a positive number", vmEnv, name, vals[name])
		}
	}
	if c.NoFile, err = strconv.ParseUint(vals["NOFILE"], 10, 64); err != nil {
		return c, true, fmt.Errorf("%sNOFILE=%q: %w", vmEnv, vals["NOFILE"], err)
	}
	if v, ok := vals["LAYER"]; ok {
		if c.Layer, err = strconv.ParseBool(v); err != nil {
			return c, true, fmt.Errorf("%sLAYER=%q: %w", vmEnv, v, err)
		}
	}
	if c.Hostname == "" {
		return c, true, fmt.Errorf("%sHOSTNAME is empty", vmEnv)
	}
	return c, true, nil
}

// VMRequest is one line (JSON) the driver writes on the control port; the supervisor answers
// each with one VMResponse line, in order.
type VMRequest struct {
	// Op is VMOpStats, VMOpSync, VMOpHostname or VMOpReseed.
	Op string `json:"op"`
	// Hostname, for VMOpHostname.
	Hostname string `json:"hostname,omitempty"`
	// Seed is entropy from the host, for VMOpReseed; MachineID, when set, replaces the
	// sandbox's /etc/machine-id (a fork is another machine).
	Seed      []byte `json:"seed,omitempty"`
	MachineID string `json:"machine_id,omitempty"`
	// UnixNano, for VMOpReseed, is the host's clock: a restored machine's clock is where it
	// was when it was saved, and the supervisor sets it.
	UnixNano int64 `json:"unix_nano,omitempty"`
}

// The control port's operations.
const (
	// VMOpStats reads the sandbox's accounting inside the guest (VMStats).
	VMOpStats = "stats"
	// VMOpSync writes what the guest holds of the sandbox's disk back to it, before the driver
	// ends the machine.
	VMOpSync = "sync"
	// VMOpHostname renames the sandbox (runtime.Renamer).
	VMOpHostname = "hostname"
	// VMOpReseed, after a restore, sets the clock to UnixNano, mixes Seed and the virtio
	// entropy device's bytes into the guest's pool and reseeds its generator at once: a
	// restored machine (and each of its forks) would otherwise draw the same numbers as the
	// one that was saved; and a fork gets MachineID.
	VMOpReseed = "reseed"
)

// VMStats is the sandbox's accounting inside the guest: its cgroup there.
type VMStats struct {
	MemoryBytes    uint64 `json:"memory_bytes"`
	MemoryMaxBytes uint64 `json:"memory_max_bytes"`
	OOMKills       uint64 `json:"oom_kills"`
	Pids           uint64 `json:"pids"`
}

// VMResponse answers a VMRequest.
type VMResponse struct {
	Error string   `json:"error,omitempty"`
	Stats *VMStats `json:"stats,omitempty"`
}
