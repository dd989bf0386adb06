package api_test

import (
	"testing"

	"github.com/littlebigbrain/lbb/internal/testkit"
)

// agentBin is a guest agent built for the tests: Level 3 routes run on the local driver
// (no isolation; real processes, real files), which needs no root.
var agentBin string

func TestMain(m *testing.M) { testkit.Main(m, &agentBin) }
