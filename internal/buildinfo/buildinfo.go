// Package buildinfo says which build a binary is: the version and commit -ldflags stamped (make
// build, make install), else those the Go toolchain recorded (go install, go build from a
// clone).
package buildinfo

import "runtime/debug"

// Describe returns version and commit as given when -ldflags set version (it differs from
// unstamped, its value in the source), else the module version and VCS revision (12 hex digits,
// "+dirty" when the tree was modified) the toolchain recorded, where it recorded them.
func Describe(version, unstamped, commit string) (string, string) {
	if version != unstamped {
		return version, commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version, commit
	}
	return fromBuildInfo(bi, version, commit)
}

func fromBuildInfo(bi *debug.BuildInfo, version, commit string) (string, string) {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		version = v
	}
	var rev string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) >= 12 {
		commit = rev[:12]
		if dirty {
			commit += "+dirty"
		}
	}
	return version, commit
}
