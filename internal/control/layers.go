package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/layers"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Templates that carry their own packages: a version with a recipe (store.ImageRecipe) is
// saved at once with its build "building"; the build runs here, in a build sandbox on the
// host agent (hostagent.LayerBuilder), and seals a read-only layer shared by every version
// with the same base image and recipe. Runs and sandboxes of the version run on that layer
// once its build is ready; before, they answer 409 template_building, and after a failed
// build 409 template_build_failed.

// layerBuilder is the host agent's ability to build layers.
func (s *Service) layerBuilder() (hostagent.LayerBuilder, error) {
	lb, ok := s.host.(hostagent.LayerBuilder)
	if !ok {
		return nil, errdefs.New(errdefs.ClassUnavailable, errdefs.CodeNotSupported,
			"this server's host agent builds no template layers: a template cannot carry an image recipe here")
	}
	return lb, nil
}

// recipeOf checks img and answers the recipe it builds, its files named by their sha256.
func (s *Service) recipeOf(ctx context.Context, graph string, img *store.ImageRecipe) (layers.Recipe, error) {
	r := layers.Recipe{Apt: img.Apt, Pip: img.Pip, Npm: img.Npm, Run: img.Run}
	for i, f := range img.Files {
		if f.File == "" || f.Path == "" {
			return r, errdefs.InvalidArgument("image.files[%d] needs file and path", i)
		}
		file, err := s.resolveFile(ctx, graph, f.File)
		if err != nil {
			return r, fmt.Errorf("image.files[%d].file: %w", i, err)
		}
		r.Files = append(r.Files, layers.File{Path: f.Path, Digest: file.SHA256})
	}
	if r.Empty() {
		return r, errdefs.InvalidArgument("image needs at least one of apt, pip, npm, run or files")
	}
	return r, r.Check()
}

// buildKey names one version's build among those running in this process.
func buildKey(t store.Template) string { return fmt.Sprintf("%s@%d", t.ID, t.Version) }

// startBuild builds t's layer in the background unless this process builds it already.
func (s *Service) startBuild(t store.Template) {
	lb, err := s.layerBuilder()
	if err != nil || t.Image == nil {
		return
	}
	k := buildKey(t)
	s.bmu.Lock()
	if s.builds == nil {
		s.builds = map[string]chan struct{}{}
	}
	if _, ok := s.builds[k]; ok {
		s.bmu.Unlock()
		return
	}
	done := make(chan struct{})
	s.builds[k] = done
	s.bmu.Unlock()
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		defer func() {
			s.bmu.Lock()
			delete(s.builds, k)
			s.bmu.Unlock()
			close(done)
		}()
		s.build(s.runCtx, lb, t)
	}()
}

// build runs t's build and records how it ended.
func (s *Service) build(ctx context.Context, lb hostagent.LayerBuilder, t store.Template) {
	log := s.log.With("template", t.Name, "version", t.Version, "layer", t.Layer)
	b := store.TemplateBuild{Status: store.BuildBuilding, StartedAt: s.now()}
	if t.Build != nil {
		b.StartedAt = t.Build.StartedAt
	}
	recipe, err := s.recipeOf(ctx, t.Graph, t.Image)
	var info layers.Info
	if err == nil {
		limits := runtimeLimits(t.Limits)
		limits.DiskMiB = max(limits.DiskMiB, 4096) // packages need room; the layer is what they take
		info, err = lb.BuildLayer(ctx, hostagent.LayerBuildRequest{SandboxID: ids.New(ids.Sandbox), Recipe: recipe, Limits: limits}, nil)
	}
	if err != nil && ctx.Err() != nil {
		// The server is shutting down: the version stays building, and its build starts
		// again on the next server's first look at it (usable, GetTemplateBuild).
		log.Info("template build interrupted by shutdown", "err", err)
		return
	}
	now := s.now()
	b.FinishedAt, b.DurationMs = &now, now.Sub(b.StartedAt).Milliseconds()
	if err == nil && info.Key != t.Layer {
		err = fmt.Errorf("the layer built is %s, not %s: the server's base image changed since the version was saved", info.Key, t.Layer)
	}
	if err != nil {
		var se *layers.StepError
		if errors.As(err, &se) {
			b.Step = se.Step
		}
		b.Status, b.Error = store.BuildFailed, err.Error()
		log.Warn("template build failed", "err", err)
	} else {
		b.Status, b.Resolved, b.LayerBytes = store.BuildReady, info.Resolved, info.Bytes
		b.Cached = info.BuiltAt.Before(b.StartedAt)
		log.Info("template built", "ms", b.DurationMs, "bytes", info.Bytes, "cached", b.Cached)
	}
	if err := s.st.SetTemplateBuild(context.WithoutCancel(ctx), t.ID, t.Version, b); err != nil {
		log.Error("recording a template build", "err", err)
	}
}

