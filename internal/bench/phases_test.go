package bench

import "testing"

func TestParseServerTiming(t *testing.T) {
	got := ParseServerTiming("auth;dur=0.82, claim;dur=1.32,admit;desc=\"x\";dur=2.5, run;dur=1, run;dur=2, bad;dur=x, nodur")
	want := map[string]float64{"auth": 0.82, "claim": 1.32, "admit": 2.5, "run": 3}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
}
