// Command wire proves the Python SDK's JSON against Go's encoding/json.
//
// The structs below mirror the design's Go types: snake_case json tags equal to the Python
// field names, time.Duration (int64 nanoseconds) for durations, time.Time (RFC 3339) for
// times, map[string]string for maps, slices for lists, nested structs by value.
//
//	go run . golden DIR   write DIR/<Struct>.<variant>.json for every fixture
//	go run . check DIR    read what Python re-encoded from those files into DIR, decode it
//	                      (unknown keys refused) and compare with the fixture; exit 1 on a
//	                      mismatch
//
// Variants: "full" sets every field, "zero" is the zero value, "nanos" carries nanosecond
// times and durations, which Python truncates to microseconds (so "check" compares it with
// the fixture truncated the same way). Only the standard library is used.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"time"
)

type ResourceLimits struct {
	CPULimit        float64       `json:"cpu_limit"`
	CPURequest      float64       `json:"cpu_request"`
	MemoryLimit     int64         `json:"memory_limit"`
	MemoryRequest   int64         `json:"memory_request"`
	DiskLimit       int64         `json:"disk_limit"`
	DiskRequest     int64         `json:"disk_request"`
	NetworkInLimit  int64         `json:"network_in_limit"`
	NetworkOutLimit int64         `json:"network_out_limit"`
	ProcessLimit    int64         `json:"process_limit"`
	FileLimit       int64         `json:"file_limit"`
	WallTimeLimit   time.Duration `json:"wall_time_limit"`
	CPUTimeLimit    time.Duration `json:"cpu_time_limit"`
	AllowUnbounded  []string      `json:"allow_unbounded"`
}

type SecurityPolicy struct {
	RunAsUser         string   `json:"run_as_user"`
	RunAsGroup        string   `json:"run_as_group"`
	ReadOnlyRoot      bool     `json:"read_only_root"`
	NoNewPrivileges   bool     `json:"no_new_privileges"`
	PreventEscalation bool     `json:"prevent_escalation"`
	AddCapabilities   []string `json:"add_capabilities"`
	DropCapabilities  []string `json:"drop_capabilities"`
	SELinuxContext    string   `json:"selinux_context"`
	AppArmorProfile   string   `json:"apparmor_profile"`
	SeccompProfile    string   `json:"seccomp_profile"`
	AllowNetworking   bool     `json:"allow_networking"`
	IsolateNetwork    bool     `json:"isolate_network"`
	IsolateProcess    bool     `json:"isolate_process"`
	AllowHostPID      bool     `json:"allow_host_pid"`
	ReadOnlyPaths     []string `json:"read_only_paths"`
	MaskedPaths       []string `json:"masked_paths"`
	TmpfsPaths        []string `json:"tmpfs_paths"`
	EnableAuditLog    bool     `json:"enable_audit_log"`
	LogSecurityEvents bool     `json:"log_security_events"`
	AllowedHosts      []string `json:"allowed_hosts"`
	BlockedHosts      []string `json:"blocked_hosts"`
	AllowedPorts      []int    `json:"allowed_ports"`
}

type GitConfig struct {
	UserName     string            `json:"user_name"`
	UserEmail    string            `json:"user_email"`
	SigningKey   string            `json:"signing_key"`
	ConfigValues map[string]string `json:"config_values"`
}

type RepositoryConfig struct {
	URL          string    `json:"url"`
	Branch       string    `json:"branch"`
	CommitHash   string    `json:"commit_hash"`
	LocalPath    string    `json:"local_path"`
	MountPoint   string    `json:"mount_point"`
	ReadOnly     bool      `json:"read_only"`
	GitConfig    GitConfig `json:"git_config"`
	IncludeFiles []string  `json:"include_files"`
	ExcludeFiles []string  `json:"exclude_files"`
	Permissions  string    `json:"permissions"`
	Owner        string    `json:"owner"`
	Group        string    `json:"group"`
}

type PortMapping struct {
	HostPort      int    `json:"host_port"`
	ContainerPort int    `json:"container_port"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"host_ip"`
}

type NetworkConfig struct {
	Isolated     bool          `json:"isolated"`
	Bridge       string        `json:"bridge"`
	DNSServers   []string      `json:"dns_servers"`
	DNSSearch    []string      `json:"dns_search"`
	HTTPProxy    string        `json:"http_proxy"`
	HTTPSProxy   string        `json:"https_proxy"`
	NoProxy      string        `json:"no_proxy"`
	PortMappings []PortMapping `json:"port_mappings"`
	AllowedHosts []string      `json:"allowed_hosts"`
	BlockedHosts []string      `json:"blocked_hosts"`
	AllowedPorts []int         `json:"allowed_ports"`
	IngressLimit int64         `json:"ingress_limit"`
	EgressLimit  int64         `json:"egress_limit"`
}

