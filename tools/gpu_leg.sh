#!/usr/bin/env bash
# One leg of derain-base on a lent GPU machine, beside the equal-data architecture benchmark (issue 43).
#
# Run from the repository root on the GPU machine, after the data was packed here (tools/pack_data.py) and sent:
# /tmp/packed holds the packed folders, /tmp/data/rain-streaks-garg06 the streak layers as they are, /tmp/site
# the wheels the machine lacks. Writes what comes back under $OUT: the leg's exported weights, its log and
# metrics, the benchmark's results. Every step's time is printed, so a short lease shows where it went. How the
# data and wheels were packed and sent in three calls (the 64 MiB a call allows): docs/history.md, "derain-base".
#
# The machine's copy of .git is the session's starting state, not the commit sent: give that commit as
# DERAIN_COMMIT (expanded here, e.g. the run's command `DERAIN_COMMIT=<git rev-parse HEAD> bash tools/gpu_leg.sh`)
# or the weights' provenance names the wrong one (leg 1's had to be corrected).
#   OUT=/tmp/out bash tools/gpu_leg.sh                                  # leg 1 + the arms, ~9.5 minutes
#   LEG=legN ARMS=0 bash tools/gpu_leg.sh                               # the next leg, legN.yaml over every earlier leg's
#   (leg 2 on ran on a CPU at 2 x 256²: a GPU leg's config sets its own batch, as leg 1's 16 x 256²)
#   LEG_OVERLAY=/tmp/cpu.yaml ARMS_ARGS=--quick bash tools/gpu_leg.sh   # a smoke test on a CPU
#   LEG=legN ARMS_ARGS="--rain heavy" bash tools/gpu_leg.sh             # a leg beside the heavy-rain arms
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 NO_ALBUMENTATIONS_UPDATE=1 GRADIO_ANALYTICS_ENABLED=False OMP_NUM_THREADS=2
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" DERAIN_DATA=${DERAIN_DATA:-/tmp/data}
OUT=${OUT:-/tmp/out}
PY=${PY:-python3}
LEG=${LEG:-leg1}  # a stage of configs/derain-base/recipe.yaml, or the next leg (its LEG.yaml beside the recipe)
LEG_BUDGET=${LEG_BUDGET:-400}  # seconds of training (TimeBudget); max_time, a guard, 90 s more from fit's start
ARMS_DEADLINE=${ARMS_DEADLINE:-500}  # seconds after the start: arms still training then are stopped
mkdir -p "$OUT"
start=$(date +%s)
stamp() { echo "[$(($(date +%s) - start)) s] $*"; }

stamp "unpack"
[ -d /tmp/packed ] && $PY tools/pack_data.py unpack /tmp/packed "$DERAIN_DATA"
# the leg as the recipe would run it: its configs layered over every earlier leg's, the weights it starts from,
# and what it needs built (the heavy validation set; stage 9 grown for leg 1; the teacher's layers later; a
# recorded leg's input, the leg before it in float16)
fit_args=$($PY -m derain recipe derain-base --fit-args "$LEG") || exit 1
mapfile -t LEG_CONFIGS <<<"$fit_args"  # one argument a line
stamp "prepare $LEG"
$PY -m derain recipe derain-base --prepare "$LEG" || exit 1
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader 2>/dev/null

stamp "arms start"
[ "${ARMS:-1}" = 0 ] || timeout $((ARMS_DEADLINE - ($(date +%s) - start))) $PY tools/architectures.py /tmp/arms --jobs 3 --workers 2 \
    ${ARMS_ARGS:-} >"$OUT/arms.log" 2>&1 &
arms=$!
[ "${ARMS:-1}" = 0 ] && arms=

stamp "leg start"
leg() {  # leg BUDGET [OPTIONS...]
    local guard=$(($1 + 90))
    $PY -m derain.fit "${LEG_CONFIGS[@]}" ${LEG_OVERLAY:+--config "$LEG_OVERLAY"} \
        --trainer.callbacks.budget "$1" "${@:2}" \
        --trainer.max_time "$(printf '00:00:%02d:%02d' $((guard / 60)) $((guard % 60)))" >>"$OUT/$LEG.log" 2>&1
}
leg_start=$(date +%s)
leg "$LEG_BUDGET"
status=$?
if [ $status -ne 0 ] && [ $(($(date +%s) - leg_start)) -lt 120 ]; then  # failed at once: rain in the workers
    stamp "leg failed ($status) early; again with the procedural rain rendered by the loader workers"
    leg $((LEG_BUDGET - ($(date +%s) - leg_start))) --data.synthesis.render_on_device false --resume never
    status=$?
fi
stamp "leg done: $status"
grep -E "TimeBudget|Exported|Error|error" "$OUT/$LEG.log" | tail -5
[ -n "$arms" ] && wait $arms
stamp "arms done: $?"
tail -25 "$OUT/arms.log"

cp "runs/derain-base/$LEG/model.safetensors" "$OUT/$LEG.safetensors" 2>/dev/null
tar czf "$OUT/results.tgz" "runs/derain-base/$LEG/lightning_logs" \
    $(cd / && ls -d /tmp/arms/*.md /tmp/arms/*.json /tmp/arms/*/*.json /tmp/arms/*/fit.log /tmp/arms/*/config.yaml \
        2>/dev/null) 2>/dev/null
stamp "collected: $(ls "$OUT" | tr '\n' ' ')"
