package guest

import (
	"regexp"
	"strings"
	"testing"
)

// sameAsPattern checks that the hand check check accepts exactly what pattern matches, over
// cases and every one- and two-byte string of alphabet (good and bad bytes).
func sameAsPattern(t *testing.T, name string, check func(string) bool, pattern *regexp.Regexp, alphabet string, cases ...string) {
	t.Helper()
	for i := 0; i < len(alphabet); i++ {
		cases = append(cases, alphabet[i:i+1])
		for j := 0; j < len(alphabet); j++ {
			cases = append(cases, alphabet[i:i+1]+alphabet[j:j+1])
		}
	}
	for _, c := range cases {
		if got, want := check(c), pattern.MatchString(c); got != want {
			t.Errorf("%s(%q) = %v, the pattern says %v", name, c, got, want)
		}
	}
}

func TestValidImportMatchesPattern(t *testing.T) {
	sameAsPattern(t, "validImport", validImport, regexp.MustCompile(`^[A-Za-z0-9_@][A-Za-z0-9_.@/:-]{0,199}$`),
		"aZ09_@./:- ;\n\x00\xff$",
		"", "numpy", "pandas", "@scope/pkg", "os.path", "a", "_x", "@", "x:y-z",
		".hidden", "/abs", "-flag", ":x", "a b", "a;rm", "a\n", "\nnumpy", "ü", "a$", "a`b`",
		strings.Repeat("a", 199), strings.Repeat("a", 200), strings.Repeat("a", 201), "a"+strings.Repeat("/", 199))
}

func TestValidSocketNameMatchesPattern(t *testing.T) {
	sameAsPattern(t, "validSocketName", validSocketName, regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`),
		"aZ09_.-/ @\n\x00\xff",
		"", "lbb-zygote-0123abcd", "a", ".", "-", "_", "a b", "a/b", "@x", "a\x00",
		strings.Repeat("a", 64), strings.Repeat("a", 65), "ü")
}
