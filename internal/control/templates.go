package control

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/littlebigbrain/lbb/internal/bases"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
)

// TemplateRequest is the body of POST /v1/sandboxes/templates.
type TemplateRequest struct {
	Name        string               `json:"name"`
	Base        string               `json:"base,omitempty"`
	Code        string               `json:"code,omitempty"`
	Limits      *store.Limits        `json:"limits,omitempty"`
	TimeoutMs   int64                `json:"timeout_ms,omitempty"`
	Config      json.RawMessage      `json:"config,omitempty"`
	Files       []store.TemplateFile `json:"files,omitempty"`
	Description string               `json:"description,omitempty"`
	// Isolation is the driver the version's runs and sandboxes default to; "" is the
	// server's default at the time of each run.
	Isolation string `json:"isolation,omitempty"`
	// Egress is the route out its runs and sandboxes get unless a call names one.
	Egress *store.Egress `json:"egress,omitempty"`
	// Image is what the version installs over its base: it answers at once, building.
	Image *store.ImageRecipe `json:"image,omitempty"`
}

var templateName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// SavedTemplate is the answer of a save: the version saved, or (Existing) the newest
// version, which already holds what was saved.
type SavedTemplate struct {
	store.Template
	Existing bool `json:"existing,omitempty"`
}

// CreateTemplate saves a new, immutable version of a template. Saving what its newest version
// already holds (base, code, limits, isolation, timeout, config, files, description) makes no
// new version: it answers that one, Existing.
func (s *Service) CreateTemplate(ctx context.Context, c Caller, req TemplateRequest) (SavedTemplate, error) {
	t, err := s.newTemplateVersion(ctx, c, req)
	if err != nil {
		return SavedTemplate{}, err
	}
	// A newest version whose build failed is built again by a new version.
	if newest, err := s.st.GetTemplate(ctx, c.Graph, t.Name, 0); err == nil && sameTemplate(newest, t) &&
		(newest.Build == nil || newest.Build.Status != store.BuildFailed) {
		return SavedTemplate{Template: newest, Existing: true}, nil
	} else if err != nil && !errdefs.IsNotFound(err) {
		return SavedTemplate{}, err
	}
	t, err = s.st.CreateTemplateVersion(ctx, t)
	if err == nil && t.Image != nil {
		s.startBuild(t)
	}
	return SavedTemplate{Template: t}, err
}

// sameTemplate reports whether two versions hold the same: what runs, with what, and how it
// is described (not who saved it, nor when).
func sameTemplate(a, b store.Template) bool {
	return a.Base == b.Base && a.Code == b.Code && a.Limits == b.Limits && a.Isolation == b.Isolation &&
		a.TimeoutMs == b.TimeoutMs && sameJSON(a.Config, b.Config) && slices.Equal(a.Files, b.Files) &&
		a.Description == b.Description && reflect.DeepEqual(a.Image, b.Image) && a.Layer == b.Layer
}

