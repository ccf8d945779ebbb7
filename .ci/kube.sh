#!/usr/bin/env bash
# Installs what the Kubernetes backend's tests run against (issue 17):
# Debian's etcd-server, and kube-apiserver and kwok built from the Go module
# proxy at one release each, cached by version under
# ${GPUD_CI_CACHE:-$HOME/.cache/gpud-ci}/kube/<version>/ so a warm run only
# checks two files. Sourced by .ci/services.sh, or run alone:
#   bash .ci/kube.sh          # install and build what is missing (cold: many minutes)
#   bash .ci/kube.sh --print  # print the binaries' directory
# internal/kubetest finds the binaries through GPUD_KUBE_BIN (exported here)
# or, unset, the same cache path.
kube_k8s_version=${GPUD_KUBE_VERSION:-v1.37.2}   # k8s.io/kubernetes; staging modules at v0.Y.Z
kube_kwok_version=${GPUD_KWOK_VERSION:-v0.8.0}    # sigs.k8s.io/kwok
kube_cache=${GPUD_CI_CACHE:-$HOME/.cache/gpud-ci}/kube
export GPUD_KUBE_BIN="$kube_cache/$kube_k8s_version/bin"

kube_build() (
  set -euo pipefail
  bin="$GPUD_KUBE_BIN"
  mkdir -p "$bin"
  if ! command -v etcd >/dev/null && [ ! -x /usr/bin/etcd ]; then
    echo "ci: installing etcd-server"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends etcd-server >/dev/null
    # The package starts a system etcd on 2379; the tests start their own.
    systemctl disable --now etcd >/dev/null 2>&1 || true
  fi
  if [ ! -x "$bin/kube-apiserver" ]; then
    echo "ci: building kube-apiserver $kube_k8s_version (cold: many minutes on 2 cores)"
    src="$kube_cache/$kube_k8s_version/src"
    rm -rf "$src"; mkdir -p "$src"
    modfile=$(go mod download -json "k8s.io/kubernetes@$kube_k8s_version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    minor=${kube_k8s_version#v1.}
    {
      echo "module gpud.dev/ci/kubebuild"
      echo "go $(sed -n 's/^go //p' "$modfile")"
      echo "require k8s.io/kubernetes $kube_k8s_version"
      # k8s.io/kubernetes replaces its staging modules with ./staging paths a
      # module download does not contain: use their published v0.Y.Z.
      sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile" |
        while read -r m; do echo "replace $m => $m v0.$minor"; done
    } >"$src/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' >"$src/tools.go"
    (cd "$src" && GOFLAGS=-mod=mod go mod tidy && \
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$kube_k8s_version" \
        -o "$bin/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
    mv "$bin/kube-apiserver.tmp" "$bin/kube-apiserver"
  fi
  if [ ! -x "$bin/kwok" ]; then
    echo "ci: building kwok $kube_kwok_version"
    src="$kube_cache/$kube_k8s_version/kwok-src"
    rm -rf "$src"; mkdir -p "$src"
    modfile=$(go mod download -json "sigs.k8s.io/kwok@$kube_kwok_version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    {
      echo "module gpud.dev/ci/kwokbuild"
      echo "go $(sed -n 's/^go //p' "$modfile")"
      echo "require sigs.k8s.io/kwok $kube_kwok_version"
    } >"$src/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/kwok/cmd/kwok"\n' >"$src/tools.go"
    (cd "$src" && GOFLAGS=-mod=mod go mod tidy && \
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok)
    mv "$bin/kwok.tmp" "$bin/kwok"
  fi
  echo "ci: kube-apiserver $kube_k8s_version, kwok $kube_kwok_version, etcd $(etcd --version 2>/dev/null | sed -n 's/^etcd Version: //p') ready in $bin"
)

if [ "${1:-}" = "--print" ]; then
  echo "$GPUD_KUBE_BIN"
elif [ "${BASH_SOURCE[0]}" = "$0" ]; then
  kube_build
else
  kube_build || { echo "ci: building the Kubernetes test binaries failed" >&2; return 1; }
fi
