#!/usr/bin/env bash
# soak.sh runs the kill -9 crash harness for thousands of cycles and prints
# one summary line per mode, with its seed: cycles, kills inside
# compaction, operations and deadlines checked, clock steps, Work handler
# runs, violations. It exits non-zero if any mode found a violation, or if
# the deliberately broken build (walq_bug_early_ack) was NOT caught.
#
#   crashtest/soak.sh                 # 1000 cycles of kill and powerloss, 200 of interval
#   crashtest/soak.sh 2000            # 2000 kill -9 and 2000 power-loss cycles
#   crashtest/soak.sh 5000 powerloss  # one mode, more cycles
#   SEED=42 crashtest/soak.sh 100     # reproduce a run (each mode is seeded with SEED)
#
# Every mode steps the children's wall clocks (back and forward, 1s to 1h,
# within a run and across restarts, each child often starting behind the
# previous one), runs Work with a heartbeat and handlers longer than the
# visibility, and puts hostile bodies (random bytes, framed CRC-valid log
# records) among the others (crashtest.DefaultMix).
#
# Modes: kill (kill -9, SyncAlways, compaction forced every few ms),
# powerloss (the same, then the log cut back to what was fsynced),
# interval (SyncInterval(20ms) with power loss: only the last interval may
# be missing), never (SyncNever, kill -9 only: a call returns once its record
# is written to the OS, and that survives the process), early-ack (the queue built to return before fsync: the run
# must report violations).
set -euo pipefail
cd "$(dirname "$0")/.."

cycles=${1:-1000}
shift || true
modes=("$@")
if [ ${#modes[@]} -eq 0 ]; then
	modes=(kill powerloss interval never early-ack)
fi
seed=${SEED:-0}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/walq-crashtest" ./crashtest/cmd/walq-crashtest
go build -tags walq_bug_early_ack -o "$bin/walq-crashtest-early-ack" ./crashtest/cmd/walq-crashtest

status=0
for mode in "${modes[@]}"; do
	case $mode in
	kill) args=(-cycles "$cycles" -sync always) ;;
	powerloss) args=(-cycles "$cycles" -sync always -powerloss) ;;
	interval) args=(-cycles "$(( cycles / 5 > 200 ? cycles / 5 : 200 ))" -sync interval:20ms -powerloss) ;;
	never) args=(-cycles "$(( cycles / 5 > 200 ? cycles / 5 : 200 ))" -sync never) ;;
	early-ack) args=(-cycles 50 -sync always -powerloss -expect-violations) ;;
	*) echo "soak.sh: unknown mode $mode" >&2; exit 2 ;;
	esac
	exe=$bin/walq-crashtest
	[ "$mode" = early-ack ] && exe=$bin/walq-crashtest-early-ack
	if ! "$exe" -seed "$seed" -stepclock "${args[@]}" 2>"$bin/$mode.err" >"$bin/$mode.out"; then
		status=1
		sed -n 1,30p "$bin/$mode.err" >&2
	fi
	echo "$mode: $(tail -n 1 "$bin/$mode.out")"
done
exit $status
