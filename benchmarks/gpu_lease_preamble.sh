# What every lease script (gpu_session.sh, gpu_peer_session.sh, gpu_check_session.sh) does first,
# sourced at its top: everything it prints also goes to $OUT/session.log, Python prints at once,
# the data come from the .gpudata folder the lease carries, and `stage` prints a timed banner.
# A script that wants other than 2 torch threads sets OMP_NUM_THREADS before sourcing this.
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export ATTNMT_DATA_DIR=${ATTNMT_DATA_DIR:-$PWD/.gpudata}
PYTHON=${PYTHON:-python3}
stage() { echo "== $(date -u +%H:%M:%S) $*"; }
