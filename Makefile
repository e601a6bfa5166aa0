# The benchmark suite (as root): see BENCHMARKS.md. Figures go to stdout and
# bench-results.json; PROFILES=dir adds CPU profiles of the bursts.
.PHONY: bench test
bench:
	go run ./bench $(if $(PROFILES),-profile-dir $(PROFILES))

# The README's test command: installs the system tools the tests need when
# they are missing (test/deps.sh), then runs every test.
test:
	./test/deps.sh
	go test -count=1 -timeout 80m ./...
