package agent

import "testing"

func TestLanguage(t *testing.T) {
	for name, want := range map[string][2]string{
		"python": {LangPython, LangPython}, "Python3": {LangPython, LangPython}, "py": {LangPython, LangPython},
		"node": {LangNode, LangNode}, "javascript": {LangNode, LangNode}, "JS": {LangNode, LangNode},
		"shell": {LangShell, ""}, "bash": {LangShell, ""}, "sh": {LangShell, ""},
		"": {"", ""}, "ruby": {"", ""},
	} {
		if got := Language(name); got != want[0] {
			t.Errorf("Language(%q) = %q, want %q", name, got, want[0])
		}
		if got := Interpreter(name); got != want[1] {
			t.Errorf("Interpreter(%q) = %q, want %q", name, got, want[1])
		}
	}
}
