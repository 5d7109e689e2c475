#!/usr/bin/env bash
# The open GPU measurements in one call of about 8 minutes on one H200 with 16 cores.
#
#   bash benchmarks/gpu_round.sh OUT [WHEELS]
#
# Each step appends its JSON lines to OUT/<step>.jsonl (stderr to OUT/stderr.log) as it
# ends, so a call stopped at its limit still returns the steps it finished:
#   1. accelerator_quick: every env kind with its learner on the GPU (`--quick`).
#   2. atari_scaling: `breakout` on 256 envs at 16 cores, training against ale-py alone.
#   3. core_scaling_envs64: `cheetah_clipped`, 64 envs on the MuJoCo batch, 16 cores.
#   4. seeds_together: the held-out seeds 100-109 of `cheetah_clipped` in one program
#      (the MuJoCo batch acting on the GPU), its wall time and the seeds' statistics.
# WHEELS, a folder of wheels (`../shared/tools/gpu-wheels.sh`), is installed to
# /tmp/site first on a machine without a network, with this checkout on PYTHONPATH.
set -o pipefail
out=${1:?usage: gpu_round.sh OUT [WHEELS]}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -n "${2:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$2"/*.whl || exit 1
  export PYTHONPATH=$PWD:/tmp/site
fi
start=$(date +%s)
step() {  # step NAME SECONDS COMMAND...: COMMAND's lines into OUT/NAME.jsonl, within SECONDS.
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" 2>>"$out/stderr.log" | tee -a "$out/$name.jsonl"
  echo "$name: done at $(($(date +%s) - start)) s"
}
step accelerator_quick 120 python3 benchmarks/accelerator_check.py --quick --timeout 60
step atari_scaling 160 python3 benchmarks/core_scaling.py --preset breakout --cores 16 \
  --phases 4 --env-seconds 5 --timeout 150 \
  --set num_envs=256 phase_steps=65536 eval_every=100 final_episodes=256
step core_scaling_envs64 80 python3 benchmarks/core_scaling.py --preset cheetah_clipped \
  --cores 16 --phases 6 --env-seconds 3 --timeout 70 \
  --set num_envs=64 phase_steps=32768 eval_every=100 final_episodes=64
# The train command's wall time (start, compiles and evaluations in it), then `stats` of
# the seeds' folders: their final returns, IQM and interval.
seeds=(100 101 102 103 104 105 106 107 108 109)
rm -rf /tmp/heldout  # A warm machine's last call: not resumed.
begun=$(date +%s%N)
timeout 240 python3 -m batchrl.scripts.train --config cheetah_clipped --logdir /tmp/heldout \
  --seeds "${seeds[@]}" --set backend=mujoco --set acting_device=gpu \
  >"$out/seeds_together.log" 2>>"$out/stderr.log"
code=$?
python3 -c "import json, sys; print(json.dumps({'benchmark': 'seeds_together_wall', \
'preset': 'cheetah_clipped', 'seeds': sys.argv[3:], 'exit': int(sys.argv[1]), \
'wall_seconds': round(int(sys.argv[2]) / 1e9, 1)}))" "$code" "$(($(date +%s%N) - begun))" \
  "${seeds[@]}" | tee -a "$out/seeds_together.jsonl"
step seeds_together 60 python3 -m batchrl.scripts.stats /tmp/heldout --reps 1000
