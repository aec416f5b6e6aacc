// Package cgroup manages the cgroup v2 directories that hold muxterm's sessions: one directory
// per gateway process under a root, one cgroup per session under it. A session's processes are
// ended with cgroup.kill, "none left" is an empty cgroup.procs, and a gateway that starts sweeps
// the directories of gateways that died without cleaning up.
//
//	<root>/                          --cgroup-root (created if missing)
//	  gw-<pid>-<start time>/         one per gateway process (start time: field 22 of /proc/PID/stat)
//	    <session id>/                one per session: the child is cloned into it
//
// The default root is muxterm-sessions under the gateway's own cgroup, found from
// /proc/self/cgroup and the cgroup2 mount in /proc/self/mountinfo. Only cgroup.kill, cgroup.procs
// and cgroup.events are used: no controller is enabled anywhere, and cgroup v2's "no internal
// processes" rule only constrains a cgroup whose cgroup.subtree_control enables controllers, so a
// session cgroup can sit below the gateway's own populated cgroup, as root in a container and
// under systemd's Delegate=yes alike. The gateway itself stays where it is, which also keeps it
// where its service manager and its resource limits put it; sessions are charged to the nearest
// ancestor that has the controllers.
//
//   - Start: Tree.Sweep takes every gw-<pid>-<start> directory whose process is not running with
//     that start time (a pid reused since does not match), cgroup.kills each cgroup in it, waits
//     for it to empty, removes it, and returns the counts (cmd/gateway logs them as
//     swept_processes and swept_cgroups). Directories of gateways still running (several may
//     share a root) and this process's own (same pid and start time after a re-exec) are left
//     alone.
//   - A session's cgroup is made, killed and removed by package session (newCgroup, killCgroup,
//     removeCgroup).
//   - Shutdown: after every kill, Tree.Close kills and removes whatever is left in this gateway's
//     directory (normally nothing), then the directory, and the default root when empty.
package cgroup
