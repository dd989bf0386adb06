package pool

import (
	"regexp"
	"strings"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// Flavours of a language's slots: what its interpreter imported before it waits. A run that
// imports none of the heavy modules pays nothing for them in a lean slot, where a full one
// costs its refill ~300 ms of CPU (python: numpy and pandas).
const (
	// FlavourFull is the language's default imports (Key.Imports nil).
	FlavourFull = ""
	// FlavourLean is the harness alone.
	FlavourLean = "lean"
)

// heavyPython are the modules whose import a full python slot has paid for, or that import
// them: code naming one runs best there.
var heavyPython = map[string]bool{
	"numpy": true, "pandas": true, "scipy": true, "sklearn": true, "matplotlib": true,
	"statsmodels": true, "seaborn": true, "pyarrow": true, "polars": true,
}

var pyImport = regexp.MustCompile(`^\s*(?:from\s+([A-Za-z_][\w.]*)\s+import\b|import\s+(.+))`)

// FlavourFor guesses from code's import statements which flavour of slot serves it best. It
// is a hint only: a module imported another way (importlib, an import inside a string) just
// costs the run its import time in a lean slot.
func FlavourFor(language, code string) string {
	if agent.Interpreter(language) != agent.LangPython {
		return FlavourFull
	}
	for _, line := range strings.Split(code, "\n") {
		m := pyImport.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		names := []string{m[1]}
		if m[2] != "" {
			// import a.b as c, d: each module's top package.
			names = nil
			for _, part := range strings.Split(strings.SplitN(m[2], "#", 2)[0], ",") {
				names = append(names, strings.Fields(strings.Trim(part, " ()\t\\"))...)
			}
		}
		for _, n := range names {
			if heavyPython[strings.SplitN(n, ".", 2)[0]] {
				return FlavourFull
			}
		}
	}
	return FlavourLean
}
