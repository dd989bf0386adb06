package guest

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
)

var (
	//go:embed harness/python.py
	pythonHarness string
	//go:embed harness/node.js
	nodeHarness string
)

// maxEnvValue keeps $LBB_INPUT and $LBB_CONFIG under the kernel's limit for one
// environment string (MAX_ARG_STRLEN, 128 KiB).
const maxEnvValue = 120 << 10

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	var req agent.RunRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, agent.MaxResult)).Decode(&req); err != nil {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: "run request: " + err.Error()})
		return
	}
	input := bytes.TrimSpace(req.Input)
	if len(input) == 0 {
		input = []byte("null")
	}
	config := bytes.TrimSpace(req.Config)
	if len(config) == 0 || string(config) == "null" {
		config = []byte("{}")
	}
	sp := &procSpec{id: req.ID, env: req.Env, cwd: req.Cwd, timeout: time.Duration(req.TimeoutMs) * time.Millisecond}
	var err error
	switch lang := agent.Language(req.Language); {
	case req.Script:
		s.takeWarm("", nil)
		var cleanup func()
		cleanup, err = scriptSpec(sp, lang, req.Code)
		if cleanup != nil {
			defer cleanup()
		}
	case lang == agent.LangPython || lang == agent.LangNode:
		if wp := s.takeWarm(lang, s.listenEnv(req.Env)); wp != nil {
			s.warmSpec(sp, wp, req.Code, input, config)
		} else {
			err = s.harnessSpec(sp, harnessArgv(lang), req.Code, input, config)
		}
	case lang == agent.LangShell:
		s.takeWarm("", nil)
		var cleanup func()
		cleanup, err = s.shellSpec(sp, req.Code, input, config)
		if cleanup != nil {
			defer cleanup()
		}
	default:
		err = &agent.Error{Code: agent.CodeInvalid, Message: fmt.Sprintf("language %q: want python, node or shell", req.Language)}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.stream(w, r, sp)
}

// scriptSpec runs code as a plain program of lang; a long one from a file, since one argument
// is at most MAX_ARG_STRLEN.
func scriptSpec(sp *procSpec, lang, code string) (func(), error) {
	var argv []string
	switch lang {
	case agent.LangPython:
		argv = []string{"python3", "-c"}
	case agent.LangNode:
		argv = []string{"node", "-e"}
	case agent.LangShell:
		argv = []string{"bash", "-c"}
	default:
		return nil, &agent.Error{Code: agent.CodeInvalid, Message: fmt.Sprintf("language %q: want python, node or shell", lang)}
	}
	var cleanup func()
	if len(code) < maxEnvValue {
		argv = append(argv, code)
	} else {
		dir, err := os.MkdirTemp("", "lbb-script-")
		if err != nil {
			return nil, err
		}
		cleanup = func() { os.RemoveAll(dir) }
		name := filepath.Join(dir, "script")
		if err := os.WriteFile(name, []byte(code), 0o644); err != nil {
			return cleanup, err
		}
		argv = []string{argv[0], name}
	}
	sp.argv = argv
	sp.finish = func(ex *agent.Exit, hdr *resultHeader, fw *frameWriter) {
		ex.OK = ex.ExitCode == 0 && ex.Signal == "" && !ex.TimedOut
		switch {
		case ex.TimedOut:
			ex.Error = "the script passed its timeout"
		case ex.Signal != "":
			ex.Error = "the script was killed by " + ex.Signal
		case ex.ExitCode != 0:
			ex.Error = fmt.Sprintf("the script exited with code %d", ex.ExitCode)
		}
	}
	return cleanup, nil
}

// harnessSpec runs an interpreter with an embedded harness: the request goes in on fd 3,
// the status line and result come back on fd 4, and stdout and stderr are the user's.
func (s *Server) harnessSpec(sp *procSpec, argv []string, code string, input, config []byte) error {
	reqJSON, err := json.Marshal(struct {
		Code   string          `json:"code"`
		Input  json.RawMessage `json:"input"`
		Config json.RawMessage `json:"config"`
	}{code, input, config})
	if err != nil {
		return &agent.Error{Code: agent.CodeInvalid, Message: err.Error()}
	}
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return err
	}
	resR, resW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return err
	}
	go func() {
		reqW.Write(reqJSON)
		reqW.Close()
	}()
	sp.argv = argv
	sp.extra = []*os.File{reqR, resW}
	sp.result = resR
	sp.finish = harnessFinish
	return nil
}

