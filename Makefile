# The benchmark suite (as root): see BENCHMARKS.md. Figures go to stdout and
# bench-results.json; PROFILES=dir adds CPU profiles of the bursts.
.PHONY: bench test lint
bench:
	go run ./bench $(if $(PROFILES),-profile-dir $(PROFILES))

# The README's test command: installs the system tools the tests need when
# they are missing (test/deps.sh), then runs every test.
test: lint
	./test/deps.sh
	go test -count=1 -timeout 80m ./...

# Static analysis: staticcheck, and golangci-lint with gosec and errorlint
# (.golangci.yml), at the versions tools/go.mod pins, built from the Go
# module proxy on first use and cached by go tool. No finding may remain:
# fix it, or mark its line with //nolint and the reason.
LINT = go tool -modfile=tools/go.mod
lint:
	$(LINT) staticcheck ./...
	$(LINT) golangci-lint run --allow-parallel-runners ./...
