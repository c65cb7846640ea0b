#!/usr/bin/env bash
# run.sh fuzzes each target of package fuzz in turn for the given time.
#
#   fuzz/run.sh 10m               # every target, 10 minutes each
#   fuzz/run.sh 30s FuzzRecovery  # one target
#
# A crasher is written to fuzz/testdata/fuzz/<target>/ by go test: fix the
# bug, keep the file as a regression seed, commit both. A target that fails
# does not stop the others; the exit status says whether any failed.
#
# Scratch directories go to /dev/shm when it exists: the targets test
# decoding, recovery and the queue's logic, not the disk, and the fsyncs of
# Open and Close on a real disk make them a hundred times slower.
# -fuzzminimizetime is short because the queue runs goroutines, so coverage
# differs slightly from run to run and the default minute of minimizing each
# new input would stall the fuzzer.
#
# Go before 1.27 can end a -fuzztime run with a bare "context deadline
# exceeded" and no crasher (golang/go#75804, a race in the coordinator at
# the deadline). A failure that wrote no new file under testdata/fuzz is
# reported as that and not counted.
set -euo pipefail
cd "$(dirname "$0")"

duration=${1:?usage: fuzz/run.sh <duration> [target...]}
shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	targets=(FuzzRecord FuzzFields FuzzSnapshot FuzzRecovery FuzzOps FuzzQueueOps)
fi
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
	export TMPDIR=/dev/shm
fi
status=0
for target in "${targets[@]}"; do
	echo "== $target ($duration)"
	corpus=testdata/fuzz/$target
	before=$(ls "$corpus" 2>/dev/null | sort || true)
	if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$duration" -fuzzminimizetime 200x \
		-parallel "${PARALLEL:-1}" -timeout 0 .; then
		continue
	fi
	after=$(ls "$corpus" 2>/dev/null | sort || true)
	if [ "$before" = "$after" ]; then
		echo "== $target: failed without writing a crasher (golang/go#75804 at the deadline?): not counted"
	else
		echo "== $target: new crasher: $(comm -13 <(echo "$before") <(echo "$after") | tr '\n' ' ')"
		status=1
	fi
done
exit $status
