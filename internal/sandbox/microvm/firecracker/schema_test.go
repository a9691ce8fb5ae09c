package firecracker

import (
	"sort"
	"testing"

	"github.com/helmr/helmr/internal/sandbox/microvm/firecracker/fctest"
)

// exampleMachine uses every part of Machine Helmr sets.
func exampleMachine() Machine {
	return Machine{
		Kernel: "/vmlinux", Initrd: "/initramfs.cpio",
		BootArgs: "console=ttyS0 reboot=k panic=1 pci=off quiet helmr.disknames=layer0,helmr,workspace helmr.agent=vsock:1024",
		VCPUs:    2, MemMiB: 608,
		Drives: []Drive{
			{DriveID: "layer0", PathOnHost: "/disks/layer0.ext4", IsReadOnly: true},
			{DriveID: "helmr", PathOnHost: "/disks/helmr.ext4", IsReadOnly: true},
			{DriveID: "workspace", PathOnHost: "/disks/workspace.ext4"},
		},
		Net:    &NetworkInterface{IfaceID: "eth0", HostDevName: "fc0", GuestMAC: "02:48:4d:00:00:0f"},
		Vsock:  &Vsock{GuestCID: GuestCID, UDSPath: VsockSock},
		Logger: &Logger{LogPath: "/firecracker.log", Level: "Warning"},
	}
}

// TestRequestsMatchSchema sends every request Helmr makes through the
// client to the fake API and checks each body, as it crossed the socket,
// against the definition Firecracker's document gives its path.
func TestRequestsMatchSchema(t *testing.T) {
	s := fctest.Load(t)
	f := newFakeAPI(t)
	c := NewClient(f.sock)
	defer c.Close()
	ctx := t.Context()
	if err := c.Boot(ctx, exampleMachine()); err != nil {
		t.Fatalf("Boot() = %v", err)
	}
	steps := []func() error{
		func() error { return c.Snapshot(ctx, "/snapshot/vmstate", "/snapshot/mem") },
		func() error { return c.SetState(ctx, StateResumed) },
		func() error { return c.Act(ctx, ActionSendCtrlAltDel) },
		func() error { return c.PutMetrics(ctx, Metrics{MetricsPath: "/metrics.json"}) },
		func() error { return c.Restore(ctx, "/snapshot/vmstate", "/snapshot/mem") },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	seen := map[string]bool{}
	for _, call := range f.recorded() {
		def, err := s.Def(call.Method, call.Path)
		if err != nil {
			t.Error(err)
			continue
		}
		seen[def] = true
		if call.Method == "GET" {
			continue
		}
		if err := s.Check(call.Method, call.Path, call.Body); err != nil {
			t.Error(err)
		}
	}
	for _, def := range []string{"Logger", "MachineConfiguration", "BootSource", "Drive", "NetworkInterface", "Vsock",
		"InstanceActionInfo", "Vm", "SnapshotCreateParams", "SnapshotLoadParams", "Metrics"} {
		if !seen[def] {
			t.Errorf("no request checked against %s", def)
		}
	}
}

// TestSchemaRefuses shows the transcribed schema can fail: it refuses
// what Firecracker refuses (an unknown field, a missing required one, a
// value outside an enum or range, a request the API has not).
func TestSchemaRefuses(t *testing.T) {
	s := fctest.Load(t)
	tests := []struct {
		method, path, body string
	}{
		{"PUT", "/boot-source", `{"kernel_image_path":"/vmlinux","root":"/dev/vda"}`},
		{"PUT", "/boot-source", `{"initrd_path":"/initramfs.cpio"}`},
		{"PUT", "/drives/workspace", `{"drive_id":"workspace","path_on_host":"/w.ext4","is_read_only":false}`},
		{"PUT", "/drives/workspace", `{"drive_id":"workspace","path_on_host":"/w.ext4","is_root_device":false,"serial":"helmr-workspace"}`},
		{"PUT", "/machine-config", `{"vcpu_count":0,"mem_size_mib":512}`},
		{"PUT", "/machine-config", `{"vcpu_count":33,"mem_size_mib":512}`},
		{"PUT", "/vsock", `{"guest_cid":2,"uds_path":"/v.sock"}`},
		{"PUT", "/actions", `{"action_type":"Reboot"}`},
		{"PATCH", "/vm", `{"state":"Stopped"}`},
		{"PUT", "/snapshot/load", `{"snapshot_path":"/s","mem_file_path":"/m","mem_backend":{"backend_type":"File","backend_path":"/m"}}`},
		{"PUT", "/snapshot/load", `{"snapshot_path":"/s"}`},
		{"PUT", "/snapshot/create", `{"snapshot_path":"/s","mem_file_path":"/m","version":"1.0.0"}`},
		{"PUT", "/drives/", `{"drive_id":"","path_on_host":"/w.ext4","is_root_device":false}`},
		{"POST", "/actions", `{"action_type":"InstanceStart"}`},
	}
	for _, tt := range tests {
		if err := s.Check(tt.method, tt.path, []byte(tt.body)); err == nil {
			t.Errorf("%s %s %s: valid, want refused", tt.method, tt.path, tt.body)
		}
	}
}

// TestSchemaIsStrict: every object the transcription defines refuses
// unknown fields, as Firecracker's types do.
func TestSchemaIsStrict(t *testing.T) {
	defs := fctest.Load(t).Raw["$defs"].(map[string]any)
	names := make([]string, 0, len(defs))
	for n := range defs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := defs[n].(map[string]any)
		if d["type"] == "object" && d["additionalProperties"] != false {
			t.Errorf("$defs/%s: additionalProperties is %v, want false", n, d["additionalProperties"])
		}
	}
}
