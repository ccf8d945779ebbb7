# Developer shortcuts. CI does not depend on just: it runs .ci/run.

# Build the gpud binary (cgo on: NVML discovery included).
build:
    go build -o bin/gpud .

# Build a fully static binary (no cgo: nvidia-smi/sysfs discovery fallback).
build-static:
    CGO_ENABLED=0 go build -ldflags '-s -w' -o bin/gpud-static .

# Run the whole test suite the way CI does (installs and starts Docker etc.).
test:
    bash .ci/test

# Run the benchmarks recorded in docs/BENCHMARKS.md.
bench:
    go test -run '^$' -bench . -benchmem ./...

# The gateway side by side with Debian's nginx and caddy (docs/BENCHMARKS.md, issue 16).
bench-gateway:
    go test ./proxy -run '^$' -bench BenchmarkGatewayVsNginxCaddy -benchtime 5000x -count 5

# Long fuzzing runs: just fuzz 10m
fuzz time="1m":
    go test ./api -run '^$' -fuzz FuzzParse -fuzztime {{time}}

lint:
    gofmt -l . | tee /dev/stderr | (! read)
    go vet ./...

fmt:
    gofmt -w .
