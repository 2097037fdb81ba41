#!/usr/bin/env bash
# Train several dynamics arms of the pile's object_set model side by side on one CUDA
# machine that has Python 3.12 and torch but no package registry, in one call of at most
# about 9 minutes:
#
#   scripts/wheelhouse.sh .wheelhouse                        # once, where PyPI is reachable
#   scripts/gpu_dynamics_arms.sh OUT MINUTES [ARM ...]       # on the GPU machine
#
# ARM is NAME:BATCH[:SECTION.FIELD=VALUE[,SECTION.FIELD=VALUE...]], for example
# `h128:1024:dynamics.hidden=128`; without ARMs, a width sweep of a fresh pile model's
# dynamics (version 9's network: edge frames, three rounds of messages) at 64, 128 and
# 256, and a two-round control at 128. Version 4's arms (docs/MODEL_CARD_pile.md,
# "Version 4") were the same names on that time's fresh network; the card gives the
# ARMs that rebuild them. The script
# 1. installs the wheelhouse (WHEELHOUSE, default .wheelhouse) with pip --no-index
#    --target and uses it through PYTHONPATH;
# 2. collects the pile card's training store (200 pile_play episodes of 200 steps, seeds
#    0..199, with one env worker per core) and prints a digest of its states and actions,
#    to compare with the store the card's command makes elsewhere;
# 3. runs `factory train dynamics --minutes MINUTES --device DEVICE --batch-size BATCH`
#    for every arm at once, each its own process (THREADS torch threads each);
# 4. writes OUT/NAME.tar for each arm (the model directory without its optimizer state,
#    the training's JSON metrics and its log) and OUT/arms.log.
#
# RESUME=1 continues the named arms in WORK (a machine still warm from the last call) to
# a total of MINUTES each, with the same store (budgets count over resumes): the learning
# rate's cosine restarts from where MINUTES puts the arm's elapsed time.
#
# A failing arm does not stop the others; the script exits 1 if any failed. Sizes can be
# overridden for a quick run (the CPU test does): PLAY_EPISODES, PLAY_STEPS, WORKERS,
# THREADS, DEVICE (default cuda), PYTHON, WORK (scratch, default /tmp/factory-arms).
set -euo pipefail
OUT=$(realpath -m "${1:?usage: scripts/gpu_dynamics_arms.sh OUT MINUTES [ARM ...]}")
MINUTES=${2:?usage: scripts/gpu_dynamics_arms.sh OUT MINUTES [ARM ...]}
shift 2
ARMS=("$@")
if [ ${#ARMS[@]} -eq 0 ]; then
    ARMS=(
        h64_b1024:1024
        h128_b1024:1024:dynamics.hidden=128
        h256_b1024:1024:dynamics.hidden=256
        h128_m2_b1024:1024:dynamics.hidden=128,dynamics.message_steps=2
    )
fi
for arm in "${ARMS[@]}"; do
    IFS=: read -r name batch sets <<<"$arm"
    if ! [[ "$name" =~ ^[A-Za-z0-9_.-]+$ && "$batch" =~ ^[1-9][0-9]*$ ]]; then
        echo "gpu_dynamics_arms: an ARM is NAME:BATCH[:SETS], not $arm" >&2
        exit 2
    fi
done
REPO=$(cd "$(dirname "$0")/.." && pwd)
WHEELHOUSE=$(realpath -m "${WHEELHOUSE:-$REPO/.wheelhouse}")
WORK=$(realpath -m "${WORK:-/tmp/factory-arms}")
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
WORKERS=${WORKERS:-$(nproc)}
THREADS=${THREADS:-2}
PLAY_EPISODES=${PLAY_EPISODES:-200} PLAY_STEPS=${PLAY_STEPS:-200}
RESUME=${RESUME:-0}
if [ "$RESUME" = 1 ]; then
    for arm in "${ARMS[@]}"; do
        if [ ! -e "$WORK/arms/${arm%%:*}/config.json" ]; then
            echo "gpu_dynamics_arms: RESUME=1 but $WORK/arms/${arm%%:*} holds no arm" >&2
            exit 2
        fi
    done
fi

mkdir -p "$OUT" "$WORK"
exec > >(tee "$OUT/arms.log") 2>&1
T0=$SECONDS
stamp() { echo "[arms $((SECONDS - T0)) s] $*"; }

export PYTHONPATH="$REPO:$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 SDL_VIDEODRIVER=dummy PYGAME_HIDE_SUPPORT_PROMPT=1
factory() { "$PY" -m pipelines.cli "$@"; }
resume_args=()
if [ "$RESUME" = 1 ]; then
    resume_args=(--resume)
    stamp "resume ${#ARMS[@]} arms in $WORK/arms"
else
    stamp "setup: $WHEELHOUSE -> $WORK/site"
    rm -rf "$WORK/site" "$WORK/train.zarr" "$WORK/arms"
    mkdir -p "$WORK/arms"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$WORK/site" "$WHEELHOUSE"/*.whl
    "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv || true

    stamp "collect $PLAY_EPISODES pile_play episodes with $WORKERS workers"
    factory collect --env pile --generator pile_play --episodes "$PLAY_EPISODES" \
        --steps "$PLAY_STEPS" --seed 0 --workers "$WORKERS" --out "$WORK/train.zarr"
fi
"$PY" "$REPO/scripts/store_digest.py" "$WORK/train.zarr"

stamp "train ${#ARMS[@]} arms side by side: $MINUTES min each on $DEVICE"
pids=()
for arm in "${ARMS[@]}"; do
    IFS=: read -r name batch sets <<<"$arm"
    set_args=()
    if [ -n "$sets" ] && [ "$RESUME" != 1 ]; then  # a resumed arm keeps its config
        IFS=, read -r -a pairs <<<"$sets"
        for pair in "${pairs[@]}"; do set_args+=(--set "$pair"); done
    fi
    factory train dynamics --data "$WORK/train.zarr" --out "$WORK/arms/$name" \
        --minutes "$MINUTES" --device "$DEVICE" --batch-size "$batch" --threads "$THREADS" \
        "${set_args[@]}" "${resume_args[@]}" --json >"$WORK/arms/$name.json" \
        2>"$WORK/arms/$name.log" &
    pids+=($!)
    stamp "started $name (batch $batch ${set_args[*]})"
done
failed=0
for i in "${!ARMS[@]}"; do
    name=${ARMS[$i]%%:*}
    if wait "${pids[$i]}"; then
        stamp "$name done: $(cat "$WORK/arms/$name.json")"
    else
        failed=1
        stamp "$name FAILED:"
        tail -20 "$WORK/arms/$name.log"
    fi
    files=()
    for f in "$name/config.json" "$name/dynamics.safetensors" "$name/dynamics.state.json" \
        "$name/provenance.json" "$name.json" "$name.log"; do
        [ -e "$WORK/arms/$f" ] && files+=("$f")
    done
    [ ${#files[@]} -gt 0 ] && tar -C "$WORK/arms" -cf "$OUT/$name.tar" "${files[@]}"
done
stamp "done: $OUT"
exit "$failed"
