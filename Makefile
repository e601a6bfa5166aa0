# The benchmark suite (as root): see BENCHMARKS.md. Figures go to stdout and
# bench-results.json; PROFILES=dir adds CPU profiles of the bursts.
.PHONY: bench fuzz lint test
bench:
	go run ./bench $(if $(PROFILES),-profile-dir $(PROFILES))

# The README's test command: installs the system tools the tests need when
# they are missing (test/deps.sh), then runs every test.
test: lint
	./test/deps.sh
	go test -count=1 -timeout 80m ./...

# Static analysis: gofmt, and golangci-lint (.golangci.yml) with its standard
# linters, staticcheck among them with all its checks, plus gosec and
# errorlint, at the version tools/go.mod pins, built from the Go module proxy
# on first use and cached by go tool. staticcheck runs inside golangci-lint
# only: a second, standalone run analysed the whole tree again, for the same
# checks, and cost minutes of a cold CI run. No finding may remain: fix it,
# or mark its line with //nolint and the reason.
LINT = go tool -modfile=tools/go.mod
lint:
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted" >&2; exit 1; fi
	$(LINT) golangci-lint run --allow-parallel-runners ./...

# The fuzz targets, as package:Target. go test -fuzz runs one target of one
# package at a time, so they are listed and run in turn, FUZZTIME each.
# Their committed seeds (f.Add and testdata/fuzz/) also run in make test.
FUZZ_TARGETS = \
	./internal/atomicwriter:FuzzValidatePath \
	./internal/atomicwriter:FuzzWriterAdversary \
	./internal/plugins/contentdir:FuzzItemPaths \
	./internal/source/manifest:FuzzParseFile \
	./internal/source/manifest:FuzzSecretNotInProblems \
	./internal/source/manifest:FuzzOneConversion \
	./internal/plugins/hostpath:FuzzHostPathSetUp \
	./internal/procpool:FuzzServe \
	./internal/plugins/nfs:FuzzValidate \
	./internal/provisioner/nfssubdir:FuzzPathPattern \
	./internal/provisioner/nfssubdir:FuzzParseClass \
	./internal/subpath:FuzzSubPath

# Fuzzing (as root, like make test). FUZZTIME is per target; FUZZPARALLEL,
# when set, caps the workers (default: one per CPU). FUZZMINIMIZETIME bounds
# the shrinking of each new input: Go's default of 60s leaves the slower
# targets (FuzzParseFile) minimizing most of the time. A failing input is
# written to the package's testdata/fuzz/<Target>/: commit it with the fix.
FUZZTIME ?= 30s
FUZZMINIMIZETIME ?= 5s
FUZZPARALLEL ?=
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; target=$${t##*:}; \
		echo "== $$target ($$pkg, $(FUZZTIME))"; \
		go test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) \
			-fuzzminimizetime $(FUZZMINIMIZETIME) $(if $(FUZZPARALLEL),-parallel $(FUZZPARALLEL)) $$pkg; \
	done
