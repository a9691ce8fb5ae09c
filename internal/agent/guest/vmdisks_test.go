package guest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDiskNames(t *testing.T) {
	tests := []struct {
		cmdline string
		want    []string
		wantErr bool
	}{
		{"console=ttyS0 helmr.disks=3", nil, false},
		{"console=ttyS0 helmr.disknames=layer0,helmr,workspace quiet", []string{"layer0", "helmr", "workspace"}, false},
		{"helmr.disknames=workspace", []string{"workspace"}, false},
		{"helmr.disknames=layer0,,workspace", nil, true},
		{"helmr.disknames=", nil, true},
		{"helmr.disknames=layer0,layer0", nil, true},
		{"helmr.disknames=../etc", nil, true},
		{"helmr.disknames=a/b", nil, true},
	}
	for _, tt := range tests {
		got, err := parseDiskNames(tt.cmdline)
		if (err != nil) != tt.wantErr || !cmp.Equal(got, tt.want) {
			t.Errorf("parseDiskNames(%q) = %q, %v; want %q (error: %v)", tt.cmdline, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestDisksByOrder(t *testing.T) {
	names := []string{"layer0", "helmr", "workspace"}
	tests := []struct {
		name  string
		disks []virtioDisk
		want  map[string]string
	}{
		{"by virtio index", []virtioDisk{{"vdc", 4}, {"vda", 2}, {"vdb", 3}},
			map[string]string{"layer0": "/dev/vda", "helmr": "/dev/vdb", "workspace": "/dev/vdc"}},
		{"index beats name", []virtioDisk{{"vda", 5}, {"vdb", 1}, {"vdc", 3}},
			map[string]string{"layer0": "/dev/vdb", "helmr": "/dev/vdc", "workspace": "/dev/vda"}},
		{"no index: kernel numbering", []virtioDisk{{"vdaa", -1}, {"vdb", -1}, {"vdz", -1}},
			map[string]string{"layer0": "/dev/vdb", "helmr": "/dev/vdz", "workspace": "/dev/vdaa"}},
		{"one still probing", []virtioDisk{{"vda", 1}, {"vdb", 2}}, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, byOrder(names, tt.disks)); diff != "" {
				t.Errorf("byOrder(%q, %v) differs (-want +got):\n%s", names, tt.disks, diff)
			}
		})
	}
}

func TestParseAgentArg(t *testing.T) {
	tests := []struct {
		cmdline string
		want    uint32
		wantErr bool
	}{
		{"console=ttyS0 quiet", 0, false},
		{"helmr.agent=vsock:1024 helmr.disks=2", 1024, false},
		{"helmr.agent=vsock:0", 0, true},
		{"helmr.agent=vsock:4294967295", 0, true},
		{"helmr.agent=vsock:x", 0, true},
		{"helmr.agent=serial:1", 0, true},
	}
	for _, tt := range tests {
		got, err := parseAgentArg(tt.cmdline)
		if (err != nil) != tt.wantErr || got.vsockPort != tt.want {
			t.Errorf("parseAgentArg(%q) = %d, %v; want %d (error: %v)", tt.cmdline, got.vsockPort, err, tt.want, tt.wantErr)
		}
	}
}
