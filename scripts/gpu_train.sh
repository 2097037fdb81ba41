#!/usr/bin/env bash
# Train a whole world model on a CUDA machine that has Python 3.12 and torch but no
# package registry, in one call of at most about 9 minutes:
#
#   scripts/wheelhouse.sh .wheelhouse          # once, where the registry is reachable
#   scripts/gpu_train.sh OUT [MINUTES]         # on the GPU machine, from the repo root
#
# 1. installs the wheelhouse (WHEELHOUSE, default .wheelhouse) with pip --no-index
#    --target and uses it through PYTHONPATH;
# 2. collects the model card's training store and held-out store, with one env worker per
#    core: ENV=pusht (default; docs/MODEL_CARD.md) 500 play + 150 expert episodes, held
#    out 40 play + 20 expert; ENV=pile (docs/MODEL_CARD_pile.md) 200 pile_play episodes
#    of 200 steps, held out 16 from seed 100000, both cameras;
# 3. runs `factory train all --kind KIND` (default: the world's shipped kind, object_state
#    for pusht and object_set for pile; or latent_grid) for MINUTES (default 6) on DEVICE
#    (default cuda), packs the model and evaluates it on the held-out store;
# 4. writes into OUT: model/ (the kind's part files, config and provenance), fidelity.json,
#    train_summary.json, train.log.
#
# Sizes can be overridden for a quick run (the CPU test does): PLAY_EPISODES, PLAY_STEPS,
# EXPERT_EPISODES, EXPERT_STEPS, HELD_PLAY, HELD_EXPERT, HELD_STEPS, RESOLUTION,
# EVAL_EPISODES, STABILITY_FRAMES, WORKERS, ENV, KIND, PYTHON, WORK (scratch, default
# /tmp/factory-gpu).
set -euo pipefail
OUT=$(realpath -m "${1:?usage: scripts/gpu_train.sh OUT [MINUTES]}")
MINUTES=${2:-6}
REPO=$(cd "$(dirname "$0")/.." && pwd)
WHEELHOUSE=$(realpath -m "${WHEELHOUSE:-$REPO/.wheelhouse}")
WORK=$(realpath -m "${WORK:-/tmp/factory-gpu}")
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
ENV=${ENV:-pusht}
WORKERS=${WORKERS:-$(nproc)}
case "$ENV" in
pusht)
    KIND=${KIND:-object_state} PLAY=play EXPERT=expert
    PLAY_EPISODES=${PLAY_EPISODES:-500} EXPERT_EPISODES=${EXPERT_EPISODES:-150}
    HELD_PLAY=${HELD_PLAY:-40} HELD_EXPERT=${HELD_EXPERT:-20} ;;
pile)  # the pile card's stores hold play only
    KIND=${KIND:-object_set} PLAY=pile_play EXPERT=pile_expert
    PLAY_EPISODES=${PLAY_EPISODES:-200} EXPERT_EPISODES=${EXPERT_EPISODES:-0}
    HELD_PLAY=${HELD_PLAY:-16} HELD_EXPERT=${HELD_EXPERT:-0} ;;
*) echo "gpu_train: ENV is pusht or pile, not $ENV" >&2; exit 2 ;;
esac
PLAY_STEPS=${PLAY_STEPS:-200} EXPERT_STEPS=${EXPERT_STEPS:-300} HELD_STEPS=${HELD_STEPS:-200}
RESOLUTION=${RESOLUTION:-96} EVAL_EPISODES=${EVAL_EPISODES:-16}
STABILITY_FRAMES=${STABILITY_FRAMES:-9000}

mkdir -p "$OUT/model" "$WORK"
exec > >(tee "$OUT/train.log") 2>&1
T0=$SECONDS
stamp() { echo "[gpu_train $((SECONDS - T0)) s] $*"; }

stamp "setup: $WHEELHOUSE -> $WORK/site"
rm -rf "$WORK/site" "$WORK/train.zarr" "$WORK/heldout.zarr" "$WORK/run"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" \
    "$WHEELHOUSE"/*.whl
export PYTHONPATH="$REPO:$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 SDL_VIDEODRIVER=dummy PYGAME_HIDE_SUPPORT_PROMPT=1
factory() { "$PY" -m pipelines.cli "$@"; }
collect() {  # collect GENERATOR EPISODES STEPS SEED STORE [--append]; 0 episodes: skip
    [ "$2" -gt 0 ] || return 0
    factory collect --env "$ENV" --workers "$WORKERS" --resolution "$RESOLUTION" \
        --generator "$1" --episodes "$2" --steps "$3" --seed "$4" --out "$5" "${@:6}"
}
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

stamp "collect with $WORKERS workers"
collect "$PLAY" "$PLAY_EPISODES" "$PLAY_STEPS" 0 "$WORK/train.zarr"
collect "$EXPERT" "$EXPERT_EPISODES" "$EXPERT_STEPS" 10000 "$WORK/train.zarr" --append
collect "$PLAY" "$HELD_PLAY" "$HELD_STEPS" 100000 "$WORK/heldout.zarr"
collect "$EXPERT" "$HELD_EXPERT" 300 200000 "$WORK/heldout.zarr" --append

stamp "train all ($ENV, $KIND): $MINUTES min on $DEVICE"
factory train all --kind "$KIND" --data "$WORK/train.zarr" --out "$WORK/run" --minutes "$MINUTES" \
    --device "$DEVICE" --eval "$WORK/heldout.zarr" --eval-episodes "$EVAL_EPISODES" \
    --stability-frames "$STABILITY_FRAMES" --json > "$OUT/train_summary.json"
cp "$WORK/run/model/"* "$OUT/model/"
cp "$WORK/run/fidelity.json" "$OUT/fidelity.json"
stamp "done: $OUT"
