package firecracker

// The request bodies Helmr sends to Firecracker's API and the responses it
// reads, as Firecracker's published API document
// (src/firecracker/swagger/firecracker.yaml) defines them; the name of
// each type's definition there is in its comment. Firecracker refuses a
// body with a field it does not know, so every optional field Helmr does
// not set is omitted, and only fields present since Firecracker 1.8 (the
// least version this package drives: MinVersion) are sent.
// testdata/firecracker-api.schema.json holds those definitions, and the
// tests check every body against it.

// BootSource is PUT /boot-source (definition BootSource). Paths are as
// Firecracker sees them: inside its jail.
type BootSource struct {
	KernelImagePath string `json:"kernel_image_path"`
	InitrdPath      string `json:"initrd_path,omitempty"`
	BootArgs        string `json:"boot_args,omitempty"`
}

// Drive is PUT /drives/{drive_id} (definition Drive): a virtio-blk disk
// backed by a file.
type Drive struct {
	DriveID      string `json:"drive_id"`
	PathOnHost   string `json:"path_on_host"`
	IsRootDevice bool   `json:"is_root_device"`
	IsReadOnly   bool   `json:"is_read_only"`
	// CacheType is "Unsafe" (Firecracker's default: flushes are not
	// passed to the host) or "Writeback"; empty: the default.
	CacheType string `json:"cache_type,omitempty"`
}

// MachineConfig is PUT /machine-config (definition MachineConfiguration).
type MachineConfig struct {
	VCPUCount  int   `json:"vcpu_count"`
	MemSizeMiB int64 `json:"mem_size_mib"`
	SMT        bool  `json:"smt"`
	// TrackDirtyPages enables diff snapshots; Helmr takes full ones.
	TrackDirtyPages bool `json:"track_dirty_pages,omitempty"`
}

// NetworkInterface is PUT /network-interfaces/{iface_id} (definition
// NetworkInterface): a virtio-net device backed by the TAP device
// HostDevName in Firecracker's network namespace.
type NetworkInterface struct {
	IfaceID     string `json:"iface_id"`
	HostDevName string `json:"host_dev_name"`
	GuestMAC    string `json:"guest_mac,omitempty"`
}

// Vsock is PUT /vsock (definition Vsock): the virtio-vsock device, whose
// host side is the unix socket UDSPath (see DialVsock).
type Vsock struct {
	GuestCID uint32 `json:"guest_cid"`
	UDSPath  string `json:"uds_path"`
}

// Actions of PUT /actions (definition InstanceActionInfo).
const (
	ActionInstanceStart  = "InstanceStart"
	ActionSendCtrlAltDel = "SendCtrlAltDel"
	ActionFlushMetrics   = "FlushMetrics"
)

// Action is PUT /actions.
type Action struct {
	ActionType string `json:"action_type"`
}

// VM states of PATCH /vm (definition Vm).
const (
	StatePaused  = "Paused"
	StateResumed = "Resumed"
)

// VM is PATCH /vm.
type VM struct {
	State string `json:"state"`
}

// SnapshotFull is the snapshot type Helmr takes.
const SnapshotFull = "Full"

// SnapshotCreate is PUT /snapshot/create (definition
// SnapshotCreateParams): the VM's device state to SnapshotPath and its
// memory to MemFilePath. The VM must be paused.
type SnapshotCreate struct {
	SnapshotType string `json:"snapshot_type,omitempty"`
	SnapshotPath string `json:"snapshot_path"`
	MemFilePath  string `json:"mem_file_path"`
}

// MemoryBackend is a snapshot's memory source (definition MemoryBackend).
type MemoryBackend struct {
	BackendType string `json:"backend_type"` // "File" or "Uffd"
	BackendPath string `json:"backend_path"`
}

// BackendFile is the MemoryBackend type of a memory file.
const BackendFile = "File"

// SnapshotLoad is PUT /snapshot/load (definition SnapshotLoadParams), on
// a Firecracker process nothing else was configured on (but the logger
// and metrics). The disks, TAP and vsock socket of the snapshotted VM
// must be at the same paths in the new jail.
type SnapshotLoad struct {
	SnapshotPath string         `json:"snapshot_path"`
	MemBackend   *MemoryBackend `json:"mem_backend,omitempty"`
	ResumeVM     bool           `json:"resume_vm"`
}

// Logger is PUT /logger (definition Logger): Firecracker's own log, to
// a file or named pipe in its jail.
type Logger struct {
	LogPath       string `json:"log_path,omitempty"`
	Level         string `json:"level,omitempty"` // Error, Warning, Info, Debug, Trace, Off
	ShowLevel     bool   `json:"show_level,omitempty"`
	ShowLogOrigin bool   `json:"show_log_origin,omitempty"`
}

// Metrics is PUT /metrics (definition Metrics).
type Metrics struct {
	MetricsPath string `json:"metrics_path"`
}

// InstanceInfo is GET /'s answer (definition InstanceInfo).
type InstanceInfo struct {
	AppName    string `json:"app_name"`
	ID         string `json:"id"`
	State      string `json:"state"` // "Not started", "Running", "Paused"
	VMMVersion string `json:"vmm_version"`
}

// Instance states of InstanceInfo.
const (
	InstanceNotStarted = "Not started"
	InstanceRunning    = "Running"
	InstancePaused     = "Paused"
)

// apiError is the body of an error answer (definition Error).
type apiError struct {
	FaultMessage string `json:"fault_message"`
}
