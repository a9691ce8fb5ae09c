.PHONY: build test demo bench
build:
	mkdir -p bin
	go build -trimpath -o bin/helmr ./cmd/helmr
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/helmr-agent ./cmd/helmr-agent
	scripts/sdk-pack.sh bin >/dev/null
test:
	scripts/test.sh
demo:
	scripts/demo.sh
bench:
	go run ./bench/runstart
