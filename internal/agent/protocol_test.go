package agent

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	tests := []struct {
		kind    byte
		payload []byte
	}{
		{FrameStarted, []byte(`{"pid":42}`)},
		{FrameStdout, []byte("hello\n")},
		{FrameStderr, nil},
		{FrameResult, bytes.Repeat([]byte("r"), 1000)},
		{FrameStdout, bytes.Repeat([]byte{0}, MaxFrame)},
		{FrameExit, []byte(`{"exit_code":0}`)},
	}
	var buf bytes.Buffer
	for _, tt := range tests {
		if err := WriteFrame(&buf, tt.kind, tt.payload); err != nil {
			t.Fatal(err)
		}
	}
	scratch := make([]byte, 0, 16)
	for i, tt := range tests {
		kind, payload, err := ReadFrame(&buf, scratch)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if kind != tt.kind || !bytes.Equal(payload, tt.payload) {
			t.Errorf("frame %d: got %q (%d bytes), want %q (%d bytes)", i, kind, len(payload), tt.kind, len(tt.payload))
		}
	}
	if _, _, err := ReadFrame(&buf, nil); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadFrameErrors(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  string // substring of the error; "EOF" matches io.EOF
	}{
		{"empty", "", "EOF"},
		{"short header", "1\x00\x00", "unexpected EOF"},
		{"unknown kind", "z\x00\x00\x00\x00", "unknown frame kind"},
		{"too large", "1\x00\x01\x00\x01", "exceeds"},
		{"short payload", "1\x00\x00\x00\x05abc", "unexpected EOF"},
		{"header only", "1\x00\x00\x00\x05", "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ReadFrame(strings.NewReader(tt.input), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error holding %q", err, tt.want)
			}
		})
	}
}

func TestWriteFrameTooLarge(t *testing.T) {
	if err := WriteFrame(io.Discard, FrameStdout, make([]byte, MaxFrame+1)); err == nil {
		t.Error("a frame over MaxFrame was written")
	}
}

func TestPutFrameHeader(t *testing.T) {
	b := make([]byte, FrameHeaderLen+3)
	PutFrameHeader(b, FrameStderr, 3)
	copy(b[FrameHeaderLen:], "abc")
	kind, payload, err := ReadFrame(bytes.NewReader(b), nil)
	if err != nil || kind != FrameStderr || string(payload) != "abc" {
		t.Errorf("got %q %q %v", kind, payload, err)
	}
}

func TestStatusOf(t *testing.T) {
	for code, want := range map[string]int{
		CodePathOutside: 400, CodeNotFound: 404, CodeIsDir: 400, CodeNotDir: 400, CodeDiskFull: 507,
		CodeExists: 409, CodeNotEmpty: 409, CodeNotSupported: 501, CodePermission: 403, "whatever": 500,
	} {
		if got := StatusOf(code); got != want {
			t.Errorf("StatusOf(%q) = %d, want %d", code, got, want)
		}
	}
	err := error(&Error{Code: CodeNotFound, Message: "x"})
	if !IsCode(errors.Join(errors.New("ctx"), err), CodeNotFound) || IsCode(err, CodeExists) {
		t.Error("IsCode")
	}
}

// FuzzReadFrame: any input either decodes into frames that re-encode to the same bytes, or
// fails; it never panics nor reads a payload beyond MaxFrame.
func FuzzReadFrame(f *testing.F) {
	var seed bytes.Buffer
	WriteFrame(&seed, FrameStarted, []byte(`{"pid":1}`))
	WriteFrame(&seed, FrameStdout, []byte("out"))
	WriteFrame(&seed, FrameExit, []byte(`{"exit_code":0}`))
	f.Add(seed.Bytes())
	f.Add([]byte{})
	f.Add([]byte("x\x00\x00\x00\x00"))
	f.Add([]byte("1\xff\xff\xff\xff"))
	f.Add([]byte("r\x00\x00\x00\x02{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var out bytes.Buffer
		var buf []byte
		consumed := 0
		for {
			kind, payload, err := ReadFrame(r, buf)
			if err != nil {
				break
			}
			if len(payload) > MaxFrame {
				t.Fatalf("payload of %d bytes", len(payload))
			}
			buf = payload[:0]
			if err := WriteFrame(&out, kind, payload); err != nil {
				t.Fatal(err)
			}
			consumed += FrameHeaderLen + len(payload)
		}
		if !bytes.Equal(out.Bytes(), data[:consumed]) {
			t.Fatalf("re-encoding differs")
		}
	})
}
