// examples/goclient/main.go: open a session on a muxterm gateway, type a command into it, read
// its output, list the sessions and kill the one it opened (docs/getting-started.md).
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/muxterm/muxterm/client"
)

func main() {
	url := os.Getenv("MUXTERM_URL") // e.g. ws://127.0.0.1:8222/ws
	if url == "" {
		url = "ws://127.0.0.1:8222/ws"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Connect and open a session running the gateway's shell, in one round trip.
	c, ch, err := client.DialOpen(ctx, url, client.DialOptions{Token: os.Getenv("MUXTERM_TOKEN")},
		client.OpenOptions{Cols: 80, Rows: 24, Name: "hello-go"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(1)
	}
	defer c.Close() // closing the socket ends no session: we kill ours below

	// Type into the shell and read its output until the answer shows up.
	if _, err := ch.Write([]byte("echo \"hello from $((6*7))\"\r")); err != nil {
		fmt.Fprintln(os.Stderr, "write:", err)
		os.Exit(1)
	}
	if _, err := ch.ReadUntil(ctx, "hello from 42"); err != nil {
		fmt.Fprintln(os.Stderr, "read:", err)
		os.Exit(1)
	}
	fmt.Println("session", ch.Session(), "said hello from 42")

	sessions, err := c.List(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "list:", err)
		os.Exit(1)
	}
	for _, s := range sessions {
		fmt.Printf("%s %s %dx%d\n", s.Session, s.Name, s.Cols, s.Rows)
	}

	res, err := c.Kill(ctx, ch.Session())
	if err != nil {
		fmt.Fprintln(os.Stderr, "kill:", err)
		os.Exit(1)
	}
	fmt.Println(res.Status)
}
