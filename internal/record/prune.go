package record

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Retention bounds the recordings kept in a directory: none older than MaxAge, and no more than
// MaxBytes in all (the oldest go first). Zero means no bound.
type Retention struct {
	MaxAge   time.Duration
	MaxBytes int64
}

// recentlyWritten: a recording written to this recently is never removed, whatever active
// says (one being created, or one whose end is still being written).
const recentlyWritten = time.Minute

// Pruned is what Prune removed.
type Pruned struct {
	Files int
	Bytes int64
}

// Prune removes the recordings of dir (files ending in Ext) that Retention bounds out, oldest
// (by modification time) first, never one for which active reports true (a recording being
// written), nor one written to in the last minute. now is the time ages count to.
func Prune(dir string, ret Retention, now time.Time, active func(path string) bool) (Pruned, error) {
	var done Pruned
	if ret.MaxAge <= 0 && ret.MaxBytes <= 0 {
		return done, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return done, fmt.Errorf("record: prune %s: %w", dir, err)
	}
	type file struct {
		path string
		mod  time.Time
		size int64
	}
	var files []file
	var total int64
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), Ext) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		files = append(files, file{filepath.Join(dir, e.Name()), info.ModTime(), info.Size()})
		total += info.Size()
	}
	slices.SortFunc(files, func(a, b file) int { return a.mod.Compare(b.mod) })
	var errs []error
	for _, f := range files {
		old := ret.MaxAge > 0 && now.Sub(f.mod) > ret.MaxAge
		over := ret.MaxBytes > 0 && total > ret.MaxBytes
		if !old && !over {
			continue
		}
		if (active != nil && active(f.path)) || now.Sub(f.mod) < recentlyWritten {
			continue
		}
		if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("record: prune: %w", err))
			continue
		}
		done.Files++
		done.Bytes += f.size
		total -= f.size
	}
	return done, errors.Join(errs...)
}
