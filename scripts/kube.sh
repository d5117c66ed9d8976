#!/usr/bin/env bash
# A real single-node Kubernetes 1.20 on this machine, for the Kubernetes backend's tests and bench.
#
#   kube.sh build    install Debian packages, fetch Debian's `kubernetes` source package, patch it,
#                    build kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl
#                    ONCE into $KUBE_CACHE/bin (a second run finds them and builds nothing)
#   kube.sh start    build if needed; PKI + kubeconfig; our own containerd; import the SDK's images;
#                    etcd, API server, controller-manager, scheduler, kubelet, all on 127.0.0.1;
#                    wait for the node to be Ready. Idempotent: a running cluster is left as it is.
#   kube.sh stop     stop what `start` started, by pid (nothing else), and remove its run state
#   kube.sh status   say what runs; exit 0 only when the node is Ready
#
# Network safety (nothing may send a packet anywhere but loopback, unix sockets and the pods we
# create): every in-tree cloud credential provider is removed from the kubelet before it is built
# (and everything is built with upstream's `providerless` tag); the kubelet runs with
# AWS_EC2_METADATA_DISABLED=true and no cloud provider; every component listens and connects on
# 127.0.0.1, with HTTP(S)_PROXY a dead loopback port; the kubelet leaves host sysctls alone;
# images come only from local imports; containerd's CRI plugin sends every registry (hosts.toml
# for docker.io, registry.k8s.io, ... and `_default` for any other name) to a dead loopback port,
# so no pull resolves or reaches a registry; the pods' bridge has no gateway, no masquerade and
# no host address (IPv6 off there). tests/kubernetes/test_kube_network_safety.py checks it.
#
# Cache (outside the clone, kept between runs): $KUBE_CACHE, default /var/cache/sandbox-sdk/kube.
# The kubeconfig is $KUBE_CACHE/run/kubeconfig once `start` succeeded.
set -euo pipefail

KUBE_CACHE=${KUBE_CACHE:-/var/cache/sandbox-sdk/kube}
K=$KUBE_CACHE
KV=1.20.2                       # upstream version inside Debian's 1.20.5+really1.20.2 source
DEB_VERSION="1.20.5+really$KV"
SRC=$K/src/kubernetes-$KV
BIN=$K/bin
PKI=$K/pki
RUN=$K/run                      # pids, kubeconfig, READY: what a running cluster needs
STATE=$K/state                  # etcd data, containerd root, kubelet dir: removed by stop
LOGS=$K/logs
IMAGES=$K/images
HERE=$(cd "$(dirname "$0")" && pwd)
BINS="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl"
# Changing the patches below must rebuild: the stamp names them.
BUILD_STAMP="v$KV patches=reflect2-mapiterinit,no-credential-providers,no-cadvisor-cloudinfo,kernel-tunables-warn tags=providerless go=1.19"
APISERVER_PORT=16443
ETCD_PORT=23790
ETCD_PEER_PORT=23800
KUBELET_PORT=20250
DEAD_REGISTRY=http://127.0.0.1:9   # discard port, nothing listens: every pull fails on loopback
PAUSE_IMAGE=registry.k8s.io/pause:3.6
COMPONENTS="etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet"
CTR_SOCK=$STATE/containerd/containerd.sock