// usable checks that template version t can run: no recipe, or its layer built.
func (s *Service) usable(ctx context.Context, t store.Template) error {
	if t.Image == nil {
		return nil
	}
	ref := fmt.Sprintf("%s@%d", t.Name, t.Version)
	switch {
	case t.Build == nil || t.Build.Status == store.BuildBuilding:
		s.startBuild(t) // after a restart, the build goes on here
		return errdefs.New(errdefs.ClassConflict, errdefs.CodeTemplateBuilding,
			"template %s is still building its image; GET /v1/sandboxes/templates/%s/build shows its progress", ref, ref)
	case t.Build.Status == store.BuildFailed:
		return errdefs.New(errdefs.ClassConflict, errdefs.CodeTemplateBuildFailed,
			"template %s failed to build at step %s: %s", ref, cmpOr(t.Build.Step, "?"), t.Build.Error)
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// usableTemplate resolves ref and checks that it can run, waiting up to wait for its build.
func (s *Service) usableTemplate(ctx context.Context, graph, ref string, wait time.Duration) (store.Template, error) {
	t, err := s.resolveTemplate(ctx, graph, ref)
	if err != nil {
		return t, err
	}
	deadline := time.Now().Add(wait)
	for {
		err = s.usable(ctx, t)
		if errdefs.CodeOf(err) != errdefs.CodeTemplateBuilding || time.Now().After(deadline) {
			return t, err
		}
		s.bmu.Lock()
		done := s.builds[buildKey(t)]
		s.bmu.Unlock()
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-done:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return t, ctx.Err()
		}
		timer.Stop()
		if t, err = s.st.GetTemplate(ctx, graph, t.Name, t.Version); err != nil {
			return t, err
		}
	}
}

// TemplateBuild is the answer of GET /v1/sandboxes/templates/{ref}/build.
type TemplateBuild struct {
	Template string `json:"template"`
	Version  int    `json:"version"`
	Layer    string `json:"layer"`
	store.TemplateBuild
	Image *store.ImageRecipe `json:"image"`
	// Log is the build's output (the last build of its layer on this server).
	Log string `json:"log"`
}

// GetTemplateBuild answers the build of template version ref, with its log.
func (s *Service) GetTemplateBuild(ctx context.Context, graph, ref string) (TemplateBuild, error) {
	t, err := s.resolveTemplate(ctx, graph, ref)
	if err != nil {
		return TemplateBuild{}, err
	}
	if t.Image == nil {
		return TemplateBuild{}, errdefs.NotFound("template %s@%d has no image recipe, hence no build", t.Name, t.Version)
	}
	if t.Build == nil || t.Build.Status == store.BuildBuilding {
		s.startBuild(t)
	}
	out := TemplateBuild{Template: t.Name, Version: t.Version, Layer: t.Layer, Image: t.Image}
	if t.Build != nil {
		out.TemplateBuild = *t.Build
	} else {
		out.Status = store.BuildBuilding
	}
	if lb, err := s.layerBuilder(); err == nil {
		if b, err := lb.LayerLog(ctx, t.Layer); err == nil {
			const max = 1 << 20
			if len(b) > max {
				b = append([]byte("…\n"), b[len(b)-max:]...)
			}
			out.Log = strings.ToValidUTF8(string(b), "\uFFFD")
		}
	}
	return out, nil
}

// sweepLayers removes the layers no template version names (failed builds' directories, and
// layers whose versions are gone).
func (s *Service) sweepLayers(ctx context.Context) (int, error) {
	lb, err := s.layerBuilder()
	if err != nil {
		return 0, nil
	}
	keep, err := s.st.TemplateLayers(ctx)
	if err != nil {
		return 0, err
	}
	// A version whose build failed names a layer that is not there: its log stays until
	// a retry replaces it.
	removed, err := lb.GCLayers(ctx, keep)
	return len(removed), err
}

// layerOf is the layer a sandbox of template version t runs on ("" for none).
func layerOf(t *store.Template) string {
	if t == nil || t.Image == nil {
		return ""
	}
	return t.Layer
}
