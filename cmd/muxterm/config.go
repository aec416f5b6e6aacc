package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// defaultURL is where `make run` listens.
const defaultURL = "ws://127.0.0.1:8222/ws"

// config is where to connect and with what token, and where each came from (for errors).
type config struct {
	url, urlFrom     string
	token, tokenFrom string
	file             string // the config file's path, whether or not it exists
}

// configPath is $XDG_CONFIG_HOME/muxterm/config, else ~/.config/muxterm/config.
func configPath(getenv func(string) string) string {
	if d := getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "muxterm", "config")
	}
	home := getenv("HOME")
	if home == "" {
		if h, err := os.UserHomeDir(); err == nil {
			home = h
		}
	}
	return filepath.Join(home, ".config", "muxterm", "config")
}

// keptTokenPath is where a gateway started without --token keeps the token it generated:
// $XDG_STATE_HOME/muxterm/token, else ~/.local/state/muxterm/token ("" without a home).
func keptTokenPath(getenv func(string) string) string {
	if d := getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "muxterm", "token")
	}
	home := getenv("HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		home = h
	}
	return filepath.Join(home, ".local", "state", "muxterm", "token")
}

// resolveConfig fills url and token from, in order of precedence, the flags (flagURL and
// flagToken, "" when not given), MUXTERM_URL and MUXTERM_TOKEN, and the config file. The file
// is read only when a flag or variable leaves something unset; it is refused if other users can
// read it.
func resolveConfig(flagURL, flagToken string, getenv func(string) string) (*config, error) {
	c := &config{file: configPath(getenv)}
	c.url, c.urlFrom = flagURL, "--url"
	if c.url == "" {
		c.url, c.urlFrom = getenv("MUXTERM_URL"), "MUXTERM_URL"
	}
	c.token, c.tokenFrom = flagToken, "--token"
	if c.token == "" {
		c.token, c.tokenFrom = getenv("MUXTERM_TOKEN"), "MUXTERM_TOKEN"
	}
	if c.url == "" || c.token == "" {
		kv, err := readConfigFile(c.file)
		if err != nil {
			return nil, err
		}
		if c.url == "" && kv["url"] != "" {
			c.url, c.urlFrom = kv["url"], c.file
		}
		if c.token == "" && kv["token"] != "" {
			c.token, c.tokenFrom = kv["token"], c.file
		}
	}
	if c.url == "" {
		c.url, c.urlFrom = defaultURL, "the default"
	}
	u, err := normalizeURL(c.url)
	if err != nil {
		return nil, fmt.Errorf("url from %s: %w", c.urlFrom, err)
	}
	c.url = u
	return c, nil
}

// readConfigFile reads `key = value` lines (keys url and token, each at most once; # starts a
// comment line). A missing file is an empty config; anything but a regular file (a FIFO, a
// device) is refused without reading it, and so is a file that group or others may read, as ssh
// refuses a private key.
func readConfigFile(path string) (map[string]string, error) {
	f, err := openNoBlock(path) // opening a FIFO would wait for a writer
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("config file %s is not a regular file (%s): refusing to read it", path, describeMode(st.Mode()))
	}
	// Windows has no such mode bits; its ACLs are not checked.
	if runtime.GOOS != "windows" && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("config file %s has mode %04o: it holds a token, so other users must not read it; run: chmod 600 %s", path, st.Mode().Perm(), path)
	}
	kv := map[string]string{}
	first := map[string]int{} // the line of each key
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || (k != "url" && k != "token") {
			return nil, fmt.Errorf("config file %s line %d: want `url = ...` or `token = ...`", path, n)
		}
		if m, dup := first[k]; dup {
			return nil, fmt.Errorf("config file %s line %d: %s is given again (first on line %d): keep one", path, n, k, m)
		}
		kv[k], first[k] = v, n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return kv, nil
}

// describeMode names a file type that is not regular.
func describeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeDir != 0:
		return "a directory"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}

// normalizeURL accepts ws, wss, http and https URLs; http(s) becomes ws(s), and an empty path
// becomes /ws.
func normalizeURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("%q: want ws://, wss://, http:// or https://", s)
	}
	if u.Host == "" {
		return "", fmt.Errorf("%q: no host", s)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/ws"
	}
	return u.String(), nil
}