// sameJSON reports whether two JSON values are equal (object keys in any order).
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// newTemplateVersion checks req and answers the version it would save.
func (s *Service) newTemplateVersion(ctx context.Context, c Caller, req TemplateRequest) (store.Template, error) {
	if !templateName.MatchString(req.Name) {
		return store.Template{}, errdefs.InvalidArgument("template name %q: want 1 to 63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit", req.Name)
	}
	baseName := req.Base
	if baseName == "" {
		baseName = "lbb/python"
	}
	base, ok := bases.Lookup(baseName)
	if !ok {
		return store.Template{}, errdefs.InvalidArgument("unknown base %q: want lbb/python, lbb/node or lbb/shell", baseName)
	}
	if req.Limits != nil {
		if _, err := s.limits(nil, req.Limits); err != nil {
			return store.Template{}, err
		}
	}
	if _, err := s.timeout(req.TimeoutMs, 0); err != nil {
		return store.Template{}, err
	}
	if req.Isolation != "" {
		if err := s.checkIsolation(req.Isolation); err != nil {
			return store.Template{}, err
		}
	}
	if req.Egress != nil {
		if err := s.checkEgress(*req.Egress); err != nil {
			return store.Template{}, err
		}
	}
	config, err := jsonValue("config", req.Config)
	if err != nil {
		return store.Template{}, err
	}
	if len(config) > 0 && config[0] != '{' {
		return store.Template{}, errdefs.InvalidArgument("config must be a JSON object")
	}
	for i, f := range req.Files {
		if f.File == "" || f.Path == "" {
			return store.Template{}, errdefs.InvalidArgument("files[%d] needs file and path", i)
		}
		if strings.HasPrefix(f.Path, "/") && !strings.HasPrefix(f.Path, "/workspace/") || strings.Contains("/"+f.Path+"/", "/../") {
			return store.Template{}, errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodePathOutsideWorkspace,
				"files[%d].path %q is outside /workspace", i, f.Path)
		}
	}
	for i, f := range req.Files {
		if _, err := s.resolveFile(ctx, c.Graph, f.File); err != nil {
			return store.Template{}, fmt.Errorf("files[%d].file: %w", i, err)
		}
	}
	var layer string
	var build *store.TemplateBuild
	if req.Image != nil {
		lb, err := s.layerBuilder()
		if err != nil {
			return store.Template{}, err
		}
		recipe, err := s.recipeOf(ctx, c.Graph, req.Image)
		if err != nil {
			return store.Template{}, err
		}
		layer = lb.LayerKey(recipe)
		build = &store.TemplateBuild{Status: store.BuildBuilding, StartedAt: s.now()}
	}
	var limits store.Limits
	if req.Limits != nil {
		limits = *req.Limits
	}
	return store.Template{Image: req.Image, Layer: layer, Build: build,
		ID: ids.New(ids.Template), Graph: c.Graph, Name: req.Name, Base: base.Name, Code: req.Code, Limits: limits,
		Isolation: req.Isolation, Egress: req.Egress, TimeoutMs: req.TimeoutMs, Config: config, Files: req.Files, Description: req.Description,
		CreatedAt: s.now(), CreatedBy: c.Key.ID,
	}, nil
}

// BaseTemplate is a built-in base, listed beside the graph's templates.
type BaseTemplate struct {
	Name     string            `json:"name"`
	Base     bool              `json:"base"`
	Language string            `json:"language"`
	Image    string            `json:"image"`
	Versions map[string]string `json:"versions"`
	Missing  []string          `json:"missing,omitempty"`
}

// versionKeys are the image versions that matter to each language.
var versionKeys = map[string][]string{
	"python": {"python", "numpy", "pandas", "scipy", "matplotlib", "pyarrow"},
	"node":   {"node"},
	"shell":  {"bash", "jq", "coreutils"},
}

// Bases lists the base templates with the versions their image has.
func (s *Service) Bases() []BaseTemplate {
	var out []BaseTemplate
	for _, b := range bases.List() {
		bt := BaseTemplate{Name: b.Name, Base: true, Language: b.Language, Image: s.image.ID, Versions: map[string]string{}}
		for _, k := range versionKeys[b.Language] {
			if v, ok := s.image.Versions[k]; ok {
				bt.Versions[k] = v
			}
		}
		if v, ok := s.image.Versions["debian"]; ok {
			bt.Versions["debian"] = v
		}
		if b.Language == "python" {
			bt.Missing = s.image.Missing
		}
		out = append(out, bt)
	}
	return out
}

// LookupBaseTemplate finds a base template by name.
func (s *Service) LookupBaseTemplate(name string) (BaseTemplate, bool) {
	for _, b := range s.Bases() {
		if b.Name == name {
			return b, true
		}
	}
	return BaseTemplate{}, false
}

// GetTemplate finds "name" (newest), "name@N" or a template by id.
func (s *Service) GetTemplate(ctx context.Context, graph, ref string) (store.Template, error) {
	return s.resolveTemplate(ctx, graph, ref)
}

// TemplateVersions lists every version of a template, newest first.
func (s *Service) TemplateVersions(ctx context.Context, graph, name string) ([]store.Template, error) {
	return s.st.ListTemplateVersions(ctx, graph, name)
}
