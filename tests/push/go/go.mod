module ojs-push-shim

go 1.22

require github.com/openjobspec/ojs-go-sdk v0.0.0

// The official SDK, unmodified, beside the repo (shared/clients). Go only reads it.
replace github.com/openjobspec/ojs-go-sdk => ../../../../shared/clients/ojs-go-sdk
