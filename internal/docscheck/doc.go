// Package docscheck holds tests that keep the docs true to the tree: docs/architecture.md's
// dependency graph is what go list says; its lock order is the one written at session's
// Registry.mu; every non-test Go or TypeScript source over MaxLines lines has a line in
// docs/architecture.md saying why, and every file that list names is still over it; every test a
// doc names as `pkg.TestName` exists; the programs docs/getting-started.md shows are the files of
// examples/ that the e2e tests run. It has no code of its own.
package docscheck

// MaxLines is the length past which a source file needs a reason in docs/architecture.md.
const MaxLines = 600