type SandboxConfig struct {
	Type          string            `json:"type"`
	Image         string            `json:"image"`
	Runtime       string            `json:"runtime"`
	Architecture  string            `json:"architecture"`
	PullPolicy    string            `json:"pull_policy"`
	Resources     ResourceLimits    `json:"resources"`
	Security      SecurityPolicy    `json:"security"`
	Repository    RepositoryConfig  `json:"repository"`
	Network       NetworkConfig     `json:"network"`
	Environment   map[string]string `json:"environment"`
	WorkingDir    string            `json:"working_dir"`
	Tools         []string          `json:"tools"`
	MCPServers    []string          `json:"mcp_servers"`
	Timeout       time.Duration     `json:"timeout"`
	CleanupDelay  time.Duration     `json:"cleanup_delay"`
	StatsInterval time.Duration     `json:"stats_interval"`
	Labels        map[string]string `json:"labels"`
	Annotations   map[string]string `json:"annotations"`
	Name          string            `json:"name"`
}

type Command struct {
	Executable     string            `json:"executable"`
	Args           []string          `json:"args"`
	WorkingDir     string            `json:"working_dir"`
	Environment    map[string]string `json:"environment"`
	StdinContent   string            `json:"stdin_content"`
	Timeout        time.Duration     `json:"timeout"`
	IdleTimeout    time.Duration     `json:"idle_timeout"`
	User           string            `json:"user"`
	AllowNetwork   bool              `json:"allow_network"`
	AllowWrite     bool              `json:"allow_write"`
	RestrictPaths  []string          `json:"restrict_paths"`
	MaxOutputBytes int64             `json:"max_output_bytes"`
}

type ResourceUsage struct {
	Timestamp     time.Time     `json:"timestamp"`
	CPUUsage      float64       `json:"cpu_usage"`
	CPUTime       time.Duration `json:"cpu_time"`
	MemoryUsage   int64         `json:"memory_usage"`
	MemoryPercent float64       `json:"memory_percent"`
	MemoryPeak    int64         `json:"memory_peak"`
	DiskUsage     int64         `json:"disk_usage"`
	DiskReads     int64         `json:"disk_reads"`
	DiskWrites    int64         `json:"disk_writes"`
	NetworkIn     int64         `json:"network_in"`
	NetworkOut    int64         `json:"network_out"`
	ProcessCount  int           `json:"process_count"`
	ThreadCount   int           `json:"thread_count"`
	FileHandles   int           `json:"file_handles"`
	Uptime        time.Duration `json:"uptime"`
}

type CommandResult struct {
	ExitCode      int               `json:"exit_code"`
	Success       bool              `json:"success"`
	Stdout        string            `json:"stdout"`
	Stderr        string            `json:"stderr"`
	Combined      string            `json:"combined"`
	StartTime     time.Time         `json:"start_time"`
	EndTime       time.Time         `json:"end_time"`
	Duration      time.Duration     `json:"duration"`
	ResourceUsage ResourceUsage     `json:"resource_usage"`
	Error         string            `json:"error"`
	Signal        string            `json:"signal"`
	ProcessID     int               `json:"process_id"`
	Metadata      map[string]string `json:"metadata"`
	TimedOut      bool              `json:"timed_out"`
	OOMKilled     bool              `json:"oom_killed"`
	Truncated     bool              `json:"truncated"`
}

type FileInfo struct {
	Name        string    `json:"name"`
	Path        string    `json:"path"`
	Size        int64     `json:"size"`
	Mode        uint32    `json:"mode"` // S_IMODE bits as in Python, not os.FileMode's layout
	ModTime     time.Time `json:"mod_time"`
	IsDir       bool      `json:"is_dir"`
	Owner       string    `json:"owner"`
	Group       string    `json:"group"`
	Permissions string    `json:"permissions"`
	IsSymlink   bool      `json:"is_symlink"`
	LinkTarget  string    `json:"link_target"`
}

type SandboxStatus string

const (
	StatusCreating  SandboxStatus = "creating"
	StatusStarting  SandboxStatus = "starting"
	StatusRunning   SandboxStatus = "running"
	StatusPaused    SandboxStatus = "paused"
	StatusStopping  SandboxStatus = "stopping"
	StatusStopped   SandboxStatus = "stopped"
	StatusFailed    SandboxStatus = "failed"
	StatusDestroyed SandboxStatus = "destroyed"
)

