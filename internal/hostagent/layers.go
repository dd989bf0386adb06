package hostagent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/layers"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// LayerBuilder is an optional ability of a Host: build the read-only layers templates carry
// their packages in (internal/layers), and run sandboxes on them (RunRequest.Layer,
// CreateRequest.Layer…). The control plane finds it by type assertion; a machine without it
// refuses templates with a recipe.
type LayerBuilder interface {
	// BuildLayer builds the layer of req.Recipe over the machine's image unless it is built,
	// streaming the build's output to log, and answers its record. A failed step is a
	// *layers.StepError.
	BuildLayer(ctx context.Context, req LayerBuildRequest, log io.Writer) (layers.Info, error)
	// LayerKey is the key BuildLayer would give recipe on this machine's image.
	LayerKey(recipe layers.Recipe) string
	// LayerLog is the log of the last build of layer key.
	LayerLog(ctx context.Context, key string) ([]byte, error)
	// GCLayers removes every layer keep does not name and answers the keys removed.
	GCLayers(ctx context.Context, keep []string) ([]string, error)
}

// LayerBuildRequest asks for a layer: the recipe (its Files' Data filled from the blobs by
// the host agent) and the build sandbox's id and limits.
type LayerBuildRequest struct {
	SandboxID string         `json:"sandbox_id"`
	Recipe    layers.Recipe  `json:"recipe"`
	Limits    runtime.Limits `json:"limits"`
}

// LayerOptions configure builds on a Local host agent.
type LayerOptions struct {
	// Dir holds the layers (<DataDir>/layers).
	Dir string
	// Sources are the package sources builds use; Allow is the build sandbox's egress
	// allowlist (the sources' hosts), nothing else. An empty Allow gives builds no route out.
	Sources layers.Sources
	Allow   []string
}

var _ LayerBuilder = (*Local)(nil)

// WithLayers lets h build layers and run sandboxes on them.
func (h *Local) WithLayers(o LayerOptions) *Local {
	h.layers = &layers.Store{Dir: o.Dir}
	h.layerOpts = o
	return h
}

func (h *Local) layerStore() (*layers.Store, error) {
	if h.layers == nil {
		return nil, errdefs.New(errdefs.ClassUnavailable, errdefs.CodeNotSupported, "this machine builds no template layers")
	}
	return h.layers, nil
}

// buildDriver is the driver build sandboxes run on: ns (the one that can export a layer).
func (h *Local) buildDriver() (runtime.Driver, error) {
	d := h.driver
	if m, ok := d.(interface {
		Driver(name string) (runtime.Driver, bool)
	}); ok {
		if ns, ok := m.Driver("ns"); ok {
			d = ns
		}
	}
	if _, ok := d.(runtime.LayerExporter); !ok {
		return nil, errdefs.New(errdefs.ClassUnavailable, errdefs.CodeNotSupported,
			"template builds need the ns driver on this machine (%s cannot export a layer)", d.Name())
	}
	return d, nil
}

func (h *Local) LayerKey(recipe layers.Recipe) string { return layers.Key(h.info.Image.ID, recipe) }

func (h *Local) BuildLayer(ctx context.Context, req LayerBuildRequest, log io.Writer) (layers.Info, error) {
	st, err := h.layerStore()
	if err != nil {
		return layers.Info{}, err
	}
	d, err := h.buildDriver()
	if err != nil {
		return layers.Info{}, err
	}
	for i, f := range req.Recipe.Files {
		if h.blobs == nil {
			return layers.Info{}, errors.New("hostagent: no blob store for a recipe's files")
		}
		rc, _, err := h.blobs.Open(ctx, f.Digest)
		if err != nil {
			return layers.Info{}, fmt.Errorf("image.files[%d]: %w", i, err)
		}
		data, err := io.ReadAll(io.LimitReader(rc, 256<<20))
		rc.Close()
		if err != nil {
			return layers.Info{}, fmt.Errorf("image.files[%d]: %w", i, err)
		}
		req.Recipe.Files[i].Data = data
	}
	o := layers.BuildOptions{Driver: d, Image: h.rootfs, BaseID: h.info.Image.ID, Recipe: req.Recipe,
		Sources: h.layerOpts.Sources, SandboxID: req.SandboxID, Limits: req.Limits, Log: log}
	if len(h.layerOpts.Allow) > 0 {
		o.Connect = func(ctx context.Context, c *agent.Client) (func(), error) {
			spec := &Egress{Policy: store.Egress{Mode: store.EgressAllowlist, Allow: h.layerOpts.Allow}}
			esb, err := h.newEgress(req.SandboxID, spec)
			if err != nil {
				return nil, err
			}
			sess, err := h.openEgress(ctx, c, esb, spec)
			if err != nil {
				return nil, err
			}
			return func() { sess.Close() }, nil
		}
	}
	return st.Build(ctx, o)
}

