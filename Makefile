# The benchmark suite (as root): see BENCHMARKS.md. Figures go to stdout and
# bench-results.json; PROFILES=dir adds CPU profiles of the bursts.
.PHONY: bench test
bench:
	go run ./bench $(if $(PROFILES),-profile-dir $(PROFILES))

test:
	go test -count=1 -timeout 80m ./...
