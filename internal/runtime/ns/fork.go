//go:build linux

package ns

import (
	"context"
	"regexp"
	"slices"
	"strings"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/ns/nsinit"
	"github.com/littlebigbrain/lbb/internal/runtime/ns/zygote"
)

// validImport is a module name a zygote may import (Z imports it before any fork).
var validImport = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// zygoteImports are what an image's default zygote imports: a slot's default python imports.
var zygoteImports = []string{"numpy", "pandas"}

// ForkInterpreter forks a pre-started python interpreter, with req.Imports imported (nil:
// numpy and pandas; empty: the harness alone), into started sandbox id from the zygote of its
// image and those imports (started at the first call, again after it died), with the
// sandbox's namespaces, cgroups and the init's hardening (runtime.InterpreterForker). The
// sandbox's agent adopts it on req.Socket.
func (d *Driver) ForkInterpreter(ctx context.Context, id string, req runtime.ForkRequest) error {
	if req.Language != "python" {
		return errdefs.New(errdefs.ClassConflict, errdefs.CodeNotSupported, "no %s zygote", req.Language)
	}
	for _, m := range req.Imports {
		if !validImport.MatchString(m) {
			return errdefs.InvalidArgument("import %q is not a module name", m)
		}
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
	z, err := d.zygote(spec.Image, req.Imports)
	if err != nil {
		return err
	}
	_, err = z.Spawn(ctx, zygote.Spawn{InitPID: sb.InitPID(), CgroupDirs: sb.cg.Paths(id), Socket: req.Socket, Hardening: h})
	return err
}

// zygoteKey names the zygote of image and imports (nil: zygoteImports).
func zygoteKey(image string, imports []string) string {
	if imports == nil {
		imports = zygoteImports
	}
	return image + "\x00" + strings.Join(imports, ",")
}

// zygote answers the zygote of image and imports (nil: zygoteImports), made at its first use.
func (d *Driver) zygote(image string, imports []string) (*zygote.Zygote, error) {
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
	key := zygoteKey(image, imports)
	z := d.zygotes[key]
	if z == nil {
		if imports == nil {
			imports = zygoteImports
		}
		z = zygote.New(zygote.Config{Agent: agentBin, Image: image, Imports: slices.Clone(imports), Logger: d.cfg.Logger})
		d.zygotes[key] = z
	}
	return z, nil
}

// Zygote answers the zygote of image and imports (nil: numpy and pandas; empty: the lean
// one) if one was made (tests).
func (d *Driver) Zygote(image string, imports []string) *zygote.Zygote {
	d.zmu.Lock()
	defer d.zmu.Unlock()
	return d.zygotes[zygoteKey(image, imports)]
}

// Close stops the zygotes and the spawn helper. Sandboxes are not touched.
func (d *Driver) Close() error {
	d.zmu.Lock()
	zs := d.zygotes
	d.zygotes, d.zclosed = nil, true
	d.zmu.Unlock()
	for _, z := range zs {
		z.Close()
	}
	d.sbs.RemoveRunDir()
	return d.spawner.Close()
}
