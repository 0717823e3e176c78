package benchreport

// Anchors measured by benchmarks in the same run, shared by several rows.
var (
	bareStoreGateway = &Anchor{Name: "a bare REST gateway in its own process staging in the store", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/rest-store-stage", Unit: "MB/s"}}
	splitStore       = &Anchor{Name: "the same gateway behind a bare proxy in its process (no store credentials where clients connect)", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/rest-store-stage-split", Unit: "MB/s"}}
	bareBwrap        = &Anchor{Name: "bare bwrap /bin/true", Ref: Ref{Pkg: "executor/sandbox", Bench: "BenchmarkBareBwrap", Unit: "p50-ms"}}
	hydrateGets      = &Anchor{Name: "1,000 sequential GETs", Ref: Ref{Pkg: "workspace/files", Bench: "BenchmarkHydrate/s3/sequential-gets", Unit: "ns/op"}}
	forkExec         = &Anchor{Name: "bare fork+exec sh -c true, back to back", Ref: Ref{Pkg: "executor", Bench: "BenchmarkBareForkExec", Unit: "p50-ms"}}
	// conch dev is a process of its own: so is the floor of its hop.
	proxyProcessP50   = &Anchor{Name: "a bare reverse proxy's in its own process", Ref: completionOverhead("proxy-process-overhead-p50-ms")}
	proxyProcessP99   = &Anchor{Name: "a bare reverse proxy's in its own process", Ref: completionOverhead("proxy-process-overhead-p99-ms")}
	proxyProcessCPU   = &Anchor{Name: "a bare reverse proxy's in its own process", Ref: completionOverhead("proxy-process-cpu-us/op")}
	directUpstream    = &Anchor{Name: "direct upstream call", Ref: completionOverhead("direct-p50-ms")}
	continuationFloor = &Anchor{Name: "the 100-turn conversation's JSON", Ref: Ref{Pkg: "router/responsestore", Bench: "BenchmarkContinuation", Unit: "conversation-B"}}
	// The command round trip's floor, timed in its rounds.
	forkExecRounds = &Anchor{Name: "bare fork+exec sh -c true after the same pause, same rounds", Ref: roundTrip("bare-paced-p50-ms")}
)

// Rows is conch's benchmark report: the performance targets of the issues,
// each with the floor it is measured against, and the other benchmarks
// worth a glance. Hydrate and flush are judged on MinIO, the store of a
// real cluster; the local-disk results are in the JSON.
var Rows = []Row{
	{
		Service: "executor", Metric: "sandbox create, warm pool, p50", Unit: "ms",
		Value:  Ref{Pkg: "executor/sandbox", Bench: "BenchmarkSandboxCreate", Unit: "p50-ms"},
		Anchor: bareBwrap, Target: Target{MaxRatio: 1.5},
	},
	{
		Service: "executor", Metric: "sandbox create, cold, p50 (conch-sandbox-agent, as an executor runs it)", Unit: "ms",
		Value:  coldCreate("conch-sandbox-agent", "p50-ms"),
		Anchor: coldFloor(coldAgent + "conch-sandbox-agent"), Target: Target{MaxRatio: 1.5},
	},
	{
		Service: "executor", Metric: "sandbox create, cold: bubblewrap's arguments to the agent's hello, p50", Unit: "ms",
		Value:  coldCreate("conch-sandbox-agent", "start-p50-ms"),
		Anchor: coldFloor(coldAgent + "conch-sandbox-agent"),
	},
	{
		// A burst beyond the bubblewraps started ahead: each create
		// starts its own.
		Service: "executor", Metric: "sandbox create, cold, no bubblewrap started ahead, p50", Unit: "ms",
		Value:  coldCreate("no-launch-ahead", "p50-ms"),
		Anchor: coldFloor(coldAgent + "no-launch-ahead"),
	},
	{
		Service: "executor", Metric: "sandbox create, cold, p50, the whole conch binary as the agent", Unit: "ms",
		Value:  coldCreate("conch", "p50-ms"),
		Anchor: coldFloor(coldAgent + "conch"),
	},
	{
		Service: "executor", Metric: "sandbox create, cold, p50, the test binary as the agent", Unit: "ms",
		Value:  Ref{Pkg: "executor/sandbox", Bench: "BenchmarkSandboxCreateCold", Unit: "p50-ms"},
		Anchor: coldFloor("BenchmarkSandboxCreateCold"),
	},
	// Where a cold create's time goes beyond bare bubblewrap, step by
	// step, all steps interleaved in one benchmark.
	{
		Service: "executor", Metric: "cold start steps: a sandbox's bubblewrap arguments, /bin/true, p50", Unit: "ms",
		Value:  coldStep("mounts"),
		Anchor: &Anchor{Name: "bare bwrap /bin/true, interleaved", Ref: coldStep("bare")},
	},
	{
		Service: "executor", Metric: "cold start steps: the same with the seccomp filter, p50", Unit: "ms",
		Value:  coldStep("seccomp"),
		Anchor: &Anchor{Name: "without the filter", Ref: coldStep("mounts")},
	},
	{
		Service: "executor", Metric: "cold start steps: the same into a cgroup of its own (v2), p50", Unit: "ms",
		Value:  coldStep("cgroup"),
		Anchor: &Anchor{Name: "without the cgroup", Ref: coldStep("seccomp")},
	},
	{
		Service: "executor", Metric: "cold start steps: the agent binary's start in place of /bin/true, p50", Unit: "ms",
		Value:  coldStep("agent"),
		Anchor: &Anchor{Name: "/bin/true", Ref: coldStep("seccomp")},
	},
	{
		Service: "executor", Metric: "cold start steps: a whole cold create, p50", Unit: "ms",
		Value:  coldStep("create"),
		Anchor: &Anchor{Name: "the agent's start and exit alone", Ref: coldStep("agent")},
	},
	{
		Service: "executor", Metric: "command `true` via gRPC, warm sandbox, p50", Unit: "ms",
		// Measured after a pause (a model's turn), as its floor is, in
		// the same rounds.
		Value:  roundTrip("p50-ms"),
		Anchor: forkExecRounds,
		Target: Target{MaxRatio: 1.5},
	},
	// The same command in two parts, in the same rounds: the executor's
	// Exec without gRPC, and gRPC's round trip alone.
	{
		Service: "executor", Metric: "command `true` through Exec, without gRPC, p50", Unit: "ms",
		Value:  roundTrip("exec-paced-p50-ms"),
		Anchor: forkExecRounds,
	},
	{
		Service: "executor", Metric: "a gRPC call to the executor that runs nothing, after the same pause, p50", Unit: "ms",
		Value:  roundTrip("noop-paced-p50-ms"),
		Anchor: forkExecRounds,
	},
	{
		Service: "executor", Metric: "command `true` via gRPC, against its floor plus a gRPC call that runs nothing, p50", Unit: "ms",
		Value:  roundTrip("p50-ms"),
		Anchor: &Anchor{Name: "bare fork+exec plus a gRPC call that runs nothing, each round", Ref: roundTrip("floor-plus-noop-p50-ms")},
	},
	{
		Service: "executor", Metric: "bare fork+exec sh -c true after a 5 ms pause, p50", Unit: "ms",
		Value:  Ref{Pkg: "executor", Bench: "BenchmarkBareForkExec", Unit: "paced-p50-ms"},
		Anchor: forkExec,
	},
	{
		Service: "executor", Metric: "command `true` via gRPC, in a burst (no spare shells), p50", Unit: "ms",
		Value:  roundTrip("burst-p50-ms"),
		Anchor: forkExec,
	},
	{
		Service: "executor", Metric: "command `true` via gRPC with the audit trail (async), p50", Unit: "ms",
		Value:  Ref{Pkg: "executor", Bench: "BenchmarkCommandRoundTripAudit", Unit: "p50-ms"},
		Anchor: &Anchor{Name: "the same without audit, same run", Ref: Ref{Pkg: "executor", Bench: "BenchmarkCommandRoundTripAudit", Unit: "no-audit-p50-ms"}},
	},
	{
		Service: "executor", Metric: "audit trail's addition to a command round trip, p50", Unit: "ms",
		Value:  Ref{Pkg: "executor", Bench: "BenchmarkCommandRoundTripAudit", Unit: "added-ms"},
		Target: Target{Max: 0.2},
	},
	{
		Service: "executor", Metric: "command `true` via the agent, p50", Unit: "ms",
		Value:  Ref{Pkg: "executor/sandbox", Bench: "BenchmarkAgentRoundTrip", Unit: "p50-ms"},
		Anchor: &Anchor{Name: "two nested shells", Ref: Ref{Pkg: "executor/sandbox", Bench: "BenchmarkTwoShells", Unit: "p50-ms"}},
	},
	{
		Service: "executor", Metric: "commands across 8 sandboxes", Unit: "cmds/s",
		Value:  Ref{Pkg: "executor", Bench: "BenchmarkThroughput8Sandboxes", Unit: "cmds/s"},
		Target: Target{Min: 300},
	},
	{
		Service: "executor", Metric: "executor RSS growth per idle sandbox (100)", Unit: "MiB",
		Value:  Ref{Pkg: "executor", Bench: "BenchmarkIdleSandboxes", Unit: "MiB-rss/sandbox"},
		Target: Target{Max: 5},
	},
	{
		Service: "executor", Metric: "sandbox processes' PSS per idle sandbox", Unit: "MiB",
		Value: Ref{Pkg: "executor", Bench: "BenchmarkIdleSandboxes", Unit: "MiB-sandbox-procs-pss/sandbox"},
	},
	{
		Service: "executor", Metric: "egress proxy: connection setup added, p50", Unit: "ms",
		Value:  Ref{Pkg: "executor/egressproxy", Bench: "BenchmarkConnectSetup", Unit: "added-p50-ms"},
		Target: Target{Max: 2},
	},
	{
		Service: "executor", Metric: "egress proxy: connect + small GET via CONNECT, p50", Unit: "ms",
		Value:  Ref{Pkg: "executor/egressproxy", Bench: "BenchmarkConnectSetup", Unit: "proxied-p50-ms"},
		Anchor: &Anchor{Name: "the same without the proxy", Ref: Ref{Pkg: "executor/egressproxy", Bench: "BenchmarkConnectSetup", Unit: "direct-p50-ms"}},
	},
	{
		Service: "executor", Metric: "egress from a sandbox (agent bridge + proxy): connection setup added, p50", Unit: "ms",
		Value:  Ref{Pkg: "executor", Bench: "BenchmarkSandboxEgressConnect", Unit: "added-p50-ms"},
		Target: Target{Max: 2},
	},
	{
		Service: "executor", Metric: "egress from a sandbox: connect + small GET, p50", Unit: "ms",
		Value:  Ref{Pkg: "executor", Bench: "BenchmarkSandboxEgressConnect", Unit: "sandbox-p50-ms"},
		Anchor: &Anchor{Name: "the same program from the host, directly", Ref: Ref{Pkg: "executor", Bench: "BenchmarkSandboxEgressConnect", Unit: "direct-p50-ms"}},
	},
	{
		Service: "executor", Metric: "egress proxy: CONNECT tunnel download", Unit: "MB/s",
		Value:  Ref{Pkg: "executor/egressproxy", Bench: "BenchmarkTunnelThroughput", Unit: "tunnel-MB/s"},
		Anchor: &Anchor{Name: "the same download without the proxy", Ref: Ref{Pkg: "executor/egressproxy", Bench: "BenchmarkTunnelThroughput", Unit: "direct-MB/s"}},
		Target: Target{Min: 200},
	},
	{
		// conch dev is a process between the client and MinIO that must
		// hash and sign what it stores, and whose part facing clients
		// holds no store credentials: the floor is a bare REST server in
		// a process of its own doing the store's same work behind a bare
		// proxy, the cheapest hop between the two parts.
		Service: "workspace", Metric: "upload 100 MB via REST to MinIO", Unit: "MB/s",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/upload", Unit: "MB/s"},
		Anchor: splitStore,
		Target: Target{Min: 200},
	},
	{
		Service: "workspace", Metric: "upload 100 MB via a bare proxy and REST gateway staging in the store, one process", Unit: "MB/s",
		Value:  splitStore.Ref,
		Anchor: bareStoreGateway,
	},
	{
		Service: "workspace", Metric: "upload 100 MB via a bare REST gateway staging in the store, no gRPC hop", Unit: "MB/s",
		Value:  bareStoreGateway.Ref,
		Anchor: &Anchor{Name: "direct MinIO put", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/minio-put", Unit: "MB/s"}},
	},
	{
		Service: "workspace", Metric: "MinIO put 100 MB via a bare reverse proxy in its own process", Unit: "MB/s",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/minio-put-via-proxy", Unit: "MB/s"},
		Anchor: &Anchor{Name: "direct MinIO put", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/minio-put", Unit: "MB/s"}},
	},
	// Where an upload's time goes: the rate its CPU time allows on this
	// machine's cores, and that time per process.
	{
		Service: "workspace", Metric: "upload 100 MB via REST, against the rate its CPU time allows", Unit: "MB/s",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/upload", Unit: "MB/s"},
		Anchor: &Anchor{Name: "CPU-bound rate of the same uploads", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/upload", Unit: "cpu-bound-MB/s"}},
	},
	{
		Service: "workspace", Metric: "upload: conch dev CPU per 100 MB", Unit: "ms",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/upload", Unit: "conch-cpu-ms/op"},
		Anchor: &Anchor{Name: "the bare proxy and REST gateway staging the same bytes", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/rest-store-stage-split", Unit: "gateway-cpu-ms/op"}},
	},
	{
		Service: "workspace", Metric: "upload: the bare proxy and REST gateway's CPU per 100 MB", Unit: "ms",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/rest-store-stage-split", Unit: "gateway-cpu-ms/op"},
		Anchor: &Anchor{Name: "the bare REST gateway alone", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/rest-store-stage", Unit: "gateway-cpu-ms/op"}},
	},
	{
		Service: "workspace", Metric: "upload: MinIO CPU per 100 MB", Unit: "ms",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/upload", Unit: "minio-cpu-ms/op"},
		Anchor: &Anchor{Name: "direct MinIO put", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/minio-put", Unit: "minio-cpu-ms/op"}},
	},
	{
		Service: "workspace", Metric: "store stage 100 MB to MinIO, no REST or gRPC", Unit: "MB/s",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/store-stage", Unit: "MB/s"},
		Anchor: &Anchor{Name: "direct MinIO put", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/minio-put", Unit: "MB/s"}},
	},
	{
		Service: "workspace", Metric: "direct MinIO put in parallel 8 MiB parts", Unit: "MB/s",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/minio-put-parts", Unit: "MB/s"},
		Anchor: &Anchor{Name: "direct MinIO put", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/minio-put", Unit: "MB/s"}},
	},
	{
		Service: "workspace", Metric: "upload: conch dev peak RSS growth", Unit: "MiB",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/upload", Unit: "rss-growth-MiB"},
		Target: Target{Max: 32},
	},
	{
		Service: "workspace", Metric: "download 100 MB via REST from MinIO", Unit: "MB/s",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/download", Unit: "MB/s"},
		Anchor: &Anchor{Name: "direct MinIO get", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/minio-get", Unit: "MB/s"}},
		Target: Target{Min: 100},
	},
	{
		Service: "workspace", Metric: "download: conch dev peak RSS growth", Unit: "MiB",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/download", Unit: "rss-growth-MiB"},
		Target: Target{Max: 32},
	},
	// A cold hydration also writes the 1,000 files into the sandbox's
	// directory (a tmpfs); write-local is that alone, the part no store
	// can save.
	{
		Service: "workspace", Metric: "hydrate 1,000 × 4 KiB, service cold (MinIO; listing kept, packs)", Unit: "ms",
		Value:  Ref{Pkg: "workspace/files", Bench: "BenchmarkHydrate/s3/cold-service", Unit: "ns/op"},
		Anchor: hydrateGets, Target: Target{Max: 300},
	},
	{
		Service: "workspace", Metric: "hydrate 1,000 × 4 KiB, service cold, listing the files (MinIO, packs)", Unit: "ms",
		Value:  Ref{Pkg: "workspace/files", Bench: "BenchmarkHydrate/s3/cold-service-listed", Unit: "ns/op"},
		Anchor: hydrateGets,
	},
	{
		Service: "workspace", Metric: "hydrate 1,000 × 4 KiB, service cold, no listing kept, no packs (MinIO)", Unit: "ms",
		Value:  Ref{Pkg: "workspace/files", Bench: "BenchmarkHydrate/s3/cold-service-unpacked", Unit: "ns/op"},
		Anchor: hydrateGets,
	},
	{
		Service: "workspace", Metric: "writing the 1,000 files of a hydration locally", Unit: "ms",
		Value: Ref{Pkg: "workspace/files", Bench: "BenchmarkHydrate/s3/write-local", Unit: "ns/op"},
	},
	{
		Service: "workspace", Metric: "hydrate 1,000 × 4 KiB, new sandbox (MinIO)", Unit: "ms",
		Value:  Ref{Pkg: "workspace/files", Bench: "BenchmarkHydrate/s3/cold", Unit: "ns/op"},
		Target: Target{Max: 1000},
	},
	{
		Service: "workspace", Metric: "hydrate 1,000 × 4 KiB, unchanged (MinIO)", Unit: "ms",
		Value:  Ref{Pkg: "workspace/files", Bench: "BenchmarkHydrate/s3/unchanged", Unit: "ns/op"},
		Target: Target{Max: 100},
	},
	{
		Service: "workspace", Metric: "flush 1 changed of 10,000 files (MinIO)", Unit: "ms",
		Value:  Ref{Pkg: "workspace/files", Bench: "BenchmarkFlushOneChanged/s3", Unit: "ns/op"},
		Target: Target{Max: 150},
	},
	{
		Service: "workspace", Metric: "store put 100 MB, size known", Unit: "MB/s",
		Value: Ref{Pkg: "internal/store/s3store", Bench: "BenchmarkLargeObject/known-size-true", Unit: "MB/s"},
	},
	{
		Service: "workspace", Metric: "store put 100 MB, size unknown", Unit: "MB/s",
		Value: Ref{Pkg: "internal/store/s3store", Bench: "BenchmarkLargeObject/known-size-false", Unit: "MB/s"},
	},
	{
		Service: "approval", Metric: "policy Evaluate, 3-segment command", Unit: "op/s",
		Value:  Ref{Pkg: "approval/policy", Bench: "BenchmarkEvaluate", Unit: "ns/op"},
		Target: Target{Min: 50_000},
	},
	{
		Service: "approval", Metric: "policy Evaluate with a new engine", Unit: "op/s",
		Value: Ref{Pkg: "approval/policy", Bench: "BenchmarkEvaluateWithNewEngine", Unit: "ns/op"},
	},
	// The target is the engine's (above); the service also resolves each
	// program on the real filesystem per call, which no cache may skip.
	{
		Service: "approval", Metric: "service Evaluate, resolving on disk", Unit: "op/s",
		Value: Ref{Pkg: "approval", Bench: "BenchmarkEvaluateService", Unit: "ns/op"},
	},
	{
		Service: "approval", Metric: ":resolve to waiting command, p50", Unit: "ms",
		Value:  Ref{Pkg: "approval", Bench: "BenchmarkResolveToWaiter", Unit: "p50-ms"},
		Target: Target{Max: 20},
	},
	{
		// The conversation's own JSON is what a continuation must hold to
		// send it upstream.
		Service: "router", Metric: "continuing a 100-turn stored conversation: bytes allocated", Unit: "B",
		Value:  Ref{Pkg: "router/responsestore", Bench: "BenchmarkContinuation", Unit: "B/op"},
		Anchor: continuationFloor,
	},
	{
		Service: "router", Metric: "continuing a 100-turn stored conversation: bytes stored (compressed)", Unit: "B",
		Value:  Ref{Pkg: "router/responsestore", Bench: "BenchmarkContinuation", Unit: "stored-B/op"},
		Anchor: continuationFloor,
	},
	{
		Service: "router", Metric: "completion via conch, p50", Unit: "ms",
		Value:  completionOverhead("conch-p50-ms"),
		Anchor: directUpstream,
	},
	{
		Service: "router", Metric: "completion via a bare httputil.ReverseProxy, p50", Unit: "ms",
		Value:  completionOverhead("proxy-p50-ms"),
		Anchor: directUpstream,
	},
	{
		Service: "router", Metric: "router overhead, p50", Unit: "ms",
		Value:  completionOverhead("overhead-p50-ms"),
		Anchor: proxyProcessP50,
		Target: Target{Max: 0.3},
	},
	{
		Service: "router", Metric: "router overhead, p99", Unit: "ms",
		Value:  completionOverhead("overhead-p99-ms"),
		Anchor: proxyProcessP99,
		Target: Target{Max: 1.5},
	},
	{
		// conch dev is a process of its own: a hop through any proxy
		// process pays two more cross-process wake-ups than the direct call.
		Service: "router", Metric: "overhead of a bare reverse proxy in its own process, p50", Unit: "ms",
		Value:  completionOverhead("proxy-process-overhead-p50-ms"),
		Anchor: &Anchor{Name: "the same proxy in the client's process", Ref: completionOverhead("proxy-overhead-p50-ms")},
	},
	{
		Service: "router", Metric: "overhead of a bare reverse proxy in its own process, p99", Unit: "ms",
		Value:  completionOverhead("proxy-process-overhead-p99-ms"),
		Anchor: &Anchor{Name: "the same proxy in the client's process", Ref: completionOverhead("proxy-overhead-p99-ms")},
	},
	{
		// A gateway that checks what it forwards must read its JSON.
		Service: "router", Metric: "overhead of a forwarder that decodes and encodes both JSON bodies, in its own process, p50", Unit: "ms",
		Value:  completionOverhead("json-process-overhead-p50-ms"),
		Anchor: proxyProcessP50,
	},
	{
		Service: "router", Metric: "router overhead, p50, against the JSON forwarder's", Unit: "ms",
		Value:  completionOverhead("overhead-p50-ms"),
		Anchor: &Anchor{Name: "the JSON forwarder's in its own process", Ref: completionOverhead("json-process-overhead-p50-ms")},
	},
	{
		// The CPU each hop's process spends per completion, waking
		// included: what the wall-clock rows above cannot split into
		// work and waiting.
		Service: "router", Metric: "conch dev's CPU per completion", Unit: "µs",
		Value:  completionOverhead("conch-cpu-us/op"),
		Anchor: proxyProcessCPU,
	},
	{
		Service: "router", Metric: "the JSON forwarder's CPU per completion", Unit: "µs",
		Value:  completionOverhead("json-process-cpu-us/op"),
		Anchor: proxyProcessCPU,
	},
	{
		// conch dev runs etcd and the other services in the router's
		// process; a cluster's router runs alone.
		Service: "router", Metric: "router overhead, a cluster's router in its own process, p50", Unit: "ms",
		Value:  completionOverhead("router-process-overhead-p50-ms"),
		Anchor: &Anchor{Name: "conch dev's", Ref: completionOverhead("overhead-p50-ms")},
	},
	{
		Service: "router", Metric: "router overhead, a cluster's router in its own process, p99", Unit: "ms",
		Value:  completionOverhead("router-process-overhead-p99-ms"),
		Anchor: &Anchor{Name: "conch dev's", Ref: completionOverhead("overhead-p99-ms")},
	},
	// conch's whole /v1 handler against a bare proxy, both in the
	// benchmark's process: what conch's own work costs, without the wake-ups
	// of a hop between processes.
	{
		Service: "router", Metric: "completion via conch's /v1 handler in process, p50", Unit: "ms",
		Value:  Ref{Pkg: "router/openai", Bench: "BenchmarkChatCompletion/conch", Unit: "p50-ms"},
		Anchor: &Anchor{Name: "a bare httputil.ReverseProxy in process", Ref: Ref{Pkg: "router/openai", Bench: "BenchmarkChatCompletion/bare-proxy", Unit: "p50-ms"}},
	},
	{
		Service: "router", Metric: "completion via conch's /v1 handler in process, CPU per completion", Unit: "µs",
		Value:  Ref{Pkg: "router/openai", Bench: "BenchmarkChatCompletion/conch", Unit: "cpu-us/op"},
		Anchor: &Anchor{Name: "a bare httputil.ReverseProxy in process", Ref: Ref{Pkg: "router/openai", Bench: "BenchmarkChatCompletion/bare-proxy", Unit: "cpu-us/op"}},
	},
	{
		Service: "router", Metric: "completions, 8 parallel clients", Unit: "op/s",
		Value: Ref{Pkg: "e2e", Bench: "BenchmarkCompletionThroughput", Unit: "completions/s"},
	},
	{
		Service: "router", Metric: "completion with one shell call, p50", Unit: "ms",
		Value: Ref{Pkg: "e2e", Bench: "BenchmarkShellCompletion", Unit: "p50-ms"},
	},
	{
		Service: "router", Metric: "Responses API completion with one shell call, p50", Unit: "ms",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkShellResponseVsChat", Unit: "responses-p50-ms"},
		Anchor: &Anchor{Name: "the same chat completion", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkShellResponseVsChat", Unit: "chat-p50-ms"}},
		Target: Target{MaxRatio: 1.1},
	},
	{
		Service: "router", Metric: "Responses API completion with one shell call, store false, p50", Unit: "ms",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkShellResponseVsChat", Unit: "responses-unstored-p50-ms"},
		Anchor: &Anchor{Name: "the same chat completion", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkShellResponseVsChat", Unit: "chat-p50-ms"}},
	},
	{
		Service: "executor", Metric: "snapshot and restore of a sandbox with 100 MB written, p50", Unit: "ms",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkSnapshotRestore", Unit: "snapshot-restore-p50-ms"},
		Anchor: &Anchor{Name: "a put and a get of the same bytes straight to MinIO, same iterations", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkSnapshotRestore", Unit: "minio-put-get-p50-ms"}},
		Target: Target{MaxRatio: 1.5},
	},
	{
		Service: "executor", Metric: "sandbox create from a cached template's root, with a writable workdir, cold, p50", Unit: "ms",
		Value:  Ref{Pkg: "executor/sandbox", Bench: "BenchmarkSandboxCreateFromImage", Unit: "p50-ms"},
		Anchor: &Anchor{Name: "bare bwrap /bin/true on the same root, alternated with the creates", Ref: Ref{Pkg: "executor/sandbox", Bench: "BenchmarkSandboxCreateFromImage", Unit: "bare-p50-ms"}},
		Target: Target{MaxRatio: 1.5},
	},
	{
		Service: "router", Metric: "streamed command (REST, \"stream\": true): time to its first output, p50", Unit: "ms",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkStreamFirstByte", Unit: "p50-ms"},
		Anchor: &Anchor{Name: "the same command's first byte through a bare pipe (fork+exec), plus one HTTP round trip, same iterations", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkStreamFirstByte", Unit: "floor-p50-ms"}},
		Target: Target{MaxRatio: 1.5},
	},
	{
		Service: "router", Metric: "terminal keystroke echo through the WebSocket, p50", Unit: "ms",
		Value: Ref{Pkg: "e2e", Bench: "BenchmarkTerminalEcho", Unit: "p50-ms"},
	},
	{
		Service: "router", Metric: "terminal keystroke echo through the WebSocket, p99", Unit: "ms",
		Value: Ref{Pkg: "e2e", Bench: "BenchmarkTerminalEcho", Unit: "p99-ms"},
	},
	{
		// python's http.server answers HTTP/1.0 and closes: each request
		// is a new connection both ways.
		Service: "router", Metric: "GET of a small file through an exposed port's private URL, p50", Unit: "ms",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkPortProxy", Unit: "proxied-p50-ms"},
		Anchor: &Anchor{Name: "the same server program on the host's loopback, alternated", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkPortProxy", Unit: "direct-p50-ms"}},
	},
	{
		// What an idle sandbox (after one command, its spare started)
		// costs the machine, measured as the drop of MemAvailable.
		Service: "executor", Metric: "idle sandboxes per GiB of memory", Unit: "sandboxes",
		Value: Ref{Pkg: "executor/sandbox", Bench: "BenchmarkIdleDensity", Unit: "idle-sandboxes/GiB"},
	},
	{
		Service: "executor", Metric: "memory of one idle sandbox", Unit: "MiB",
		Value: Ref{Pkg: "executor/sandbox", Bench: "BenchmarkIdleDensity", Unit: "MiB/idle-sandbox"},
	},
	{
		// In memory, a copy: a tmpfs has no reflinks
		// (docs/reference/sandboxes.md#fork).
		Service: "executor", Metric: "fork of a sandbox with 100 MB written, in memory, p50", Unit: "ms",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkSnapshotRestore", Unit: "fork-p50-ms"},
		Anchor: &Anchor{Name: "cp -a of the same files inside a sandbox, same iterations", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkSnapshotRestore", Unit: "cp-p50-ms"}},
	},
	{
		// On btrfs storage, snapshots: a sandbox create plus a few
		// milliseconds, whatever the size.
		Service: "executor", Metric: "fork of a sandbox with 100 MB written, on btrfs storage, p50", Unit: "ms",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkForkCopyOnWrite", Unit: "fork-p50-ms"},
		Anchor: &Anchor{Name: "cp --reflink=never -a of the same files inside the source, same iterations", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkForkCopyOnWrite", Unit: "cp-p50-ms"}},
		Target: Target{MaxRatio: 0.25},
	},
	{
		Service: "executor", Metric: "copy of a sandbox with 100 MB on btrfs storage (Spec.From), p50", Unit: "ms",
		Value:  Ref{Pkg: "executor/sandbox", Bench: "BenchmarkCopyOnWrite", Unit: "copy-p50-ms"},
		Anchor: &Anchor{Name: "a cold create of an empty sandbox on the same storage, alternated", Ref: Ref{Pkg: "executor/sandbox", Bench: "BenchmarkCopyOnWrite", Unit: "cold-p50-ms"}},
	},
	{
		Service: "router", Metric: "Anthropic Messages API with one code execution call, p50", Unit: "ms",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkMessagesVsChat", Unit: "messages-p50-ms"},
		Anchor: &Anchor{Name: "the same chat completion, same run", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkMessagesVsChat", Unit: "chat-p50-ms"}},
		Target: Target{MaxRatio: 1.1},
	},
	{
		// What store true costs over store false is one durable etcd
		// write; its floor is that write alone, in the same run, on an
		// etcd as idle as the router's when a completion ends.
		Service: "router", Metric: "Responses API: what storing a response adds, p50", Unit: "ms",
		Value:  Ref{Pkg: "e2e", Bench: "BenchmarkShellResponseVsChat", Unit: "store-added-ms"},
		Anchor: &Anchor{Name: "the durable writes of the same response (two synced objects, one etcd put), same run", Ref: Ref{Pkg: "e2e", Bench: "BenchmarkShellResponseVsChat", Unit: "durable-write-p50-ms"}},
	},
	{
		// The writes a stored response waits for, alone, back to back.
		Service: "router", Metric: "storing a response, fsync on, back to back, p50", Unit: "ms",
		Value:  Ref{Pkg: "router/responsestore", Bench: "BenchmarkPutDurable", Unit: "store-p50-ms"},
		Anchor: &Anchor{Name: "one small key put, same etcd", Ref: Ref{Pkg: "router/responsestore", Bench: "BenchmarkPutDurable", Unit: "put-p50-ms"}},
	},
}

// coldAgent prefixes the sub-benchmarks of the cold create benchmark with
// the agents an executor runs.
const coldAgent = "BenchmarkSandboxCreateColdAgent/"

// coldCreate is a result of coldAgent's sub-benchmark sub.
func coldCreate(sub, unit string) Ref {
	return Ref{Pkg: "executor/sandbox", Bench: coldAgent + sub, Unit: unit}
}

// completionOverhead is a result of e2e's BenchmarkCompletionOverhead.
func completionOverhead(unit string) Ref {
	return Ref{Pkg: "e2e", Bench: "BenchmarkCompletionOverhead", Unit: unit}
}

// coldFloor is the bare bubblewrap timed in the rounds of the cold create
// benchmark bench, in the same state of the machine as its creates.
func coldFloor(bench string) *Anchor {
	return &Anchor{Name: "bare bwrap /bin/true, alternated with the creates", Ref: Ref{Pkg: "executor/sandbox", Bench: bench, Unit: "bare-p50-ms"}}
}

// coldStep is one step of BenchmarkColdStartSteps.
func coldStep(step string) Ref {
	return Ref{Pkg: "executor/sandbox", Bench: "BenchmarkColdStartSteps", Unit: step + "-p50-ms"}
}

// roundTrip is a result of executor's BenchmarkCommandRoundTrip.
func roundTrip(unit string) Ref {
	return Ref{Pkg: "executor", Bench: "BenchmarkCommandRoundTrip", Unit: unit}
}
