//go:build linux

package ns

import (
	"context"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/ns/nsinit"
	"github.com/littlebigbrain/lbb/internal/runtime/ns/zygote"
)

// zygoteImports are what each image's zygote imports: a slot's default python imports.
var zygoteImports = []string{"numpy", "pandas"}

// ForkInterpreter forks a pre-started python interpreter, with numpy and pandas imported,
// into started sandbox id from its image's zygote (started at the first call, again after it
// died), with the sandbox's namespaces, cgroups and the init's hardening
// (runtime.InterpreterForker). The sandbox's agent adopts it on req.Socket.
func (d *Driver) ForkInterpreter(ctx context.Context, id string, req runtime.ForkRequest) error {
	if req.Language != "python" {
		return errdefs.New(errdefs.ClassConflict, errdefs.CodeNotSupported, "no %s zygote", req.Language)
	}
	sb, err := d.sbs.Started(id)
	if err != nil {
		return err
	}
	spec, err := d.readSpec(id)
	if err != nil {
		return err
	}
	if spec.Layer != "" || spec.WritableRoot {
		// The zygote's root is the image alone; a template layer's files would differ.
		return errdefs.New(errdefs.ClassConflict, errdefs.CodeNotSupported, "sandbox %s has a template layer or a writable root: no zygote", id)
	}
	h, err := nsinit.HardeningFor(d.cfg.NoFile, spec.Limits.DiskMiB, spec.WritableRoot)
	if err != nil {
		return err
	}
	z, err := d.zygote(spec.Image)
	if err != nil {
		return err
	}
	_, err = z.Spawn(ctx, zygote.Spawn{InitPID: sb.InitPID(), CgroupDirs: sb.cg.Paths(id), Socket: req.Socket, Hardening: h})
	return err
}

// zygote answers image's zygote, made at its first use.
func (d *Driver) zygote(image string) (*zygote.Zygote, error) {
	agentBin, err := d.agentBinary()
	if err != nil {
		return nil, err
	}
	d.zmu.Lock()
	defer d.zmu.Unlock()
	if d.zclosed {
		return nil, errdefs.Unavailable("the driver is closed")
	}
	if d.zygotes == nil {
		d.zygotes = map[string]*zygote.Zygote{}
	}
	z := d.zygotes[image]
	if z == nil {
		z = zygote.New(zygote.Config{Agent: agentBin, Image: image, Imports: zygoteImports, Logger: d.cfg.Logger})
		d.zygotes[image] = z
	}
	return z, nil
}

// Zygote answers image's zygote if one was made (tests).
func (d *Driver) Zygote(image string) *zygote.Zygote {
	d.zmu.Lock()
	defer d.zmu.Unlock()
	return d.zygotes[image]
}

// Close stops the zygotes. Sandboxes are not touched.
func (d *Driver) Close() error {
	d.zmu.Lock()
	zs := d.zygotes
	d.zygotes, d.zclosed = nil, true
	d.zmu.Unlock()
	for _, z := range zs {
		z.Close()
	}
	return nil
}
