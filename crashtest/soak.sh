#!/usr/bin/env bash
# soak.sh runs the kill -9 crash harness for thousands of cycles and prints
# one summary line per mode, with its seed: cycles, kills inside
# compaction, power losses and the pages they lost, operations and
# deadlines checked, clock steps, Work handler runs, refused opens, lost
# and resurrected items, violations, cycles per second. It exits non-zero if
# any mode found a violation, or if the deliberately broken build
# (walq_bug_early_ack) was NOT caught.
#
#   crashtest/soak.sh                  # 1000 kill and 1000 power-loss cycles, 200 each of interval and never
#   crashtest/soak.sh 10000            # 10000 kill -9 and 10000 power-loss cycles, 2000 each of interval and never
#   crashtest/soak.sh 5000 powerloss   # one mode, more cycles
#   crashtest/soak.sh 300 kill interval=300 never=300   # mode=cycles sets one mode's cycles
#   SEED=42 crashtest/soak.sh 100      # reproduce a run (each mode is seeded with SEED)
#   QUEUES=0 crashtest/soak.sh 1000    # the default queue only, as before named queues
#
# Every mode steps the children's wall clocks (back and forward, 1s to 1h,
# within a run and across restarts, each child often starting behind the
# previous one), runs Work with a heartbeat and handlers longer than the
# visibility (on the named queues, in half the children, one WorkQueues
# pool: pool-runs), and puts hostile bodies (random bytes, lookalike format-1 and
# format-2 records, copies of real frames read from the queue's own
# segments) among the others, and bodies of every size from 0 B to 256 KiB:
# 2% of items large (1 KiB to 256 KiB, a quarter of them 256 KiB, a quarter
# next to a 4 KiB page boundary) and 1% empty (crashtest.DefaultMix). The
# summary counts the large and empty bodies read back from disk and
# checked byte for byte at the checks, and the MiB of all.
#
# Every mode also runs the workload over QUEUES named queues (default 3)
# besides the default queue, with settings of their own: each child opens
# them, spreads its puts, gets, Work and sweeps over all of them, pauses
# them (until a time and until resumed), resumes them, and deletes them
# (forced or not) and creates them again; each check holds every item to
# the queue and ID it was put with, no incarnation whose delete was
# promised (nor any item, key or dead letter of it) coming back, every
# pause promised still recorded, keys per queue, and the counters and
# dead letters of each queue (crashtest/queues.go). The summary line then
# counts the pauses, resumes, deletes, re-creations, the pauses and
# deletes found held at checks, and the keys found held in several queues
# at once.
#
# Every mode also watches wake-ups: each child reads its queues' Stats every
# 50 ms and reports a consumer stalled (a Get waiting while its queue can
# lease, nothing changed for 200 ms), with quiet phases that leave one queue
# to its Work consumers; and after the first check, every eighth and the
# last, an idle check on a copy of the recovered directory holds the timer
# loop to 2 rounds and the committer to none in 100 ms with Gets blocked and
# nothing due (crashtest/consumers.go, crashtest/idle.go). The summary line
# counts the watch's reads, those that saw Stats.Stalled or a consumer
# stuck for a moment, the longest such moment, the idle checks and the most
# rounds of either loop one saw.
#
# Modes:
#   kill                kill -9, SyncAlways, compaction forced every few ms
#   powerloss           kill -9, then a power loss that keeps a random share
#                       of the unsynced 4 KiB pages of the log's tail and
#                       zeroes or garbles the others (sometimes cutting the
#                       file at a page boundary); each child's sync policy is
#                       drawn from always, interval:100ms and never
#   powerloss-always    the same under one policy
#   powerloss-interval
#   powerloss-never
#   interval            SyncInterval(20ms), kill -9 then the log cut back to
#                       what was fsynced, the rest zeros, garbage or nothing
#   never               SyncNever, kill -9 only: a call returns once its
#                       record is written to the OS, and that survives the
#                       process
#   lowdisk             kill -9 with the queue on an 8 MiB tmpfs (root only;
#                       skipped otherwise), each child's sync policy drawn,
#                       Options.DiskWatermark at 2 MiB, automatic compaction
#                       on and a third of the items large: puts are refused
#                       with ErrDiskFull (counted as disk-refused, held to
#                       storing nothing) and the queue must never fail itself
#   early-ack           the queue built to return before fsync, under page
#                       loss: the run must report violations
# interval, never and lowdisk run a fifth of the cycles (at least 200),
# early-ack 50.
set -euo pipefail
cd "$(dirname "$0")/.."

cycles=${1:-1000}
shift || true
modes=("$@")
if [ ${#modes[@]} -eq 0 ]; then
	modes=(kill powerloss interval never lowdisk early-ack)
fi
seed=${SEED:-0}
queues=${QUEUES:-3}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/walq-crashtest" ./crashtest/cmd/walq-crashtest
go build -tags walq_bug_early_ack -o "$bin/walq-crashtest-early-ack" ./crashtest/cmd/walq-crashtest
echo "soak.sh: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo +dirty)," \
	"$(go env GOVERSION), $(nproc) cores, SEED=${SEED:-clock}, QUEUES=$queues"

fifth=$(( cycles / 5 > 200 ? cycles / 5 : 200 ))
status=0
for spec in "${modes[@]}"; do
	mode=${spec%%=*}
	n=
	[ "$spec" != "$mode" ] && n=${spec#*=}
	case $mode in
	kill) args=(-cycles "${n:-$cycles}" -sync always) ;;
	powerloss) args=(-cycles "${n:-$cycles}" -sync cycle -pageloss) ;;
	powerloss-always) args=(-cycles "${n:-$cycles}" -sync always -pageloss) ;;
	powerloss-interval) args=(-cycles "${n:-$cycles}" -sync interval:100ms -pageloss) ;;
	powerloss-never) args=(-cycles "${n:-$cycles}" -sync never -pageloss) ;;
	interval) args=(-cycles "${n:-$fifth}" -sync interval:20ms -powerloss) ;;
	never) args=(-cycles "${n:-$fifth}" -sync never) ;;
	lowdisk)
		if [ "$(id -u)" != 0 ]; then
			echo "lowdisk: skipped: it mounts a tmpfs, which needs root"
			continue
		fi
		args=(-cycles "${n:-$fifth}" -sync cycle -lowdisk $((8 << 20)) -mix large=30)
		;;
	early-ack) args=(-cycles "${n:-50}" -sync always -pageloss -expect-violations) ;;
	*) echo "soak.sh: unknown mode $mode" >&2; exit 2 ;;
	esac
	exe=$bin/walq-crashtest
	[ "$mode" = early-ack ] && exe=$bin/walq-crashtest-early-ack
	if ! "$exe" -seed "$seed" -stepclock -queues "$queues" "${args[@]}" 2>"$bin/$mode.err" >"$bin/$mode.out"; then
		status=1
		sed -n 1,30p "$bin/$mode.err" >&2
	fi
	echo "$mode: $(tail -n 1 "$bin/$mode.out")"
done
exit $status
