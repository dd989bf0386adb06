//go:build linux

package microvm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/runtime/driverkit"
)

// accelInfo is the acceleration the driver's machines run under, and why.
type accelInfo struct {
	name string // "kvm" or "tcg"
	why  string // for tcg: why not kvm
}

// Acceleration is probed once per process (per QEMU and kernel), and its answer kept until
// the host boots again (probeCached): /dev/kvm being there is not
// enough — a nested or paravirtualized KVM (this project's CI machines: PVM) may open and
// then not boot a stock kernel. The probe boots the guest kernel under KVM without an
// initramfs: a kernel that gets as far as looking for its root file system boots.
var accelProbes struct {
	mu   sync.Mutex
	seen map[string]accelInfo
}

// Accel is the acceleration this driver's machines run under: "kvm", or "tcg" (emulated)
// with why not KVM.
func (d *Driver) Accel() (name, why string) {
	a := d.accel()
	return a.name, a.why
}

// accel answers the acceleration of this driver's machines (Config.Accel, else probed).
func (d *Driver) accel() accelInfo {
	switch d.cfg.Accel {
	case "kvm", "tcg":
		return accelInfo{name: d.cfg.Accel, why: "configured"}
	}
	k, err := images.CurrentKernel(d.cfg.ImagesDir)
	if err != nil {
		return accelInfo{name: "tcg", why: err.Error()}
	}
	key := d.cfg.QEMU + "\x00" + k.Vmlinuz()
	accelProbes.mu.Lock()
	defer accelProbes.mu.Unlock()
	if a, ok := accelProbes.seen[key]; ok {
		return a
	}
	a, cached := d.probeCached(key, func() accelInfo { return probeKVM(d.cfg.QEMU, k.Vmlinuz()) })
	if cached {
		// Said by the process that probed.
	} else if a.name == "tcg" {
		d.cfg.Logger.Warn("microvm: KVM cannot boot a guest here; machines run under TCG (emulated): "+
			"seconds to boot and several times slower to run", "why", a.why)
	} else {
		d.cfg.Logger.Info("microvm: machines run under KVM")
	}
	if accelProbes.seen == nil {
		accelProbes.seen = map[string]accelInfo{}
	}
	accelProbes.seen[key] = a
	return a
}

// probeKVM boots kernel under KVM and answers kvm when it reaches the search for its root.
func probeKVM(qemu, kernel string) accelInfo {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return accelInfo{name: "tcg", why: fmt.Sprintf("/dev/kvm: %v", err)}
	}
	f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, "-machine", "microvm,x-option-roms=off,rtc=on", "-accel", "kvm", "-cpu", "host",
		"-m", "256M", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-kernel", kernel, "-append", "console=ttyS0 panic=-1")
	// A KVM that cannot run the guest makes QEMU print the vCPU's registers ("KVM internal
	// error", "Code=…") and pause: no need to wait for the timeout then.
	var out bytes.Buffer
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			out.WriteString(line + "\n")
			if strings.Contains(line, "KVM internal error") || strings.Contains(line, "emulation failure") ||
				strings.HasPrefix(line, "Code=") || strings.Contains(line, "Unable to mount root fs") {
				cancel()
			}
		}
		io.Copy(io.Discard, pr)
	}()
	err = cmd.Run()
	pw.Close()
	s := out.String()
	if strings.Contains(s, "Unable to mount root fs") || strings.Contains(s, "Run /init") {
		return accelInfo{name: "kvm"}
	}
	last := strings.TrimSpace(s)
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("no boot within 15 s")
	}
	return accelInfo{name: "tcg", why: fmt.Sprintf("a guest kernel did not boot under KVM (%v; last line %q)", err, last)}
}

// probeCached answers what probe answered in an earlier process since the host booted, kept
// in /run/lbb (a tmpfs: gone at the next boot; else <StateDir>), else probes and keeps the
// answer: every lbb serve offers microvm, and a probe costs a boot.
func (d *Driver) probeCached(key string, probe func() accelInfo) (accelInfo, bool) {
	type record struct {
		Key, Boot, Name, Why string
	}
	bootID, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	qemu, _ := os.Stat(d.cfg.QEMU)
	if qemu != nil {
		key += fmt.Sprint("\x00", qemu.Size(), qemu.ModTime().UnixNano())
	}
	path := "/run/lbb/microvm-accel.json"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		path = filepath.Join(d.cfg.StateDir, ".accel.json")
	}
	var r record
	if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &r) == nil &&
		r.Key == key && r.Boot == strings.TrimSpace(string(bootID)) && (r.Name == "kvm" || r.Name == "tcg") {
		return accelInfo{name: r.Name, why: r.Why}, true
	}
	a := probe()
	if os.MkdirAll(filepath.Dir(path), 0o711) == nil {
		_ = driverkit.WriteJSON(path, record{Key: key, Boot: strings.TrimSpace(string(bootID)), Name: a.name, Why: a.why})
	}
	return a, false
}
