package images

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// MirrorEnv overrides the Debian mirror that is otherwise read from the host's apt sources.
const MirrorEnv = "LBB_DEBIAN_MIRROR"

// aptSource is one "deb" entry of the host's apt configuration.
type aptSource struct {
	URIs       []string
	Suites     []string
	Components []string
}

// debianSuites are the suite names and aliases of Debian's main archive. An apt source naming
// one of them (or its -updates/-backports pocket) is taken for a mirror of that archive; other
// repositories (third-party, security) name suites of their own.
var debianSuites = []string{
	"buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid",
	"oldoldstable", "oldstable", "stable", "testing", "unstable", "experimental",
}

// debianPockets are what may follow a suite name and a dash on the main archive (security
// updates live in another archive).
var debianPockets = []string{"", "updates", "backports", "backports-sloppy", "proposed-updates"}

// HostMirror finds the Debian archive mirror this machine's apt uses, so that builds fetch
// from where the host is allowed to. It reads /etc/apt/sources.list and then
// /etc/apt/sources.list.d/*.list and *.sources, in apt's order, and answers the first match.
func HostMirror() (string, error) { return hostMirror("/etc/apt") }

func hostMirror(aptDir string) (string, error) {
	files := []string{filepath.Join(aptDir, "sources.list")}
	more, _ := filepath.Glob(filepath.Join(aptDir, "sources.list.d", "*"))
	slices.Sort(more)
	files = append(files, more...)
	for _, f := range files {
		var parse func(string) []aptSource
		switch {
		case strings.HasSuffix(f, ".sources"):
			parse = parseDeb822
		case strings.HasSuffix(f, ".list"):
			parse = parseOneLine
		default:
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return "", err
		}
		if m, ok := pickMirror(parse(string(b))); ok {
			return m, nil
		}
	}
	return "", fmt.Errorf("no Debian archive among the apt sources in %s; set %s", aptDir, MirrorEnv)
}

// pickMirror answers the first URI of a source for Debian's main archive with the main component.
func pickMirror(srcs []aptSource) (string, bool) {
	for _, s := range srcs {
		if len(s.URIs) == 0 || !slices.Contains(s.Components, "main") {
			continue
		}
		for _, suite := range s.Suites {
			base, pocket, _ := strings.Cut(strings.TrimSuffix(suite, "/"), "-")
			if slices.Contains(debianSuites, base) && slices.Contains(debianPockets, pocket) {
				return strings.TrimSuffix(s.URIs[0], "/"), true
			}
		}
	}
	return "", false
}

// parseDeb822 reads the deb822 format of *.sources files: stanzas of "Field: value" lines,
// separated by blank lines, continued by lines that start with white space.
func parseDeb822(text string) []aptSource {
	var out []aptSource
	fields := map[string]string{}
	last := ""
	flush := func() {
		types := strings.Fields(fields["types"])
		enabled := strings.ToLower(strings.TrimSpace(fields["enabled"]))
		if slices.Contains(types, "deb") && enabled != "no" && enabled != "false" {
			out = append(out, aptSource{
				URIs:       strings.Fields(fields["uris"]),
				Suites:     strings.Fields(fields["suites"]),
				Components: strings.Fields(fields["components"]),
			})
		}
		fields = map[string]string{}
		last = ""
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.TrimSpace(line) == "":
			if len(fields) > 0 {
				flush()
			}
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				fields[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
	}
	if len(fields) > 0 {
		flush()
	}
	return out
}

// parseOneLine reads the one-line format of sources.list:
// "deb [option=value …] URI suite component…".
func parseOneLine(text string) []aptSource {
	var out []aptSource
	for line := range strings.Lines(text) {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "deb ") && !strings.HasPrefix(line, "deb\t") {
			continue
		}
		rest := strings.TrimSpace(line[3:])
		if strings.HasPrefix(rest, "[") {
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				continue
			}
			rest = rest[end+1:]
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		out = append(out, aptSource{URIs: f[:1], Suites: f[1:2], Components: f[2:]})
	}
	return out
}
