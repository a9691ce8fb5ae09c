package images

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// usedDir holds one empty file per cached layer, touched whenever a build
// uses the layer: its modification time is the layer's last use.
const usedDir = ".used"

// markUsed records that the layers under LayersDir among layers were used.
func (r *Resolver) markUsed(layers []string) {
	now := time.Now()
	for _, l := range layers {
		if filepath.Dir(l) != r.LayersDir && filepath.Dir(filepath.Dir(l)) != r.LayersDir {
			continue // built-in bases are not the cache's
		}
		name := cacheEntry(r.LayersDir, l)
		p := filepath.Join(r.LayersDir, usedDir, name)
		if err := os.Chtimes(p, now, now); errors.Is(err, fs.ErrNotExist) {
			if os.MkdirAll(filepath.Dir(p), 0o755) == nil {
				_ = os.WriteFile(p, nil, 0o644)
			}
		}
	}
}

// cacheEntry is the top directory under layersDir that holds layer (a
// pulled base's rootfs lives one level down).
func cacheEntry(layersDir, layer string) string {
	rel, err := filepath.Rel(layersDir, layer)
	if err != nil {
		return filepath.Base(layer)
	}
	first, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
	return first
}

// CollectStats is what a collection did.
type CollectStats struct {
	Kept, Removed           int
	KeptBytes, RemovedBytes int64
}

// Collect removes cached layers, least recently used first, until the
// cache holds at most maxBytes. It never removes a layer that is in inUse
// (host paths of layers mounted by live sandboxes) or that a build used in
// the last grace period (a run about to boot on it); leftovers of
// interrupted builds and layers replaced by --no-cache builds go once they
// are older than grace, whatever the size.
func (r *Resolver) Collect(maxBytes int64, inUse []string, grace time.Duration) (CollectStats, error) {
	var st CollectStats
	ents, err := os.ReadDir(r.LayersDir)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	busy := map[string]bool{}
	for _, l := range inUse {
		busy[cacheEntry(r.LayersDir, l)] = true
	}
	for _, e := range ents {
		if r.pinned(e.Name()) {
			busy[e.Name()] = true
		}
	}
	type entry struct {
		name string
		size int64
		used time.Time
	}
	var layers []entry
	now := time.Now()
	for _, e := range ents {
		name := e.Name()
		if name == usedDir || !e.IsDir() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		used := info.ModTime()
		if fi, err := os.Stat(filepath.Join(r.LayersDir, usedDir, name)); err == nil {
			used = fi.ModTime()
		}
		if strings.HasPrefix(name, ".") { // .build-, .pull-, .copyfrom-, .tmp-, .replaced-
			size := dirSize(filepath.Join(r.LayersDir, name))
			if now.Sub(used) > grace && !busy[name] && r.remove(name) == nil {
				st.Removed++
				st.RemovedBytes += size
			}
			continue
		}
		layers = append(layers, entry{name, r.layerSize(name), used})
	}
	var total int64
	for _, l := range layers {
		total += l.size
	}
	sort.Slice(layers, func(i, j int) bool { return layers[i].used.Before(layers[j].used) })
	for _, l := range layers {
		if maxBytes <= 0 || total <= maxBytes || busy[l.name] || now.Sub(l.used) < grace {
			st.Kept++
			st.KeptBytes += l.size
			continue
		}
		if err := r.remove(l.name); err != nil {
			st.Kept++
			st.KeptBytes += l.size
			continue
		}
		total -= l.size
		st.Removed++
		st.RemovedBytes += l.size
	}
	return st, nil
}

// layerSize is the disk space of a cached layer, measured once: a layer
// under its key never changes (a --no-cache rebuild replaces it and
// forgets its size), so collections do not walk every layer again.
func (r *Resolver) layerSize(name string) int64 {
	r.pinMu.Lock()
	n, ok := r.sizes[name]
	r.pinMu.Unlock()
	if ok {
		return n
	}
	n = dirSize(filepath.Join(r.LayersDir, name))
	r.pinMu.Lock()
	if r.sizes == nil {
		r.sizes = map[string]int64{}
	}
	r.sizes[name] = n
	r.pinMu.Unlock()
	return n
}

// forgetSize drops a measured size (the entry was removed or replaced).
func (r *Resolver) forgetSize(name string) {
	r.pinMu.Lock()
	delete(r.sizes, name)
	r.pinMu.Unlock()
}

func (r *Resolver) remove(name string) error {
	// Renamed first, so no build finds a half-removed layer under its key.
	tmp := filepath.Join(r.LayersDir, ".removing-"+name)
	if err := os.Rename(filepath.Join(r.LayersDir, name), tmp); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(r.LayersDir, usedDir, name))
	r.forgetSize(name)
	return os.RemoveAll(tmp)
}

// dirSize is the bytes the files under dir occupy on disk.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil {
			if fi, err := d.Info(); err == nil {
				n += allocated(fi)
			}
		}
		return nil
	})
	return n
}

func allocated(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// pin keeps layers from collection while a build step runs on them.
func (r *Resolver) pin(layers []string) func() {
	r.pinMu.Lock()
	defer r.pinMu.Unlock()
	if r.pins == nil {
		r.pins = map[string]int{}
	}
	names := make([]string, 0, len(layers))
	for _, l := range layers {
		n := cacheEntry(r.LayersDir, l)
		r.pins[n]++
		names = append(names, n)
	}
	return func() {
		r.pinMu.Lock()
		defer r.pinMu.Unlock()
		for _, n := range names {
			if r.pins[n]--; r.pins[n] <= 0 {
				delete(r.pins, n)
			}
		}
	}
}

func (r *Resolver) pinned(name string) bool {
	r.pinMu.Lock()
	defer r.pinMu.Unlock()
	return r.pins[name] > 0
}
