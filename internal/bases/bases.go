// Package bases is the table of base templates: lbb/python, lbb/node and lbb/shell, each a
// run language on the one base image. The control plane resolves templates against it; the
// image builder (internal/images) makes the image they all run on.
package bases

import "github.com/littlebigbrain/lbb/internal/agent"

// Base is a base template: a language run on the one rootfs.
type Base struct {
	Name     string `json:"name"`
	Language string `json:"language"` // python | node | shell
	// Context is the language of the code context a long-lived sandbox of this base starts
	// with, ready for its first cell ("" for none).
	Context string `json:"context,omitempty"`
}

var bases = []Base{
	{Name: "lbb/python", Language: agent.LangPython},
	{Name: "lbb/node", Language: agent.LangNode},
	{Name: "lbb/shell", Language: agent.LangShell},
	// Seed 002's code interpreter: Python, with a Jupyter kernel started with the sandbox.
	{Name: "lbb/code-interpreter", Language: agent.LangPython, Context: agent.LangPython},
}

// List lists the base templates, lbb/python (the default) first.
func List() []Base { return append([]Base(nil), bases...) }

// Lookup finds a base by name ("lbb/node"); a bare language ("node") finds it too.
func Lookup(name string) (Base, bool) {
	for _, b := range bases {
		if b.Name == name || b.Language == name {
			return b, true
		}
	}
	return Base{}, false
}
