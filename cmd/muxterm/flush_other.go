//go:build !linux

package main

// flushInput discards unread terminal input on Linux; elsewhere it does nothing.
func flushInput(int) {}