type SandboxInfo struct {
	ID                 string            `json:"id"`
	Name               string            `json:"name"`
	Type               string            `json:"type"`
	Status             SandboxStatus     `json:"status"`
	CreatedAt          time.Time         `json:"created_at"`
	StartedAt          time.Time         `json:"started_at"`
	Runtime            string            `json:"runtime"`
	Image              string            `json:"image"`
	Platform           string            `json:"platform"`
	IPAddress          string            `json:"ip_address"`
	MACAddress         string            `json:"mac_address"`
	Hostname           string            `json:"hostname"`
	AllocatedResources ResourceLimits    `json:"allocated_resources"`
	Config             SandboxConfig     `json:"config"`
	Labels             map[string]string `json:"labels"`
	Annotations        map[string]string `json:"annotations"`
	StatusReason       string            `json:"status_reason"`
	ExitCode           *int              `json:"exit_code,omitempty"`
	OOMKilled          bool              `json:"oom_killed"`
}

// OutputChunk is the SDK's streamed output piece; Data is base64 as Go writes []byte.
type OutputChunk struct {
	Stream string `json:"stream"`
	Data   []byte `json:"data"`
}

var (
	plus2 = time.FixedZone("", 2*3600)
	t0    = time.Date(2026, 11, 22, 1, 2, 3, 450000000, time.UTC)
	t1    = time.Date(2026, 11, 22, 3, 4, 5, 123456000, plus2)
	tNano = time.Date(2026, 11, 22, 1, 48, 0, 194016722, plus2)
)

func fullLimits() ResourceLimits {
	return ResourceLimits{
		CPULimit: 1.5, CPURequest: 0.25, MemoryLimit: 512 << 20, MemoryRequest: 256 << 20,
		DiskLimit: 1 << 30, DiskRequest: 1 << 29, NetworkInLimit: 1000000,
		NetworkOutLimit: 2000000, ProcessLimit: 256, FileLimit: 1024,
		WallTimeLimit: 10 * time.Minute, CPUTimeLimit: 90*time.Second + 5*time.Microsecond,
		AllowUnbounded: []string{"cpu_limit"},
	}
}

func fullSecurity() SecurityPolicy {
	return SecurityPolicy{
		RunAsUser: "1000", RunAsGroup: "1000", ReadOnlyRoot: true, NoNewPrivileges: true,
		PreventEscalation: true, AddCapabilities: []string{"NET_BIND_SERVICE"},
		DropCapabilities: []string{"ALL"}, SELinuxContext: "system_u:system_r:container_t:s0",
		AppArmorProfile: "docker-default", SeccompProfile: "default.json",
		AllowNetworking: true, IsolateNetwork: true, IsolateProcess: true, AllowHostPID: true,
		ReadOnlyPaths: []string{"/etc"}, MaskedPaths: []string{"/proc/kcore"},
		TmpfsPaths: []string{"/tmp"}, EnableAuditLog: true, LogSecurityEvents: true,
		AllowedHosts: []string{"pypi.org"}, BlockedHosts: []string{"evil.example"},
		AllowedPorts: []int{443},
	}
}

func fullGit() GitConfig {
	return GitConfig{UserName: "bot", UserEmail: "bot@example.com", SigningKey: "ABCDEF",
		ConfigValues: map[string]string{"core.autocrlf": "false", "pull.rebase": "true"}}
}

func fullRepository() RepositoryConfig {
	return RepositoryConfig{
		URL: "https://example.com/repo.git", Branch: "main", CommitHash: "0123456789abcdef",
		LocalPath: "/home/me/repo", MountPoint: "/src", ReadOnly: true, GitConfig: fullGit(),
		IncludeFiles: []string{"*.py", "src/**"}, ExcludeFiles: []string{".git"},
		Permissions: "0755", Owner: "1000", Group: "1000",
	}
}

func fullPort() PortMapping {
	return PortMapping{HostPort: 8080, ContainerPort: 80, Protocol: "udp", HostIP: "0.0.0.0"}
}

func fullNetwork() NetworkConfig {
	return NetworkConfig{
		Isolated: true, Bridge: "sandbox-net", DNSServers: []string{"1.1.1.1"},
		DNSSearch: []string{"example.com"}, HTTPProxy: "http://proxy:3128",
		HTTPSProxy: "http://proxy:3128", NoProxy: "localhost",
		// The second mapping is how a Go caller writes one: protocol and host_ip unset.
		PortMappings: []PortMapping{fullPort(), {ContainerPort: 443}},
		AllowedHosts: []string{"pypi.org"}, BlockedHosts: []string{"evil.example"},
		AllowedPorts: []int{80, 443}, IngressLimit: 10, EgressLimit: 20,
	}
}