func (h *Local) LayerLog(ctx context.Context, key string) ([]byte, error) {
	st, err := h.layerStore()
	if err != nil {
		return nil, err
	}
	return st.Log(key)
}

func (h *Local) GCLayers(ctx context.Context, keep []string) ([]string, error) {
	if h.layers == nil {
		return nil, nil // no builds here: nothing to collect
	}
	st := h.layers
	in := map[string]bool{}
	for _, k := range keep {
		in[k] = true
	}
	if err := h.dropWarmLayers(ctx, st, in); err != nil {
		return nil, err
	}
	return st.GC(in)
}

// image is the image directory of a sandbox on layer ("" is the base) and driver runtime ("":
// the machine's default), and the layer's directory for a driver that stacks it itself
// (runtime.LayerStacker: microvm) — the others get base and layer stacked in the image.
func (h *Local) image(layer, runtime string) (image, layerDir string, err error) {
	if layer == "" {
		return h.rootfs, "", nil
	}
	if runtime == "" {
		runtime = h.info.Default
	}
	st, err := h.layerStore()
	if err != nil {
		return "", "", err
	}
	if h.stacksLayers(runtime) {
		layerDir, err = st.Layer(layer, h.info.Image.ID)
		image = h.rootfs
	} else {
		image, err = st.Rootfs(layer, h.info.Image.ID, h.rootfs)
	}
	if errdefs.IsNotFound(err) {
		return "", "", errdefs.Wrap(errdefs.ClassConflict, errdefs.CodeTemplateBuilding, fmt.Errorf("layer %s is not built on this machine", layer))
	}
	return image, layerDir, err
}

// stacksLayers reports whether driver name stacks a template layer itself.
func (h *Local) stacksLayers(name string) bool {
	d := h.driver
	if m, ok := d.(interface {
		Driver(name string) (runtime.Driver, bool)
	}); ok {
		if named, ok := m.Driver(name); ok {
			d = named
		}
	}
	_, ok := d.(runtime.LayerStacker)
	return ok
}

// warmLayer has the warm pool keep slots of the template layer key that a one-call run r
// is for (pool.Pool.Ensure), as many as its demand asks for and none while it has none: its
// first run starts cold, the next ones find a slot with the layer mounted and the
// interpreter pre-started (the layer's packages on its path).
func (h *Local) warmLayer(key string, r pool.Request) {
	if h.pool == nil {
		return
	}
	lang := agent.Interpreter(r.Language)
	k := pool.Key{Image: r.Spec.Image, Layer: r.Spec.Layer, Language: lang, Limits: r.Spec.Limits, Runtime: r.Spec.Runtime,
		Max: 2}
	name := cmp.Or(lang, "bare")
	if lang != "" {
		k.Flavour = r.Flavour
		if lang == agent.LangPython && r.Flavour == pool.FlavourLean {
			k.Imports, name = []string{}, "python-lean"
		}
	}
	k.Name = fmt.Sprintf("layer-%.12s/%s/%s/%dm-%gc", key, cmp.Or(r.Spec.Runtime, h.info.Default), name, k.Limits.MemoryMiB, k.Limits.CPUs)
	added, err := h.pool.Ensure(k)
	switch {
	case err != nil:
		h.log.Warn("warm slots of a template layer", "layer", key, "err", err)
	case added:
		h.log.Info("the pool keeps slots of a template layer as demand asks", "layer", key, "key", k.Name)
	}
}

// dropWarmLayers removes the pool's keys (and parked slots) of the layers GC is about to
// collect: every one the store holds that keep does not name.
func (h *Local) dropWarmLayers(ctx context.Context, st *layers.Store, keep map[string]bool) error {
	if h.pool == nil {
		return nil
	}
	all, err := st.List()
	if err != nil {
		return err
	}
	var gone []string
	for _, k := range all {
		if !keep[k] {
			gone = append(gone, st.Path(k)+string(filepath.Separator))
		}
	}
	if len(gone) == 0 {
		return nil
	}
	return h.pool.Drop(ctx, func(k pool.Key) bool {
		for _, dir := range gone {
			if strings.HasPrefix(k.Image, dir) || strings.HasPrefix(k.Layer, dir) {
				return true
			}
		}
		return false
	})
}

// CloseLayers unmounts the rootfs of every template layer.
func (h *Local) CloseLayers() error {
	if h.layers == nil {
		return nil
	}
	return h.layers.Close()
}