say() { printf 'kube: %s\n' "$*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
die() { say "$*"; exit 1; }

# Wait up to $1 seconds for command $2... to succeed.
wait_for() {
    local end=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.1
    done
}

deps() {
    local need=()
    command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
    [ -x /usr/lib/go-1.19/bin/go ] || need+=(golang-1.19-go)
    command -v containerd >/dev/null 2>&1 || need+=(containerd)
    command -v runc >/dev/null 2>&1 || need+=(runc)
    [ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
    [ -x /bin/busybox ] || need+=(busybox-static)
    command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
    command -v openssl >/dev/null 2>&1 || need+=(openssl)
    command -v curl >/dev/null 2>&1 || need+=(curl)
    command -v strace >/dev/null 2>&1 || need+=(strace)
    command -v ss >/dev/null 2>&1 || need+=(iproute2)
    if [ "${#need[@]}" -gt 0 ]; then bash "$HERE/apt-install.sh" kube "${need[@]}"; fi
}

# Debian's kubernetes source package: the full upstream tree with vendor/ and staging/, so it
# builds offline. A private sources list and lists dir leave /etc/apt as it is.
fetch() {
    [ "$(cat "$SRC/.patched" 2>/dev/null)" = "$BUILD_STAMP" ] && return 0
    local t; t=$(now)
    local A=$K/apt uri
    mkdir -p "$A/lists/partial" "$K/src"
    uri=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
    if [ -n "$uri" ]; then
        printf 'deb-src %s bookworm main\n' "$uri" >"$A/sources.list"
    else
        grep -h '^deb ' /etc/apt/sources.list 2>/dev/null | head -1 | sed 's/^deb /deb-src /' >"$A/sources.list"
    fi
    [ -s "$A/sources.list" ] || die "no Debian mirror found in /etc/apt to fetch the kubernetes source package from"
    local O=(-o "Dir::Etc::SourceList=$A/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$A/lists" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=)
    local orig=$A/kubernetes_$DEB_VERSION.orig.tar.gz
    if [ ! -s "$orig" ]; then
        say "fetching Debian's kubernetes $DEB_VERSION source package (private apt lists in $A)"
        apt-get "${O[@]}" update -qq >/dev/null
        (cd "$A" && apt-get "${O[@]}" --download-only source "kubernetes=$DEB_VERSION-1" >/dev/null 2>&1 ||
                    apt-get "${O[@]}" --download-only source kubernetes >/dev/null)
    fi
    [ -s "$orig" ] || die "the source package did not bring $orig"
    rm -rf "$SRC"
    tar xzf "$orig" -C "$K/src"
    [ -d "$SRC/cmd/kubelet" ] || die "unexpected source layout: no $SRC/cmd/kubelet"
    patch_source
    echo "$BUILD_STAMP" >"$SRC/.patched"
    say "source fetched, extracted and patched in $(since "$t") s"
}

patch_source() {
    # 1. NETWORK SAFETY. The in-tree cloud credential providers: AWS's queries the EC2 metadata
    # address (169.254.169.254) when the kubelet starts; azure and gcp are dormant off their clouds
    # but nothing here may ever try an outside address. None of them is linked into our kubelet:
    # the imports go from plugins.go and globalflags.go, and everything is built with upstream's
    # `providerless` tag (no in-tree cloud provider, cloud volume plugin or their flags).
    local f
    for f in cmd/kubelet/app/plugins.go cmd/kubelet/app/options/globalflags.go; do
        sed -i -E '/_ "k8s.io\/kubernetes\/pkg\/credentialprovider\/(aws|azure|gcp)"/d' "$SRC/$f"
    done
    if grep -rqE '"k8s.io/kubernetes/pkg/credentialprovider/(aws|azure|gcp)"' --include='*.go' \
        "$SRC/cmd" "$SRC/pkg/kubelet"; then
        die "a cloud credential provider import is left in the kubelet's source"
    fi
    # cAdvisor's cloud-info probes (aws, azure, gce) are imported for their side effect in
    # 1.20's cadvisor_linux.go, outside the providerless tag; aws's asks the metadata address.
    sed -i -E '/_ "github.com\/google\/cadvisor\/utils\/cloudinfo\/(aws|azure|gce)"/d' \
        "$SRC/pkg/kubelet/cadvisor/cadvisor_linux.go"
    if grep -rqE '"github.com/google/cadvisor/utils/cloudinfo/(aws|azure|gce)"' --include='*.go' \
        "$SRC/cmd" "$SRC/pkg/kubelet"; then
        die "a cAdvisor cloud-info import is left in the kubelet's source"
    fi
    # 2. The kubelet sets host sysctls it likes (vm.overcommit_memory=1, kernel.panic_on_oops=1,
    # kernel.panic=10) when it starts. This is a shared machine: it only warns about them.
    p=$SRC/pkg/kubelet/cm/container_manager_linux.go
    sed -i 's/^\tb := KernelTunableModify$/\tb := KernelTunableWarn \/\/ sandbox-sdk: never change a shared host'"'"'s sysctls/' "$p"
    grep -q 'b := KernelTunableWarn' "$p" || die "kernel tunables patch did not apply to $p"
    # 3. reflect2 v1.0.1 (vendored) calls runtime.mapiterinit with the pre-Go-1.18 signature and
    # corrupts memory on Go 1.19: the signature and hiter layout of reflect2 v1.0.2.
    python3 - "$SRC/vendor/github.com/modern-go/reflect2" <<'EOF'
import os, sys
d = sys.argv[1]
def edit(name, old, new):
    path = os.path.join(d, name)
    text = open(path).read()
    if old not in text:
        sys.exit(f"reflect2 patch: {name} does not contain the expected code")
    open(path, "w").write(text.replace(old, new))
edit("unsafe_link.go",
     "func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer) *hiter",
     "func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer, it *hiter)")
edit("unsafe_link.go", "\t// rest fields are ignored\n}",
     "\tt           unsafe.Pointer\n\th           unsafe.Pointer\n\tbuckets     unsafe.Pointer\n"
     "\tbptr        unsafe.Pointer\n\toverflow    *[]unsafe.Pointer\n\toldoverflow *[]unsafe.Pointer\n"
     "\tstartBucket uintptr\n\toffset      uint8\n\twrapped     bool\n\tB           uint8\n"
     "\ti           uint8\n\tbucket      uintptr\n\tcheckBucket uintptr\n}")
edit("unsafe_map.go",
     "\treturn &UnsafeMapIterator{\n\t\thiter:      mapiterinit(type2.rtype, *(*unsafe.Pointer)(obj)),",
     "\tvar it hiter\n\tmapiterinit(type2.rtype, *(*unsafe.Pointer)(obj), &it)\n"
     "\treturn &UnsafeMapIterator{\n\t\thiter:      &it,")
EOF
}

built() {
    local b
    for b in $BINS; do [ -x "$BIN/$b" ] || return 1; done
    [ "$(cat "$BIN/.stamp" 2>/dev/null)" = "$BUILD_STAMP" ]
}

# Kubernetes 1.20 builds in GOPATH mode from vendor/ (as its hack/lib/golang.sh does); the Go
# module proxy is never asked (GOPROXY=off, GOFLAGS=-mod=vendor is implied by GOPATH mode).
build() {
    deps
    if built; then say "binaries cached in $BIN ($BUILD_STAMP); nothing to build"; return 0; fi
    local T; T=$(now)
    fetch
    mkdir -p "$BIN" "$LOGS"
    (
        export GOROOT=/usr/lib/go-1.19 PATH=/usr/lib/go-1.19/bin:$PATH
        export GOPATH=$K/gopath GOCACHE=$K/gocache GOPROXY=off GOSUMDB=off GO111MODULE=off CGO_ENABLED=0
        export GOFLAGS= GOTOOLCHAIN=local
        mkdir -p "$GOPATH/src/k8s.io"
        ln -sfn "$SRC" "$GOPATH/src/k8s.io/kubernetes"
        cd "$GOPATH/src/k8s.io/kubernetes"
        local t
        if [ ! -s pkg/generated/openapi/zz_generated.openapi.go ]; then
            # Produced by upstream's Makefile, absent from the tarball: the same input set.
            t=$(now)
            go build -o "$K/gopath/bin/openapi-gen" k8s.io/kubernetes/vendor/k8s.io/kube-openapi/cmd/openapi-gen
            local dirs
            dirs=$(grep -R -l --include='*.go' --exclude='*_test.go' '+k8s:openapi-gen=' pkg cmd plugin vendor/k8s.io |
                grep -v -E '^vendor/k8s.io/(code-generator|sample-apiserver)/|/testdata/' |
                xargs -n1 dirname | LC_ALL=C sort -u | sed 's#^#k8s.io/kubernetes/#' | paste -sd, -)
            "$K/gopath/bin/openapi-gen" --logtostderr -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi \
                -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
                -r "$LOGS/openapi-violations.report" 2>"$LOGS/openapi-gen.log"
            # Upstream's known list: proves the input set matches upstream's Makefile.
            diff <(sort "$LOGS/openapi-violations.report") <(sort api/api-rules/violation_exceptions.list) >/dev/null ||
                { echo "kube: openapi-gen input differs from upstream's (see $LOGS/openapi-violations.report)" >&2; exit 1; }
            echo "kube:   openapi-gen $(since "$t") s" >&2
        fi
        local ldf="-s -w" p
        for p in k8s.io/kubernetes/pkg/version k8s.io/kubernetes/vendor/k8s.io/component-base/version \
                 k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
            ldf="$ldf -X $p.gitVersion=v$KV -X $p.gitMajor=1 -X $p.gitMinor=20 -X $p.gitCommit=debian-$DEB_VERSION"
            ldf="$ldf -X $p.gitTreeState=clean -X $p.buildDate=2021-01-13T00:00:00Z"
        done
        local b
        for b in $BINS; do
            t=$(now)
            go build -trimpath -tags providerless -ldflags "$ldf" -o "$BIN/$b.new" "k8s.io/kubernetes/cmd/$b"
            mv -f "$BIN/$b.new" "$BIN/$b"
            echo "kube:   built $b in $(since "$t") s" >&2
        done
    )
    # The kubelet must not contain a credential provider or cloud-info probe (network safety).
    if grep -a -q -E 'pkg/credentialprovider/(aws|azure|gcp)|cadvisor/utils/cloudinfo/(aws|azure|gce)|legacy-cloud-providers/(aws|azure|gce)' "$BIN/kubelet"; then
        rm -f "$BIN/kubelet"; die "the built kubelet still links a cloud credential provider; refusing it"
    fi
    echo "$BUILD_STAMP" >"$BIN/.stamp"
    say "built $BINS in $(since "$T") s (cache: $K)"
}

# ---------------------------------------------------------------------------------------------
# PKI and kubeconfigs: a CA and one client certificate per component, made once and kept in
# $PKI (a restarted cluster keeps its certificates, so an old kubeconfig still works).
pki() {
    [ -s "$PKI/.done" ] && return 0
    local t; t=$(now)
    rm -rf "$PKI"; mkdir -p "$PKI"; chmod 700 "$PKI"
    (
        cd "$PKI"
        openssl genrsa -out ca.key 2048 2>/dev/null
        openssl req -x509 -new -nodes -key ca.key -sha256 -days 3650 -subj "/CN=sandbox-sdk-kube-ca" -out ca.crt
        cert() { # name CN O extension-lines
            local subj="/CN=$2"
            [ -n "$3" ] && subj="/O=$3/CN=$2"
            openssl genrsa -out "$1.key" 2048 2>/dev/null
            openssl req -new -key "$1.key" -subj "$subj" -out "$1.csr"
            printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n%s\n' "$4" >"$1.ext"
            openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
                -extfile "$1.ext" -out "$1.crt" 2>/dev/null
            rm -f "$1.csr" "$1.ext"
        }
        cert apiserver kube-apiserver "" "extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
        cert admin sandbox-sdk-admin system:masters "extendedKeyUsage=clientAuth"
        cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters "extendedKeyUsage=clientAuth"
        # The node is named 127.0.0.1: --hostname-override=<loopback IP> is how a 1.20 kubelet
        # gets a loopback node address (it refuses a loopback --node-ip).
        cert kubelet system:node:127.0.0.1 system:nodes "extendedKeyUsage=clientAuth"
        cert kubelet-server 127.0.0.1 "" "extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
        cert controller-manager system:kube-controller-manager "" "extendedKeyUsage=clientAuth"
        cert scheduler system:kube-scheduler "" "extendedKeyUsage=clientAuth"
        openssl genrsa -out sa.key 2048 2>/dev/null
        openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
        chmod 600 ./*.key
    )
    local who
    for who in admin kubelet controller-manager scheduler; do kubeconfig "$who" >"$PKI/$who.kubeconfig"; done
    date -u +%FT%TZ >"$PKI/.done"
    say "PKI made in $(since "$t") s"
}

kubeconfig() {
    cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandbox-sdk-kube
  cluster: {server: "https://127.0.0.1:$APISERVER_PORT", certificate-authority: "$PKI/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$PKI/$1.crt", client-key: "$PKI/$1.key"}
contexts:
- name: sandbox-sdk-kube
  context: {cluster: sandbox-sdk-kube, user: $1, namespace: sandboxes}
current-context: sandbox-sdk-kube
EOF
}

# The pause image, built from the tree's build/pause/linux/pause.c: the kubelet never pulls it.
pause_image() {
    [ -s "$IMAGES/pause.tar" ] && return 0
    local r=$IMAGES/pause-rootfs
    rm -rf "$r"; mkdir -p "$r"
    gcc -Os -Wall -static -DVERSION=v3.6-sandbox-sdk -o "$r/pause" "$SRC/build/pause/linux/pause.c"
    strip "$r/pause"
    python3 "$HERE/kube_oci.py" "$r" "$PAUSE_IMAGE" "$IMAGES/pause.tar" --entrypoint /pause
}

config() {
    mkdir -p "$STATE" "$K/containerd/root" "$K/containerd/hosts/_default" "$K/cni/net.d" "$LOGS" "$RUN"
    # Every registry (and "_default", which containerd uses for any name not listed) has one
    # endpoint: a loopback port nothing listens on. No pull can leave the machine; a missing
    # image fails fast with "connection refused" on 127.0.0.1.
    local reg
    for reg in _default docker.io registry-1.docker.io registry.k8s.io k8s.gcr.io gcr.io quay.io ghcr.io \
               mcr.microsoft.com public.ecr.aws; do
        mkdir -p "$K/containerd/hosts/$reg"
        printf 'server = "%s"\n\n[host."%s"]\n  capabilities = ["pull", "resolve"]\n' \
            "$DEAD_REGISTRY" "$DEAD_REGISTRY" >"$K/containerd/hosts/$reg/hosts.toml"
    done
    cat >"$K/containerd/config.toml" <<EOF
version = 2
root = "$K/containerd/root"
state = "$STATE/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$CTR_SOCK"
[ttrpc]
  address = "$CTR_SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$K/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  enable_selinux = false
  # Root here lacks CAP_SYS_RESOURCE: runc cannot give the pause container oom_score_adj -998.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$K/containerd/hosts"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$K/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
EOF
    # Pods' bridge: no address on the host side, no gateway, no masquerade: a pod reaches
    # other pods on it and nothing else.
    cat >"$K/cni/net.d/10-sandbox-sdk.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "sandbox-sdk-kube", "plugins": [{"type": "bridge", "bridge": "sbxkube0",
  "isGateway": false, "isDefaultGateway": false, "ipMasq": false, "hairpinMode": false,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.77.0/24"}]], "dataDir": "$STATE/cni-ipam"}}]}
EOF
    echo "# empty: pods get no nameserver" >"$K/resolv.conf"
    cat >"$K/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 20248
tlsCertFile: $PKI/kubelet-server.crt
tlsPrivateKeyFile: $PKI/kubelet-server.key
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: $PKI/ca.crt}}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failSwapOn: false
makeIPTablesUtilChains: false
resolvConf: $K/resolv.conf
clusterDomain: cluster.local
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 2s
maxPods: 250
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
EOF
}

# ---------------------------------------------------------------------------------------------
pid_of() { cat "$RUN/$1.pid" 2>/dev/null || true; }

# A component we started: its pidfile names a live process whose command line mentions our cache.
alive() {
    local pid; pid=$(pid_of "$1")
    [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$K/"
}

# Start $1 detached (own session: a Ctrl-C of make does not reach it; without our lock fd),
# log to $LOGS/$1.log.
launch() {
    local name=$1; shift
    : >"$LOGS/$name.log"
    setsid env AWS_EC2_METADATA_DISABLED=true HTTP_PROXY=$DEAD_REGISTRY HTTPS_PROXY=$DEAD_REGISTRY \
        http_proxy=$DEAD_REGISTRY https_proxy=$DEAD_REGISTRY NO_PROXY= no_proxy= \
        "$@" >>"$LOGS/$name.log" 2>&1 </dev/null 9>&- &
    echo $! >"$RUN/$name.pid"
}

kubectl_() { "$BIN/kubectl" --kubeconfig="$PKI/admin.kubeconfig" --request-timeout=10s "$@"; }

node_ready() {
    [ "$(kubectl_ get node 127.0.0.1 -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

api_ready() { curl -sf --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null; }

all_alive() { local c; for c in $COMPONENTS; do alive "$c" || return 1; done; }

ctr_() { ctr -a "$CTR_SOCK" -n k8s.io "$@"; }

# The SDK's images from the Docker engine, as name:local (and their own tag) in the cluster's
# containerd. Imported again only when Docker's image id changed. The pause image likewise.
import_images() {
    local t; t=$(now)
    mkdir -p "$IMAGES"
    local have; have=$(ctr_ images ls -q)   # (not piped into grep -q: SIGPIPE under pipefail)
    if ! grep -qx "$PAUSE_IMAGE" <<<"$have"; then
        ctr_ images import "$IMAGES/pause.tar" >/dev/null
    fi
    local img id ref n=0
    for img in ${KUBE_IMAGES:-sandbox-busybox sandbox-python}; do
        id=$(docker image inspect --format '{{.Id}}' "$img:latest" 2>/dev/null) || {
            say "note: Docker has no $img:latest (make images); not imported"; continue; }
        ref=docker.io/library/$img
        if [ "$(cat "$IMAGES/$img.id" 2>/dev/null)" = "$id" ] && grep -qx "$ref:local" <<<"$have"; then
            continue
        fi
        docker save "$img:latest" | ctr_ images import - >/dev/null
        ctr_ images tag --force "$ref:latest" "$ref:local" >/dev/null
        echo "$id" >"$IMAGES/$img.id"
        n=$((n + 1))
    done
    say "images ready in containerd ($n imported) in $(since "$t") s"
}

start() {
    if all_alive && node_ready; then
        say "cluster already running (kubeconfig: $RUN/kubeconfig)"
        write_ready
        return 0
    fi
    if ls "$RUN"/*.pid >/dev/null 2>&1; then
        say "a partial cluster is left over; stopping it first"
        stop
    fi
    local T0; T0=$(now)
    build
    pki
    pause_image
    config
    command -v docker >/dev/null 2>&1 || die "docker is needed to move the SDK's images in (make engine images)"
    local t; t=$(now)
    mkdir -p "$STATE/etcd"
    # From here on the host carries our bridge, kubepods cgroups and shims: stop cleans them.
    date -u +%FT%TZ >"$RUN/started"
    launch etcd etcd --name sandbox-sdk --data-dir "$STATE/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "sandbox-sdk=http://127.0.0.1:$ETCD_PEER_PORT" \
        --enable-v2=false
    # containerd starts meanwhile (independent of the control plane).
    launch containerd containerd --config "$K/containerd/config.toml"
    wait_for 60 curl -sf --max-time 1 "http://127.0.0.1:$ETCD_PORT/health" || fail etcd
    say "etcd ready in $(since "$t") s"
    t=$(now)
    launch kube-apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
        --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$APISERVER_PORT --insecure-port=0 \
        --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" --client-ca-file="$PKI/ca.crt" \
        --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-cluster-ip-range=10.0.0.0/24 --authorization-mode=Node,RBAC \
        --enable-admission-plugins=NodeRestriction --allow-privileged=true \
        --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
        --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
        --kubelet-preferred-address-types=Hostname,InternalIP --endpoint-reconciler-type=none \
        --profiling=false
    wait_for 90 api_ready || fail kube-apiserver
    say "kube-apiserver ready in $(since "$t") s"
    launch kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$PKI/controller-manager.kubeconfig" \
        --authentication-kubeconfig="$PKI/controller-manager.kubeconfig" \
        --authorization-kubeconfig="$PKI/controller-manager.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port=20257 --port=0 --leader-elect=false \
        --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
        --use-service-account-credentials=true \
        --profiling=false
    launch kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$PKI/scheduler.kubeconfig" \
        --authentication-kubeconfig="$PKI/scheduler.kubeconfig" --authorization-kubeconfig="$PKI/scheduler.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port=20259 --port=0 --leader-elect=false --profiling=false
    t=$(now)
    wait_for 60 ctr -a "$CTR_SOCK" version || fail containerd
    import_images
    pod_bridge
    t=$(now)
    mkdir -p "$STATE/kubelet"
    # No --cloud-provider (none is linked in anyway); --docker names no socket so cAdvisor does
    # not look for a Docker engine.
    launch kubelet "$BIN/kubelet" --kubeconfig="$PKI/kubelet.kubeconfig" --config="$K/kubelet-config.yaml" \
        --container-runtime=remote --container-runtime-endpoint="unix://$CTR_SOCK" \
        --containerd="$CTR_SOCK" --docker="unix://$STATE/no-docker.sock" \
        --hostname-override=127.0.0.1 --root-dir="$STATE/kubelet" --cloud-provider=
    wait_for 120 node_ready || fail kubelet
    say "node Ready $(since "$t") s after the kubelet started"
    # The tests' namespace, usable once its default ServiceAccount exists.
    kubectl_ create namespace sandboxes >/dev/null
    wait_for 60 kubectl_ -n sandboxes get serviceaccount default || fail kube-controller-manager
    all_alive || fail "a component"
    kubeconfig admin >"$RUN/kubeconfig.tmp" && mv -f "$RUN/kubeconfig.tmp" "$RUN/kubeconfig"
    write_ready
    say "cluster up in $(since "$T0") s: kubeconfig $RUN/kubeconfig, namespace sandboxes, images *:local"
}

# The pods' bridge, made before the CNI plugin would (it reuses it): no IPv4 address (the CNI
# config has no gateway) and IPv6 off, so the host has no address on it (no link-local fe80::
# either) and a pod reaches no host service, not even one listening on [::].
pod_bridge() {
    ip link show sbxkube0 >/dev/null 2>&1 || ip link add sbxkube0 type bridge
    echo 1 >/proc/sys/net/ipv6/conf/sbxkube0/disable_ipv6
    ip link set sbxkube0 up
}

write_ready() { echo READY >"$RUN/READY"; }

fail() {
    say "$1 did not come up; last lines of its log:"
    local c
    for c in $COMPONENTS; do
        if [ -f "$RUN/$c.pid" ] && ! alive "$c"; then say "$c is not running ($LOGS/$c.log):"; tail -15 "$LOGS/$c.log" >&2 || true; fi
    done
    [ "$1" = "a component" ] || tail -15 "$LOGS/$1.log" >&2 2>/dev/null || true
    say "stopping what was started"
    stop
    exit 1
}

stop1() {
    local name=$1 pid
    pid=$(pid_of "$name")
    if [ -n "$pid" ] && alive "$name"; then
        kill "$pid" 2>/dev/null || true
        local i
        for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; sleep 0.2; fi
        say "stopped $name (pid $pid)"
    fi
    rm -f "$RUN/$name.pid"
}

stop() {
    local t; t=$(now)
    rm -f "$RUN/READY" "$RUN/kubeconfig"
    stop1 kubelet
    if alive containerd; then
        # Every pod container and pod sandbox of ours: killed and removed (their shims exit).
        local c
        for c in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true; done
        for c in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks rm -f "$c" >/dev/null 2>&1 || true; done
        for c in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers rm "$c" >/dev/null 2>&1 || true; done
    fi
    stop1 containerd
    local comp
    for comp in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop1 "$comp"; done
    # Mounts the kubelet and containerd left under our state dir (volumes, rootfs, netns).
    local m
    awk -v s="$STATE/" 'index($2, s) == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    # What a cluster of THIS cache left on the host; never touched when this cache started
    # nothing (another KUBE_CACHE's cluster may be running).
    if [ -e "$RUN/started" ]; then
        # Shims of our containerd still alive (their command line names our socket): by pid.
        local pid
        for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $CTR_SOCK" 2>/dev/null || true); do
            kill -9 "$pid" 2>/dev/null || true
        done
        ip link del sbxkube0 2>/dev/null || true
        # The kubelet's pod cgroups (cgroup v1: one tree per controller; v2: one).
        local h
        for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
            if [ -d "$h" ]; then find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null || true; fi
        done
        rm -f "$RUN/started"
    fi
    rm -rf "$STATE"
    say "stopped in $(since "$t") s"
}

status() {
    local c rc=0
    for c in $COMPONENTS; do
        if alive "$c"; then say "$c running (pid $(pid_of "$c"))"; else say "$c not running"; rc=1; fi
    done
    if [ "$rc" = 0 ] && node_ready; then
        say "node 127.0.0.1 Ready; kubeconfig $RUN/kubeconfig"
    else
        say "cluster not ready"; rc=1
    fi
    if built; then say "binaries built ($BUILD_STAMP)"; else say "binaries not built yet (kube.sh build)"; fi
    return "$rc"
}

# One kube.sh at a time per cache (two `make test` at once must not start two clusters).
lock() { mkdir -p "$K"; exec 9>"$K/.lock"; flock 9; }

case "${1:-}" in
    build) lock; build ;;
    start) lock; start ;;
    stop) lock; stop ;;
    status) status ;;
    *) echo "usage: $0 build|start|stop|status" >&2; exit 2 ;;
esac
