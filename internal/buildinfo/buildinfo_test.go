package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestDescribe(t *testing.T) {
	if v, c := Describe("v1.2.3", "0.1.0-dev", "abc1234"); v != "v1.2.3" || c != "abc1234" {
		t.Errorf("stamped: got %s %s, want what -ldflags set", v, c)
	}
	rev := "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		bi           debug.BuildInfo
		wantV, wantC string
	}{
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "0.1.0-dev", "unknown"},
		{debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261204230000-0123456789ab"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}},
			"v0.0.0-20261204230000-0123456789ab", "0123456789ab"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}},
			"0.1.0-dev", "0123456789ab+dirty"},
	} {
		if v, c := fromBuildInfo(&tc.bi, "0.1.0-dev", "unknown"); v != tc.wantV || c != tc.wantC {
			t.Errorf("%+v: got %s %s, want %s %s", tc.bi, v, c, tc.wantV, tc.wantC)
		}
	}
}