// warmSpec hands the run to a pre-started interpreter; stream sends it the request once the
// working directory is resolved.
func (s *Server) warmSpec(sp *procSpec, wp *warmProc, code string, input, config []byte) {
	sp.warm = wp
	sp.warmReq = func(dir string, env map[string]string) ([]byte, error) {
		return warmRequest(code, input, config, dir, env)
	}
	sp.result = wp.resR
	sp.finish = harnessFinish
}

func harnessFinish(ex *agent.Exit, hdr *resultHeader, fw *frameWriter) {
	ex.OK = hdr.seen && hdr.OK && ex.ExitCode == 0 && ex.Signal == "" && !ex.TimedOut
	if !ex.OK {
		ex.Error = failure(ex, hdr)
	}
}

// failure says why a run is not OK.
func failure(ex *agent.Exit, hdr *resultHeader) string {
	switch {
	case ex.TimedOut:
		return fmt.Sprintf("timed out after %d ms", ex.DurationMs)
	case hdr.seen && !hdr.OK && hdr.Error != "":
		return hdr.Error
	case ex.Signal != "":
		return "killed by " + ex.Signal
	case ex.ExitCode != 0:
		return fmt.Sprintf("exit code %d", ex.ExitCode)
	default:
		return "run did not report a result"
	}
}

// shellSpec runs the code with bash: input on stdin, $LBB_INPUT, $LBB_INPUT_FILE and
// $LBB_CONFIG; the result is read from the file $LBB_RESULT after the script ends.
func (s *Server) shellSpec(sp *procSpec, code string, input, config []byte) (func(), error) {
	dir, err := os.MkdirTemp("", "lbb-run-")
	if err != nil {
		return nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	inputFile := filepath.Join(dir, "input.json")
	if err := os.WriteFile(inputFile, input, 0o644); err != nil {
		return cleanup, err
	}
	resultFile := filepath.Join(dir, "result")
	env := map[string]string{}
	for k, v := range sp.env {
		env[k] = v
	}
	env["LBB_INPUT_FILE"] = inputFile
	env["LBB_RESULT"] = resultFile
	env["LBB_CONFIG"] = string(config)
	var warn string
	if len(input) <= maxEnvValue {
		env["LBB_INPUT"] = string(input)
	} else {
		delete(env, "LBB_INPUT")
		warn = fmt.Sprintf("lbb: the input (%d bytes) is too large for $LBB_INPUT; read stdin or $LBB_INPUT_FILE\n", len(input))
	}
	if len(config) > maxEnvValue {
		return cleanup, &agent.Error{Code: agent.CodeInvalid, Message: fmt.Sprintf("config of %d bytes is too large for $LBB_CONFIG", len(config))}
	}
	sp.env = env
	if len(code) < maxEnvValue {
		sp.argv = []string{"bash", "-c", code, "lbb-run"}
	} else {
		script := filepath.Join(dir, "run.sh")
		if err := os.WriteFile(script, []byte(code), 0o644); err != nil {
			return cleanup, err
		}
		sp.argv = []string{"bash", script}
	}
	sp.stdin = bytes.NewReader(input)
	sp.finish = func(ex *agent.Exit, hdr *resultHeader, fw *frameWriter) {
		if warn != "" {
			fw.writeChunks(agent.FrameStderr, []byte(warn))
		}
		ex.OK = ex.ExitCode == 0 && ex.Signal == "" && !ex.TimedOut
		if !ex.OK {
			ex.Error = failure(ex, hdr)
			return
		}
		res, err := shellResult(resultFile)
		if err != nil {
			ex.OK, ex.Error = false, err.Error()
			return
		}
		fw.writeChunks(agent.FrameResult, res)
	}
	return cleanup, nil
}

// shellResult reads what a script wrote to $LBB_RESULT: JSON when it parses, else a string.
func shellResult(file string) ([]byte, error) {
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return []byte("null"), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading $LBB_RESULT: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, agent.MaxResult+1))
	if err != nil {
		return nil, fmt.Errorf("reading $LBB_RESULT: %w", err)
	}
	if len(b) > agent.MaxResult {
		return nil, fmt.Errorf("$LBB_RESULT holds more than %d bytes", agent.MaxResult)
	}
	if t := bytes.TrimSpace(b); len(t) > 0 && json.Valid(t) {
		return t, nil
	}
	if len(bytes.TrimSpace(b)) == 0 && len(b) == 0 {
		return []byte("null"), nil
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	return json.Marshal(string(b))
}
