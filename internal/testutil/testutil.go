// Package testutil holds helpers shared by the tests of several packages. It is imported by
// _test.go files only.
package testutil

// Panics reports whether f panics.
func Panics(f func()) (panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	f()
	return false
}
