package agent

import "strings"

// Run languages.
const (
	LangPython = "python"
	LangNode   = "node"
	LangShell  = "shell"
)

// Language maps a run language or one of its aliases (python3 and py; javascript and js;
// bash and sh; in any case) to LangPython, LangNode or LangShell; "" when it names none.
func Language(name string) string {
	switch strings.ToLower(name) {
	case LangPython, "python3", "py":
		return LangPython
	case LangNode, "javascript", "js":
		return LangNode
	case LangShell, "bash", "sh":
		return LangShell
	}
	return ""
}

// Interpreter is the interpreter a run of language name runs in and a warm slot can
// pre-start: LangPython or LangNode; "" for shell, none or an unknown language.
func Interpreter(name string) string {
	if l := Language(name); l != LangShell {
		return l
	}
	return ""
}
