package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// findDisks maps the helmr disks' names to their device nodes: by serial
// (VMDiskPrefix + name) when names is nil, else by order: names[i] is the
// i-th virtio disk the VMM attached (byOrder).
func findDisks(names []string) map[string]string {
	if names != nil {
		return byOrder(names, virtioDisks())
	}
	out := map[string]string{}
	ents, _ := os.ReadDir("/sys/block")
	for _, e := range ents {
		serial, err := os.ReadFile(filepath.Join("/sys/block", e.Name(), "serial"))
		if err != nil {
			continue
		}
		if name, ok := strings.CutPrefix(strings.TrimSpace(string(serial)), VMDiskPrefix); ok && name != "" {
			out[name] = "/dev/" + e.Name()
		}
	}
	return out
}

// parseDiskNames reads VMArgDiskNames from a kernel command line: nil
// when it is absent; an error for an empty, repeated or path-like name.
func parseDiskNames(cmdline string) ([]string, error) {
	var names []string
	for _, w := range strings.Fields(cmdline) {
		v, ok := strings.CutPrefix(w, VMArgDiskNames)
		if !ok {
			continue
		}
		names = []string{}
		seen := map[string]bool{}
		for _, n := range strings.Split(v, ",") {
			if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\x00") || seen[n] {
				return nil, fmt.Errorf("vm init: bad disk name %q in %s%s", n, VMArgDiskNames, v)
			}
			seen[n] = true
			names = append(names, n)
		}
	}
	return names, nil
}

// virtioDisk is a virtio block device of the guest: its node name (vda)
// and its virtio device's index (virtioN), which the kernel hands out in
// the order it finds the VMM's devices.
type virtioDisk struct {
	name  string
	index int
}

// virtioDisks lists the guest's virtio disks (/sys/block/vd*).
func virtioDisks() []virtioDisk {
	var out []virtioDisk
	ents, _ := os.ReadDir("/sys/block")
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "vd") {
			continue
		}
		d := virtioDisk{name: e.Name(), index: -1}
		if dev, err := os.Readlink(filepath.Join("/sys/block", e.Name(), "device")); err == nil {
			if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dev), "virtio")); err == nil {
				d.index = n
			}
		}
		out = append(out, d)
	}
	return out
}

// byOrder maps names[i] to the i-th of disks in the VMM's order: by
// virtio device index (the order the guest found the devices, which is the
// order the VMM attached them: Firecracker gives its drives MMIO slots in
// the order of its PUT /drives requests), then by node name as the kernel
// numbers them (vda < vdb < ... < vdz < vdaa). It maps nothing until every
// name has a disk: a disk still probing could otherwise shift the order.
func byOrder(names []string, disks []virtioDisk) map[string]string {
	out := map[string]string{}
	if len(disks) < len(names) {
		return out
	}
	sort.Slice(disks, func(i, j int) bool {
		a, b := disks[i], disks[j]
		if a.index != b.index {
			return a.index < b.index
		}
		if len(a.name) != len(b.name) {
			return len(a.name) < len(b.name)
		}
		return a.name < b.name
	})
	for i, n := range names {
		out[n] = "/dev/" + disks[i].name
	}
	return out
}