func fullConfig() SandboxConfig {
	return SandboxConfig{
		Type: "docker", Image: "alpine:3.20", Runtime: "runsc", Architecture: "arm64",
		PullPolicy: "always", Resources: fullLimits(), Security: fullSecurity(),
		Repository: fullRepository(), Network: fullNetwork(),
		Environment: map[string]string{"LANG": "C.UTF-8", "Ünicode": "✓ \"quoted\" <&>"},
		WorkingDir:  "/src", Tools: []string{"git", "python"}, MCPServers: []string{"fs"},
		Timeout: 30 * time.Second, CleanupDelay: 1500 * time.Millisecond,
		StatsInterval: 5 * time.Second, Labels: map[string]string{"team": "ai"},
		Annotations: map[string]string{"note": "x"}, Name: "sbx-1",
	}
}

func fullCommand() Command {
	return Command{
		Executable: "python3", Args: []string{"-c", "print(1)"}, WorkingDir: "/src",
		Environment: map[string]string{"PYTHONUNBUFFERED": "1"}, StdinContent: "input\n",
		Timeout: 10 * time.Second, IdleTimeout: 2 * time.Second, User: "nobody",
		AllowNetwork: true, AllowWrite: true, RestrictPaths: []string{"/src"},
		MaxOutputBytes: 4096,
	}
}

func fullUsage() ResourceUsage {
	return ResourceUsage{
		Timestamp: t0, CPUUsage: 150.5, CPUTime: 3*time.Second + 250*time.Microsecond,
		MemoryUsage: 1000, MemoryPercent: 12.5, MemoryPeak: 2000, DiskUsage: 3000,
		DiskReads: 4000, DiskWrites: 5000, NetworkIn: 6000, NetworkOut: 7000,
		ProcessCount: 3, ThreadCount: 8, FileHandles: 20, Uptime: time.Hour,
	}
}

func fullResult() CommandResult {
	return CommandResult{
		ExitCode: 137, Success: false, Stdout: "out\n", Stderr: "err\n",
		Combined: "out\nerr\n", StartTime: t0, EndTime: t1,
		Duration: time.Second + 500*time.Microsecond, ResourceUsage: fullUsage(),
		Error: "killed", Signal: "SIGKILL", ProcessID: 42,
		Metadata: map[string]string{"k": "v"}, TimedOut: true, OOMKilled: true, Truncated: true,
	}
}

func fullFile() FileInfo {
	return FileInfo{
		Name: "a.txt", Path: "/src/a.txt", Size: 12, Mode: 0o4755, ModTime: t1, IsDir: true,
		Owner: "root", Group: "root", Permissions: "-rwsr-xr-x", IsSymlink: true,
		LinkTarget: "/src/b.txt",
	}
}

func fullInfo() SandboxInfo {
	code := 137
	return SandboxInfo{
		ID: "f00ba4", Name: "sbx-1", Type: "docker", Status: StatusFailed, CreatedAt: t0,
		StartedAt: t1, Runtime: "runsc", Image: "alpine:3.20", Platform: "linux/arm64",
		IPAddress: "172.17.0.2", MACAddress: "02:42:ac:11:00:02", Hostname: "sbx",
		AllocatedResources: fullLimits(), Config: fullConfig(),
		Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"},
		StatusReason: "OOM", ExitCode: &code, OOMKilled: true,
	}
}

// nanosResult has nanosecond times and durations; Python keeps microseconds of them.
func nanosResult(truncate bool) CommandResult {
	r := CommandResult{
		ExitCode: 0, StartTime: tNano, EndTime: tNano.Add(1999 * time.Nanosecond),
		Duration: 1999 * time.Nanosecond,
		ResourceUsage: ResourceUsage{Timestamp: tNano, CPUTime: 123456789 * time.Nanosecond,
			Uptime: 1},
	}
	if truncate {
		r.StartTime = r.StartTime.Truncate(time.Microsecond)
		r.EndTime = r.EndTime.Truncate(time.Microsecond)
		r.Duration = r.Duration.Truncate(time.Microsecond)
		r.ResourceUsage.Timestamp = r.ResourceUsage.Timestamp.Truncate(time.Microsecond)
		r.ResourceUsage.CPUTime = r.ResourceUsage.CPUTime.Truncate(time.Microsecond)
		r.ResourceUsage.Uptime = r.ResourceUsage.Uptime.Truncate(time.Microsecond)
	}
	return r
}

// fixture is one value to write, and what Go must read back from Python's re-encoding.
type fixture struct {
	value    interface{}
	expected interface{}
	fresh    func() interface{} // a pointer to a new zero value of the same type
}

