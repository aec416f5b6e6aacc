package tmpprobe

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"muxterm/mux"
)

func TestEchoTrace(t *testing.T) {
	cmd := exec.Command("/work/main/bin/gateway", "--listen", "127.0.0.1:0", "--token", "0123456789abcdef0123", "--allow-cmd", "*",
		"--max-input-rate", "0", "--pprof-listen", "127.0.0.1:0")
	out, _ := cmd.StdoutPipe()
	cmd.Start()
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	var addr, pp string
	for sc.Scan() {
		l := sc.Text()
		if r, ok := strings.CutPrefix(l, "muxterm: pprof on "); ok {
			pp = r
		}
		if r, ok := strings.CutPrefix(l, "muxterm: listening on http://"); ok {
			addr = r
			break
		}
	}
	ctx := context.Background()
	c, err := mux.Dial(ctx, "ws://"+addr+"/ws", mux.DialOptions{Token: "0123456789abcdef0123"})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Open(ctx, mux.OpenOptions{Cmd: []string{"sh", "-c", "stty raw -echo; printf R; exec cat"}, Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	ch.Read(buf)
	done := make(chan struct{})
	go func() {
		exec.Command("sh", "-c", "curl -s '"+pp+"trace?seconds=2' > /tmp/echo.trace").Run()
		close(done)
	}()
	var lat []time.Duration
	for {
		select {
		case <-done:
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			fmt.Println("n", len(lat), "p50", lat[len(lat)/2], "p99", lat[len(lat)*99/100])
			return
		default:
		}
		t0 := time.Now()
		ch.Write([]byte{'a'})
		ch.Read(buf)
		lat = append(lat, time.Since(t0))
	}
}