func fixtures() map[string]fixture {
	f := map[string]fixture{}
	add := func(name string, full, zero interface{}, fresh func() interface{}) {
		f[name+".full"] = fixture{full, full, fresh}
		f[name+".zero"] = fixture{zero, zero, fresh}
	}
	add("ResourceLimits", fullLimits(), ResourceLimits{}, func() interface{} { return &ResourceLimits{} })
	add("SecurityPolicy", fullSecurity(), SecurityPolicy{}, func() interface{} { return &SecurityPolicy{} })
	add("GitConfig", fullGit(), GitConfig{}, func() interface{} { return &GitConfig{} })
	add("RepositoryConfig", fullRepository(), RepositoryConfig{}, func() interface{} { return &RepositoryConfig{} })
	add("PortMapping", fullPort(), PortMapping{}, func() interface{} { return &PortMapping{} })
	add("NetworkConfig", fullNetwork(), NetworkConfig{}, func() interface{} { return &NetworkConfig{} })
	add("SandboxConfig", fullConfig(), SandboxConfig{}, func() interface{} { return &SandboxConfig{} })
	add("Command", fullCommand(), Command{}, func() interface{} { return &Command{} })
	add("ResourceUsage", fullUsage(), ResourceUsage{}, func() interface{} { return &ResourceUsage{} })
	add("CommandResult", fullResult(), CommandResult{}, func() interface{} { return &CommandResult{} })
	add("FileInfo", fullFile(), FileInfo{}, func() interface{} { return &FileInfo{} })
	add("SandboxInfo", fullInfo(), SandboxInfo{}, func() interface{} { return &SandboxInfo{} })
	add("OutputChunk", OutputChunk{Stream: "stderr", Data: []byte("\x00\xffbytes")}, OutputChunk{},
		func() interface{} { return &OutputChunk{} })
	f["CommandResult.nanos"] = fixture{nanosResult(false), nanosResult(true),
		func() interface{} { return &CommandResult{} }}
	return f
}

func names(f map[string]fixture) []string {
	out := make([]string, 0, len(f))
	for name := range f {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func writeGolden(dir string) error {
	f := fixtures()
	for _, name := range names(f) {
		data, err := json.MarshalIndent(f[name].value, "", "  ")
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".json"), append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// normal decodes JSON generically and treats null, [] and {} alike: Python has one empty
// tuple or dict where Go tells a nil slice or map from an empty one.
func normal(data []byte) (interface{}, error) {
	var v interface{}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	return squash(v), nil
}

func squash(v interface{}) interface{} {
	switch x := v.(type) {
	case map[string]interface{}:
		if len(x) == 0 {
			return nil
		}
		for k, item := range x {
			x[k] = squash(item)
		}
	case []interface{}:
		if len(x) == 0 {
			return nil
		}
		for i, item := range x {
			x[i] = squash(item)
		}
	}
	return v
}

func check(dir string) error {
	f := fixtures()
	failed := 0
	for _, name := range names(f) {
		fx := f[name]
		got, err := os.ReadFile(filepath.Join(dir, name+".json"))
		if err != nil {
			return err
		}
		decoded := fx.fresh()
		dec := json.NewDecoder(bytes.NewReader(got))
		dec.DisallowUnknownFields()
		if err := dec.Decode(decoded); err != nil {
			fmt.Printf("%s: Go cannot decode Python's JSON: %v\n", name, err)
			failed++
			continue
		}
		again, err := json.Marshal(reflect.ValueOf(decoded).Elem().Interface())
		if err != nil {
			return err
		}
		want, err := json.Marshal(fx.expected)
		if err != nil {
			return err
		}
		a, errA := normal(again)
		b, errB := normal(want)
		if errA != nil || errB != nil {
			return fmt.Errorf("%s: %v %v", name, errA, errB)
		}
		if !reflect.DeepEqual(a, b) {
			fmt.Printf("%s: differs\n  Go wrote:      %s\n  Go read back:  %s\n", name, want, again)
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d fixtures differ", failed, len(f))
	}
	fmt.Printf("ok: %d fixtures read back equal\n", len(f))
	return nil
}

func main() {
	if len(os.Args) != 3 || (os.Args[1] != "golden" && os.Args[1] != "check") {
		fmt.Fprintln(os.Stderr, "usage: wire golden DIR | wire check DIR")
		os.Exit(2)
	}
	var err error
	if os.Args[1] == "golden" {
		err = writeGolden(os.Args[2])
	} else {
		err = check(os.Args[2])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wire:", err)
		os.Exit(1)
	}
}
